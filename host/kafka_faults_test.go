package host_test

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// faultCase is a broker fault a wordcount task (with a changelog) must ride out, or halt on
// with a message containing halts: before installs what fails from the start, mid acts between
// the two halves of the input (a leader or a coordinator moving, a broker removed). long cases
// run only under WASMSTREAM_TEST_LONG (they passed before the fixes, or repeat another case).
type faultCase struct {
	name    string
	brokers int
	before  func(c *kfake.Cluster) injected
	mid     func(t *testing.T, c *kfake.Cluster) (after func())
	kafka   func(k *host.KafkaConfig)
	halts   string
	long    bool
}

// injected is what a faultCase's before installed: how many requests it met, and how to lift it.
type injected struct {
	hits func() int
	lift func()
}

// runFaultCase runs a wordcount task over 2×half records while fc's faults act and checks that
// it did not halt (or halted saying fc.halts, then, the fault lifted, that a host restarted on
// its data directory completes the work), that the outputs are complete (exactly once: each
// once) and that the state is exact. It returns how long the run took from the host's start to
// the last record committed.
func runFaultCase(t *testing.T, module string, fc faultCase, eos bool, half int) time.Duration {
	t.Helper()
	brokers := max(fc.brokers, 1)
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(4, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	want := produceWords(t, newClient(t, c), "words", half, 30, 11)
	var inj injected
	if fc.before != nil {
		inj = fc.before(c)
	}
	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	if eos {
		tc.Delivery = "exactly_once"
	}
	dir := filepath.Join(t.TempDir(), "data")
	cfg := host.Config{
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), TransactionTimeout: 10 * time.Second},
		Tasks: []host.TaskConfig{tc},
	}
	if fc.kafka != nil {
		fc.kafka(&cfg.Kafka)
	}
	start := time.Now()
	h := hosttest.Start(t, cfg)
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
	if fc.halts != "" {
		var cause string
		hosttest.WaitFor(t, 60*time.Second, "the task halted", func() bool {
			s := h.Stats()
			if len(s) > 0 && s[0].Halted {
				cause = s[0].Error
				return true
			}
			return false
		})
		h.Stop()
		if !strings.Contains(cause, fc.halts) {
			t.Fatalf("the task halted with %q, want it to say %q", cause, fc.halts)
		}
		t.Logf("%s: halted %.2fs after the start: %s", fc.name, time.Since(start).Seconds(), cause)
		if inj.lift != nil {
			inj.lift()
		}
		h = hosttest.Start(t, cfg) // restarted on the same data directory, the fault lifted
	} else {
		hosttest.WaitFor(t, 60*time.Second, "the first half committed", committed(half))
	}
	var after func()
	if fc.mid != nil {
		after = fc.mid(t, c)
	}
	more := produceWords(t, newClient(t, c), "words", half, 30, 12)
	if after != nil {
		after()
	}
	addCounts(want, more)
	hosttest.WaitFor(t, 60*time.Second, "every record committed", committed(2*half))
	took := time.Since(start)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if inj.hits != nil && inj.hits() == 0 {
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
	if inj.hits != nil {
		n = inj.hits()
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
func fault(f ...kfake.Fault) func(c *kfake.Cluster) injected {
	return func(c *kfake.Cluster) injected {
		h := c.Fault(f...)
		return injected{hits: h.Hits, lift: h.Remove}
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

// heldProduces holds every produce request to topic at the broker until lifted: responses
// delayed past kafka.delivery_timeout.
func heldProduces(topic string) func(c *kfake.Cluster) injected {
	return func(c *kfake.Cluster) injected {
		release := make(chan struct{})
		var once sync.Once
		var held atomic.Int64
		id := c.TopicInfo(topic).TopicID // produce requests of v13 on name topics by id
		c.ControlKey(kmsg.Produce.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			select {
			case <-release:
				return nil, nil, false
			default:
			}
			for _, tp := range kr.(*kmsg.ProduceRequest).Topics {
				if tp.Topic == topic || tp.TopicID == id {
					held.Add(1)
					c.SleepControl(func() { <-release })
					break
				}
			}
			return nil, nil, false
		})
		return injected{hits: func() int { return int(held.Load()) }, lift: func() { once.Do(func() { close(release) }) }}
	}
}

// slowFetches delays n fetches above offset 50 by d each at the broker.
func slowFetches(n int, d time.Duration) func(c *kfake.Cluster) injected {
	return func(c *kfake.Cluster) injected {
		var slowed atomic.Int64
		c.ControlKey(kmsg.Fetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
			if slowed.Load() < int64(n) && fetchAbove(50)(kr) {
				slowed.Add(1)
				c.SleepControl(func() { <-time.After(d) }) // the broker's delay, not a wait of the test
			}
			return nil, nil, false
		})
		return injected{hits: func() int { return int(slowed.Load()) }}
	}
}

// holdEpochChecks holds the OffsetForLeaderEpoch requests of a consumer checking its position
// after a leader change until the returned release is called, once records were written in the
// new epoch. kfake answers a request for an epoch older than the partition's current one, when
// the partition holds no record of a later epoch yet, with an unknown epoch (-1), which the
// client takes for data loss (franz-go moved the partition to its log start and the task
// halted, as on a log that lost records); a Kafka broker records an epoch's start offset as
// its leader takes over and answers with it.
func holdEpochChecks(c *kfake.Cluster) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	c.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	return func() { once.Do(func() { close(gate) }) }
}

// faultCases are the faults of both delivery modes.
func faultCases() []faultCase {
	produce := func(e *kerr.Error, n int) func(c *kfake.Cluster) injected {
		return fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: e, Count: n})
	}
	fetch := func(e *kerr.Error, n int) func(c *kfake.Cluster) injected {
		return fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "words", Err: e, Count: n, When: fetchAbove(50)})
	}
	return []faultCase{
		// Before: 32.5 s to ride out six refusals at least once (a metadata refresh every 5 s).
		{name: "produce NOT_LEADER_OR_FOLLOWER", before: produce(kerr.NotLeaderForPartition, 6)},
		{name: "produce REQUEST_TIMED_OUT", before: produce(kerr.RequestTimedOut, 6), long: true},
		{name: "produce NOT_ENOUGH_REPLICAS", before: produce(kerr.NotEnoughReplicas, 6), long: true},
		{name: "fetch NOT_LEADER_OR_FOLLOWER", before: fetch(kerr.NotLeaderForPartition, 6), long: true},
		// Before: the first one halted the task.
		{name: "fetch UNKNOWN_SERVER_ERROR", before: fetch(kerr.UnknownServerError, 6)},
		// Before: halted, saying the partition's log diverged at offset 0.
		{name: "fetch OFFSET_OUT_OF_RANGE once", before: fetch(kerr.OffsetOutOfRange, 1)},
		{name: "slow fetches", before: slowFetches(3, 2*time.Second), long: true},
		{name: "coordinators move", brokers: 3, mid: func(t *testing.T, c *kfake.Cluster) func() { c.RehashCoordinators(); return nil }},
		{name: "leaders move", brokers: 3, mid: func(t *testing.T, c *kfake.Cluster) func() {
			release := holdEpochChecks(c)
			c.ShufflePartitionLeaders()
			return release
		}},
		{name: "broker removed", brokers: 3, mid: func(t *testing.T, c *kfake.Cluster) func() {
			release := holdEpochChecks(c)
			if err := c.RemoveNode(c.LeaderFor("words", 0)); err != nil {
				t.Fatal(err)
			}
			return release
		}},
	}
}

