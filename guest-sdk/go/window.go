package wasmstream

import (
	"errors"
	"math"
	"strconv"
)

// Event-time windows over a key's records, built on typed state and event-time timers, with the
// state layout and semantics the Rust SDK shares (its state::window module).
//
// A record with an event time goes to its windows: Tumbling(size) gives it the one window
// [start, start+size) with start a multiple of size; Sliding(size, slide) the windows of that
// size whose start is a multiple of slide, from the latest start at or before the record down to
// the first above ts-size; Session(gap) the session of the key whose events are less than gap
// apart (a record merges every session it is within gap of, with Merge, in ascending order of
// their starts). Fold adds the record to
// each window's accumulator (the zero value for a new window). A window closes when the
// partition's watermark reaches its end (start+size; a session's last event + gap): the timer
// fires, Emit gets the accumulator, and the window's state is deleted.
//
// Allowed lateness is the task's lateness setting: the watermark trails the highest event time
// read by it, and the host flags a record read below the watermark late. A late record, or one
// without an event time, goes whole to the output named Late (dropped when Late is ""): it joins
// no window. The result is then the input's alone: the host runs every record of a key that is
// not late before the firings whose time is above its timestamp (ABI.md §4.12), while a late
// record may come before or after a window's close depending on how far the host read ahead, so
// the helper never lets one into a window.
//
// State and timers, for Windows named n (window starts and ends in decimal ms):
//
//	n/w/<start>   the window's accumulator, Codec's bytes
//	n/e/<start>   sessions only: the session's last event time, 8-byte i64 (Int64Codec)
//	timer n/<start>, event time, at the window's end
//
// Name must be unique among the key's state and timer names like the other typed helpers'.

// WindowKind is how records are assigned to windows: Tumbling, Sliding or Session.
type WindowKind struct {
	kind        uint8 // 1 tumbling, 2 sliding, 3 session
	size, slide int64 // ms; a session's gap is size
}

// Tumbling windows are consecutive, non-overlapping windows of size ms (size > 0).
func Tumbling(size int64) WindowKind { return WindowKind{1, size, size} }

// Sliding windows are windows of size ms starting every slide ms (0 < slide <= size).
func Sliding(size, slide int64) WindowKind { return WindowKind{2, size, slide} }

// Session windows group a key's events less than gap ms apart (gap > 0).
func Session(gap int64) WindowKind { return WindowKind{3, gap, 0} }

// Window is one window's span: the event times in [Start, End). A session's End is its last event
// + the gap.
type Window struct{ Start, End int64 }

// Windows is a window aggregation of a key's records, e.g.
//
//	var perMinute = wasmstream.Windows[int64]{
//		Name: "clicks", Kind: wasmstream.Tumbling(60_000), Codec: wasmstream.Int64Codec, Late: "late",
//		Fold: func(n int64, r *wasmstream.Record) (int64, error) { return n + 1, nil },
//		Emit: func(key []byte, w wasmstream.Window, n int64) error { ... },
//	}
//
// A task calls Add from its record handler and Fire from its timer handler.
type Windows[A any] struct {
	Name  string
	Kind  WindowKind
	Codec Codec[A]
	// Fold returns acc with the record added; acc is the zero value for a new window.
	Fold func(acc A, r *Record) (A, error)
	// Merge combines the accumulators of two sessions a record joins (Session only; required).
	Merge func(a, b A) (A, error)
	// Emit is called when a window closes, in its firing: it emits the result (Emit and EmitWith
	// stamp outputs with the window's end).
	Emit func(key []byte, w Window, acc A) error
	// Late is the output late records (and records without an event time) go to; "" drops them.
	Late string
}

func (w *Windows[A]) check() error {
	k := w.Kind
	switch {
	case w.Name == "":
		return errors.New("wasmstream: windows: Name is empty: give the windows a state name")
	case k.kind == 0 || k.size <= 0 || (k.kind == 2 && (k.slide <= 0 || k.slide > k.size)):
		return errors.New("wasmstream: windows " + w.Name + ": Kind needs Tumbling(size > 0), Sliding(size, 0 < slide <= size) or Session(gap > 0)")
	case w.Codec == nil || w.Fold == nil || w.Emit == nil:
		return errors.New("wasmstream: windows " + w.Name + ": Codec, Fold and Emit are required")
	case k.kind == 3 && w.Merge == nil:
		return errors.New("wasmstream: windows " + w.Name + ": session windows need Merge")
	}
	return nil
}

func (w *Windows[A]) acc(start int64) Value[A] {
	return Value[A]{w.Name + "/w/" + strconv.FormatInt(start, 10), w.Codec}
}

func (w *Windows[A]) last(start int64) Value[int64] {
	return Value[int64]{w.Name + "/e/" + strconv.FormatInt(start, 10), Int64Codec}
}

func (w *Windows[A]) timer(start int64) string { return w.Name + "/" + strconv.FormatInt(start, 10) }

// end is the end of the window starting at start (of the session whose last event is at start
// for sessions), the end of time on overflow.
func (w *Windows[A]) end(start int64) int64 {
	if start > math.MaxInt64-w.Kind.size {
		return math.MaxInt64
	}
	return start + w.Kind.size
}

// floorTo is the greatest multiple of m at or below t.
func floorTo(t, m int64) int64 {
	s := t - t%m
	if t%m < 0 {
		s -= m
	}
	return s
}

