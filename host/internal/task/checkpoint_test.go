package task

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/store"
)

// TestPartialPositions checks the positions a split checkpoint may write early for a file
// stream: one at the first record of each changed key between the durable position and the
// new one, each with the byte position of its line, and the new Next itself.
func TestPartialPositions(t *testing.T) {
	st := &stream{id: 3, durable: store.Position{Next: 10, Horizon: 12, Resume: 100, Watermark: 4}}
	for off := int64(10); off < 20; off++ {
		if off == 14 {
			continue // a gap: no record at offset 14
		}
		st.ends = append(st.ends, endMark{off, 10*off + 10}) // line off ends at byte 10*off+10
	}
	keys := []store.KeyWrites{
		{Stream: 3, First: 15}, {Stream: 3, First: 12}, {Stream: 3, First: 15},
		{Stream: 3, First: 10},            // at the durable position: nothing to write
		{Stream: 3, First: 25},            // beyond the new position
		{Stream: 3, First: math.MaxInt64}, // changed by a timer only
		{Stream: 4, First: 11},            // another stream
	}
	got := partialPositions(nil, keys, st, 18)
	pos := func(next, resume int64) store.StreamPosition {
		return store.StreamPosition{Stream: 3, Position: store.Position{Next: next, Horizon: 12, Resume: resume, Watermark: 4}}
	}
	want := []store.StreamPosition{pos(12, 120), pos(15, 140), pos(18, 180)}
	if !slices.Equal(got, want) {
		t.Errorf("partialPositions = %+v\nwant %+v", got, want)
	}
}

// TestCheckpointWhenSinksFull runs a task whose checkpoint interval is an hour with an output
// sink that holds its lines until Flush (as a file sink does) and checks that the task
// checkpoints as soon as the sink holds maxHeldOutputs: the memory a sink holds is bounded by
// early checkpoints, not by the interval.
func TestCheckpointWhenSinksFull(t *testing.T) {
	r := startRig(t, rigOpts{checkpoint: time.Hour, holdBytes: maxHeldOutputs / 4})
	r.send(r0("a", "count"), r0("b", "count"), r0("c", "count"), r0("d", "count"))
	r.waitLines("log rec", 4)
	deadline := time.Now().Add(60 * time.Second)
	for r.tk.Stats().Checkpoints == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint although the sink holds %d outputs of %d bytes", 4, maxHeldOutputs/4)
		}
		time.Sleep(time.Millisecond)
	}
	pos, ok, err := r.db.Position("timers", 1)
	if err != nil || !ok || pos.Next != 4 {
		t.Errorf("position after the early checkpoint = %+v, %v, %v; want Next 4", pos, ok, err)
	}
}
