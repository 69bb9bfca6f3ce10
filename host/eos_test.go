package host_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

func eosTask(module string) host.TaskConfig {
	tc := wordcountKafkaTask(module)
	tc.Delivery = "exactly_once"
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	return tc
}

// runEOSHost runs an exactly-once wordcount host over dir until stop returns true, then stops it
// cleanly and returns its figures.
func runEOSHost(t *testing.T, c *kfake.Cluster, module, dir string, stop func(h *host.Host) bool) host.TaskStats {
	t.Helper()
	h := hosttest.Start(t, host.Config{
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{eosTask(module)},
	})
	for deadline := time.Now().Add(90 * time.Second); !stop(h.Host); time.Sleep(50 * time.Millisecond) {
		select {
		case <-h.Done():
			t.Fatalf("host stopped: %v", h.Wait())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("host did not get there in time: %+v", h.Stats())
		}
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	return h.Stats()[0]
}

func processedAll(total int) func(h *host.Host) bool {
	return func(h *host.Host) bool {
		s := h.Stats()
		if len(s) == 0 {
			return false
		}
		var committed int64
		for _, in := range s[0].Inputs {
			committed += in.Committed
		}
		return committed >= int64(total)
	}
}

// wordTotal is the number of outputs the wordcount emits for want: one per word occurrence.
func wordTotal(want map[string]map[string]int) int {
	total := 0
	for _, ws := range want {
		for _, n := range ws {
			total += n
		}
	}
	return total
}

// TestExactlyOnceBrokerFaults runs an exactly-once task while the broker fails transaction ends,
// transactional offset commits and produces. The faulted transactions abort and their records
// are processed again; a read_committed reader of the outputs sees every count exactly once
// and in order, the local state is exact, and a host with an empty disk restores it exactly
// from the changelog.
func TestExactlyOnceBrokerFaults(t *testing.T) {
	t.Parallel() // it mostly waits (client retries, timeouts): it runs beside the other tests that do
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 3000, 40, 5)
	total := wordTotal(want)
	endFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 2})
	offsetFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.CoordinatorLoadInProgress, Count: 2})
	produceFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "counts", Err: kerr.NotEnoughReplicas, Count: 3})

	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	a := runEOSHost(t, c, module, dirA, processedAll(3000))
	if endFaults.Hits() == 0 || offsetFaults.Hits() == 0 || produceFaults.Hits() == 0 {
		t.Fatalf("faults not hit: end %d, offsets %d, produce %d", endFaults.Hits(), offsetFaults.Hits(), produceFaults.Hits())
	}
	if a.TxnAborts == 0 {
		t.Fatalf("no transaction aborted under %d transaction-end and %d offset-commit faults", endFaults.Hits(), offsetFaults.Hits())
	}
	checkCountsOutputs(t, consumeOutputs(t, c, "counts", total, 60*time.Second), want)
	sameCounts(t, want, stateOf(t, dirA, "wc"))

	b := runEOSHost(t, c, module, dirB, func(h *host.Host) bool {
		s := h.Stats()
		return len(s) > 0 && s[0].Restores >= 4
	})
	sameCounts(t, want, stateOf(t, dirB, "wc"))
	t.Logf("host a: %d transactions committed, %d aborted (faults hit: end %d, offsets %d, produce %d); host b restored %d changelog records",
		a.TxnCommits, a.TxnAborts, endFaults.Hits(), offsetFaults.Hits(), produceFaults.Hits(), b.RestoredRecords)
}