// alosFaultCases are the faults of at-least-once tasks only: group offset commits (exactly once
// commits offsets in its transactions) and the delivery timeout (exactly once bounds a
// transaction's flush by kafka.unreachable_timeout).
func aloFaultCases() []faultCase {
	commit := func(e *kerr.Error) func(c *kfake.Cluster) injected {
		return fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: e, Count: 4})
	}
	return []faultCase{
		{name: "commit REBALANCE_IN_PROGRESS", before: commit(kerr.RebalanceInProgress), long: true},
		{name: "commit COORDINATOR_NOT_AVAILABLE", before: commit(kerr.CoordinatorNotAvailable), long: true},
		{name: "commit NOT_COORDINATOR", before: commit(kerr.NotCoordinator)},
		{name: "commit REQUEST_TIMED_OUT", before: commit(kerr.RequestTimedOut), long: true},
		// Before: halted saying "outputs not acknowledged", no topic named.
		{name: "produce held past delivery_timeout", before: heldProduces("counts"),
			kafka: func(k *host.KafkaConfig) { k.DeliveryTimeout = 2 * time.Second },
			halts: "outputs to counts ("},
		// Before: the changelog's records had a delivery timeout of their own (2 min) and its
		// flush waited 60 s whatever kafka.delivery_timeout said; the task went on without a
		// checkpoint for a minute, then halted with "context deadline exceeded".
		{name: "changelog produce held past delivery_timeout", before: func(c *kfake.Cluster) injected {
			if err := c.CreateTopic("wc-changelog", 4, map[string]string{"cleanup.policy": "compact"}); err != nil {
				panic(err)
			}
			return heldProduces("wc-changelog")(c)
		},
			kafka: func(k *host.KafkaConfig) { k.DeliveryTimeout = 2 * time.Second },
			halts: "changelog wc-changelog: producing the checkpoint failed; it is not committed: kafka: changelog wc-changelog: records not acknowledged within 2s (kafka.delivery_timeout)"},
	}
}

