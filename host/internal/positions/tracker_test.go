package positions

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/scripttest"
)

// TestScripts runs the golden scripts under testdata. Commands:
//
//	new <start>           a fresh tracker
//	add <offset>...       Add each offset
//	complete <offset>...  Complete each offset
//	committable | horizon | inflight
//	state                 all three
//
// add and complete print each error, then the state.
func TestScripts(t *testing.T) {
	scripttest.Run(t, func(t *testing.T) func(string, []string) string {
		tr := NewTracker(0)
		state := func() string {
			return fmt.Sprintf("committable=%d horizon=%d inflight=%d", tr.Committable(), tr.Horizon(), tr.InFlight())
		}
		return func(cmd string, args []string) string {
			var offs []int64
			for _, a := range args {
				o, err := strconv.ParseInt(a, 10, 64)
				if err != nil {
					return "bad argument: " + a
				}
				offs = append(offs, o)
			}
			var out strings.Builder
			switch cmd {
			case "new":
				if len(offs) != 1 {
					return "usage: new <start>"
				}
				tr = NewTracker(offs[0])
			case "add", "complete":
				for _, o := range offs {
					f := tr.Add
					if cmd == "complete" {
						f = tr.Complete
					}
					if err := f(o); err != nil {
						out.WriteString("error: " + err.Error() + "\n")
					}
				}
			case "committable":
				return strconv.FormatInt(tr.Committable(), 10)
			case "horizon":
				return strconv.FormatInt(tr.Horizon(), 10)
			case "inflight":
				return strconv.Itoa(tr.InFlight())
			case "state":
			default:
				return "unknown command " + cmd
			}
			return out.String() + state()
		}
	})
}

func TestTracker(t *testing.T) {
	type step struct {
		add, complete []int64
		want          int64 // committable after the step
	}
	tests := []struct {
		name  string
		start int64
		steps []step
	}{
		{"nothing added", 7, []step{{want: 7}}},
		{"design example", 0, []step{
			{add: []int64{0, 1, 2, 3}, want: 0},
			{complete: []int64{0, 2, 3}, want: 1},
			{complete: []int64{1}, want: 4},
		}},
		{"in order", 10, []step{
			{add: []int64{10, 11}, complete: []int64{10}, want: 11},
			{complete: []int64{11}, want: 12},
		}},
		{"gap stays until later record completes", 0, []step{
			{add: []int64{5, 8}, complete: []int64{5}, want: 6},
			{complete: []int64{8}, want: 9},
		}},
		{"gap before first record", 0, []step{
			{add: []int64{3}, want: 0},
			{complete: []int64{3}, want: 4},
		}},
		{"reverse completion", 0, []step{
			{add: []int64{0, 1, 2, 3, 4}, complete: []int64{4, 3, 2, 1}, want: 0},
			{complete: []int64{0}, want: 5},
		}},
		{"empties and refills", 100, []step{
			{add: []int64{100}, complete: []int64{100}, want: 101},
			{add: []int64{200, 201}, complete: []int64{201}, want: 101},
			{complete: []int64{200}, want: 202},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.start)
			for i, s := range tc.steps {
				for _, o := range s.add {
					if err := tr.Add(o); err != nil {
						t.Fatalf("step %d: Add(%d): %v", i, o, err)
					}
				}
				for _, o := range s.complete {
					if err := tr.Complete(o); err != nil {
						t.Fatalf("step %d: Complete(%d): %v", i, o, err)
					}
				}
				if got := tr.Committable(); got != s.want {
					t.Fatalf("step %d: Committable() = %d, want %d", i, got, s.want)
				}
			}
		})
	}
}

