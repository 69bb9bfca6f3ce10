package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// TestChangelogSettlesAppliedSet: a data directory that a run without the changelog left with
// an applied set (a key's record retried for long holds the partition's Next while other keys'
// records complete over two checkpoints, the second keeping their marks at the first's), run
// with the changelog on again (the first run had it: the restore replays only the changelog's
// tail and keeps the copy), writes those keys' true marks and deletes the set when the
// partition opens, before a changelog record could carry a mark the set left low (a key
// written again from the store alone: rewriteStale, or a key only timers changed) to a restore
// that has no set. The state stays exact. Before, the set and the low marks stayed until Next
// passed them.
func TestChangelogSettlesAppliedSet(t *testing.T) {
	module := guestbuild.Go(t, "testguests/conform")
	c := newCluster(t, "cmds", "results")
	dir := filepath.Join(t.TempDir(), "data")
	run := func(changelog bool) *hosttest.Running {
		return hosttest.Start(t, host.Config{
			DataDir: dir, Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
			Tasks: []host.TaskConfig{{
				Name: "cf", Module: module,
				Inputs:    []host.InputConfig{{Name: "cmds", Type: "kafka", Topics: []string{"cmds"}}},
				Output:    host.OutputConfig{Type: "kafka", Topic: "results"},
				Retry:     host.RetryConfig{MaxAttempts: 1000, Backoff: time.Hour, MaxBackoff: time.Hour},
				Changelog: host.ChangelogConfig{Enabled: changelog},
			}},
		})
	}
	prod := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(kv ...string) {
		t.Helper()
		var recs []*kgo.Record
		for i := 0; i < len(kv); i += 2 {
			recs = append(recs, &kgo.Record{Topic: "cmds", Partition: 0, Key: []byte(kv[i]), Value: []byte(kv[i+1])})
		}
		if err := prod.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// processedThenCheckpoint waits for n records processed in this run and a checkpoint that
	// collected after them: the figures are published as a checkpoint ends (Processed then
	// counts what it may have collected only in part), and the one after it, which collects
	// after that, ends before the second checkpoint ended since (empty ones count too) does.
	processedThenCheckpoint := func(h *hosttest.Running, n int64) {
		t.Helper()
		var ended uint64
		hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d records processed", n), func() bool {
			s := h.Stats()[0]
			ended = s.CheckpointSeconds.Count
			return s.Processed >= n
		})
		hosttest.WaitFor(t, 60*time.Second, "a checkpoint after them", func() bool { return h.Stats()[0].CheckpointSeconds.Count >= ended+2 })
	}
	stop := func(h *hosttest.Running) {
		t.Helper()
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	type view struct {
		set   store.AppliedSet
		marks map[string]int64
		state map[string]string
	}
	look := func() view {
		t.Helper()
		db, err := store.Open(filepath.Join(dir, "state"), store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		id, err := db.StreamID("cf", "kafka:cmds/0")
		if err != nil {
			t.Fatal(err)
		}
		v := view{marks: map[string]int64{}, state: map[string]string{}}
		if v.set, err = db.Applied("cf", id); err != nil {
			t.Fatal(err)
		}
		if err := db.Marks("cf", id, func(key []byte, mark int64) bool { v.marks[string(key)] = mark; return true }); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a", "b", "c", "d"} {
			val, _, err := db.Get("cf", id, []byte(k), []byte("n"))
			if err != nil {
				t.Fatal(err)
			}
			v.state[k] = fmt.Sprint(len(val) == 8 && val[0] > 0, val)
		}
		return v
	}

	// Run 1, with the changelog: a@0.
	h := run(true)
	produce("a", "count n 1")
	processedThenCheckpoint(h, 1)
	stop(h)
	// Run 2, without: x@1 fails and holds Next at 1; a@2 b@3 c@4 complete, a checkpoint; then
	// a@5 b@6 c@7, and the last checkpoint keeps their marks at 2, 3, 4 (in its set: 2..7).
	h = run(false)
	produce("x", "fail held", "a", "count n 1", "b", "count n 1", "c", "count n 1")
	processedThenCheckpoint(h, 3)
	produce("a", "count n 1", "b", "count n 1", "c", "count n 1")
	processedThenCheckpoint(h, 6)
	stop(h)
	before := look()
	if before.set.Base != 1 || before.set.Len() != 6 || before.marks["b"] >= 6 {
		t.Fatalf("after the run without the changelog: set from %d with %d offsets, b's mark %d; want a set of 2..7 from 1 and b's mark below 6",
			before.set.Base, before.set.Len(), before.marks["b"])
	}
	// Run 3, with the changelog again: x@1 still fails, d@8 completes.
	h = run(true)
	produce("d", "count n 1")
	processedThenCheckpoint(h, 1)
	stop(h)
	after := look()
	if after.set.Len() != 0 {
		t.Errorf("the applied set holds %d offsets after the partition opened with the changelog; want it settled", after.set.Len())
	}
	for k, want := range map[string]int64{"a": 5, "b": 6, "c": 7, "d": 8} {
		if after.marks[k] != want {
			t.Errorf("key %s: stored mark %d, want its true mark %d", k, after.marks[k], want)
		}
	}
	// Counters: a 3, b 2, c 2, d 1, each once (8-byte little-endian).
	for k, n := range map[string]byte{"a": 3, "b": 2, "c": 2, "d": 1} {
		if want := fmt.Sprint(true, []byte{n, 0, 0, 0, 0, 0, 0, 0}); after.state[k] != want {
			t.Errorf("key %s: count %s, want %d", k, after.state[k], n)
		}
	}
}
