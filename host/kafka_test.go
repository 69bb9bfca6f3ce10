package host_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// newCluster starts an in-process Kafka cluster with the given topics of 4 partitions.
func newCluster(t testing.TB, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClientAt(t, c.ListenAddrs(), opts...)
}

// newClientAt is newClient for a cluster reached at addrs (a development broker).
func newClientAt(t *testing.T, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceWords produces n keyed text records to topic and returns the expected wordcount state.
func produceWords(t *testing.T, cl *kgo.Client, topic string, n, users int, seed uint64) map[string]map[string]int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	want := map[string]map[string]int{}
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		user := fmt.Sprintf("u%03d", rng.IntN(users))
		w1, w2 := fmt.Sprintf("w%02d", rng.IntN(30)), fmt.Sprintf("w%02d", rng.IntN(30))
		if want[user] == nil {
			want[user] = map[string]int{}
		}
		want[user][w1]++
		want[user][w2]++
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(user), Value: []byte(w1 + " " + w2)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return want
}

// consumeOutputs reads topic until want records arrived (or the deadline), returning the
// values per key in order.
func consumeOutputs(t *testing.T, c *kfake.Cluster, topic string, want int, timeout time.Duration) map[string][]string {
	t.Helper()
	return consumeOutputsAt(t, c.ListenAddrs(), topic, want, timeout)
}

// consumeOutputsAt is consumeOutputs for a cluster reached at addrs (a development broker).
func consumeOutputsAt(t *testing.T, addrs []string, topic string, want int, timeout time.Duration) map[string][]string {
	t.Helper()
	cl := newClientAt(t, addrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := map[string][]string{}
	n := 0
	collect := func(fs kgo.Fetches) {
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
			n++
		})
	}
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d outputs arrived on %s", n, want, topic)
		}
		collect(fs)
	}
	// Then whatever else arrives shortly: duplicates would show here.
	settle, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stop()
	for settle.Err() == nil {
		collect(cl.PollFetches(settle))
	}
	return got
}

func wordcountKafkaTask(module string) host.TaskConfig {
	return host.TaskConfig{
		Name: "wc", Module: module, Workers: 2,
		Inputs: []host.InputConfig{{Name: "words", Type: "kafka", Topics: []string{"words"}}},
		Output: host.OutputConfig{Type: "kafka", Topic: "counts"},
	}
}

// checkOutputsOnce is checkCountsOutputs for exactly once: besides, exactly total outputs were
// committed, none twice.
func checkOutputsOnce(t *testing.T, got map[string][]string, want map[string]map[string]int, total int) {
	t.Helper()
	checkCountsOutputs(t, got, want)
	outputs := 0
	for _, vs := range got {
		outputs += len(vs)
	}
	if outputs != total {
		t.Fatalf("%d committed outputs, want exactly %d", outputs, total)
	}
}

// checkCountsOutputs checks that every key's outputs for each word are exactly 1..final in
// order (per-key order preserved across the topic's partitions).
func checkCountsOutputs(t *testing.T, got map[string][]string, want map[string]map[string]int) {
	t.Helper()
	for user, words := range want {
		next := map[string]int{}
		for _, v := range got[user] {
			w, c, _ := strings.Cut(v, " ")
			n, _ := strconv.Atoi(c)
			if n != next[w]+1 {
				t.Fatalf("key %s: output %q after count %d", user, v, next[w])
			}
			next[w] = n
		}
		for w, n := range words {
			if next[w] != n {
				t.Fatalf("key %s word %s: last output count %d, want %d", user, w, next[w], n)
			}
		}
	}
}

func stateOf(t *testing.T, dataDir, task string) map[string]map[string]int {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := map[string]map[string]int{}
	err = r.Scan(task, nil, false, func(e host.StateEntry) bool {
		n, _ := strconv.Atoi(string(e.Value))
		if got[string(e.Key)] == nil {
			got[string(e.Key)] = map[string]int{}
		}
		got[string(e.Key)][string(e.Name)] = n
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func sameCounts(t *testing.T, want, got map[string]map[string]int) {
	t.Helper()
	for u, ws := range want {
		for w, n := range ws {
			if got[u][w] != n {
				t.Fatalf("state %s/%s = %d, want %d", u, w, got[u][w], n)
			}
		}
	}
	for u, ws := range got {
		for w := range ws {
			if _, ok := want[u][w]; !ok {
				t.Fatalf("unexpected state %s/%s", u, w)
			}
		}
	}
}

// End to end on Kafka: keyed records in, the Go wordcount, outputs on a topic, exact state.
func TestKafkaEndToEnd(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 3000, 50, 1)
	total := wordTotal(want)
	dir := t.TempDir()
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module)},
	})
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	checkCountsOutputs(t, got, want)
	sameCounts(t, want, stateOf(t, filepath.Join(dir, "data"), "wc"))

	// A restart resumes where the first run committed: more records, and the outputs go on
	// from the first run's counts with nothing processed twice.
	more := produceWords(t, newClient(t, c), "words", 1000, 50, 2)
	for u, ws := range more {
		for w, n := range ws {
			if want[u] == nil {
				want[u] = map[string]int{}
			}
			want[u][w] += n
			total += n
		}
	}
	h2 := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module)},
	})
	got = consumeOutputs(t, c, "counts", total, 60*time.Second)
	if err := h2.Stop(); err != nil {
		t.Fatal(err)
	}
	checkCountsOutputs(t, got, want)
	n := 0
	for _, vs := range got {
		n += len(vs)
	}
	if n != total {
		t.Fatalf("%d outputs after the restart, want exactly %d", n, total)
	}
	sameCounts(t, want, stateOf(t, filepath.Join(dir, "data"), "wc"))
}

