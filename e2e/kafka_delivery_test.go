package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// The delivery tests: a produce that fails halts the task without any checkpoint, offset
// commit or changelog write covering the outputs that were not acknowledged, so that once the
// cause is gone a restarted host produces every output. Each runs the real binary against a
// broker in its own process, on a port and in a directory of its own: they run in parallel, as
// they mostly wait (delivery timeouts, sessions, outages).

// deliveryRig is a broker process, its client and a host configuration for one test.
type deliveryRig struct {
	t       *testing.T
	bin     string
	dir     string
	brokers string
	cl      *kgo.Client
	cfg     string
}

func newDeliveryRig(t *testing.T, topics ...string) *deliveryRig {
	t.Helper()
	r := &deliveryRig{t: t, bin: guestbuild.Binary(t), dir: t.TempDir()}
	port := freePort(t)
	startBroker(t, r.bin, filepath.Join(r.dir, "broker"), port, topics...)
	r.brokers = "127.0.0.1:" + strconv.Itoa(port)
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.cl = cl
	return r
}

// produceWords appends n wordcount records with timestamp ts (zero: now) to "words" and returns
// the model of what they count.
func (r *deliveryRig) produceWords(n int, ts time.Time, seed uint64) wordcountExpect {
	r.t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	want := wordcountExpect{}
	batch := make([]*kgo.Record, 0, n)
	for range n {
		user := fmt.Sprintf("user%02d", rng.IntN(30))
		text := fmt.Sprintf("w%02d w%02d", rng.IntN(20), rng.IntN(20))
		want.add(user, text)
		batch = append(batch, &kgo.Record{Topic: "words", Key: []byte(user), Value: []byte(text), Timestamp: ts})
	}
	if err := r.cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
	return want
}

func (r *deliveryRig) writeConfig(yaml string) {
	r.t.Helper()
	r.cfg = filepath.Join(r.dir, "wasmstream.yaml")
	if err := os.WriteFile(r.cfg, []byte(yaml), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *deliveryRig) createTopic(name string) {
	r.t.Helper()
	resp, err := kadm.NewClient(r.cl).CreateTopics(context.Background(), 4, 1, nil, name)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		r.t.Fatalf("creating %s: %v", name, err)
	}
}

// hostRun is a running wasmstream process.
type hostRun struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan error
}

func (r *deliveryRig) start() *hostRun {
	r.t.Helper()
	h := &hostRun{cmd: exec.Command(r.bin, "run", "-c", r.cfg, "--log-level", "info"), logs: &lockedBuffer{}, done: make(chan error, 1)}
	h.cmd.Stderr = h.logs
	if err := h.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() { h.done <- h.cmd.Wait() }()
	r.t.Cleanup(func() {
		h.cmd.Process.Signal(syscall.SIGKILL)
		<-h.done
		h.done <- nil
	})
	return h
}

// awaitHalt waits for the host to exit on its own, with a failure, and returns its log.
func (h *hostRun) awaitHalt(t *testing.T, within time.Duration) string {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err
		if err == nil {
			t.Fatalf("the host exited without an error; its log:\n%s", h.logs.String())
		}
	case <-time.After(within):
		t.Fatalf("the host did not halt within %s; its log:\n%s", within, tail(h.logs.String(), 8000))
	}
	return h.logs.String()
}

// stop stops the host with SIGINT and waits for it.
func (h *hostRun) stop(t *testing.T) {
	t.Helper()
	h.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("host: %v\n%s", err, tail(h.logs.String(), 8000))
		}
	case <-time.After(time.Minute):
		t.Fatalf("the host did not stop; its log:\n%s", tail(h.logs.String(), 8000))
	}
}

