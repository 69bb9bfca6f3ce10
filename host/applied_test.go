package host_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// appliedRig runs the conform guest (task "cf") over partition 0 of topic "cmds" on kfake, its
// results to "results", a record retried for an hour holding the partition's Next where one
// fails: the applied sets' situation, completed offsets running ahead of Next.
type appliedRig struct {
	t      *testing.T
	c      *kfake.Cluster
	module string
	dir    string
	prod   *kgo.Client
	ts     int64 // when positive, the next record's timestamp (ms), one more for each record
	// eos: the runs with the changelog deliver exactly once.
	eos bool
}

func newAppliedRig(t *testing.T) *appliedRig {
	r := &appliedRig{t: t, module: guestbuild.Go(t, "testguests/conform"), c: newCluster(t, "cmds", "results"),
		dir: filepath.Join(t.TempDir(), "data")}
	r.prod = newClient(t, r.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	return r
}

// run starts a host on the rig's data directory; span, when positive, lowers the applied sets'
// span (host.SetAppliedSpan).
func (r *appliedRig) run(changelog bool, span int64) *hosttest.Running {
	cfg := host.Config{
		DataDir: r.dir, Logger: testLogger(r.t), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: r.c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: "cf", Module: r.module,
			Inputs:    []host.InputConfig{{Name: "cmds", Type: "kafka", Topics: []string{"cmds"}}},
			Output:    host.OutputConfig{Type: "kafka", Topic: "results"},
			Retry:     host.RetryConfig{MaxAttempts: 1000, Backoff: time.Hour, MaxBackoff: time.Hour},
			Changelog: host.ChangelogConfig{Enabled: changelog},
		}},
	}
	if span > 0 {
		host.SetAppliedSpan(&cfg, span)
	}
	if changelog && r.eos {
		cfg.Tasks[0].Delivery = "exactly_once"
	}
	return hosttest.Start(r.t, cfg)
}

// stop stops h, which must end without an error.
func (r *appliedRig) stop(h *hosttest.Running) {
	r.t.Helper()
	if err := h.Stop(); err != nil {
		r.t.Fatal(err)
	}
}

// produce appends records key, command, key, command... to partition 0.
func (r *appliedRig) produce(kv ...string) {
	r.t.Helper()
	var recs []*kgo.Record
	for i := 0; i < len(kv); i += 2 {
		rec := &kgo.Record{Topic: "cmds", Partition: 0, Key: []byte(kv[i]), Value: []byte(kv[i+1])}
		if r.ts > 0 {
			rec.Timestamp = time.UnixMilli(r.ts)
			r.ts++
		}
		recs = append(recs, rec)
	}
	if err := r.prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
}

// counts produces n "count n 1" records, to keys k00.. in turn.
func (r *appliedRig) counts(n, keys int) {
	r.t.Helper()
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("k%02d", i%keys), "count n 1")
	}
	r.produce(kv...)
}

// processedThenCheckpoint waits for n records processed in this run and a checkpoint that
// collected after them: the figures are published as a checkpoint ends (Processed then counts
// what it may have collected only in part), and the one after it, which collects after that,
// ends before the second checkpoint ended since (empty ones count too) does.
func processedThenCheckpoint(t *testing.T, h *hosttest.Running, n int64) {
	t.Helper()
	var ended uint64
	hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d records processed", n), func() bool {
		s := h.Stats()[0]
		ended = s.CheckpointSeconds.Count
		return s.Processed >= n
	})
	hosttest.WaitFor(t, 60*time.Second, "a checkpoint after them", func() bool { return h.Stats()[0].CheckpointSeconds.Count >= ended+2 })
}

// appliedView is what the store holds of partition 0 of "cmds" for task "cf".
type appliedView struct {
	set    store.AppliedSet
	marks  map[string]int64
	counts map[string]int64 // the conform guest's counter "n" of each key with one
}

