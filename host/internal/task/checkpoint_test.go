package task

import (
	"math"
	"slices"
	"testing"

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
