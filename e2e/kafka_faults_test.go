package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKafkaBrokerFaultsThroughBinary: the binary runs an exactly-once wordcount (with a
// changelog) against a cluster of three brokers (kfake in the test's process) that refuses
// produces (NOT_LEADER_OR_FOLLOWER), a transactional offset commit (REQUEST_TIMED_OUT), answers
// a fetch at an offset the partition holds with OFFSET_OUT_OF_RANGE, and then, between two
// batches of input, loses a broker (its partitions' leadership moves) and moves its
// coordinators. The host rides it all out: it never halts, and a read_committed reader sees
// every count exactly once. Before, the fetch's OFFSET_OUT_OF_RANGE halted it as data loss
// ("the partition's log diverged from what it read at offset 0"), and the offset commit's
// REQUEST_TIMED_OUT halted it ("ending the transaction: ... REQUEST_TIMED_OUT").
func TestKafkaBrokerFaultsThroughBinary(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Seeded with broker 0, which stays: the clients learn the others from it.
	r := &deliveryRig{t: t, bin: guestbuild.Binary(t), dir: t.TempDir(), brokers: c.ListenAddrs()[0]}
	r.cl, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.cl.Close)

	want := r.produceWords(400, time.Time{}, 41)
	aboveStart := func(kr kmsg.Request) bool {
		for _, tp := range kr.(*kmsg.FetchRequest).Topics {
			for _, p := range tp.Partitions {
				if p.FetchOffset > 20 {
					return true
				}
			}
		}
		return false
	}
	faults := c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "counts", Err: kerr.NotLeaderForPartition, Count: 3},
		kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Err: kerr.RequestTimedOut, Count: 1},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "words", Err: kerr.OffsetOutOfRange, Count: 1, When: aboveStart},
	)
	yaml := r.wordcountYAML(guestbuild.Go(t, "wordcount"), "exactly_once", "  transaction_timeout: 10s\n")
	r.writeConfig(yaml + "    changelog:\n      enabled: true\n")
	h := r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, true)
	if n := faults.Hits(); n < 5 {
		t.Fatalf("%d faults met, want the 5 installed; the log:\n%s", n, tail(h.logs.String(), 8000))
	}

	// kfake answers a consumer checking its position for an epoch older than the partition's
	// current one with an unknown epoch until a record of the new epoch is written (a Kafka
	// broker answers with the epoch's start): those checks wait for the next records.
	gate := make(chan struct{})
	c.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	victim := c.LeaderFor("words", 0)
	if victim == 0 {
		victim = 2
	}
	if err := c.RemoveNode(victim); err != nil {
		t.Fatal(err)
	}
	c.RehashCoordinators()
	for user, ws := range r.produceWords(400, time.Time{}, 42) {
		if want[user] == nil {
			want[user] = map[string]int{}
		}
		for w, n := range ws {
			want[user][w] += n
		}
	}
	close(gate)
	outputs, dups := consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, true)
	h.stop(t)
	if dups > 0 {
		t.Fatalf("%d of %d outputs seen twice by a read_committed reader; the log:\n%s", dups, outputs, tail(h.logs.String(), 8000))
	}
	if log := h.logs.String(); !strings.Contains(log, "although its log holds the offset") {
		t.Fatalf("the log does not say the out-of-range fetch was ridden out:\n%s", tail(log, 8000))
	}
	t.Logf("%d outputs, each once; faults met %d", outputs, faults.Hits())
}