// inStore calls fn with the store of data directory dir, open, and the stream of partition 0
// of "cmds" for task "cf".
func (r *appliedRig) inStore(dir string, fn func(db *store.DB, id uint32)) {
	r.t.Helper()
	db, err := store.Open(filepath.Join(dir, "state"), store.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	defer db.Close()
	id, err := db.StreamID("cf", "kafka:cmds/0")
	if err != nil {
		r.t.Fatal(err)
	}
	fn(db, id)
}

func (r *appliedRig) look() (v appliedView) {
	r.t.Helper()
	r.inStore(r.dir, func(db *store.DB, id uint32) { v = r.view(db, id) })
	return v
}

func (r *appliedRig) view(db *store.DB, id uint32) appliedView {
	t := r.t
	t.Helper()
	var err error
	v := appliedView{marks: map[string]int64{}, counts: map[string]int64{}}
	if v.set, err = db.Applied("cf", id); err != nil {
		t.Fatal(err)
	}
	if err := db.Marks("cf", id, func(key []byte, mark int64) bool { v.marks[string(key)] = mark; return true }); err != nil {
		t.Fatal(err)
	}
	for k := range v.marks {
		val, ok, err := db.Get("cf", id, []byte(k), []byte("n"))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if len(val) != 8 {
				t.Fatalf("key %s: counter of %d bytes", k, len(val))
			}
			v.counts[k] = int64(binary.LittleEndian.Uint64(val))
		}
	}
	return v
}

// TestChangelogCarriesAppliedSet: a data directory that a run without the changelog left with
// an applied set (a key's record retried for long holds the partition's Next while other keys'
// records complete over two checkpoints, the second keeping their marks at the first's), run
// with the changelog on again: the partition's copy is published with its stored marks, and
// its checkpoints keep marks by the set too, so the changelog carries marks the set left low
// (a, c published; b, which only a timer firing changed, written from the store alone). The
// position records carry the set, so a restore of the changelog on an empty disk is exact:
// every key counted as its records say (b 2 times). Without the set in the position record, or
// a restore that drops it, replay from Next 1 applies b@6, a@2, a@5, c@4, c@7 again.
func TestChangelogCarriesAppliedSet(t *testing.T) {
	r := newAppliedRig(t)
	r.ts = 10 // event time, for b's timer
	stop := r.stop
	// Run 1, with the changelog: a@0.
	h := r.run(true, 0)
	r.produce("a", "count n 1")
	processedThenCheckpoint(t, h, 1)
	stop(h)
	// Run 2, without: x@1 fails and holds Next at 1; a@2 b@3 c@4 complete, a checkpoint; then
	// a@5 b@6 c@7 and b@8 (b's event-time timer at 500), and the last checkpoint keeps their
	// marks at 2, 3, 4 (in its set: 2..8).
	h = r.run(false, 0)
	r.produce("x", "fail held", "a", "count n 1", "b", "count n 1", "c", "count n 1")
	processedThenCheckpoint(t, h, 3)
	r.produce("a", "count n 1", "b", "count n 1", "c", "count n 1", "b", "timer t 500")
	processedThenCheckpoint(t, h, 7)
	stop(h)
	before := r.look()
	if before.set.Base != 1 || before.set.Len() != 7 || before.marks["b"] >= 6 {
		t.Fatalf("after the run without the changelog: set from %d with %d offsets, b's mark %d; want a set of 2..8 from 1 and b's mark below 6",
			before.set.Base, before.set.Len(), before.marks["b"])
	}
	// Run 3, with the changelog again: x@1 still fails, d@9 at 1000 completes and fires b's
	// timer: b's changelog record, its state from the store, carries its mark.
	h = r.run(true, 0)
	r.ts = 1000
	r.produce("d", "count n 1")
	hosttest.WaitFor(t, 60*time.Second, "b's timer fired", func() bool { return h.Stats()[0].TimersFired >= 1 })
	processedThenCheckpoint(t, h, 1)
	stop(h)
	after := r.look()
	if after.set.Base != 1 || after.set.Len() != 8 || after.marks["b"] >= 6 {
		t.Errorf("after the run with the changelog: set from %d with %d offsets, b's mark %d; want a set of 2..9 from 1 and b's mark below 6 (kept by the set)",
			after.set.Base, after.set.Len(), after.marks["b"])
	}
	want := map[string]int64{"a": 3, "b": 2, "c": 2, "d": 1}
	if fmt.Sprint(after.counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v: each record applied once", after.counts, want)
	}

	// Run 4, on an empty disk: the changelog restores every key (a and c published, b the
	// firing's record, d) and the position at 1 with its set; replay skips offsets 2..9 by the
	// set.
	r.dir = filepath.Join(t.TempDir(), "data")
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "offsets 2..9 processed or skipped", func() bool {
		s := h.Stats()[0]
		return s.Processed+s.Skipped >= 8
	})
	stop(h)
	if got := r.look().counts; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("counts %v after a restore of the changelog on an empty disk, want %v", got, want)
	}
}