// wordcountYAML is a wordcount host over the rig's broker: input "words", output "counts".
func (r *deliveryRig) wordcountYAML(module, delivery, extraKafka string) string {
	return fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  brokers: [%s]
  session_timeout: 6s
  rebalance_timeout: 10s
%stasks:
  - name: wc
    module: %s
    delivery: %s
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: kafka
      topic: counts
`, filepath.Join(r.dir, "data"), r.brokers, extraKafka, module, delivery)
}

// TestKafkaMissingOutputTopicLosesNothing: with the output topic missing the task halts on the
// first produce failure with the cause; its state and offsets stay at the last checkpoint whose
// outputs were acknowledged (none here), so that once the topic exists a restarted host produces
// every output. Before the fix the exit path checkpointed anyway: state and offsets went to the
// end and none of the outputs ever appeared.
func TestKafkaMissingOutputTopicLosesNothing(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			r := newDeliveryRig(t, "words")
			want := r.produceWords(2000, time.Time{}, 1)
			// At least once, the delivery bound is long enough that the missing topic's own
			// failure (the client gives up on it after a few metadata reads) comes first on a
			// loaded machine too; exactly once halts after transactions aborted in a row for it.
			bound := "60s"
			if delivery == "exactly_once" {
				bound = "5s"
			}
			yaml := r.wordcountYAML(guestbuild.Go(t, "wordcount"), delivery, "  delivery_timeout: "+bound+"\n")
			if delivery == "exactly_once" {
				yaml += "    changelog:\n      enabled: true\n"
			}
			r.writeConfig(yaml)
			log := r.start().awaitHalt(t, 2*time.Minute)
			if !strings.Contains(log, "UNKNOWN_TOPIC_OR_PARTITION") {
				t.Fatalf("the halt does not name the cause; the log:\n%s", tail(log, 8000))
			}
			if delivery == "exactly_once" && !strings.Contains(log, "no transaction could commit") {
				t.Fatalf("the exactly-once halt does not say why; the log:\n%s", tail(log, 8000))
			}
			r.createTopic("counts")
			h := r.start()
			outputs, _ := consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, delivery == "exactly_once")
			h.stop(t)
			t.Logf("%s: after the topic was created and the host restarted, %d outputs (every one of the %d expected)", delivery, outputs, wordTotalOf(want))
		})
	}
}

// wordTotalOf is the number of outputs the model expects: one per word.
func wordTotalOf(want wordcountExpect) int {
	n := 0
	for _, ws := range want {
		for _, c := range ws {
			n += c
		}
	}
	return n
}

// TestKafkaDayOldRecords: a fresh group over a topic of records stamped a day ago produces every
// output, each with its input's event time as its timestamp. franz-go's RecordDeliveryTimeout is
// measured from a record's timestamp, so before the fix every batch failed at once.
func TestKafkaDayOldRecords(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts")
	old := time.Now().Add(-24 * time.Hour).Truncate(time.Millisecond)
	want := r.produceWords(2000, old, 2)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once", ""))
	h := r.start()
	need := wordTotalOf(want)
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers), kgo.ConsumeTopics("counts"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := 0
	for n < need {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d outputs; the host's log:\n%s", n, need, tail(h.logs.String(), 8000))
		}
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			if !rec.Timestamp.Equal(old) {
				t.Errorf("output %s/%s has timestamp %v, want its input's %v", rec.Key, rec.Value, rec.Timestamp, old)
			}
		})
	}
	h.stop(t)
	t.Logf("day-old backlog: %d of %d outputs, each stamped with its input's event time", n, need)
}

// TestKafkaMissingDeadLetterTopicLosesNothing: a dead letter that cannot be produced (its topic
// is missing) halts the task without committing past it; once the topic exists, a restarted
// host writes the dead letter and every output.
func TestKafkaMissingDeadLetterTopicLosesNothing(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r := newDeliveryRig(t, "events", "echoes")
	var recs []*kgo.Record
	for i := range 300 {
		v := "v" + strconv.Itoa(i)
		if i == 120 {
			v = "boom"
		}
		recs = append(recs, &kgo.Record{Topic: "events", Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte(v)})
	}
	if err := r.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r.writeConfig(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  brokers: [%s]
  delivery_timeout: 60s
tasks:
  - name: echo
    module: %s
    inputs:
      - name: events
        type: kafka
        topics: [events]
    output:
      type: kafka
      topic: echoes
    dead_letter:
      topic: dlq
    retry:
      max_attempts: 2
      backoff: 1ms
      max_backoff: 1ms
`, filepath.Join(r.dir, "data"), r.brokers, guestbuild.Go(t, "testguests/trapper")))
	// The delivery bound (60s) is long enough that the missing topic's own failure comes first
	// on a loaded machine too (with 5s, the bound came first once in CI, naming no topic).
	log := r.start().awaitHalt(t, 2*time.Minute)
	if !strings.Contains(log, "UNKNOWN_TOPIC_OR_PARTITION") || !strings.Contains(log, "dlq") {
		t.Fatalf("the halt does not name the cause; the log:\n%s", tail(log, 8000))
	}
	r.createTopic("dlq")
	h := r.start()
	echoes := consumeAll(t, r.brokers, "echoes", 299, h.logs.String)
	dead := consumeAll(t, r.brokers, "dlq", 1, h.logs.String)
	h.stop(t)
	if string(dead[0].Value) != "boom" {
		t.Fatalf("dead letter %q, want boom", dead[0].Value)
	}
	t.Logf("after the dead-letter topic was created and the host restarted: %d distinct echoes of 299, %d dead letter", len(distinctValues(echoes)), len(dead))
}

