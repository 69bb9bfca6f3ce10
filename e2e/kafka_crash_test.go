package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startBroker runs `wasmstream dev --broker-only` as its own process, so that it outlives the
// hosts the test kills.
func startBroker(t testing.TB, bin, dir string, port int, topics ...string) {
	t.Helper()
	args := []string{"dev", "--broker-only", "--dir", dir, "--port", strconv.Itoa(port)}
	for _, tp := range topics {
		args = append(args, "--topic", tp)
	}
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "listening") {
		t.Fatalf("broker did not start: %q %v", line, err)
	}
}

// TestKafkaCrashExactState kills a real wasmstream process consuming from a broker in another
// process with SIGKILL at random moments, at least 10 times (6 unless hosttest.Long), and checks that the final state is
// exact and no output was lost; it reports the duplicates.
func TestKafkaCrashExactState(t *testing.T) {
	kafkaCrashExactState(t, 1, hosttest.Scale(6, 10))
}

// TestKafkaCrashExactStateLoops is TestKafkaCrashExactState with the task running as three
// loops (tasks[].loops) over the four partitions, killed at least 4 times (10 with
// hosttest.Long): each loop checkpoints its partitions on its own into the one store, and a
// restart's loops take them over in any order.
func TestKafkaCrashExactStateLoops(t *testing.T) {
	kafkaCrashExactState(t, 3, hosttest.Scale(4, 10))
}