// TestAppliedSpanCrossedMidRun: with the applied sets' span lowered to 256 offsets
// (host.SetAppliedSpan; store.MaxAppliedSpan is 262,144), a record retried for long holds
// partition 0's Next at 0 while 500 others complete: the checkpoints of the first 100 give a
// set, those past offset 255 none and write every key's mark (the stored set stays). Then the
// host crashes: the output topic refuses the next 100 records' results, so no checkpoint covers
// them and the task halts. The store then holds the set of the first checkpoints and every
// key's true mark; a restart replays from 0, skips exactly the 500 committed records (by the
// set or the marks) and applies the 100 others once: every counter is exact.
func TestAppliedSpanCrossedMidRun(t *testing.T) {
	const keys, span = 20, 256
	r := newAppliedRig(t)
	h := r.run(false, span)
	r.produce("held", "fail held") // offset 0: Next stays there
	r.counts(100, keys)            // 1..100: within the span, a set
	processedThenCheckpoint(t, h, 100)
	r.counts(400, keys) // 101..500: past it, no set
	processedThenCheckpoint(t, h, 500)

	// The crash: the results of 501..600 are refused (not retried), so the checkpoint that
	// would cover them fails and the task halts.
	refuse := refuseProduce(t, r, "results")
	refuse.Store(true)
	r.counts(100, keys) // 501..600
	hosttest.WaitFor(t, 60*time.Second, "the task halted on the refused results", func() bool { return h.Stats()[0].Halted })
	h.Stop() // the task's failure, reported
	refuse.Store(false)

	crashed := r.look()
	if crashed.set.Base != 0 || crashed.set.Len() < 100 || crashed.set.Last() >= span {
		t.Errorf("after the crash the stored set has %d offsets from %d up to %d; want those of 1..100 at least, none from %d (past the span)",
			crashed.set.Len(), crashed.set.Base, crashed.set.Last(), span)
	}
	for i := range keys {
		k := fmt.Sprintf("k%02d", i)
		if want := int64(500 - keys + 1 + i); crashed.marks[k] != want {
			t.Errorf("after the crash key %s's stored mark is %d, want %d (written: no set past the span)", k, crashed.marks[k], want)
		}
		if crashed.counts[k] != 500/keys {
			t.Errorf("after the crash key %s's counter is %d, want %d (501..600 not committed)", k, crashed.counts[k], 500/keys)
		}
	}

	h = r.run(false, span)
	processedThenCheckpoint(t, h, 100) // 501..600 (skipped records count apart)
	s := h.Stats()[0]
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if s.Skipped != 500 {
		t.Errorf("the restart skipped %d replayed records, want the 500 committed", s.Skipped)
	}
	after := r.look()
	for i := range keys {
		k := fmt.Sprintf("k%02d", i)
		if after.counts[k] != 600/keys || after.marks[k] != int64(600-keys+1+i) {
			t.Errorf("key %s: counter %d, mark %d; want %d and %d", k, after.counts[k], after.marks[k], 600/keys, 600-keys+1+i)
		}
	}
}

// TestChangelogTurnedOnKeepsState: a data directory of a run without the changelog, run with
// the changelog on (its partitions have nothing in it yet), keeps its state: a key counted
// twice before counts 3 after one more record. Before, the restore found the changelog empty
// and the local copy covering no changelog offset, replaced the copy with the changelog's
// nothing, and the group's offsets resumed after the records it had counted: 1.
func TestChangelogTurnedOnKeepsState(t *testing.T) {
	r := newAppliedRig(t)
	h := r.run(false, 0)
	r.produce("a", "count n 1", "a", "count n 1")
	processedThenCheckpoint(t, h, 2)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	h = r.run(true, 0)
	r.produce("a", "count n 1")
	processedThenCheckpoint(t, h, 1)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := r.look().counts["a"]; got != 3 {
		t.Errorf("a counted %d, want 3: the state before the changelog kept", got)
	}
}

