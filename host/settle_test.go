package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// appends sends the conform guest "append l <n>" records, n counting up from 0 over the test,
// and keeps per key the n of each record sent to it in order: a key's list in the state is the
// exact effect of its records when it equals that, with no n twice (applied twice) or missing
// (lost).
type appends struct {
	r    *appliedRig
	n    int
	sent map[string][]string
}

// add sends one record to each key in turn.
func (a *appends) add(keys ...string) {
	a.r.t.Helper()
	var kv []string
	for _, k := range keys {
		n := fmt.Sprint(a.n)
		a.n++
		kv = append(kv, k, "append l "+n)
		a.sent[k] = append(a.sent[k], n)
	}
	a.r.produce(kv...)
}

// lists reads every key's list "l" from the data directory dir.
func (a *appends) lists(dir string) map[string][]string {
	t := a.r.t
	t.Helper()
	got := map[string][]string{}
	a.r.inStore(dir, func(db *store.DB, id uint32) {
		if err := db.ScanKeys("cf", id, nil, func(key, name, val []byte) bool {
			if strings.HasPrefix(string(name), "l/") { // the items, in append order
				got[string(key)] = append(got[string(key)], string(val))
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
	})
	return got
}

// check reports each key whose list in dir differs from the records sent to it.
func (a *appends) check(dir, when string) {
	a.r.t.Helper()
	got := a.lists(dir)
	for _, k := range keysOf(a.sent, got) {
		if !slices.Equal(got[k], a.sent[k]) {
			a.r.t.Errorf("%s: key %s holds %v, want %v (each record applied once)", when, k, got[k], a.sent[k])
		}
	}
}

func keysOf(ms ...map[string][]string) []string {
	var ks []string
	for _, m := range ms {
		for k := range m {
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
	}
	slices.Sort(ks)
	return ks
}

// refuseProduce makes the broker refuse (not retryably) every produce request to topic while
// the returned flag is set: the results of the records processed meanwhile are not delivered,
// so no checkpoint covers those records and the task halts, as a host killed before its next
// checkpoint.
func refuseProduce(t *testing.T, r *appliedRig, topic string) *atomic.Bool {
	t.Helper()
	id := topicID(t, r, topic)
	var on atomic.Bool
	r.c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if !on.Load() {
			return nil, nil, false
		}
		refused := false
		for _, rt := range req.Topics {
			refused = refused || rt.Topic == topic || rt.TopicID == id
		}
		if !refused {
			return nil, nil, false
		}
		return refusedProduce(req), nil, true
	})
	return &on
}

// refusedProduce is the answer to req that refuses every partition of it, not retryably.
func refusedProduce(req *kmsg.ProduceRequest) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, p := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

func topicID(t *testing.T, r *appliedRig, topic string) [16]byte {
	t.Helper()
	topics, err := kadm.NewClient(newClient(t, r.c)).ListTopics(context.Background(), topic)
	if err != nil || topics[topic].Err != nil {
		t.Fatalf("listing topic %s: %v %v", topic, err, topics[topic].Err)
	}
	return [16]byte(topics[topic].ID)
}

// cutAfterSettle makes the broker refuse every fetch of partition 0 of the changelog
// "cf-changelog" that comes after a first one (the restore's look for a position record,
// changelogKnows) and a fetch of partition 0 of the input "cmds" after that (settleApplied's
// read of the applied set's records), while the returned flag is set: the restore stops with
// the marks settled and the changelog's tail not replayed, and the task halts.
func cutAfterSettle(t *testing.T, r *appliedRig) (on, cut *atomic.Bool) {
	t.Helper()
	cmds, changelog := topicID(t, r, "cmds"), topicID(t, r, "cf-changelog")
	var stage atomic.Int32 // 0: before the look, 1: before the settle's read, 2: cutting
	on, cut = &atomic.Bool{}, &atomic.Bool{}
	r.c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if !on.Load() {
			return nil, nil, false
		}
		input, ours := false, false
		for _, rt := range req.Topics {
			for _, p := range rt.Partitions {
				input = input || p.Partition == 0 && (rt.Topic == "cmds" || rt.TopicID == cmds)
				ours = ours || p.Partition == 0 && (rt.Topic == "cf-changelog" || rt.TopicID == changelog)
			}
		}
		if input {
			stage.CompareAndSwap(1, 2)
		}
		if !ours || stage.CompareAndSwap(0, 1) || stage.Load() < 2 {
			return nil, nil, false
		}
		cut.Store(true)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, p := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition, sp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return on, cut
}

// TestChangelogTailOverChangedCopy: the one path where settleApplied runs, a tail replay of the
// changelog over a local copy that a run without the changelog changed since it last covered
// the changelog, which another owner wrote since. Data directory 1 runs with the changelog (a,
// b); directory 2, on an empty disk, restores it and goes on (b, d: the changelog's tail past
// directory 1's copy); directory 1 runs without the changelog: a record retried for long holds
// the partition's Next while a, c, e, z, g, b complete over two checkpoints, the second keeping
// a, c and b's marks low by its applied set. Then directory 1 runs with the changelog again:
// its copy's marks are settled, the changelog's tail (b, d, and the position with directory
// 2's set) replays over it, and every record after the position is applied or skipped once.
// Every key's list must hold each of its records once, in directory 1 and in a restore of the
// changelog on an empty disk, at each crash point:
//
//   - clean: every run stops with its final checkpoint;
//   - halted: the run without the changelog halts before a checkpoint covers its last records
//     (a, g, h), which the next run must apply, beyond the set;
//   - cut: the run with the changelog again halts after settling the marks, before the tail's
//     replay; the run after it settles nothing more and replays the tail;
//   - unpublished: the run with the changelog again halts after the tail's replay, its publish
//     of the copy refused; the run after it publishes the copy.
//
// Without settleApplied, a@5, a@9 and c@10 (their marks kept low by the set the tail's position
// replaces) are applied twice. Without the copy's publish after the replay, a restore of the
// changelog on an empty disk had no z (changed by the run without the changelog alone, and
// skipped there by the set of the later position records).
//
// The CI form runs it clean, then with the three crashes in one run; with
// WASMSTREAM_TEST_LONG=1 (hosttest.Long) each crash alone too.
func TestChangelogTailOverChangedCopy(t *testing.T) {
	runs := []string{"clean", "halted+cut+unpublished"}
	if hosttest.Long() {
		runs = append(runs, "halted", "cut", "unpublished")
	}
	for _, crashes := range runs {
		t.Run(crashes, func(t *testing.T) { tailOverChangedCopy(t, strings.Split(crashes, "+")) })
	}
}

func tailOverChangedCopy(t *testing.T, crashes []string) {
	crash := func(c string) bool { return slices.Contains(crashes, c) }
	r := newAppliedRig(t)
	a := &appends{r: r, sent: map[string][]string{}}
	stop := r.stop
	// settled waits until every record from offset from to the partition's end was processed
	// or skipped in this run (the held record at offset 4 never is), and a checkpoint after.
	end := int64(0)
	produced := func(n int) { end += int64(n) }
	settled := func(h *hosttest.Running, from int64) {
		t.Helper()
		hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("offsets %d..%d processed or skipped", from, end-1), func() bool {
			s := h.Stats()[0]
			return s.Processed+s.Skipped >= end-from
		})
		processedThenCheckpoint(t, h, 0)
	}
	dir1, dir2 := r.dir, filepath.Join(t.TempDir(), "data")

	// Run 1, directory 1, with the changelog: a@0 b@1.
	h := r.run(true, 0)
	a.add("a", "b")
	produced(2)
	settled(h, 0)
	stop(h)

	// Run 2, directory 2 on an empty disk, with the changelog: restores a and b, then b@2 d@3.
	r.dir = dir2
	h = r.run(true, 0)
	a.add("b", "d")
	produced(2)
	settled(h, 2)
	stop(h)

	// Run 3, directory 1 without the changelog: it starts at the group's offset 4 (directory
	// 2's); x@4 fails and holds Next at 4; a@5 c@6 e@7 z@8 complete, a checkpoint; a@9 c@10
	// g@11 b@12; the checkpoints keep a, c and b's marks at 0, 6 and 1 (run 1's, the first
	// checkpoint's; their new marks are in the set, 5..12).
	r.dir = dir1
	var refused *atomic.Bool
	if crash("halted") {
		refused = refuseProduce(t, r, "results")
	}
	h = r.run(false, 0)
	r.produce("x", "fail held")
	produced(1)
	a.add("a", "c", "e", "z")
	produced(4)
	settled(h, 5)
	a.add("a", "c", "g", "b")
	produced(4)
	settled(h, 5)
	if crash("halted") {
		// a@13 g@14 h@15, their results refused: the task halts with no checkpoint after them.
		refused.Store(true)
		a.add("a", "g", "h")
		produced(3)
		hosttest.WaitFor(t, 60*time.Second, "the task halted on the refused results", func() bool { return h.Stats()[0].Halted })
		h.Stop() // the task's failure, reported
		refused.Store(false)
	} else {
		stop(h)
	}
	before := r.look()
	if before.set.Base != 4 || before.set.Len() != 8 || before.marks["a"] != 0 || before.marks["c"] != 6 || before.marks["b"] != 1 {
		t.Fatalf("after the run without the changelog: set from %d with %d offsets, marks %v; want a set of 5..12 from 4, a, c and b's marks 0, 6 and 1",
			before.set.Base, before.set.Len(), before.marks)
	}

	// Run 4, directory 1 with the changelog again: the tail replay over the changed copy.
	if crash("cut") {
		on, cut := cutAfterSettle(t, r)
		on.Store(true)
		h = r.run(true, 0)
		hosttest.WaitFor(t, 60*time.Second, "the task halted on the refused changelog fetch, or every partition restored", func() bool {
			s := h.Stats()[0]
			return s.Halted || s.Restores >= 4
		})
		h.Stop() // the task's failure, reported
		on.Store(false)
		if !cut.Load() {
			t.Fatal("no fetch of the changelog was refused after a read of the input: the restore read no applied set's records before the tail's replay")
		}
		settledMarks := r.look()
		if settledMarks.set.Len() != 0 || settledMarks.marks["a"] != 9 || settledMarks.marks["c"] != 10 || settledMarks.marks["b"] != 12 {
			t.Errorf("after the cut restore: set of %d offsets, marks %v; want the set settled: a, c and b's marks 9, 10 and 12, no set",
				settledMarks.set.Len(), settledMarks.marks)
		}
	}
	if crash("unpublished") {
		refused := refuseProduce(t, r, "cf-changelog")
		refused.Store(true)
		h = r.run(true, 0)
		hosttest.WaitFor(t, 60*time.Second, "the task halted on the refused publish", func() bool { return h.Stats()[0].Halted })
		if err := h.Stop(); err == nil || !strings.Contains(err.Error(), "publishing the local state of input cmds partition 0") {
			t.Fatalf("the refused publish stopped with %v; want an error naming it", err)
		}
		refused.Store(false)
	}
	h = r.run(true, 0)
	a.add("a", "b", "c", "d", "e", "g", "f")
	produced(7)
	settled(h, 5)
	stop(h)
	a.check(dir1, "directory 1 after the tail replay over its changed copy")

	// Run 5, an empty disk: the changelog restores every key as its records say.
	r.dir = filepath.Join(t.TempDir(), "data")
	h = r.run(true, 0)
	settled(h, 5)
	stop(h)
	a.check(r.dir, "a restore of the changelog on an empty disk")
}
