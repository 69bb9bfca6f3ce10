package host_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/evtimetest"
)

// worldTimes is an input whose timestamps behave as the world's do, not as the generator's:
// records hours out of order, one two days back, twenty with the same timestamp, and one record
// an hour ahead of the others, after which every record is late and re-arms its timer at a time
// the watermark has already passed (a timer set in the past).
func worldTimes() []evtimetest.Rec {
	const m = 60_000
	t0 := int64(evtimetest.T0)
	add := func(key string, ts int64) evtimetest.Rec { return evtimetest.Rec{Key: key, Ts: ts, Cmd: "add"} }
	recs := []evtimetest.Rec{add("a", t0), add("b", t0+m), add("c", t0+2*m)}
	recs = append(recs, add("d", t0-3*60*m), add("c", t0+3*m))    // three hours out of order
	recs = append(recs, add("e", t0-2*24*60*m), add("e", t0+4*m)) // two days back
	for i := range 20 {                                           // all at one time
		recs = append(recs, add(string(rune('a'+i%5)), t0+5*m))
	}
	recs = append(recs, add("f", t0+65*m)) // an hour ahead of the rest
	for i := range 10 {
		recs = append(recs, add(string(rune('a'+i%5)), t0+int64(6+i)*m))
	}
	recs = append(recs, evtimetest.Rec{Key: "b", Ts: t0 + 16*m, Cmd: "del"}, add("f", t0+66*m))
	return recs
}

// TestEventTimeWorldTimes: on such an input the outputs per key and the final state are the
// reference model's, from a file read at full speed, in batches of one, or from stdin one record
// at a time. The record an hour ahead moves the watermark for good, as docs/timers-and-windows.md
// says: the timers it passes fire at once, and every record after it is late but still counted
// and never dropped.
func TestEventTimeWorldTimes(t *testing.T) {
	recs := worldTimes()
	outs, _ := evtimetest.Model(recs, evtimetest.Gap, evtimetest.Lateness)
	// What the docs promise, in the model: a, whose session started at t0, expires at the
	// record an hour ahead (offset 27) with its 5 records so far; its two records after it are
	// late, and each one's timer, set in the past, fires before a's next record.
	a := strings.Join(outs["a"], ", ")
	if a != fmt.Sprintf("1 expire 5 %d, 2 late 28, 3 expire 1 %d, 4 late 33, 5 expire 1 %d",
		evtimetest.T0+35*60_000, evtimetest.T0+36*60_000, evtimetest.T0+41*60_000) {
		t.Fatalf("the reference model gives a: %s", a)
	}
	var settings []evSetting
	for _, s := range evSettings {
		if slices.Contains([]string{"file-defaults", "file-workers1-batch1-queued2", "stdin-slow"}, s.name) {
			settings = append(settings, s)
		}
	}
	evCheck(t, recs, settings)
}
