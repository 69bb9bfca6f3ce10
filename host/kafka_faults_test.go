package host_test

import (
	"context"
	"path/filepath"
	"strconv"
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

// faultCase is a broker fault a wordcount task (with a changelog) must ride out: before installs
// what fails from the start, mid acts between the two halves of the input (a leader or a
// coordinator moving, a broker removed), hit says whether the fault was met.
type faultCase struct {
	name    string
	brokers int
	before  func(c *kfake.Cluster) func() int // returns the fault's hit count (nil: not counted)
	mid     func(t *testing.T, c *kfake.Cluster)
}

// runFaultCase runs a wordcount task over 2×half records while fc's faults act and checks that
// it did not halt, that the outputs are complete (exactly once: each once) and that the state is
// exact. It returns how long the run took from the host's start to the last record committed.
func runFaultCase(t *testing.T, module string, fc faultCase, eos bool, half int) time.Duration {
	t.Helper()
	brokers := max(fc.brokers, 1)
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(4, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	want := produceWords(t, newClient(t, c), "words", half, 30, 11)
	var hits func() int
	if fc.before != nil {
		hits = fc.before(c)
	}
	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	if eos {
		tc.Delivery = "exactly_once"
	}
	dir := filepath.Join(t.TempDir(), "data")
	start := time.Now()
	h := hosttest.Start(t, host.Config{
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), TransactionTimeout: 10 * time.Second},
		Tasks: []host.TaskConfig{tc},
	})
	committed := func(n int) func() bool {
		return func() bool {
			s := h.Stats()
			if len(s) == 0 {
				return false
			}
			if s[0].Halted {
				t.Fatalf("the task halted: %s", s[0].Error)
			}
			var sum int64
			for _, in := range s[0].Inputs {
				sum += in.Committed
			}
			return sum >= int64(n)
		}
	}
	hosttest.WaitFor(t, 60*time.Second, "the first half committed", committed(half))
	if fc.mid != nil {
		fc.mid(t, c)
	}
	more := produceWords(t, newClient(t, c), "words", half, 30, 12)
	for u, ws := range more {
		if want[u] == nil {
			want[u] = map[string]int{}
		}
		for w, n := range ws {
			want[u][w] += n
		}
	}
	hosttest.WaitFor(t, 60*time.Second, "every record committed", committed(2*half))
	took := time.Since(start)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if hits != nil && hits() == 0 {
		t.Fatalf("the fault was never hit")
	}
	total := wordTotal(want)
	got := consumeOutputs(t, c, "counts", total, 30*time.Second)
	if eos {
		checkOutputsOnce(t, got, want, total)
	} else if dups := checkCountsAtLeastOnce(t, got, want); dups > 0 {
		t.Logf("%d outputs repeated (at least once)", dups)
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))
	s := h.Stats()[0]
	n := -1
	if hits != nil {
		n = hits()
	}
	t.Logf("%s: every record committed %.2fs after the start; fault hits %d, transactions %d committed %d aborted",
		fc.name, took.Seconds(), n, s.TxnCommits, s.TxnAborts)
	return took
}

// checkCountsAtLeastOnce checks that every key's outputs for each word hold each count from 1 to
// the final one at least once and none above it; it returns how many outputs were repeats.
func checkCountsAtLeastOnce(t *testing.T, got map[string][]string, want map[string]map[string]int) int {
	t.Helper()
	dups := 0
	for user, words := range want {
		seen := map[string]map[int]int{}
		for _, v := range got[user] {
			w, cs, _ := strings.Cut(v, " ")
			n, _ := strconv.Atoi(cs)
			if seen[w] == nil {
				seen[w] = map[int]int{}
			}
			seen[w][n]++
			if seen[w][n] > 1 {
				dups++
			}
		}
		for w, n := range words {
			for i := 1; i <= n; i++ {
				if seen[w][i] == 0 {
					t.Fatalf("key %s word %s: count %d never output (final %d)", user, w, i, n)
				}
			}
			for i := range seen[w] {
				if i > n {
					t.Fatalf("key %s word %s: count %d output, above the final %d", user, w, i, n)
				}
			}
		}
	}
	return dups
}