// TestExactlyOnceConfig: exactly-once mode refuses what cannot take part in a Kafka transaction,
// naming the key and why.
func TestExactlyOnceConfig(t *testing.T) {
	err := host.Config{Kafka: host.KafkaConfig{Brokers: []string{"127.0.0.1:9"}}, Tasks: []host.TaskConfig{{
		Name: "t", Module: "m.wasm", Delivery: "exactly_once",
		Inputs: []host.InputConfig{{Name: "k", Type: "kafka", Topics: []string{"in"}}, {Name: "f", Type: "file", Path: "x"}},
		Output: host.OutputConfig{Type: "stdout"},
	}, {
		Name: "u", Module: "m.wasm", Delivery: "twice",
		Inputs: []host.InputConfig{{Name: "k", Type: "kafka", Topics: []string{"in"}}},
	}}}.Validate()
	for _, want := range []string{
		"tasks[0].inputs[1].type: delivery exactly_once needs kafka inputs only",
		"tasks[0].output.type: delivery exactly_once needs a kafka output",
		"tasks[0].changelog.enabled: delivery exactly_once needs the changelog",
		"tasks[1].delivery:",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v\nwant a problem %q", err, want)
		}
	}
}

// TestExactlyOncePause pauses an exactly-once task: it reads nothing more while paused (the
// transactions go on without it), and after Resume it processes the rest, every output once.
func TestExactlyOncePause(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	cl := newClient(t, c)
	want := produceWords(t, cl, "words", 1000, 30, 11)
	h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t),
		DataDir: filepath.Join(t.TempDir(), "a"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{eosTask(module)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	wait := func(what string, cond func(host.TaskStats) bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if s := h.Stats(); len(s) > 0 && cond(s[0]) {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("host stopped: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not in 60s: %+v", what, h.Stats())
			}
		}
	}
	processedAll := func(n int64) func(host.TaskStats) bool {
		return func(s host.TaskStats) bool {
			var committed int64
			for _, in := range s.Inputs {
				committed += in.Committed
			}
			return committed >= n
		}
	}
	wait("first 1000 committed", processedAll(1000))
	if err := h.Pause(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	more := produceWords(t, cl, "words", 1000, 30, 12)
	// Many transaction intervals go by; nothing of the new records may be read meanwhile. The
	// loop's checkpoint ticks count them: the consumer ends a transaction on the same interval.
	from := h.Stats()[0].CheckpointSeconds.Count
	wait("15 checkpoint intervals while paused", func(s host.TaskStats) bool { return s.CheckpointSeconds.Count >= from+15 })
	if s := h.Stats()[0]; s.Records != 1000 || s.TxnAborts != 0 {
		t.Fatalf("paused: read %d records (want 1000), %d transactions aborted", s.Records, s.TxnAborts)
	}
	if err := h.Resume(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	wait("all 2000 committed", processedAll(2000))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	addCounts(want, more)
	checkCountsOutputs(t, consumeOutputs(t, c, "counts", wordTotal(want), 60*time.Second), want)
}

// TestExactlyOnceProduceRetriesInTime: outputs the broker refuses twice in a row with a retriable
// error (NOT_ENOUGH_REPLICAS) are produced again soon enough for their transaction to commit
// within a short kafka.transaction_timeout. The client retries such a batch after refreshing its
// metadata, which it did at most every 5 s by default: the second retry came 5 s after the first,
// the broker aborted the transaction at its timeout, and the producer, fenced by the epoch bump,
// halted the task (TestExactlyOnceBrokerFaults' flake: three faults, 15 s, the 15 s default
// timeout).
func TestExactlyOnceProduceRetriesInTime(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 400, 20, 9)
	faults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "counts", Err: kerr.NotEnoughReplicas, Count: 2})
	h := hosttest.Start(t, host.Config{
		DataDir: t.TempDir(), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), TransactionTimeout: 3 * time.Second},
		Tasks: []host.TaskConfig{eosTask(module)},
	})
	hosttest.WaitFor(t, 60*time.Second, "every record committed", func() bool {
		if s := h.Stats(); len(s) > 0 && s[0].Halted {
			t.Fatalf("the task halted: %s", s[0].Error)
		}
		return processedAll(400)(h.Host)
	})
	if faults.Hits() != 2 {
		t.Fatalf("%d produce faults hit, want 2", faults.Hits())
	}
	checkCountsOutputs(t, consumeOutputs(t, c, "counts", wordTotal(want), 30*time.Second), want)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
}