// TestChangelogTurnedOnPublishesState: a data directory of a run without the changelog, run
// with the changelog on, publishes the partition's state to the changelog before the
// partition opens, so that a host on an empty disk restores every key as stored. The first
// try is cut short: the changelog takes its first produce request of partition 0 and refuses
// every later one, so some keys reach it and the position record after them does not; the
// task halts naming the publish. The next run finds keys but no position of the partition,
// publishes again, and a host on an empty disk then restores each key's counter, mark and
// timer exactly as the first directory holds them, and counts on from there. Before, nothing
// was published (the keys only went to the changelog when they next changed): the empty disk
// restored nothing.
func TestChangelogTurnedOnPublishesState(t *testing.T) {
	r := newAppliedRig(t)
	r.ts = 10
	h := r.run(false, 0)
	r.produce("a", "count n 1", "a", "count n 1", "b", "count n 1", "c", "timer t 500", "d", "count n 1")
	processedThenCheckpoint(t, h, 5)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	want := r.look()
	if len(want.marks) != 4 || want.counts["a"] != 2 {
		t.Fatalf("after the run without the changelog: marks %v counts %v; want 4 keys, a counted 2", want.marks, want.counts)
	}

	// The cut-short publish. Produce requests name topics by id: the changelog's is the one
	// that is neither the input's nor the output's.
	cmdsID, resultsID := topicID(t, r, "cmds"), topicID(t, r, "results")
	var taken, refused atomic.Int32
	var refuse atomic.Bool
	refuse.Store(true)
	r.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if !refuse.Load() {
			return nil, nil, false
		}
		ours := false
		for _, rt := range req.Topics {
			for _, p := range rt.Partitions {
				changelog := rt.Topic == "cf-changelog" || (rt.Topic == "" && rt.TopicID != cmdsID && rt.TopicID != resultsID)
				ours = ours || (changelog && p.Partition == 0)
			}
		}
		if !ours || taken.Add(1) == 1 {
			return nil, nil, false
		}
		refused.Add(1)
		return refusedProduce(req), nil, true
	})
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "the task halted on the refused publish", func() bool { return h.Stats()[0].Halted })
	if err := h.Stop(); err == nil || !strings.Contains(err.Error(), "publishing the local state of input cmds partition 0") {
		t.Fatalf("the cut-short publish stopped with %v; want an error naming it", err)
	}
	if refused.Load() == 0 {
		t.Fatal("no produce request of the changelog was refused: the publish was not cut short")
	}
	refuse.Store(false)

	// The publish again, then a restore on an empty disk.
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "partition 0 open", func() bool { return h.Stats()[0].Restores >= 4 })
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	r.dir = filepath.Join(t.TempDir(), "data")
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "partition 0 restored", func() bool { return h.Stats()[0].Restores >= 4 })
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	got := r.look()
	if fmt.Sprint(got.counts) != fmt.Sprint(want.counts) || fmt.Sprint(got.marks) != fmt.Sprint(want.marks) {
		t.Errorf("restored on an empty disk: counts %v marks %v; want %v and %v, as the data directory held them", got.counts, got.marks, want.counts, want.marks)
	}
	var n int
	r.inStore(r.dir, func(db *store.DB, id uint32) {
		var err error
		if n, err = db.TimerCount("cf", id); err != nil {
			t.Fatal(err)
		}
	})
	if n != 1 {
		t.Errorf("restored on an empty disk: %d timers, want c's 1", n)
	}
	h = r.run(true, 0)
	r.produce("a", "count n 1")
	processedThenCheckpoint(t, h, 1)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := r.look().counts["a"]; got != 3 {
		t.Errorf("a counted %d after one more record, want 3", got)
	}
}