// Broker faults on produce and on offset commit are retried: nothing is lost, state is exact.
func TestKafkaBrokerFaults(t *testing.T) {
	t.Parallel() // it mostly waits (client retries, timeouts): it runs beside the other tests that do
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 2000, 40, 7)
	total := wordTotal(want)
	produceFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "counts",
		Err: kerr.NotEnoughReplicas, Count: 3})
	commitFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit},
		Err: kerr.CoordinatorLoadInProgress, Count: 3})
	dir := t.TempDir()
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module)},
	})
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if produceFaults.Hits() == 0 || commitFaults.Hits() == 0 {
		t.Fatalf("faults were not hit: produce %d, commit %d", produceFaults.Hits(), commitFaults.Hits())
	}
	checkCountsOutputs(t, got, want)
	sameCounts(t, want, stateOf(t, filepath.Join(dir, "data"), "wc"))
	t.Logf("produce faults hit %d times, commit faults %d times", produceFaults.Hits(), commitFaults.Hits())
}

// S1 on Kafka: per-key order across partitions with several workers and random call
// durations (the order guest checks each key's sequence in its state and reports a violation).
func TestKafkaPerKeyOrder(t *testing.T) {
	module := guestbuild.Go(t, "testguests/order")
	c := newCluster(t, "seq", "seen")
	recs, perKey := orderInput(500, 8000, 20_000, 11)
	var krecs []*kgo.Record
	for _, r := range recs {
		krecs = append(krecs, &kgo.Record{Topic: "seq", Key: []byte(r[0]), Value: []byte(r[1])})
	}
	if err := newClient(t, c).ProduceSync(context.Background(), krecs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t),
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: "order", Module: module, Workers: 4, MaxBatchRecords: 32, MaxKeyRecords: 4,
			Inputs: []host.InputConfig{{Name: "seq", Type: "kafka", Topics: []string{"seq"}}},
			Output: host.OutputConfig{Type: "kafka", Topic: "seen"},
		}},
	})
	got := consumeOutputs(t, c, "seen", len(recs), 60*time.Second)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	for k, n := range perKey {
		vs := got[k]
		if len(vs) != n {
			t.Fatalf("key %s: %d outputs, want %d", k, len(vs), n)
		}
		for i, v := range vs {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("key %s: output %d is %q, want %d in order", k, i, v, i+1)
			}
		}
	}
}