func TestTrackerErrors(t *testing.T) {
	tests := []struct {
		name string
		do   func(*Tracker) error
		want error
	}{
		{"add below start", func(tr *Tracker) error { return tr.Add(9) }, ErrNotIncreasing},
		{"add repeated", func(tr *Tracker) error { tr.Add(10); return tr.Add(10) }, ErrNotIncreasing},
		{"add decreasing", func(tr *Tracker) error { tr.Add(12); return tr.Add(11) }, ErrNotIncreasing},
		{"complete unknown", func(tr *Tracker) error { return tr.Complete(10) }, ErrNotInFlight},
		{"complete in gap", func(tr *Tracker) error { tr.Add(10); tr.Add(12); return tr.Complete(11) }, ErrNotInFlight},
		{"complete twice behind a hole", func(tr *Tracker) error {
			tr.Add(10)
			tr.Add(11)
			tr.Complete(11)
			return tr.Complete(11)
		}, ErrNotInFlight},
		{"complete twice after commit", func(tr *Tracker) error { tr.Add(10); tr.Complete(10); return tr.Complete(10) }, ErrNotInFlight},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(10)
			err := tc.do(tr)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// model is the naive definition of S8: every offset ever added with its completion flag.
type model struct {
	start   int64
	offs    []int64
	done    map[int64]bool
	horizon int64
}

func newModel(start int64) *model {
	return &model{start: start, done: map[int64]bool{}, horizon: start - 1}
}

func (m *model) add(o int64) bool {
	if o < m.start || (len(m.offs) > 0 && o <= m.offs[len(m.offs)-1]) {
		return false
	}
	m.offs = append(m.offs, o)
	m.done[o] = false
	return true
}

func (m *model) complete(o int64) bool {
	d, ok := m.done[o]
	if !ok || d {
		return false
	}
	m.done[o] = true
	m.horizon = max(m.horizon, o)
	return true
}

func (m *model) committable() int64 {
	c := m.start
	for _, o := range m.offs {
		if !m.done[o] {
			break
		}
		c = o + 1
	}
	return c
}

func (m *model) inFlight() int {
	n := 0
	for _, d := range m.done {
		if !d {
			n++
		}
	}
	return n
}

func check(t *testing.T, tr *Tracker, m *model) {
	t.Helper()
	if got, want := tr.Committable(), m.committable(); got != want {
		t.Fatalf("Committable() = %d, want %d", got, want)
	}
	if got, want := tr.Horizon(), m.horizon; got != want {
		t.Fatalf("Horizon() = %d, want %d", got, want)
	}
	if got, want := tr.InFlight(), m.inFlight(); got != want {
		t.Fatalf("InFlight() = %d, want %d", got, want)
	}
	if tr.n > 0 && tr.ring[tr.head].done {
		t.Fatal("completed slot left at the head of the ring")
	}
	if len(tr.ring) > minRing && tr.n < len(tr.ring)/8 {
		t.Fatalf("ring of %d slots holds only %d", len(tr.ring), tr.n)
	}
}

// TestTrackerModel drives the tracker and the naive model with the same random operations
// (fixed seed) and compares them after every step.
func TestTrackerModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			start := rng.Int64N(1000)
			tr, m := NewTracker(start), newModel(start)
			next := start
			var pending []int64
			for range 5000 {
				switch r := rng.IntN(10); {
				case r < 5: // add, sometimes after a gap
					next += 1 + int64(rng.IntN(3)/2)*int64(rng.IntN(5))
					if err := tr.Add(next); err != nil || !m.add(next) {
						t.Fatalf("Add(%d): %v", next, err)
					}
					pending = append(pending, next)
				case r < 9 && len(pending) > 0: // complete a random pending record
					i := rng.IntN(len(pending))
					o := pending[i]
					pending = slices.Delete(pending, i, i+1)
					if err := tr.Complete(o); err != nil || !m.complete(o) {
						t.Fatalf("Complete(%d): %v", o, err)
					}
				default: // a contract violation must change nothing
					o := start + rng.Int64N(next-start+2) - 1
					errAdd, okAdd := tr.Add(o), m.add(o)
					if (errAdd == nil) != okAdd {
						t.Fatalf("Add(%d) = %v, model ok = %v", o, errAdd, okAdd)
					}
					if okAdd {
						next = o
						pending = append(pending, o)
					}
					errC, okC := tr.Complete(o), m.complete(o)
					if (errC == nil) != okC {
						t.Fatalf("Complete(%d) = %v, model ok = %v", o, errC, okC)
					}
					if okC {
						pending = slices.DeleteFunc(pending, func(p int64) bool { return p == o })
					}
				}
				check(t, tr, m)
			}
		})
	}
}