// consumeAll reads topic from its start until it holds want distinct values, and returns its
// records.
func consumeAll(t *testing.T, brokers, topic string, want int, logs func() string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(distinctValues(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d distinct records; the host's log:\n%s", topic, len(distinctValues(out)), want, tail(logs(), 8000))
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func distinctValues(recs []*kgo.Record) map[string]bool {
	m := map[string]bool{}
	for _, r := range recs {
		m[string(r.Value)] = true
	}
	return m
}

// brokerProc is `wasmstream dev --broker-only` in its own process, to be killed and restarted on
// the same directory and port.
type brokerProc struct {
	t      *testing.T
	bin    string
	dir    string
	port   int
	topics []string
	cmd    *exec.Cmd
	line   string // the line its last start printed
}

func (b *brokerProc) start() {
	b.t.Helper()
	args := []string{"dev", "--broker-only", "--dir", b.dir, "--port", strconv.Itoa(b.port)}
	for _, tp := range b.topics {
		args = append(args, "--topic", tp)
	}
	cmd := exec.Command(b.bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "listening") {
		cmd.Process.Kill()
		cmd.Wait()
		b.t.Fatalf("broker did not start: %q %v", line, err)
	}
	b.cmd, b.line = cmd, strings.TrimSpace(line)
}

func (b *brokerProc) kill() {
	if b.cmd != nil {
		b.cmd.Process.Signal(syscall.SIGKILL)
		b.cmd.Wait()
		b.cmd = nil
	}
}

// newBlipRig is a rig whose broker can be killed and restarted.
func newBlipRig(t *testing.T, topics ...string) (*deliveryRig, *brokerProc) {
	t.Helper()
	r := &deliveryRig{t: t, bin: guestbuild.Binary(t), dir: t.TempDir()}
	b := &brokerProc{t: t, bin: r.bin, dir: filepath.Join(r.dir, "broker"), port: freePort(t), topics: topics}
	b.start()
	t.Cleanup(b.kill)
	r.brokers = "127.0.0.1:" + strconv.Itoa(b.port)
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r.cl = cl
	return r, b
}

// readyz is the status code of the host's /readyz, or 0 when it does not answer.
func readyz(port int) int {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// await waits until cond holds, failing the test (with the host's log) after within.
func (h *hostRun) await(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		select {
		case err := <-h.done:
			h.done <- err
			t.Fatalf("the host exited (%v) while waiting for %s; its log:\n%s", err, what, tail(h.logs.String(), 8000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; the host's log:\n%s", what, within, tail(h.logs.String(), 8000))
		}
	}
}

// TestKafkaBrokerRestartRiddenOut: the broker is killed and restarted on the same directory
// while the host runs; the host rides it out (not ready meanwhile), and every output of the
// records from before and after the outage arrives. Before, the host halted within a second
// of the first refused connection and stayed down.
func TestKafkaBrokerRestartRiddenOut(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(2000, time.Time{}, 3)
	admin := freePort(t)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once",
		"  unreachable_timeout: 90s\n  delivery_timeout: 90s\n") + fmt.Sprintf("admin:\n  addr: 127.0.0.1:%d\n", admin))
	h := r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	h.await(t, "/readyz 200", 2*time.Minute, func() bool { return readyz(admin) == 200 })

	b.kill()
	down := time.Now()
	h.await(t, "/readyz 503 with the broker gone", 2*time.Minute, func() bool { return readyz(admin) == 503 })
	notReady := time.Since(down)
	// Five seconds down, as in the report: longer than a session's heartbeats go unanswered.
	time.Sleep(time.Until(down.Add(5 * time.Second))) // the outage itself, not a synchronisation
	b.start()
	more := r.produceWords(2000, time.Time{}, 4)
	for u, ws := range more {
		for w, n := range ws {
			if want[u] == nil {
				want[u] = map[string]int{}
			}
			want[u][w] += n
		}
	}
	outputs, _ := consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	h.await(t, "/readyz 200 after the broker came back", 2*time.Minute, func() bool { return readyz(admin) == 200 })
	h.stop(t)
	t.Logf("broker killed and restarted 5 s later: not ready %s after the kill, every one of the %d outputs arrived (%d with duplicates), ready again %s after the kill",
		notReady.Round(time.Millisecond), wordTotalOf(want), outputs, time.Since(down).Round(time.Millisecond))
}

// TestKafkaBrokerGoneLosesNothing: the broker is killed while the host produces outputs and
// stays away longer than kafka.unreachable_timeout and kafka.delivery_timeout: the host halts
// with the cause, and none of its checkpoints covers an output that was not acknowledged, so
// that once the broker is back (on its directory) a restarted host produces every output.
func TestKafkaBrokerGoneLosesNothing(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(30_000, time.Time{}, 5)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once",
		"  unreachable_timeout: 3s\n  delivery_timeout: 3s\n"))
	h := r.start()
	if !waitNewOutputs(r.brokers, 2*time.Minute) {
		t.Fatalf("no outputs; the host's log:\n%s", tail(h.logs.String(), 8000))
	}
	b.kill() // while outputs are being produced
	log := h.awaitHalt(t, 2*time.Minute)
	if !strings.Contains(log, "unreachable for") && !strings.Contains(log, "not acknowledged within") {
		t.Fatalf("the halt does not say why; the log:\n%s", tail(log, 8000))
	}
	b.start()
	h = r.start()
	outputs, dups := consumeCounts(t, r.brokers, want, 3*time.Minute, h.logs.String, false)
	h.stop(t)
	t.Logf("broker killed mid-run and kept away past the bounds: the host halted; after a restart every one of the %d outputs arrived (%d read, %d duplicates)",
		wordTotalOf(want), outputs, dups)
}

// TestKafkaRecreatedTopicHalts: the input topic is deleted and recreated (fewer records than were
// processed of the old one) while the host runs, then again while it is down: each time the task
// halts, naming the topic and both offsets, rather than resume the new topic at the old positions
// and skip its records. Before, the host read on and committed lag 0 over records it never
// processed.
func TestKafkaRecreatedTopicHalts(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts")
	want := r.produceWords(4000, time.Time{}, 6)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once", ""))
	adm := kadm.NewClient(r.cl)
	recreate := func() {
		t.Helper()
		resp, err := adm.DeleteTopics(context.Background(), "words")
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("deleting words: %v", err)
		}
		r.createTopic("words")
		// A new client: the rig's knows the old topic's id.
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		old := r.cl
		r.cl = cl
		r.produceWords(200, time.Time{}, 7)
		r.cl = old
	}
	const rule = "the topic was deleted and recreated"
	h := r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	recreate()
	if log := h.awaitHalt(t, 2*time.Minute); !strings.Contains(log, rule) {
		t.Fatalf("while running: the halt does not say why; the log:\n%s", tail(log, 8000))
	}
	h = r.start()
	if log := h.awaitHalt(t, 2*time.Minute); !strings.Contains(log, rule) {
		t.Fatalf("at a restart: the halt does not say why; the log:\n%s", tail(log, 8000))
	}
}

