package host_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestExactlyOnceLongRebalance: an exactly-once host processes records when a second host
// joins its group, and the rebalance's sync (the leader's SyncGroup, which every member's waits
// for) is held longer than kafka.transaction_timeout, as a slow member holds a real group.
// franz-go holds a transaction's offset commit while the group joins and syncs: a transaction
// that took records during the join would wait there until the broker aborted it and fenced
// the producer (the task halted). The host takes no records while its group joins and syncs,
// so its transaction stays empty meanwhile: no host halts, a read_committed reader sees every
// count exactly once, and the state is exact.
func TestExactlyOnceLongRebalance(t *testing.T) {
	const txnTimeout = 3 * time.Second
	const hold = txnTimeout + 2*time.Second
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	dir := t.TempDir()
	start := func(name string) *hosttest.Running {
		return hosttest.Start(t, host.Config{
			DataDir: filepath.Join(dir, name), Logger: testLogger(t), CheckpointInterval: 200 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), TransactionTimeout: txnTimeout,
				SessionTimeout: 6 * time.Second, RebalanceTimeout: 20 * time.Second},
			Tasks: []host.TaskConfig{eosTask(module)},
		})
	}
	stats := func(h *hosttest.Running) host.TaskStats {
		if s := h.Stats(); len(s) > 0 {
			return s[0]
		}
		return host.TaskStats{}
	}
	hosts := map[string]*hosttest.Running{}
	alive := func() {
		t.Helper()
		for name, h := range hosts {
			if s := stats(h); s.Halted {
				t.Fatalf("host %s halted: %s", name, s.Error)
			}
		}
	}

	stopProducing := flowWords(t, c, 11, 10, 20*time.Millisecond)
	a := start("a")
	hosts["a"] = a
	hosttest.WaitFor(t, 60*time.Second, "a owns every partition and commits", func() bool {
		alive()
		s := stats(a)
		return len(s.Inputs) == 4 && s.TxnCommits > 2
	})

	// The next rebalance's sync is held for hold: the leader's SyncGroup (the one carrying the
	// plan), which the other members' syncs wait for.
	var armed atomic.Bool
	var once sync.Once
	var held atomic.Int64
	c.ControlKey(int16(kmsg.SyncGroup), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if armed.Load() && len(kreq.(*kmsg.SyncGroupRequest).GroupAssignment) > 0 {
			once.Do(func() {
				held.Add(1)
				c.SleepControl(func() { time.Sleep(hold) })
			})
		}
		return nil, nil, false
	})
	armed.Store(true)
	commitsBefore := stats(a).TxnCommits
	b := start("b")
	hosts["b"] = b
	hosttest.WaitFor(t, 60*time.Second, "a and b share the partitions after the held sync", func() bool {
		alive()
		sa, sb := stats(a), stats(b)
		return held.Load() > 0 && len(sa.Inputs) > 0 && len(sb.Inputs) > 0 && len(sa.Inputs)+len(sb.Inputs) == 4 &&
			sa.TxnCommits > commitsBefore && sb.TxnCommits > 0
	})

	t.Logf("after the held rebalance: a committed %d transactions (%d before b joined), b %d", stats(a).TxnCommits, commitsBefore, stats(b).TxnCommits)

	// b leaves again (a rebalance not held): a owns everything and gets through every record.
	if err := b.Stop(); err != nil {
		t.Fatalf("stopping b: %v", err)
	}
	delete(hosts, "b")
	p := stopProducing()
	if p.err != nil {
		t.Fatalf("producing: %v", p.err)
	}
	hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("a commits all %d records", p.records), func() bool {
		alive()
		return len(stats(a).Inputs) == 4 && processedAll(p.records)(a.Host)
	})
	total := wordTotal(p.want)
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	sa := stats(a)
	if err := a.Stop(); err != nil {
		t.Fatalf("stopping a: %v", err)
	}
	checkOutputsOnce(t, got, p.want, total)
	sameCounts(t, p.want, stateOf(t, filepath.Join(dir, "a"), "wc"))
	t.Logf("%d records, %d outputs; sync held %s (transaction timeout %s); a: %d transactions committed, %d aborted",
		p.records, total, hold, txnTimeout, sa.TxnCommits, sa.TxnAborts)
}
