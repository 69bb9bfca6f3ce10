//go:build !wasip1

package wasmstreamtest_test

import (
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// countWindows counts records per window and emits "<start>-<end>:<count>" to "counts".
func countWindows(kind wasmstream.WindowKind) *wasmstream.Windows[int64] {
	return &wasmstream.Windows[int64]{
		Name: "c", Kind: kind, Codec: wasmstream.Int64Codec, Late: "late",
		Fold:  func(n int64, _ *wasmstream.Record) (int64, error) { return n + 1, nil },
		Merge: func(a, b int64) (int64, error) { return a + b, nil },
		Emit: func(key []byte, w wasmstream.Window, n int64) error {
			return wasmstream.Emit("counts", key, []byte(strconv.FormatInt(w.Start, 10)+"-"+strconv.FormatInt(w.End, 10)+":"+strconv.FormatInt(n, 10)))
		},
	}
}

func runWindows(t *testing.T, w *wasmstream.Windows[int64]) *wasmstreamtest.Host {
	t.Helper()
	wasmstream.Handle(w.Add)
	wasmstream.HandleTimer(func(f *wasmstream.Firing) error {
		if ok, err := w.Fire(f); ok || err != nil {
			return err
		}
		return wasmstream.Emit("other", f.Key(), []byte(f.Name()))
	})
	t.Cleanup(func() { wasmstream.HandleTimer(nil) })
	return wasmstreamtest.New(wasmstreamtest.Options{})
}

func ev(key string, ts int64, late bool) wasmstreamtest.Input {
	return wasmstreamtest.Input{Source: "in", Key: []byte(key), Value: []byte(key + "@" + strconv.FormatInt(ts, 10)), Timestamp: ts, Late: late}
}

func outs(res wasmstreamtest.Result) string {
	var s []string
	for _, o := range res.Outputs {
		s = append(s, o.Name+" "+string(o.Key)+" "+string(o.Value)+" ts="+strconv.FormatInt(o.Timestamp, 10))
	}
	return strings.Join(s, ", ")
}

func hexState(es []wasmstreamtest.StateEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, string(e.Key)+"/"+e.Name+"="+hex.EncodeToString(e.Value))
	}
	return strings.Join(s, ",")
}

func step(t *testing.T, res wasmstreamtest.Result, err error, want string) wasmstreamtest.Result {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if got := outs(res); got != want {
		t.Fatalf("outputs\n got %s\nwant %s", got, want)
	}
	return res
}

// Tumbling windows close on the watermark; a late record and one without event time go to the
// late output whole and join no window. The state layout is the one both SDKs document.
func TestWindowsTumbling(t *testing.T) {
	h := runWindows(t, countWindows(wasmstream.Tumbling(60_000)))
	res, err := h.Process(ev("a", 1000, false), ev("a", 59_999, false), ev("b", 60_000, false), ev("a", 500, true), ev("a", -1, false))
	res = step(t, res, err, "late a a@500 ts=500, late a a@-1 ts=-1")
	if got := hexState(res.State); got != "a/c/w/0=0200000000000000,b/c/w/60000=0100000000000000" {
		t.Fatalf("state %s", got)
	}
	if got := timers(h.Timers()); got != "0/a/c/0@60000:,0/b/c/60000@120000:" {
		t.Fatalf("timers %s", got)
	}
	res, err = h.AdvanceWatermark(0, 59_999)
	step(t, res, err, "")
	res, err = h.AdvanceWatermark(0, 60_000)
	res = step(t, res, err, "counts a 0-60000:2 ts=60000")
	if got := hexState(res.State); got != "b/c/w/60000=0100000000000000" {
		t.Fatalf("state after the close %s", got)
	}
	res, err = h.AdvanceWatermark(0, 200_000)
	step(t, res, err, "counts b 60000-120000:1 ts=120000")
}

// A sliding window's record counts in every window that covers it.
func TestWindowsSliding(t *testing.T) {
	h := runWindows(t, countWindows(wasmstream.Sliding(60_000, 20_000)))
	res, err := h.Process(ev("a", 45_000, false), ev("a", 61_000, false))
	step(t, res, err, "")
	res, err = h.AdvanceWatermark(0, 1_000_000)
	step(t, res, err, "counts a 0-60000:1 ts=60000, counts a 20000-80000:2 ts=80000, counts a 40000-100000:2 ts=100000, counts a 60000-120000:1 ts=120000")
}

// Sessions grow with each event less than the gap away, merge when an event bridges two, and
// close gap after their last event; a timer that is not the windows' goes to the task.
func TestWindowsSession(t *testing.T) {
	h := runWindows(t, countWindows(wasmstream.Session(10_000)))
	res, err := h.Process(ev("a", 1000, false), ev("a", 5000, false), ev("a", 21_000, false), ev("b", 100, false))
	res = step(t, res, err, "")
	if got := hexState(res.State); got != "a/c/e/1000=8813000000000000,a/c/e/21000=0852000000000000,a/c/w/1000=0200000000000000,a/c/w/21000=0100000000000000,b/c/e/100=6400000000000000,b/c/w/100=0100000000000000" {
		t.Fatalf("state %s", got)
	}
	res, err = h.Process(ev("a", 14_900, false), ev("a", 30_000, false))
	step(t, res, err, "")
	if got := timers(h.Timers()); got != "0/a/c/1000@40000:,0/b/c/100@10100:" {
		t.Fatalf("timers %s", got)
	}
	h.SetTimer(wasmstreamtest.Timer{Key: []byte("a"), Name: "own", Domain: wasmstream.EventTime, Time: 20_000})
	res, err = h.AdvanceWatermark(0, 39_999)
	step(t, res, err, "counts b 100-10100:1 ts=10100, other a own ts=20000")
	res, err = h.AdvanceWatermark(0, 40_000)
	res = step(t, res, err, "counts a 1000-40000:5 ts=40000")
	if len(res.State) != 0 {
		t.Fatalf("state left %s", hexState(res.State))
	}
}

// A Windows that cannot work fails the call with a message naming what is missing.
func TestWindowsConfig(t *testing.T) {
	w := countWindows(wasmstream.Session(10))
	w.Merge = nil
	h := runWindows(t, w)
	if _, err := h.Process(ev("a", 1, false)); err == nil || !strings.Contains(err.Error(), "session windows need Merge") {
		t.Fatalf("err %v", err)
	}
}
