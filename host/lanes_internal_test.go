package host

import (
	"slices"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/task"
)

// TestMergeStats: a task's figures over its loops: counters and histograms summed, the lowest
// version, each partition once (the entry furthest on: a loop may still list a partition that
// moved since its last checkpoint), guest metrics merged by name and labels, the last recent
// errors in time order.
func TestMergeStats(t *testing.T) {
	h := func(counts ...uint64) Histogram {
		return Histogram{Bounds: []float64{1, 2}, Counts: counts, Count: counts[0] + counts[1] + counts[2], Sum: 1}
	}
	at := func(s int) RecentError { return RecentError{Time: time.Unix(int64(s), 0)} }
	a := TaskStats{Version: 3, Deploys: 1, Records: 10, Processed: 9, Pending: 1, Paused: false, LogDropped: 4,
		BatchSize: h(1, 2, 3), Inputs: []InputStats{{Name: "in", Topic: "t", Partition: 1, Committed: 5}, {Name: "in", Topic: "t", Partition: 0, Committed: 7}},
		GuestMetrics: []GuestMetric{{Name: "m", Counter: true, Value: 2}},
		Recent:       []RecentError{at(1), at(5)}}
	b := TaskStats{Version: 2, Deploys: 1, Records: 20, Processed: 20, Paused: true, LogDropped: 4,
		BatchSize: h(1, 1, 1), Inputs: []InputStats{{Name: "in", Topic: "t", Partition: 1, Committed: 9}, {Name: "in", Topic: "t", Partition: 2, Committed: 1}},
		GuestMetrics: []GuestMetric{{Name: "m", Counter: true, Value: 3}, {Name: "g", Value: 1}}}
	for range 25 {
		b.Recent = append(b.Recent, at(3))
	}
	got := mergeStats([]TaskStats{a, b})
	if got.Version != 2 || got.Deploys != 1 || got.Records != 30 || got.Processed != 29 || got.Pending != 1 || !got.Paused || got.LogDropped != 4 {
		t.Errorf("figures %+v", got)
	}
	if !slices.Equal(got.BatchSize.Counts, []uint64{2, 3, 4}) || got.BatchSize.Count != 9 || got.BatchSize.Sum != 2 {
		t.Errorf("batch sizes %+v, want the two summed", got.BatchSize)
	}
	if !slices.Equal(a.BatchSize.Counts, []uint64{1, 2, 3}) {
		t.Errorf("the first loop's histogram changed: %v", a.BatchSize.Counts)
	}
	var parts []int32
	for _, in := range got.Inputs {
		parts = append(parts, in.Partition)
		if in.Partition == 1 && in.Committed != 9 {
			t.Errorf("partition 1 listed at committed %d, want 9 (the entry furthest on)", in.Committed)
		}
	}
	if !slices.Equal(parts, []int32{0, 1, 2}) {
		t.Errorf("partitions %v, want 0, 1, 2 once each", parts)
	}
	if len(got.GuestMetrics) != 2 || got.GuestMetrics[0].Value != 5 || got.GuestMetrics[1].Name != "g" {
		t.Errorf("guest metrics %+v", got.GuestMetrics)
	}
	if n := len(got.Recent); n != 20 || !got.Recent[n-1].Time.Equal(time.Unix(5, 0)) || !got.Recent[0].Time.Equal(time.Unix(3, 0)) {
		t.Errorf("recent errors: %d, last %v", n, got.Recent[len(got.Recent)-1].Time)
	}
}

// TestShareStandby: the loops of a task with a standby share one, new for each run, and only
// loop 0 runs its tailer (a standby per loop would tail, into the shared store, what a sibling
// loop owns and writes); the configurations a restart runs again are left as they are; one loop,
// or no standby, is left alone.
func TestShareStandby(t *testing.T) {
	cc := &task.ChangelogConfig{Topic: "wc-changelog", Standby: true}
	cfgs := []task.Config{{Name: "wc", Changelog: cc}, {Name: "wc", Changelog: cc}, {Name: "wc", Changelog: cc}}
	got := shareStandby(cfgs)
	for i, c := range got {
		if c.Changelog.Shared == nil || c.Changelog.Shared != got[0].Changelog.Shared {
			t.Fatalf("loop %d's standby %p, loop 0's %p: want one shared by every loop", i, c.Changelog.Shared, got[0].Changelog.Shared)
		}
		if c.Changelog.Tails != (i == 0) {
			t.Errorf("loop %d tails: %v, want only loop 0", i, c.Changelog.Tails)
		}
		if c.Changelog.Topic != "wc-changelog" || !c.Changelog.Standby {
			t.Errorf("loop %d's changelog %+v: the task's lost", i, c.Changelog)
		}
	}
	if cc.Shared != nil || cc.Tails || cfgs[0].Changelog != cc {
		t.Errorf("the configurations given changed: %+v", cfgs[0].Changelog)
	}
	if again := shareStandby(cfgs); again[0].Changelog.Shared == got[0].Changelog.Shared {
		t.Error("a second run shares the first run's standby (its claims): want a new one")
	}
	if one := shareStandby(cfgs[:1]); one[0].Changelog.Shared != nil {
		t.Error("one loop got a shared standby")
	}
	off := &task.ChangelogConfig{Topic: "wc-changelog"}
	if none := shareStandby([]task.Config{{Changelog: off}, {Changelog: off}}); none[0].Changelog.Shared != nil {
		t.Error("loops without standby got one")
	}
}