// fault returns a faultCase's before that installs f.
func fault(f ...kfake.Fault) func(c *kfake.Cluster) func() int {
	return func(c *kfake.Cluster) func() int {
		h := c.Fault(f...)
		return h.Hits
	}
}

// fetchAbove matches a fetch of a partition at an offset above o: a fault on a partition the
// host is reading, past its start.
func fetchAbove(o int64) func(kmsg.Request) bool {
	return func(r kmsg.Request) bool {
		for _, tp := range r.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.FetchOffset > o {
					return true
				}
			}
		}
		return false
	}
}

func faultCases() []faultCase {
	produce := func(e *kerr.Error, n int) func(c *kfake.Cluster) func() int {
		return fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: e, Count: n})
	}
	commit := func(e *kerr.Error) func(c *kfake.Cluster) func() int {
		return fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: e, Count: 4})
	}
	return []faultCase{
		{name: "produce NOT_LEADER_OR_FOLLOWER", before: produce(kerr.NotLeaderForPartition, 6)},
		{name: "produce REQUEST_TIMED_OUT", before: produce(kerr.RequestTimedOut, 6)},
		{name: "produce NOT_ENOUGH_REPLICAS", before: produce(kerr.NotEnoughReplicas, 6)},
		{name: "fetch NOT_LEADER_OR_FOLLOWER", before: fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.NotLeaderForPartition, Count: 6, When: fetchAbove(50)})},
		{name: "fetch UNKNOWN_SERVER_ERROR", before: fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Err: kerr.UnknownServerError, Count: 6, When: fetchAbove(50)})},
		{name: "fetch OFFSET_OUT_OF_RANGE once", before: fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "words", Err: kerr.OffsetOutOfRange, Count: 1, When: fetchAbove(50)})},
		{name: "commit REBALANCE_IN_PROGRESS", before: commit(kerr.RebalanceInProgress)},
		{name: "commit COORDINATOR_NOT_AVAILABLE", before: commit(kerr.CoordinatorNotAvailable)},
		{name: "commit NOT_COORDINATOR", before: commit(kerr.NotCoordinator)},
		{name: "commit REQUEST_TIMED_OUT", before: commit(kerr.RequestTimedOut)},
		{name: "coordinators move", brokers: 3, mid: func(t *testing.T, c *kfake.Cluster) { c.RehashCoordinators() }},
		{name: "leaders move", brokers: 3, mid: func(t *testing.T, c *kfake.Cluster) { c.ShufflePartitionLeaders() }},
		{name: "broker removed", brokers: 3, mid: func(t *testing.T, c *kfake.Cluster) {
			if err := c.RemoveNode(c.LeaderFor("counts", 0)); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

func txnFaultCases() []faultCase {
	txn := func(k kmsg.Key, e *kerr.Error) func(c *kfake.Cluster) func() int {
		return fault(kfake.Fault{Keys: []kmsg.Key{k}, Err: e, Count: 3})
	}
	var cs []faultCase
	for _, k := range []kmsg.Key{kmsg.AddPartitionsToTxn, kmsg.EndTxn, kmsg.TxnOffsetCommit} {
		for _, e := range []*kerr.Error{kerr.ConcurrentTransactions, kerr.CoordinatorLoadInProgress, kerr.RequestTimedOut} {
			cs = append(cs, faultCase{name: k.Name() + " " + e.Message, before: txn(k, e)})
		}
	}
	return cs
}

// TestKafkaBrokerFaultsRiddenOut: every fault of faultCases, at least once.
func TestKafkaBrokerFaultsRiddenOut(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	for _, fc := range faultCases() {
		t.Run(strings.ReplaceAll(fc.name, " ", "_"), func(t *testing.T) {
			runFaultCase(t, module, fc, false, 400)
		})
	}
}

// TestExactlyOnceBrokerFaultsRiddenOut: every fault of faultCases and txnFaultCases, exactly once.
func TestExactlyOnceBrokerFaultsRiddenOut(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	for _, fc := range append(faultCases(), txnFaultCases()...) {
		t.Run(strings.ReplaceAll(fc.name, " ", "_"), func(t *testing.T) {
			runFaultCase(t, module, fc, true, 400)
		})
	}
}

var _ = context.Background