// FuzzTracker interprets the input as operations and compares the tracker with the model.
func FuzzTracker(f *testing.F) {
	f.Add(int64(0), []byte{0, 0, 0, 0, 1, 0, 1, 2, 1, 3, 1, 1})
	f.Add(int64(5), []byte{0, 3, 0, 1, 1, 255, 1, 0})
	f.Fuzz(func(t *testing.T, start int64, ops []byte) {
		start %= 1 << 40
		tr, m := NewTracker(start), newModel(start)
		last := start - 1
		for i := 0; i+1 < len(ops); i += 2 {
			arg := int64(ops[i+1])
			switch ops[i] % 3 {
			case 0: // add at a small distance past the last offset (0 is a contract violation)
				o := last + arg%4
				err, ok := tr.Add(o), m.add(o)
				if (err == nil) != ok {
					t.Fatalf("Add(%d) = %v, model ok = %v", o, err, ok)
				}
				if ok {
					last = o
				}
			case 1: // complete an offset near the committable position
				o := tr.Committable() + arg%16 - 2
				err, ok := tr.Complete(o), m.complete(o)
				if (err == nil) != ok {
					t.Fatalf("Complete(%d) = %v, model ok = %v", o, err, ok)
				}
			case 2: // complete the oldest pending offset, so long runs drain
				for _, o := range m.offs {
					if !m.done[o] {
						if err := tr.Complete(o); err != nil || !m.complete(o) {
							t.Fatalf("Complete(%d): %v", o, err)
						}
						break
					}
				}
			}
			check(t, tr, m)
		}
	})
}

// TestTrackerMemory checks that memory follows the records in flight, not all records ever.
func TestTrackerMemory(t *testing.T) {
	tr := NewTracker(0)
	for o := range int64(100_000) {
		tr.Add(o)
		if o >= 10 {
			tr.Complete(o - 10)
		}
	}
	if len(tr.ring) > 64 {
		t.Fatalf("ring has %d slots for %d in flight", len(tr.ring), tr.InFlight())
	}
	// A burst grows the ring; draining it shrinks the ring again.
	for o := int64(100_000); o < 200_000; o++ {
		tr.Add(o)
	}
	for o := int64(99_990); o < 199_990; o++ {
		tr.Complete(o)
	}
	if tr.InFlight() != 10 || len(tr.ring) > 64 {
		t.Fatalf("after drain: %d in flight, ring of %d slots", tr.InFlight(), len(tr.ring))
	}
	if got := tr.Committable(); got != 199_990 {
		t.Fatalf("Committable() = %d, want 199990", got)
	}
}

func BenchmarkTracker(b *testing.B) {
	for _, bc := range []struct {
		name   string
		window int // records in flight
		gap    int64
	}{{"window=64", 64, 1}, {"window=4096", 4096, 1}, {"window=4096/gaps", 4096, 3}} {
		b.Run(bc.name, func(b *testing.B) {
			tr := NewTracker(0)
			rng := rand.New(rand.NewPCG(1, 2))
			var pending []int64
			next := int64(0)
			b.ReportAllocs()
			for b.Loop() {
				tr.Add(next)
				pending = append(pending, next)
				next += bc.gap
				if len(pending) == bc.window {
					// Complete a random half of the window, leaving the rest in flight.
					rng.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
					for _, o := range pending[:bc.window/2] {
						tr.Complete(o)
					}
					pending = append(pending[:0], pending[bc.window/2:]...)
				}
			}
		})
	}
}

// TestTrackerAppendDone: the bitmap of completed offsets above Committable holds exactly those,
// with gaps in the offsets, across the ring's wrap and growth, and none past the span.
func TestTrackerAppendDone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tr := NewTracker(100)
	done := map[int64]bool{}
	var added []int64
	off := int64(100)
	for step := range 2000 {
		off += 1 + int64(rng.IntN(3)) // gaps
		if err := tr.Add(off); err != nil {
			t.Fatal(err)
		}
		added = append(added, off)
		for range rng.IntN(3) {
			o := added[rng.IntN(len(added))]
			if !done[o] {
				done[o] = true
				if err := tr.Complete(o); err != nil {
					t.Fatal(err)
				}
			}
		}
		bits, ok := tr.AppendDone(nil, 1<<20)
		if !ok {
			t.Fatalf("step %d: over a span of 1<<20", step)
		}
		next := tr.Committable()
		for _, o := range added {
			d := o - next
			in := d >= 0 && d < int64(len(bits))*64 && bits[d/64]&(1<<(d%64)) != 0
			if want := done[o] && o >= next; in != want {
				t.Fatalf("step %d: offset %d (Next %d, done %v) in the bitmap: %v", step, o, next, done[o], in)
			}
		}
		if len(bits) > 0 && bits[len(bits)-1] == 0 {
			t.Fatalf("step %d: trailing zero word", step)
		}
		if span := tr.Horizon() - next; span >= 0 {
			if _, ok := tr.AppendDone(nil, span); ok && done[tr.Horizon()] && tr.Horizon() >= next {
				t.Fatalf("step %d: a completed offset %d offsets above Next within a span of %d", step, span, span)
			}
		}
	}
}
