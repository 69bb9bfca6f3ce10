package task

import "testing"

// TestEpochBelow: a Kafka stream's leader epoch marks give each position the epoch of the last
// record below its Next: across epoch changes, gaps (compaction, retention), a start with the
// stored position's epoch (or without one), and records read again after a rewind (an aborted
// transaction), which replace the marks at and above them.
func TestEpochBelow(t *testing.T) {
	st := &stream{}
	st.noteEpoch(99, 0) // resumed at 100, the stored position's epoch 0
	for o := int64(100); o < 150; o++ {
		st.noteEpoch(o, 0)
	}
	for o := int64(150); o < 200; o += 2 { // a new leader, and gaps
		st.noteEpoch(o, 1)
	}
	st.noteEpoch(260, 3) // after a retention gap, two leaders later
	for _, c := range []struct {
		next int64
		want int32
	}{{100, 0}, {120, 0}, {150, 0}, {151, 1}, {200, 1}, {260, 1}, {261, 3}} {
		if got := st.epochBelow(c.next); got != c.want {
			t.Errorf("epochBelow(%d) = %d, want %d", c.next, got, c.want)
		}
	}
	if len(st.epochs) != 1 {
		t.Errorf("marks kept after a position at 261: %v, want only the last", st.epochs)
	}

	// Read again from 150 after a rewind: the records there are of epoch 1 again, then a new
	// epoch 4 from 170.
	rw := &stream{}
	rw.noteEpoch(99, 0)
	rw.noteEpoch(150, 1)
	rw.noteEpoch(180, 2)
	rw.noteEpoch(150, 1)
	rw.noteEpoch(170, 4)
	for _, c := range []struct {
		next int64
		want int32
	}{{150, 0}, {170, 1}, {181, 4}} {
		if got := rw.epochBelow(c.next); got != c.want {
			t.Errorf("after the rewind: epochBelow(%d) = %d, want %d", c.next, got, c.want)
		}
	}

	// A partition started without an epoch (a position of format 4, a group offset): unknown
	// until a record of it is below the position.
	un := &stream{}
	un.noteEpoch(99, -1)
	if got := un.epochBelow(100); got != -1 {
		t.Errorf("no record read: epochBelow = %d, want -1", got)
	}
	un.noteEpoch(100, 5)
	if got := un.epochBelow(101); got != 5 {
		t.Errorf("epochBelow(101) = %d, want 5", got)
	}
	if got := (&stream{}).epochBelow(10); got != -1 {
		t.Errorf("no marks: epochBelow = %d, want -1", got)
	}
}