// txnFaultCases are the faults of exactly-once tasks only. AddPartitionsToTxn is not among them:
// franz-go against kfake runs transactions of KIP-890 part 2, which add partitions with their
// produce requests (a fault on AddPartitionsToTxn is never met).
func txnFaultCases() []faultCase {
	txn := func(k kmsg.Key, e *kerr.Error) func(c *kfake.Cluster) injected {
		return fault(kfake.Fault{Keys: []kmsg.Key{k}, Err: e, Count: 3})
	}
	var cs []faultCase
	for _, k := range []kmsg.Key{kmsg.EndTxn, kmsg.TxnOffsetCommit} {
		for _, e := range []*kerr.Error{kerr.ConcurrentTransactions, kerr.CoordinatorLoadInProgress, kerr.RequestTimedOut} {
			fc := faultCase{name: k.Name() + " " + e.Message, before: txn(k, e), long: e != kerr.RequestTimedOut}
			if k == kmsg.EndTxn && e == kerr.RequestTimedOut {
				// Whether the commit took is unknown to the client: it halts, and a restart
				// resumes from what the cluster committed.
				fc.halts = "whether it committed is unknown"
			}
			cs = append(cs, fc)
		}
	}
	// A transaction's end waits at most kafka.unreachable_timeout for the outputs'
	// acknowledgements; the halt says what to do (before, it did not).
	cs = append(cs, faultCase{name: "produce held past unreachable_timeout", before: heldProduces("counts"),
		kafka: func(k *host.KafkaConfig) { k.UnreachableTimeout = 3 * time.Second },
		halts: "did not end the transaction within 3s (kafka.unreachable_timeout; the cluster has been unreachable for that long, or has not acknowledged the transaction's records?): once it answers, restart the task (wasmstream restart)", long: true})
	// The partition an out-of-range fetch moved back in the transaction that then aborts: before,
	// the client took the offset it was moved back to for the partition's committed one, and the
	// abort rewound it there, past the records of the aborted transaction (the task stalled).
	return append(cs, faultCase{name: "fetch OFFSET_OUT_OF_RANGE then TxnOffsetCommit REQUEST_TIMED_OUT", brokers: 3, before: fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "counts", Err: kerr.NotLeaderForPartition, Count: 3},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "words", Err: kerr.OffsetOutOfRange, Count: 1, When: fetchAbove(50)},
		kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.RequestTimedOut, Count: 1})})
}

func runFaultCases(t *testing.T, cases []faultCase, eos bool) {
	module := guestbuild.Go(t, "wordcount")
	for _, fc := range cases {
		t.Run(strings.ReplaceAll(fc.name, " ", "_"), func(t *testing.T) {
			if fc.long && !hosttest.Long() {
				t.Skip("long form only (WASMSTREAM_TEST_LONG=1)")
			}
			runFaultCase(t, module, fc, eos, 400)
		})
	}
}

// TestKafkaBrokerFaultsRiddenOut: an at-least-once task rides out each retriable broker fault
// (nothing lost, state exact), and halts with the topic named on produce responses held past
// kafka.delivery_timeout, completing after a restart.
func TestKafkaBrokerFaultsRiddenOut(t *testing.T) {
	runFaultCases(t, append(faultCases(), aloFaultCases()...), false)
}

// TestExactlyOnceBrokerFaultsRiddenOut: the same for an exactly-once task, with transactional
// faults besides: every output once, state exact.
func TestExactlyOnceBrokerFaultsRiddenOut(t *testing.T) {
	runFaultCases(t, append(faultCases(), txnFaultCases()...), true)
}