// TestKafkaStaticMembership: a host killed and restarted takes its place in the group back as
// the same static member (group.instance.id from host_id): right after its restart the group
// has one member, not the dead one beside the new one until the dead one's session times out.
// A host stopped cleanly leaves the group all the same.
// It reports the time from the restart to the first new output, with static and with dynamic
// membership (kafka.dynamic_membership).
func TestKafkaStaticMembership(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	for _, static := range []bool{true, false} {
		dynamic := !static
		t.Run(fmt.Sprintf("dynamic=%t", dynamic), func(t *testing.T) {
			t.Parallel()
			r := newDeliveryRig(t, "words", "counts")
			want := r.produceWords(1000, time.Time{}, 8)
			r.writeConfig(strings.Replace(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once",
				fmt.Sprintf("  dynamic_membership: %t\n", dynamic)), "session_timeout: 6s", "session_timeout: 20s", 1))
			h := r.start()
			consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
			h.cmd.Process.Signal(syscall.SIGKILL)
			<-h.done
			h.done <- nil
			// New work for the restarted host, and where the outputs end before it.
			ends, err := kadm.NewClient(r.cl).ListEndOffsets(context.Background(), "counts")
			if err != nil {
				t.Fatal(err)
			}
			r.produceWords(10, time.Time{}, 9)

			restart := time.Now()
			h = r.start()
			h.await(t, "partitions assigned after the restart", 2*time.Minute, func() bool {
				return strings.Contains(h.logs.String(), "partition assigned")
			})
			assigned := time.Since(restart)
			groups, err := kadm.NewClient(r.cl).DescribeGroups(context.Background(), "wasmstream-wc")
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, m := range groups["wasmstream-wc"].Members {
				id := "<none>"
				if m.InstanceID != nil {
					id = *m.InstanceID
				}
				ids = append(ids, id)
			}
			from := map[string]map[int32]kgo.Offset{"counts": {}}
			ends.Each(func(o kadm.ListedOffset) { from["counts"][o.Partition] = kgo.NewOffset().At(o.Offset) })
			cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers), kgo.ConsumePartitions(from))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			got := false
			for !got && ctx.Err() == nil {
				got = len(cl.PollFetches(ctx).Records()) > 0
			}
			cancel()
			cl.Close()
			if !got {
				t.Fatalf("no output after the restart; the log:\n%s", tail(h.logs.String(), 8000))
			}
			firstOutput := time.Since(restart)
			h.stop(t)
			t.Logf("dynamic=%t: after a SIGKILL and restart, partitions assigned in %s, first new output %s after the restart; group members then: %v",
				dynamic, assigned.Round(time.Millisecond), firstOutput.Round(time.Millisecond), ids)
			if !dynamic && (len(ids) != 1 || !strings.HasPrefix(ids[0], "wasmstream-wc-")) {
				t.Fatalf("static membership: the group's members after the restart are %v, want the one static member wasmstream-wc-<host_id>", ids)
			}
			// A clean stop leaves the group, static member or not: its partitions move at once.
			groups, err = kadm.NewClient(r.cl).DescribeGroups(context.Background(), "wasmstream-wc")
			if err != nil {
				t.Fatal(err)
			}
			if n := len(groups["wasmstream-wc"].Members); n != 0 {
				t.Fatalf("after a clean stop the group has %d members, want none", n)
			}
		})
	}
}