// TestChangelogAppliedSpan: an applied set of the largest span (TestLong: store.MaxAppliedSpan
// offsets; 16,384 otherwise) goes through the changelog: a record retried for long holds
// partition 0's Next at 0 while the others complete, over 1,000 keys, in a run without the
// changelog; a run with it publishes the keys with their stored marks and the position record
// with the set (up to 32 KiB), and a host on an empty disk restores the same set and marks. It
// logs the publish's and the restore's durations.
func TestChangelogAppliedSpan(t *testing.T) {
	n := hosttest.Scale(16_384, int(store.MaxAppliedSpan)) - 1
	const keys = 1000
	r := newAppliedRig(t)
	h := r.run(false, 0)
	r.produce("held", "fail held")
	r.counts(n, keys)
	processedThenCheckpoint(t, h, int64(n))
	if err := h.Stop(); err != nil && !strings.Contains(err.Error(), "held") {
		t.Fatal(err)
	}
	set := r.look().set
	if set.Len() < n/2 {
		t.Fatalf("the applied set holds %d offsets, want most of the %d completed above Next", set.Len(), n)
	}
	began := time.Now()
	h = r.run(true, 0)
	hosttest.WaitFor(t, 10*time.Minute, "partition 0 open", func() bool { return h.Stats()[0].Restores >= 4 })
	t.Logf("an applied set of %d offsets (spanning %d) and %d keys published, host start included, in %s",
		set.Len(), set.Last()+1-set.Base, keys, time.Since(began).Round(time.Millisecond))
	if err := h.Stop(); err != nil && !strings.Contains(err.Error(), "held") {
		t.Fatal(err)
	}
	want := r.look()
	r.dir = filepath.Join(t.TempDir(), "data")
	began = time.Now()
	h = r.run(true, 0)
	hosttest.WaitFor(t, 10*time.Minute, "partition 0 restored", func() bool { return h.Stats()[0].Restores >= 4 })
	t.Logf("restored on an empty disk, host start included, in %s", time.Since(began).Round(time.Millisecond))
	if err := h.Stop(); err != nil && !strings.Contains(err.Error(), "held") {
		t.Fatal(err)
	}
	got := r.look()
	if got.set.Base != set.Base || !slices.Equal(got.set.Bits, set.Bits) {
		t.Errorf("restored applied set from %d with %d offsets, want the published one: from %d with %d", got.set.Base, got.set.Len(), set.Base, set.Len())
	}
	if fmt.Sprint(got.marks) != fmt.Sprint(want.marks) || fmt.Sprint(got.counts) != fmt.Sprint(want.counts) {
		t.Errorf("restored marks or counts differ from the published copy's")
	}
}

// TestExactlyOnceTurnedOnPublishesState: TestChangelogTurnedOnPublishesState's publish when the
// runs with the changelog deliver exactly once (which needs the changelog: turning it on turns
// the changelog on), where the partition's restore and publish run beside the loop and the
// changelog's other records are written in transactions: a host on an empty disk restores
// every key as the data directory held it.
func TestExactlyOnceTurnedOnPublishesState(t *testing.T) {
	r := newAppliedRig(t)
	r.eos = true
	h := r.run(false, 0)
	r.produce("a", "count n 1", "a", "count n 1", "b", "count n 1")
	processedThenCheckpoint(t, h, 3)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	want := r.look()
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "partition 0 open", func() bool { return h.Stats()[0].Restores >= 4 })
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	r.dir = filepath.Join(t.TempDir(), "data")
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "partition 0 restored", func() bool { return h.Stats()[0].Restores >= 4 })
	r.produce("a", "count n 1")
	processedThenCheckpoint(t, h, 1)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	got := r.look()
	want.counts["a"]++
	if fmt.Sprint(got.counts) != fmt.Sprint(want.counts) {
		t.Errorf("restored on an empty disk, then a counted once more: counts %v, want %v", got.counts, want.counts)
	}
}

// TestChangelogOffThenOnPublishesState: a data directory whose runs had the changelog, then
// not, then again: the run without it marks the partition's copy as changed since it covered
// the changelog, and the next run with the changelog publishes the copy, so that a host on an
// empty disk restores what the run without the changelog counted too, and counts on from
// there. Before, the run with the changelog again replayed the changelog's tail (nothing) and
// published nothing: the empty disk restored a counted 1 (the first run's) and no b.
func TestChangelogOffThenOnPublishesState(t *testing.T) {
	r := newAppliedRig(t)
	stop := r.stop
	h := r.run(true, 0)
	r.produce("a", "count n 1")
	processedThenCheckpoint(t, h, 1)
	stop(h)
	h = r.run(false, 0)
	r.produce("a", "count n 1", "b", "count n 1")
	processedThenCheckpoint(t, h, 2)
	stop(h)
	want := r.look()
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "partition 0 open", func() bool { return h.Stats()[0].Restores >= 4 })
	stop(h)
	r.dir = filepath.Join(t.TempDir(), "data")
	h = r.run(true, 0)
	hosttest.WaitFor(t, 60*time.Second, "partition 0 restored", func() bool { return h.Stats()[0].Restores >= 4 })
	stop(h)
	got := r.look()
	if fmt.Sprint(got.counts) != fmt.Sprint(want.counts) || fmt.Sprint(got.marks) != fmt.Sprint(want.marks) {
		t.Errorf("restored on an empty disk: counts %v marks %v; want %v and %v, as the data directory held them", got.counts, got.marks, want.counts, want.marks)
	}
	h = r.run(true, 0)
	r.produce("a", "count n 1")
	processedThenCheckpoint(t, h, 1)
	stop(h)
	if got := r.look().counts["a"]; got != 3 {
		t.Errorf("a counted %d after one more record, want 3", got)
	}
}
