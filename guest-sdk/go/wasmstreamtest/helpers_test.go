//go:build !wasip1

package wasmstreamtest_test

import (
	"reflect"
	"strconv"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// Emit stamps an output with the time of what the guest handles: the record's timestamp (its
// unknown -1 stays -1, i.e. processing time), an event-time firing's time, and processing time in
// a processing-time firing and in a tick. The Rust SDK's Context::emit follows the same rule.
func TestEmitTimestampRule(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		if err := wasmstream.SetTimer(r.Key(), "ev", wasmstream.EventTime, 70, nil); err != nil {
			return err
		}
		if err := wasmstream.SetTimer(r.Key(), "pt", wasmstream.ProcessingTime, 2000, nil); err != nil {
			return err
		}
		return wasmstream.Emit("rec", r.Key(), nil)
	})
	wasmstream.HandleTimer(func(f *wasmstream.Firing) error { return wasmstream.Emit(f.Name(), f.Key(), nil) })
	defer wasmstream.HandleTimer(nil)
	wasmstream.HandleTick(func(tk *wasmstream.Tick) error { return wasmstream.Emit("tick", nil, nil) })
	defer wasmstream.HandleTick(nil)

	h := wasmstreamtest.New(wasmstreamtest.Options{NowMs: 1000})
	res, err := h.Process(wasmstreamtest.Input{Key: []byte("a"), Timestamp: 55},
		wasmstreamtest.Input{Key: []byte("b"), Timestamp: -1})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, o := range res.Named("rec") {
		got = append(got, o.Timestamp)
	}
	if want := []int64{55, wasmstream.TimestampNow}; !reflect.DeepEqual(got, want) {
		t.Fatalf("record outputs stamped %v, want %v", got, want)
	}
	res, err = h.AdvanceWatermark(0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if ev := res.Named("ev"); len(ev) != 2 || ev[0].Timestamp != 70 || ev[1].Timestamp != 70 {
		t.Fatalf("event-time firing outputs %v, want ts 70", ev)
	}
	res, err = h.AdvanceTime(2500)
	if err != nil {
		t.Fatal(err)
	}
	if pt := res.Named("pt"); len(pt) != 2 || pt[0].Timestamp != wasmstream.TimestampNow {
		t.Fatalf("processing-time firing outputs %v, want ts %d", pt, wasmstream.TimestampNow)
	}
	res, err = h.Tick(0, "in")
	if err != nil {
		t.Fatal(err)
	}
	if tk := res.Named("tick"); len(tk) != 1 || tk[0].Timestamp != wasmstream.TimestampNow {
		t.Fatalf("tick outputs %v", tk)
	}
}

var (
	count  = wasmstream.Counter{Name: "count"}
	last   = wasmstream.Value[float64]{Name: "last", Codec: wasmstream.Float64Codec}
	seen   = wasmstream.Map[bool]{Name: "seen", Codec: wasmstream.BoolCodec}
	recent = wasmstream.List[string]{Name: "recent", Codec: wasmstream.StringCodec}
)

// The typed state helpers work through the ABI and a test reads them back with Host.Read and Get.
func TestTypedStateThroughHarness(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		st := r.State()
		o, err := wasmstream.ParseJSONObject(r.Value())
		if err != nil {
			return err
		}
		card, _ := o.String("card")
		amount, _ := o.Float("amount")
		n, err := count.Add(st, 1)
		if err != nil {
			return err
		}
		if err := last.Set(st, amount); err != nil {
			return err
		}
		if err := seen.Put(st, card, true); err != nil {
			return err
		}
		if err := recent.Append(st, card); err != nil {
			return err
		}
		items, err := recent.Items(st)
		if err != nil {
			return err
		}
		var w wasmstream.JSONWriter
		w.Int("n", n).Float("last", amount).Int("items", int64(len(items)))
		return wasmstream.Emit("out", r.Key(), w.Bytes())
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	in := func(v string) wasmstreamtest.Input { return wasmstreamtest.Input{Key: []byte("u1"), Value: []byte(v)} }
	res, err := h.Process(in(`{"card":"c-17","amount":123.45}`), in(`{"card":"c-9","amount":1}`),
		in(`{"card":"c-17","amount":2.5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"n":1,"last":123.45,"items":1}`, `{"n":2,"last":1,"items":2}`, `{"n":3,"last":2.5,"items":3}`}
	if got := res.Values("out"); !reflect.DeepEqual(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	st := h.Read("u1")
	if n, err := count.Get(st); n != 3 || err != nil {
		t.Fatalf("count %d, %v", n, err)
	}
	if v, ok, err := last.Get(st); v != 2.5 || !ok || err != nil {
		t.Fatalf("last %v %v %v", v, ok, err)
	}
	var cards []string
	if err := seen.Each(st, func(k string, v bool) bool { cards = append(cards, k+"="+strconv.FormatBool(v)); return true }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"c-17=true", "c-9=true"}; !reflect.DeepEqual(cards, want) {
		t.Fatalf("map %q", cards)
	}
	if items, err := recent.Items(st); err != nil || !reflect.DeepEqual(items, []string{"c-17", "c-9", "c-17"}) {
		t.Fatalf("list %q, %v", items, err)
	}
	// The byte encodings are the documented ones.
	if b, _ := h.Get("u1", "count"); string(b) != "\x03\x00\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("counter bytes %q", b)
	}
	if b, _ := h.Get("u1", "recent/0000000000000002"); string(b) != "c-17" {
		t.Fatalf("third list item %q", b)
	}
	if b, _ := h.Get("u1", "seen/c-9"); string(b) != "\x01" {
		t.Fatalf("map entry %q", b)
	}
	if err := count.Reset(st); err == nil {
		t.Fatal("Host.Read view accepted a write")
	}
}

// A stored value the codec cannot decode is an error naming the entry, not a silent zero.
func TestTypedStateBadValue(t *testing.T) {
	var got error
	wasmstream.Handle(func(r *wasmstream.Record) error {
		_, got = count.Add(r.State(), 1)
		return nil
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	h.SetState("k", "count", []byte("12"))
	if _, err := h.Process(wasmstreamtest.Input{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Error() != `wasmstream: state "count": state value is not an i64 (8 bytes little-endian): 2 bytes` {
		t.Fatalf("error %v", got)
	}
}