func kafkaCrashExactState(t *testing.T, loops, minKills int) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	port := freePort(t)
	startBroker(t, bin, filepath.Join(dir, "broker"), port, "words", "counts")
	brokers := "127.0.0.1:" + strconv.Itoa(port)

	// The input: keyed text records, produced once up front.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	want := wordcountExpect{}
	records := 0
	var produced []inputRecord // where each record landed, for a failure's report
	// produce appends n records to the input and to the model.
	produce := func(n int) {
		batch := make([]*kgo.Record, 0, n)
		for i := 0; i < n; i++ {
			user := fmt.Sprintf("user%03d", rng.IntN(300))
			text := fmt.Sprintf("w%02d w%02d", rng.IntN(40), rng.IntN(40))
			want.add(user, text)
			batch = append(batch, &kgo.Record{Topic: "words", Key: []byte(user), Value: []byte(text)})
		}
		res := cl.ProduceSync(context.Background(), batch...)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			produced = append(produced, inputRecord{partition: r.Record.Partition, offset: r.Record.Offset,
				user: string(r.Record.Key), text: string(r.Record.Value)})
		}
		records += n
	}
	produce(15_000)
	cfg := filepath.Join(dir, "wasmstream.yaml")
	os.WriteFile(cfg, []byte(wcHostConfig{data: filepath.Join(dir, "data"), brokers: brokers, module: module,
		session: "2s", rebalance: "5s", loops: loops}.yaml()), 0o644)

	kills, midRun := 0, 0
	// Each killed run's log, kept for a failure's report: the state differing once in about 60
	// runs (seen in CI, one key's counts low) left nothing to read.
	var runLogs []*lockedBuffer
	for kills < minKills {
		produce(15_000) // every run has new work to be killed in the middle of
		cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "info")
		logs, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The host signals when it owns partitions; odd runs die at a random moment from
		// start-up on, even runs some time after they began processing.
		assigned := make(chan struct{})
		runLog := &lockedBuffer{}
		runLogs = append(runLogs, runLog)
		go func() {
			sc := bufio.NewScanner(logs)
			once := false
			for sc.Scan() {
				fmt.Fprintln(runLog, sc.Text())
				if !once && strings.Contains(sc.Text(), "partition assigned") {
					once = true
					close(assigned)
				}
			}
		}()
		if kills%2 == 0 {
			// Wait for the partitions, then for this run's first new outputs: the kill lands
			// mid-processing, between checkpoints.
			select {
			case <-assigned:
				if waitNewOutputs(brokers, 30*time.Second) {
					midRun++
				}
			case <-time.After(30 * time.Second):
			}
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		kills++
		// What the kill left must be exact already: a restart skips exactly the records whose
		// effects the state holds. Checked here, a loss names the run that made it.
		problems, checked, err := replayExact(filepath.Join(dir, "data"), "wc", brokers, "wasmstream-wc", "words", produced)
		if err != nil {
			t.Logf("after kill %d the store could not be checked: %v", kills, err)
		}
		t.Logf("after kill %d: %s", kills, checked)
		if len(problems) > 0 {
			logRuns(t, runLogs, "")
			t.Fatalf("after kill %d, a restart would not make the state exact:\n%s", kills, strings.Join(problems, "\n"))
		}
	}
	// One more run, killed the moment every expected output is there: all its outputs are
	// acknowledged, and the checkpoint covering the last of them may not be durable yet (the
	// at-least-once window). The last run must then process those records again before the
	// state is read: CI26's last run, stopped as soon as the outputs were all there (a fast
	// killed run had emitted them), had not, and the state read lacked a partition's tail.
	{
		// Reading the outputs so far while the host starts, the watch sees the last ones a
		// moment after they are written, well within a checkpoint interval most times.
		complete := watchOutputs(t, brokers, want)
		cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "info")
		runLog := &lockedBuffer{}
		runLogs = append(runLogs, runLog)
		cmd.Stderr = runLog
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-complete:
		case <-time.After(3 * time.Minute):
			logRuns(t, runLogs, "")
			t.Fatalf("the outputs were not all there after 3 minutes of run %d", len(runLogs))
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		kills++
		problems, checked, err := replayExact(filepath.Join(dir, "data"), "wc", brokers, "wasmstream-wc", "words", produced)
		if err != nil {
			t.Logf("after kill %d the store could not be checked: %v", kills, err)
		}
		t.Logf("after kill %d, once every output was there: %s", kills, checked)
		if len(problems) > 0 {
			logRuns(t, runLogs, "")
			t.Fatalf("after kill %d, a restart would not make the state exact:\n%s", kills, strings.Join(problems, "\n"))
		}
	}
	// The last run goes until every output is there and every input record is checkpointed
	// (waitCaughtUp), then stops cleanly. It starts once the
	// group has no members left (the killed members' sessions, 2s, ran out), so that the group
	// has only live members: with the in-process broker, a live member has been seen waiting
	// minutes for the partitions of a member whose session expired while it was in the group
	// (an open question, noted in the closing note of the Kafka issue).
	adm := kadm.NewClient(cl)
	hosttest.WaitFor(t, time.Minute, "the killed hosts' sessions ending (no member left in the group)", func() bool {
		groups, err := adm.DescribeGroups(context.Background(), "wasmstream-wc")
		return err == nil && len(groups["wasmstream-wc"].Members) == 0
	})
	cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "info")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outputs, dups := consumeCounts(t, brokers, want, 3*time.Minute, func() string { return stderr.String() }, false)
	waitCaughtUp(t, brokers, "wasmstream-wc", "words", 3*time.Minute, func() string { return stderr.String() })
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("last run: %v\n%s", err, stderr.String())
	}
	if l := fmt.Sprintf("loops=%d", loops); loops > 1 && !strings.Contains(stderr.String(), l) {
		t.Fatalf("the last run's log does not say %s:\n%s", l, stderr.String())
	}
	got := readState(t, filepath.Join(dir, "data"), "wc")
	if diffs := diffState(want, got); len(diffs) > 0 {
		logRuns(t, runLogs, stderr.String())
		t.Fatalf("state differs after %d kills: %s\n%s", kills,
			kafkaStateReport(filepath.Join(dir, "data"), "wc", brokers, "wasmstream-wc", "words", want, got, produced),
			strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	// One host: the group's offsets are only ever committed from its own store's positions, so
	// no run may find them further than its checkpoint (that would skip the records between).
	logs := []string{stderr.String()}
	for _, l := range runLogs {
		logs = append(logs, l.String())
	}
	for i, l := range logs {
		if strings.Contains(l, "the group committed further than this host's checkpoint") {
			logRuns(t, runLogs, stderr.String())
			t.Fatalf("a run (%d of %d, the last one first) found the group's offset further than its store's position", i+1, len(logs))
		}
	}
	t.Logf("kafka crash test (loops %d): %d records, %d SIGKILLs (%d while it was producing outputs), state exact over %d users; %d outputs, %d duplicates",
		loops, records, kills, midRun, len(got), outputs, dups)
	fmt.Printf("kafka crash test (loops %d): %d SIGKILLs, %d records, state exact, %d duplicate outputs\n", loops, kills, records, dups)
}

// consumeCounts reads the counts topic until every expected (user, word, count) output is
// there, and returns how many outputs it read and how many were duplicates.
// With readCommitted, only outputs of committed transactions are read.
func consumeCounts(t *testing.T, brokers string, want wordcountExpect, timeout time.Duration, logs func() string, readCommitted bool) (outputs, dups int) {
	t.Helper()
	need := 0
	for _, ws := range want {
		for _, n := range ws {
			need += n
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers), kgo.ConsumeTopics("counts"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := map[string]bool{}
	read := map[int32]int{} // records read by partition
	for len(seen) < need {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d distinct outputs arrived (%s); missing %s; the host's log:\n%s", len(seen), need, outputOffsets(brokers, read), missingCounts(want, seen), logs())
		}
		fs.EachRecord(func(r *kgo.Record) {
			read[r.Partition]++
			outputs++
			k := string(r.Key) + "/" + string(r.Value)
			if seen[k] {
				dups++
			}
			seen[k] = true
		})
	}
	// Every output is one the model expects.
	for k := range seen {
		user, rest, _ := strings.Cut(k, "/")
		word, count, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(count)
		if n < 1 || n > want[user][word] {
			t.Fatalf("unexpected output %s", k)
		}
	}
	return outputs, dups
}

// watchOutputs reads the counts topic from its start until every expected (user, word, count)
// output is there, then closes the channel it returned. It stops with the test.
func watchOutputs(t *testing.T, brokers string, want wordcountExpect) <-chan struct{} {
	need := 0
	for _, ws := range want {
		for _, n := range ws {
			need += n
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics("counts"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-stopped
		cl.Close()
	})
	complete := make(chan struct{})
	go func() {
		defer close(stopped)
		seen := map[string]bool{}
		for len(seen) < need && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Key)+"/"+string(r.Value)] = true })
		}
		if len(seen) >= need {
			close(complete)
		}
	}()
	return complete
}

