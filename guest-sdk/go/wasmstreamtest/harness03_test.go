//go:build !wasip1

package wasmstreamtest_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// Declared at package level, as a module would: the SDK declares them in every instance's init.
var (
	wordsSeen = wasmstream.NewMetricCounter("words_seen", "lang", "en")
	lastLen   = wasmstream.NewMetricGauge("last_len")
	wordLen   = wasmstream.NewMetricHistogram("word_len", []float64{1, 3}, "lang", "en")
)

// TestMetricsThroughHarness: a handler's counter and gauge are recorded by the harness, which a
// test reads with Host.Metric; the values carry over to a second instance's init (as the host
// keeps them across instance replacement); a counter refuses a negative delta.
func TestMetricsThroughHarness(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		words := strings.Fields(string(r.Value()))
		n := int64(len(words))
		if err := wordsSeen.Add(n); err != nil {
			return err
		}
		for _, w := range words {
			if err := wordLen.Observe(float64(len(w))); err != nil {
				return err
			}
		}
		lastLen.Set(n)
		return nil
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Process(wasmstreamtest.Input{Key: []byte("a"), Value: []byte("x y z")},
		wasmstreamtest.Input{Key: []byte("b"), Value: []byte("x y")}); err != nil {
		t.Fatal(err)
	}
	if err := h.Init(); err != nil { // a replacement instance
		t.Fatal(err)
	}
	if _, err := h.Process(wasmstreamtest.Input{Key: []byte("a"), Value: []byte("wwwww")}); err != nil {
		t.Fatal(err)
	}
	if v, ok := h.Metric("words_seen", "lang", "en"); !ok || v != 6 {
		t.Errorf("words_seen = %d (declared %v), want 6", v, ok)
	}
	if v, ok := h.Metric("last_len"); !ok || v != 1 {
		t.Errorf("last_len = %d (declared %v), want 1", v, ok)
	}
	hs, ok := h.Histogram("word_len", "lang", "en")
	if want := "{[1 3] [5 0 1] 6 10}"; !ok || fmt.Sprint(hs) != want {
		t.Errorf("word_len = %v (declared %v), want %s", hs, ok, want)
	}
	if err := wordLen.Observe(math.NaN()); !errors.Is(err, wasmstream.ErrInvalid) {
		t.Errorf("Observe(NaN) = %v, want ErrInvalid", err)
	}
	if err := wordsSeen.Add(-1); !errors.Is(err, wasmstream.ErrInvalid) {
		t.Errorf("Add(-1) = %v, want ErrInvalid", err)
	}
}

// New runs init before the first call that needs it, as the real host does: a test that never
// calls Init sees what init did (its config read, its metrics declared); a failing init is the
// first call's error.
func TestInitRunsBeforeFirstCall(t *testing.T) {
	var inits int
	var cfg string
	wasmstream.HandleInit(func(c []byte) error {
		inits++
		cfg = string(c)
		if cfg == `{"fail":true}` {
			return errors.New("bad config")
		}
		return nil
	})
	defer wasmstream.HandleInit(nil)
	wasmstream.Handle(func(r *wasmstream.Record) error { return wordsSeen.Add(1) })

	h := wasmstreamtest.New(wasmstreamtest.Options{Config: []byte(`{"n":1}`)})
	if v, ok := h.Metric("words_seen", "lang", "en"); !ok || v != 0 {
		t.Errorf("words_seen before any call = %d (declared %v), want 0, declared by init", v, ok)
	}
	if _, err := h.Process(wasmstreamtest.Input{Key: []byte("a"), Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if inits != 1 || cfg != `{"n":1}` {
		t.Errorf("init ran %d times with %q, want once with the config", inits, cfg)
	}
	if v, ok := h.Metric("words_seen", "lang", "en"); !ok || v != 1 {
		t.Errorf("words_seen = %d (declared %v), want 1", v, ok)
	}

	h = wasmstreamtest.New(wasmstreamtest.Options{Config: []byte(`{"fail":true}`)})
	if _, err := h.Process(wasmstreamtest.Input{Key: []byte("a")}); err == nil || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("Process after a failing init: %v, want init's error", err)
	}
}