// TestKafkaDuplicateHostID: two hosts started with the same host_id (each with its own data
// directory) under static membership share one group.instance.id, and the second to join fences
// the first. The first halts with an error that names the cause (the same host_id), and does not
// leave the group by that instance id on its way out, which would throw out the second; the
// second keeps the partitions, alone in the group, and processes what comes.
func TestKafkaDuplicateHostID(t *testing.T) {
	t.Parallel() // it mostly waits (sessions, heartbeats), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts")
	r.produceWords(500, time.Time{}, 11)
	module := guestbuild.Go(t, "wordcount")
	yaml := "host_id: twin\n" + r.wordcountYAML(module, "at_least_once", "") // static membership: the default
	r.writeConfig(yaml)
	first := r.start()
	first.await(t, "the first host's partitions", 2*time.Minute, func() bool {
		return strings.Count(first.logs.String(), "partition assigned") == 4
	})
	r.writeConfig(strings.Replace(yaml, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "data2"), 1))
	second := r.start()
	log := first.awaitHalt(t, time.Minute)
	for _, cause := range []string{"another consumer joined the group", "wasmstream-wc-twin", "the same host_id"} {
		if !strings.Contains(log, cause) {
			t.Fatalf("the fenced host's halt does not say why (want %q); its log:\n%s", cause, tail(log, 8000))
		}
	}
	// The second host owns every partition, and processes new records.
	second.await(t, "the second host's partitions", 2*time.Minute, func() bool {
		return strings.Count(second.logs.String(), "partition assigned") >= 4
	})
	ends, err := kadm.NewClient(r.cl).ListEndOffsets(context.Background(), "counts")
	if err != nil {
		t.Fatal(err)
	}
	r.produceWords(50, time.Time{}, 12)
	from := map[string]map[int32]kgo.Offset{"counts": {}}
	ends.Each(func(o kadm.ListedOffset) { from["counts"][o.Partition] = kgo.NewOffset().At(o.Offset) })
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers), kgo.ConsumePartitions(from))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for got := false; !got; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no output from the second host; its log:\n%s", tail(second.logs.String(), 8000))
		}
		got = len(fs.Records()) > 0
	}
	groups, err := kadm.NewClient(r.cl).DescribeGroups(context.Background(), "wasmstream-wc")
	if err != nil {
		t.Fatal(err)
	}
	members := groups["wasmstream-wc"].Members
	if len(members) != 1 || members[0].InstanceID == nil || *members[0].InstanceID != "wasmstream-wc-twin" {
		t.Fatalf("the group's members after the first host halted: %+v, want the second host alone", members)
	}
	l := second.logs.String()
	if n := strings.Count(l, "partition lost") + strings.Count(l, "partition revoked"); n > 0 {
		t.Fatalf("the second host lost or gave up %d partitions after it joined (the fenced host left the group by its instance id?); its log:\n%s", n, tail(l, 8000))
	}
	second.stop(t)
}