// A record that keeps failing goes to the dead-letter topic with its key, value and headers
// naming the error, the task, the source topic, partition, offset and attempts.
func TestKafkaDeadLetterTopic(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	c := newCluster(t, "events", "echoes", "dlq")
	cl := newClient(t, c)
	var recs []*kgo.Record
	for i := 0; i < 50; i++ {
		v := "v" + strconv.Itoa(i)
		if i == 20 {
			v = "boom"
		}
		recs = append(recs, &kgo.Record{Topic: "events", Key: []byte("k" + strconv.Itoa(i%5)), Value: []byte(v)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t),
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: "echo", Module: module,
			Inputs:     []host.InputConfig{{Name: "events", Type: "kafka", Topics: []string{"events"}}},
			Output:     host.OutputConfig{Type: "kafka", Topic: "echoes"},
			DeadLetter: host.DeadLetterConfig{Topic: "dlq"},
			Retry:      host.RetryConfig{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond},
		}},
	})
	echoes := consumeOutputs(t, c, "echoes", 49, 60*time.Second)
	dcl := newClient(t, c, kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	var dead []*kgo.Record
	for len(dead) == 0 && pctx.Err() == nil {
		dead = append(dead, dcl.PollFetches(pctx).Records()...)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, vs := range echoes {
		n += len(vs)
	}
	if n != 49 {
		t.Errorf("%d echoes, want every record but the failing one", n)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	d := dead[0]
	hs := map[string]string{}
	for _, h := range d.Headers {
		hs[h.Key] = string(h.Value)
	}
	if string(d.Key) != "k0" || string(d.Value) != "boom" || hs["wasmstream.task"] != "echo" ||
		hs["wasmstream.source"] != "events" || hs["wasmstream.attempts"] != "2" || hs["wasmstream.offset"] == "" ||
		hs["wasmstream.partition"] == "" || !strings.Contains(hs["wasmstream.error"], "unreachable") {
		t.Fatalf("dead letter key %q value %q headers %v", d.Key, d.Value, hs)
	}
}

// SASL (PLAIN and SCRAM) from the configuration reaches the cluster: the task consumes and
// produces on a broker that requires it, and wrong credentials fail clearly.
func TestKafkaSASL(t *testing.T) {
	t.Parallel() // it mostly waits (client retries, timeouts): it runs beside the other tests that do
	module := guestbuild.Go(t, "testguests/trapper")
	for _, mech := range []string{"plain", "scram-sha-256", "scram-sha-512"} {
		t.Run(mech, func(t *testing.T) {
			kmech := map[string]string{"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512"}[mech]
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"),
				kfake.EnableSASL(), kfake.Superuser(kmech, "ws", "secret"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			adminAuth := kgo.SASL(saslFor(mech, "ws", "secret"))
			cl := newClient(t, c, adminAuth)
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte("hello")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cfg := func(pass string, connect time.Duration) host.Config {
				return host.Config{
					DataDir: filepath.Join(t.TempDir(), "data"), Logger: testLogger(t),
					Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), ConnectTimeout: connect,
						SASL: host.KafkaSASLConfig{Mechanism: host.SASLMechanism(mech), User: "ws", Password: pass}},
					Tasks: []host.TaskConfig{{
						Name: "echo", Module: module,
						Inputs: []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
						Output: host.OutputConfig{Type: "kafka", Topic: "out"},
					}},
				}
			}
			h := hosttest.Start(t, cfg("secret", 0))
			out := newClient(t, c, adminAuth, kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer pcancel()
			var got []*kgo.Record
			for len(got) == 0 && pctx.Err() == nil {
				got = append(got, out.PollFetches(pctx).Records()...)
			}
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || string(got[0].Value) != "hello" {
				t.Fatalf("got %d outputs", len(got))
			}

			// Wrong credentials: the host fails with a clear error instead of waiting forever
			// (once: each try waits out the connect timeout, kafka.connect_timeout, made short
			// here).
			if mech != "scram-sha-256" {
				return
			}
			bad, err := host.New(cfg("wrong", 2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			bctx, bcancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer bcancel()
			err = bad.Run(bctx)
			if err == nil || !strings.Contains(err.Error(), "check the brokers, TLS and SASL settings") {
				t.Fatalf("Run with a wrong password = %v; want an error pointing at the SASL settings", err)
			}
		})
	}
}

func saslFor(mech, user, pass string) sasl.Mechanism {
	switch mech {
	case "plain":
		return plain.Auth{User: user, Pass: pass}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	default:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	}
}

// An emitted record that max_value_bytes allows but Kafka does not take (a 1 MiB value is over
// the producer's 1,000,012-byte batch) fails the emit with ERR_TOO_LARGE, so the record goes to
// the dead letters after its retries. It used to be produced, fail at the next flush and halt
// the task, and a restart replayed it into the same halt.
func TestKafkaOutputRecordTooLarge(t *testing.T) {
	module := guestbuild.Go(t, "testguests/hostile")
	c := newCluster(t, "echoes")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, []byte("a:before\nb:mibemit\nc:after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t),
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: "big", Module: module,
			Inputs: []host.InputConfig{{Name: "in", Type: "file", Path: input, Format: "text", KeySeparator: ":"}},
			Output: host.OutputConfig{Type: "kafka", Topic: "echoes"},
			Retry:  host.RetryConfig{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := consumeOutputs(t, c, "echoes", 2, 60*time.Second)
	if len(got["a"]) != 1 || len(got["c"]) != 1 || len(got["k"]) != 0 {
		t.Errorf("outputs %v, want those of a and c", got)
	}
	dead, err := os.ReadFile(filepath.Join(dir, "data", "big.deadletter.ndjson"))
	if err != nil || !strings.Contains(string(dead), "ERR_TOO_LARGE") || !strings.Contains(string(dead), `"key":"b"`) {
		t.Errorf("dead letters (%v):\n%s", err, dead)
	}
}

// A dead letter too large for a Kafka record (a long malformed line of a file input) is cut to
// fit, with headers saying so, instead of failing the flush and halting the task, which a
// restart replayed into the same halt.
func TestKafkaDeadLetterTooLarge(t *testing.T) {
	module := guestbuild.Go(t, "testguests/hostile")
	c := newCluster(t, "echoes", "dlq")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	long := "b:" + strings.Repeat("x", 2_000_000)
	if err := os.WriteFile(input, []byte("a:before\n"+long+"\nc:after\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t),
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: "long", Module: module,
			Inputs:     []host.InputConfig{{Name: "in", Type: "file", Path: input, Format: "text", KeySeparator: ":", MaxLineBytes: 1_000_000}},
			Output:     host.OutputConfig{Type: "kafka", Topic: "echoes"},
			DeadLetter: host.DeadLetterConfig{Topic: "dlq"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	dcl := newClient(t, c, kgo.ConsumeTopics("dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dead []*kgo.Record
	for len(dead) == 0 && ctx.Err() == nil {
		dead = append(dead, dcl.PollFetches(ctx).Records()...)
	}
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	hs := map[string]string{}
	for _, h := range dead[0].Headers {
		hs[h.Key] = string(h.Value)
	}
	if v := string(dead[0].Value); !strings.HasPrefix(long, v) || len(v) < 900_000 || hs["wasmstream.truncated"] != "true" ||
		hs["wasmstream.size"] != strconv.Itoa(len(long)) || !strings.Contains(hs["wasmstream.error"], "max_line_bytes") {
		t.Errorf("dead letter of %d bytes, headers %v", len(v), hs)
	}
}

// output.compression sets the codec of the record batches a kafka output produces (snappy when
// unset), at least once and exactly once; an unknown codec is refused at validation. Before, every
// batch was snappy whatever the configuration said (and the key did not exist).
func TestKafkaOutputCompression(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	// The codec numbers of a record batch's attributes.
	codecs := map[string]uint8{"": 2, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	for _, tc := range []struct{ compression, delivery string }{
		{"", "at_least_once"}, {"none", "at_least_once"}, {"gzip", "at_least_once"}, {"lz4", "at_least_once"},
		{"zstd", "at_least_once"}, {"gzip", "exactly_once"},
	} {
		t.Run(tc.compression+"/"+tc.delivery, func(t *testing.T) {
			c := newCluster(t, "events", "echoes")
			var recs []*kgo.Record
			for i := range 50 {
				recs = append(recs, &kgo.Record{Topic: "events", Key: []byte("k" + strconv.Itoa(i%5)), Value: []byte(strings.Repeat("v", 200))})
			}
			if err := newClient(t, c).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			task := host.TaskConfig{
				Name: "echo", Module: module, Delivery: host.Delivery(tc.delivery),
				Inputs: []host.InputConfig{{Name: "events", Type: "kafka", Topics: []string{"events"}}},
				Output: host.OutputConfig{Type: "kafka", Topic: "echoes", Compression: tc.compression},
			}
			if tc.delivery == "exactly_once" {
				task.Changelog = host.ChangelogConfig{Enabled: true}
			}
			h := hosttest.Start(t, host.Config{DataDir: t.TempDir(), Logger: testLogger(t),
				Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{task}})
			cl := newClient(t, c, kgo.ConsumeTopics("echoes"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n := 0
			for n < 50 && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					n++
					if got := r.Attrs.CompressionType(); got != codecs[tc.compression] {
						t.Errorf("an output's batch has codec %d, want %d (%q)", got, codecs[tc.compression], tc.compression)
					}
				})
			}
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			if n < 50 {
				t.Fatalf("%d of 50 outputs", n)
			}
		})
	}
	err := host.Config{Tasks: []host.TaskConfig{{Name: "x", Module: module,
		Inputs: []host.InputConfig{{Name: "events", Type: "kafka", Topics: []string{"events"}}},
		Output: host.OutputConfig{Type: "kafka", Topic: "echoes", Compression: "brotli"}}},
		Kafka: host.KafkaConfig{Brokers: []string{"127.0.0.1:1"}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "output.compression") {
		t.Fatalf("Validate with compression brotli: %v", err)
	}
}

// key_field, value_field, timestamp_field and key_separator on a kafka input are refused at
// validation: they were accepted and silently ignored.
func TestKafkaInputRefusesLineFields(t *testing.T) {
	for _, in := range []host.InputConfig{
		{KeyField: "user"}, {ValueField: "text"}, {TimestampField: "ts"}, {KeySeparator: "\t"},
	} {
		in.Name, in.Type, in.Topics = "events", "kafka", []string{"events"}
		err := host.Config{Tasks: []host.TaskConfig{{Name: "x", Module: "x.wasm", Inputs: []host.InputConfig{in},
			Output: host.OutputConfig{Type: "kafka", Topic: "echoes"}}},
			Kafka: host.KafkaConfig{Brokers: []string{"127.0.0.1:1"}}}.Validate()
		if err == nil || !strings.Contains(err.Error(), "a kafka input takes each record's key, value and timestamp as they are") {
			t.Errorf("Validate with %+v: %v", in, err)
		}
	}
}
