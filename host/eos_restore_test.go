package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestExactlyOnceSlowRestore: an exactly-once host that keeps partitions whose transaction
// holds records is assigned more partitions, whose restore from the changelog takes longer
// than kafka.transaction_timeout (the broker's changelog fetches are held that long). The
// restore runs beside the loop: the kept partitions go on committing transactions meanwhile,
// none outlives the timeout, so the broker aborts none and the host is not fenced. Before,
// the restore ran on the loop inside the open transaction, which the broker aborted: the task
// halted, fenced. A read_committed reader of the outputs sees every count exactly once, and the
// host's state is exact.
func TestExactlyOnceSlowRestore(t *testing.T) {
	// A timeout short enough to outlast, long enough for every transaction of a loaded machine
	// (under the race detector too).
	const txnTimeout = 4 * time.Second
	const hold = txnTimeout + 2*time.Second // how long the new owner's changelog fetches are held
	const checkpoint = 300 * time.Millisecond
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	dir := t.TempDir()
	start := func(name string) *hosttest.Running {
		return hosttest.Start(t, host.Config{
			DataDir: filepath.Join(dir, name), Logger: testLogger(t), CheckpointInterval: checkpoint,
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

	// Records flow the whole time, so that a transaction of the kept partitions holds
	// outputs whenever the assignment comes.
	stopProducing := flowWords(t, c, 7, 10, 20*time.Millisecond)

	a := start("a")
	b := start("b")
	alive := func() {
		t.Helper()
		for name, h := range map[string]*hosttest.Running{"a": a, "b": b} {
			if s := stats(h); s.Halted {
				t.Fatalf("host %s halted: %s", name, s.Error)
			}
		}
	}
	// Both own partitions and have committed work: b's partitions have a changelog to restore.
	hosttest.WaitFor(t, 60*time.Second, "a and b share the partitions and commit", func() bool {
		alive()
		sa, sb := stats(a), stats(b)
		return len(sa.Inputs) > 0 && len(sb.Inputs) > 0 && len(sa.Inputs)+len(sb.Inputs) == 4 &&
			sa.TxnCommits > 0 && sb.TxnCommits > 0 && sb.ChangelogRecords > 0
	})

	// b's leaving gives its partitions to a. a's sync is held until a's open transaction holds
	// outputs, so that the assignment (a few requests after the sync) comes while the
	// transaction holds records, but no longer than half an interval after the last commit: the
	// client holds a transaction's offset commit while the group joins and syncs, so a held sync
	// must end before the next commit begins (or it would wait for the sync, and the sync for
	// its outputs: a deadlock until the broker's timeout fences the transaction). Since the host
	// takes no records while its group joins and syncs, the hold ends on the half interval, and
	// the records read right after the sync are in the transaction when the assignment comes.
	var dirty, syncArmed atomic.Bool
	var lastEnd atomic.Int64 // unix nanoseconds of the last EndTxn
	lastEnd.Store(time.Now().UnixNano())
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if id := kreq.(*kmsg.ProduceRequest).TransactionID; id != nil && *id != "" {
			dirty.Store(true)
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		dirty.Store(false)
		lastEnd.Store(time.Now().UnixNano())
		return nil, nil, false
	})
	var syncsHeld atomic.Int64
	c.ControlKey(int16(kmsg.SyncGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if syncArmed.Load() {
			syncsHeld.Add(1)
			c.SleepControl(func() {
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for ; !dirty.Load() && time.Since(time.Unix(0, lastEnd.Load())) < checkpoint/2; <-tick.C {
				}
			})
		}
		return nil, nil, false
	})

	// From now on, every fetch of the changelog (the restore of b's partitions on a, once b is
	// gone) is held until hold passed since the first.
	changelog := "wc-changelog"
	topics, err := kadm.NewClient(newClient(t, c)).ListTopics(context.Background(), changelog)
	if err != nil || topics[changelog].Err != nil {
		t.Fatalf("listing the changelog topic: %v %v", err, topics[changelog].Err)
	}
	changelogID := [16]byte(topics[changelog].ID)
	var held atomic.Int64
	holding, release := make(chan struct{}), make(chan struct{})
	var first, released sync.Once
	defer released.Do(func() { close(release) })
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, ft := range kreq.(*kmsg.FetchRequest).Topics {
			if ft.Topic == changelog || ft.TopicID == changelogID {
				held.Add(1)
				first.Do(func() {
					syncArmed.Store(false)
					close(holding)
					time.AfterFunc(hold, func() { released.Do(func() { close(release) }) })
				})
				c.SleepControl(func() { <-release })
				break
			}
		}
		return nil, nil, false
	})

	syncArmed.Store(true)
	if err := b.Stop(); err != nil {
		t.Fatalf("stopping b: %v", err)
	}
	hosttest.WaitFor(t, 30*time.Second, "a restores b's partitions", func() bool {
		alive()
		select {
		case <-holding:
			return true
		default:
			return false
		}
	})
	commitsBefore := stats(a).TxnCommits
	<-release
	commitsHeld := stats(a).TxnCommits - commitsBefore

	hosttest.WaitFor(t, 60*time.Second, "a owns every partition after its restores", func() bool {
		alive()
		return len(stats(a).Inputs) == 4
	})
	p := stopProducing()
	if p.err != nil {
		t.Fatalf("producing: %v", p.err)
	}
	hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("a commits all %d records", p.records), func() bool {
		alive()
		return processedAll(p.records)(a.Host)
	})
	total := wordTotal(p.want)
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	sa := stats(a)
	if err := a.Stop(); err != nil {
		t.Fatalf("stopping a: %v", err)
	}
	checkOutputsOnce(t, got, p.want, total)
	sameCounts(t, p.want, stateOf(t, filepath.Join(dir, "a"), "wc"))
	if syncsHeld.Load() == 0 {
		t.Errorf("a's assignment of b's partitions was not held until its transaction held outputs")
	}
	// The kept partitions went on while the restore was held: their transactions committed.
	if commitsHeld == 0 {
		t.Errorf("a committed no transaction while its restore was held for %s", hold)
	}
	t.Logf("%d records, %d outputs; %d syncs held; changelog fetches held %d times for %s; a committed %d transactions meanwhile, %d in all (%d aborted), restored %d changelog records",
		p.records, total, syncsHeld.Load(), held.Load(), hold, commitsHeld, sa.TxnCommits, sa.TxnAborts, sa.RestoredRecords)
}