// waitCaughtUp waits until group has committed every partition of topic up to its end: every
// input record was processed and its effects checkpointed (at least once, a group offset is
// committed after the store, and the changelog, hold its position; exactly once, with the
// state's transaction). The outputs alone do not say so: those of a killed run are there before
// the run that must process its records again has, and a host stopped then leaves them to its
// next start, its state exact up to its position but short of the whole input (CI26).
func waitCaughtUp(t *testing.T, brokers, group, topic string, timeout time.Duration, logs func() string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lag := "not read yet"
	caughtUp := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			lag = err.Error()
			return false
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			lag = err.Error()
			return false
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(o.Topic, o.Partition)
			if !ok || c.At < o.Offset {
				behind = append(behind, fmt.Sprintf("partition %d committed %d of %d", o.Partition, c.At, o.Offset))
			}
		})
		slices.Sort(behind)
		lag = strings.Join(behind, ", ")
		return len(behind) == 0
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !caughtUp() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("group %s did not commit topic %s to its end within %s (%s); the log:\n%s", group, topic, timeout, lag, tail(logs(), 8000))
		}
	}
}

// missingCounts describes, for a failure, the expected outputs not seen: how many, how many of
// them are a word's last count (a lost update of the state) rather than one before it (an output
// lost while the state moved on), and the first few, "user/word count (of last)".
func missingCounts(want wordcountExpect, seen map[string]bool) string {
	var miss []string
	last := 0
	for user, ws := range want {
		for word, n := range ws {
			for c := 1; c <= n; c++ {
				if !seen[fmt.Sprintf("%s/%s %d", user, word, c)] {
					miss = append(miss, fmt.Sprintf("%s/%s %d (of %d)", user, word, c, n))
					if c == n {
						last++
					}
				}
			}
		}
	}
	slices.Sort(miss)
	return fmt.Sprintf("%d (%d of them a word's last count): %s", len(miss), last, strings.Join(miss[:min(len(miss), 30)], ", "))
}

// outputOffsets describes, for a failure, what the reader read of each partition of the counts
// topic beside the partition's end offset and last stable offset (the end for read_committed
// readers): an LSO below the end holds a reader back behind an open transaction.
func outputOffsets(brokers string, read map[int32]int) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, "counts")
	if err != nil {
		return fmt.Sprintf("read by partition %v; end offsets: %v", read, err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, "counts")
	if err != nil {
		return fmt.Sprintf("read by partition %v; last stable offsets: %v", read, err)
	}
	var b strings.Builder
	ends.Each(func(o kadm.ListedOffset) {
		lso, _ := stable.Lookup(o.Topic, o.Partition)
		fmt.Fprintf(&b, "partition %d: read %d, end %d, last stable %d; ", o.Partition, read[o.Partition], o.Offset, lso.Offset)
	})
	return strings.TrimSuffix(b.String(), "; ")
}

// waitNewOutputs waits until a record is appended to the counts topic after the call, and
// reports whether one was.
func waitNewOutputs(brokers string, timeout time.Duration) bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics("counts"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()))
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for ctx.Err() == nil {
		if len(cl.PollFetches(ctx).Records()) > 0 {
			return true
		}
	}
	return false
}

// keyEvents are the log lines that say where a run took its partitions from and what moved
// them: logRuns prints them whole, whatever a log's tail cuts.
var keyEvents = []string{"partition assigned", "partition revoked", "partition lost", "committed further",
	"no longer knew", "lost committed checkpoints", "level=ERROR", "level=WARN"}

// logRuns logs, for a failure, each killed run's key events and the tail of its log, then the
// last run's (if any).
func logRuns(t *testing.T, runs []*lockedBuffer, last string) {
	t.Helper()
	show := func(name, log string) {
		var events []string
		for _, line := range strings.Split(log, "\n") {
			for _, e := range keyEvents {
				if strings.Contains(line, e) {
					events = append(events, line)
					break
				}
			}
		}
		t.Logf("%s: key events:\n%s\n... its log's tail:\n%s", name, strings.Join(events, "\n"), tail(log, 6000))
	}
	for i, l := range runs {
		show(fmt.Sprintf("killed run %d", i+1), l.String())
	}
	if last != "" {
		show("the last run", last)
	}
}
