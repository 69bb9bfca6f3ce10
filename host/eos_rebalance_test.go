package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestExactlyOnceRebalance runs three exactly-once wordcount hosts, each with its own data dir
// (hence its own transactional id), in one consumer group while records flow the whole time and
// hosts join, leave cleanly and come back, so that partitions move between hosts several times
// mid-stream; every move revokes partitions from a host, whose next transaction aborts and
// rolls back. A read_committed reader of the outputs sees every count exactly once and in
// order; the host left alone at the end, owning every partition, has exact state; a host with
// an empty disk restores exactly the same state from the changelog; and partitions did move
// (assignments beyond the first host's four, changelog records restored by later owners).
func TestExactlyOnceRebalance(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	dir := t.TempDir()
	own := &ownership{}
	base := slog.NewTextHandler(testWriter{t}, nil)
	dirOf := func(m int) string { return filepath.Join(dir, "member"+strconv.Itoa(m)) }

	type member struct {
		h      *host.Host
		cancel context.CancelFunc
		done   chan error
	}
	running := map[int]*member{}
	var runs []host.TaskStats // the figures of every run that ended
	start := func(m int) *host.Host {
		t.Helper()
		h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t),
			DataDir: dirOf(m), Logger: slog.New(ownHandler{own, m, base}), CheckpointInterval: 100 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
			Tasks: []host.TaskConfig{eosTask(module)},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		mb := &member{h: h, cancel: cancel, done: make(chan error, 1)}
		go func() { mb.done <- h.Run(ctx) }()
		running[m] = mb
		return h
	}
	stop := func(m int) {
		t.Helper()
		mb := running[m]
		mb.cancel()
		if err := <-mb.done; err != nil {
			t.Fatalf("member %d: %v", m, err)
		}
		runs = append(runs, mb.h.Stats()[0])
		delete(running, m)
	}
	defer func() { // on a failure, stop what still runs
		for m, mb := range running {
			mb.cancel()
			<-mb.done
			delete(running, m)
		}
	}()
	stats := func(m int) host.TaskStats {
		if s := running[m].h.Stats(); len(s) > 0 {
			return s[0]
		}
		return host.TaskStats{}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			for m, mb := range running {
				select {
				case err := <-mb.done:
					mb.cancel()
					delete(running, m)
					t.Fatalf("member %d stopped on its own: %v", m, err)
				default:
				}
			}
			if time.Now().After(deadline) {
				figures := map[int]host.TaskStats{}
				for m := range running {
					figures[m] = stats(m)
				}
				t.Fatalf("%s: not reached in 90s: %+v", what, figures)
			}
		}
	}
	// settled: the running members own the four partitions between them, each at least one,
	// and each has processed records since the change (a member that just joined: of the
	// partitions it got).
	settle := func(change string) {
		t.Helper()
		processed := map[int]int64{}
		for m := range running {
			processed[m] = stats(m).Processed
		}
		waitFor(change+": partitions settled and processed", func() bool {
			owned := 0
			for m := range running {
				s := stats(m)
				if len(s.Inputs) == 0 || s.Processed <= processed[m] {
					return false
				}
				owned += len(s.Inputs)
			}
			return owned == 4
		})
	}

	// The producer: keyed text records flow the whole time, until told to stop.
	stopProducing := flowWords(t, c, 21, 20, 25*time.Millisecond)

	began := time.Now()
	start(0)
	settle("member 0 starts")
	start(1)
	settle("member 1 joins")
	start(2)
	settle("member 2 joins")
	stop(0)
	settle("member 0 leaves")
	start(0) // back with the disk of its first run, behind what 1 and 2 committed since
	settle("member 0 comes back")
	stop(1)
	settle("member 1 leaves")
	stop(2)
	settle("member 2 leaves")
	start(2)
	settle("member 2 comes back")
	stop(2)
	settle("member 2 leaves again")
	changes := time.Since(began)
	p := stopProducing()
	if p.err != nil {
		t.Fatalf("producing: %v", p.err)
	}

	// Member 0 alone owns every partition: it gets through every record and commits it.
	h0 := running[0].h
	waitFor(fmt.Sprintf("member 0 alone commits all %d records", p.records), func() bool {
		return len(stats(0).Inputs) == 4 && processedAll(p.records)(h0)
	})
	total := wordTotal(p.want)
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	stop(0)
	checkOutputsOnce(t, got, p.want, total)
	sameCounts(t, p.want, stateOf(t, dirOf(0), "wc"))

	// The changelog holds exactly that state: a host with an empty disk restores it.
	fresh := runEOSHost(t, c, module, dirOf(3), func(h *host.Host) bool {
		s := h.Stats()
		return len(s) > 0 && s[0].Restores >= 4
	})
	sameCounts(t, p.want, stateOf(t, dirOf(3), "wc"))

	moves := own.check(t)
	var restored, commits, aborts int64
	for _, s := range runs {
		restored += s.RestoredRecords
		commits += s.TxnCommits
		aborts += s.TxnAborts
	}
	// Member 0's first start assigns all four partitions (from an empty changelog); anything
	// beyond means partitions moved, and a later owner restored what an earlier one wrote.
	if moves <= 4 {
		t.Errorf("only %d partition assignments: no partition ever moved", moves)
	}
	if restored == 0 {
		t.Errorf("no host restored any changelog record on taking partitions over")
	}
	if fresh.RestoredRecords == 0 {
		t.Errorf("the empty-disk host restored no changelog record")
	}
	t.Logf("%d records (%d outputs) over %s of membership changes; %d partition assignments; %d runs: %d transactions committed, %d aborted, %d changelog records restored on takeovers; empty-disk host restored %d",
		p.records, total, changes.Round(time.Millisecond), moves, len(runs), commits, aborts, restored, fresh.RestoredRecords)
}

// producedWords is what flowWords produced: each user's word counts, the records, the first
// error.
type producedWords struct {
	want    map[string]map[string]int
	records int
	err     error
}

// flowWords produces keyed records of two words to "words", batch records every pause (random
// from seed), until the stop it returns is called; stop returns what was produced. The test's
// end stops it too.
func flowWords(t *testing.T, c *kfake.Cluster, seed uint64, batch int, pause time.Duration) (stop func() producedWords) {
	producer := newClient(t, c, kgo.ProducerLinger(2*time.Millisecond))
	done := make(chan struct{})
	result := make(chan producedWords, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 3))
		p := producedWords{want: map[string]map[string]int{}}
		defer func() { result <- p }()
		for {
			var recs []*kgo.Record
			for i := 0; i < batch; i++ {
				user := fmt.Sprintf("u%03d", rng.IntN(40))
				w1, w2 := fmt.Sprintf("w%02d", rng.IntN(30)), fmt.Sprintf("w%02d", rng.IntN(30))
				recs = append(recs, &kgo.Record{Topic: "words", Key: []byte(user), Value: []byte(w1 + " " + w2)})
				if p.want[user] == nil {
					p.want[user] = map[string]int{}
				}
				p.want[user][w1]++
				p.want[user][w2]++
			}
			if p.err = producer.ProduceSync(context.Background(), recs...).FirstErr(); p.err != nil {
				return
			}
			p.records += len(recs)
			select {
			case <-done:
				return
			case <-time.After(pause):
			}
		}
	}()
	var once sync.Once
	var got producedWords
	stop = func() producedWords {
		once.Do(func() {
			close(done)
			got = <-result
		})
		return got
	}
	t.Cleanup(func() { stop() })
	return stop
}
