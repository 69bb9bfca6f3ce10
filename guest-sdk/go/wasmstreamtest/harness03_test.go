//go:build !wasip1

package wasmstreamtest_test

import (
	"errors"
	"strings"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// Declared at package level, as a module would: the SDK declares them in every instance's init.
var (
	wordsSeen = wasmstream.NewMetricCounter("words_seen", "lang", "en")
	lastLen   = wasmstream.NewMetricGauge("last_len")
)

// TestMetricsThroughHarness: a handler's counter and gauge are recorded by the harness, which a
// test reads with Host.Metric; the values carry over to a second instance's init (as the host
// keeps them across instance replacement); a counter refuses a negative delta.
func TestMetricsThroughHarness(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		n := int64(len(strings.Fields(string(r.Value()))))
		if err := wordsSeen.Add(n); err != nil {
			return err
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
	if _, err := h.Process(wasmstreamtest.Input{Key: []byte("a"), Value: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	if v, ok := h.Metric("words_seen", "lang", "en"); !ok || v != 6 {
		t.Errorf("words_seen = %d (declared %v), want 6", v, ok)
	}
	if v, ok := h.Metric("last_len"); !ok || v != 1 {
		t.Errorf("last_len = %d (declared %v), want 1", v, ok)
	}
	if err := wordsSeen.Add(-1); !errors.Is(err, wasmstream.ErrInvalid) {
		t.Errorf("Add(-1) = %v, want ErrInvalid", err)
	}
}