// Add puts record r in its windows, or sends it to the Late output when it is late or has no
// event time.
func (w *Windows[A]) Add(r *Record) error {
	if err := w.check(); err != nil {
		return err
	}
	ts := r.Timestamp()
	if ts < 0 || r.Late() {
		if w.Late == "" {
			return nil
		}
		return EmitWith(Output{Name: w.Late, Key: r.Key(), Value: r.Value(), Headers: r.Headers(), Timestamp: ts})
	}
	st := r.State()
	if w.Kind.kind == 3 {
		return w.addSession(st, r, ts)
	}
	first := floorTo(ts, w.Kind.slide)
	for s := first; s > ts-w.Kind.size; s -= w.Kind.slide {
		if err := w.fold(st, r, s, w.end(s)); err != nil {
			return err
		}
		if s < math.MinInt64+w.Kind.slide {
			break
		}
	}
	return nil
}

// fold adds r to the window starting at start, opening it (and setting its timer) if new.
func (w *Windows[A]) fold(st State, r *Record, start, end int64) error {
	v := w.acc(start)
	acc, ok, err := v.Get(st)
	if err != nil {
		return err
	}
	if acc, err = w.Fold(acc, r); err != nil {
		return err
	}
	if err := v.Set(st, acc); err != nil {
		return err
	}
	if ok {
		return nil
	}
	return SetTimer(r.Key(), w.timer(start), EventTime, end, nil)
}

func (w *Windows[A]) addSession(st State, r *Record, ts int64) error {
	joined, err := w.joinedSessions(st, ts)
	if err != nil {
		return err
	}
	var acc A
	have := false
	start, last := ts, ts
	for _, s := range joined {
		v, ok, err := w.acc(s.start).Get(st)
		if err != nil {
			return err
		}
		switch {
		case ok && !have:
			acc, have = v, true
		case ok:
			if acc, err = w.Merge(acc, v); err != nil {
				return err
			}
		}
		start, last = min(start, s.start), max(last, s.last)
	}
	if err := w.dropSessions(st, r, joined, start); err != nil {
		return err
	}
	acc, err = w.Fold(acc, r)
	if err != nil {
		return err
	}
	if err := w.acc(start).Set(st, acc); err != nil {
		return err
	}
	if err := w.last(start).Set(st, last); err != nil {
		return err
	}
	return SetTimer(r.Key(), w.timer(start), EventTime, w.end(last), nil)
}

// session is one of a key's open sessions: its start and its last event.
type session struct{ start, last int64 }

// joinedSessions returns the key's open sessions that an event at ts joins (it falls within
// their gap), by start.
func (w *Windows[A]) joinedSessions(st State, ts int64) ([]session, error) {
	gap := w.Kind.size
	var joined []session
	prefix := w.Name + "/e/"
	var derr error
	err := st.Scan(prefix, func(name, value []byte) bool {
		start, err := strconv.ParseInt(string(name[len(prefix):]), 10, 64)
		if err != nil {
			derr = errors.New("wasmstream: windows " + w.Name + ": state " + string(name) + " is not a session")
			return false
		}
		last, err := Int64Codec.Decode(value)
		if err != nil {
			derr = named(string(name), err)
			return false
		}
		if ts < w.end(last) && (start < math.MinInt64+gap || ts > start-gap) {
			joined = append(joined, session{start, last})
		}
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	for i := 1; i < len(joined); i++ { // by start; few sessions
		for j := i; j > 0 && joined[j].start < joined[j-1].start; j-- {
			joined[j], joined[j-1] = joined[j-1], joined[j]
		}
	}
	return joined, nil
}

// dropSessions deletes the state and timers of the joined sessions merged into the one that
// starts at start.
func (w *Windows[A]) dropSessions(st State, r *Record, joined []session, start int64) error {
	for _, s := range joined {
		if s.start == start {
			continue
		}
		if err := w.acc(s.start).Delete(st); err != nil {
			return err
		}
		if err := w.last(s.start).Delete(st); err != nil {
			return err
		}
		if err := DeleteTimer(r.Key(), w.timer(s.start)); err != nil {
			return err
		}
	}
	return nil
}

// Fire closes the window whose timer fired and reports true, or reports false when f is not a
// timer of these windows (the task's own timer: handle it).
func (w *Windows[A]) Fire(f *Firing) (bool, error) {
	name := f.Name()
	if len(name) <= len(w.Name) || name[:len(w.Name)] != w.Name || name[len(w.Name)] != '/' || !f.EventTime() {
		return false, nil
	}
	start, err := strconv.ParseInt(name[len(w.Name)+1:], 10, 64)
	if err != nil {
		return false, nil
	}
	if err := w.check(); err != nil {
		return true, err
	}
	st := f.State()
	acc, ok, err := w.acc(start).Get(st)
	if err != nil || !ok {
		return true, err // closed already
	}
	end := w.end(start)
	if w.Kind.kind == 3 {
		last, ok, err := w.last(start).Get(st)
		if err != nil {
			return true, err
		}
		if !ok {
			last = start
		}
		if end = w.end(last); f.Time() < end {
			// The session grew after this timer was set: it closes at its new end.
			return true, SetTimer(f.Key(), name, EventTime, end, nil)
		}
		if err := w.last(start).Delete(st); err != nil {
			return true, err
		}
	}
	if err := w.Emit(f.Key(), Window{start, end}, acc); err != nil {
		return true, err
	}
	return true, w.acc(start).Delete(st)
}
