//go:build !wasip1

package wasmstream

import (
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// TestMetricCalls: metrics declared before init reach the host at the start of init with their
// labels as a Headers layout, one declared during init at once; updates pass the host's id.
func TestMetricCalls(t *testing.T) {
	h := install(t)
	c := NewMetricCounter("c", "k", "v")
	g := NewMetricGauge("g")
	var late *MetricGauge
	HandleInit(func([]byte) error { late = NewMetricGauge("late"); return nil })
	if rc := deliver(t, abi.AppendInit(nil, abi.Init{Version: abi.Version}), callInit); rc != 0 {
		t.Fatalf("init: %d %q", rc, h.failMsg)
	}
	c.Inc()
	g.Set(-4)
	late.Add(2)
	want := `declare 0 c "\x01\x00\x00\x00\x01\x00\x00\x00k\x01\x00\x00\x00v",declare 1 g "",declare 1 late "",add 0 1,set 1 -4,add 2 2`
	if got := strings.Join(h.metricOps, ","); got != want {
		t.Errorf("host calls\n got %s\nwant %s", got, want)
	}
	if inInit {
		t.Error("still in init")
	}
}

// TestMetricRefusedFailsInit: a metric the host refuses makes init fail naming it, so the module
// is refused at deploy time instead of silently counting nothing; its updates are no-ops.
func TestMetricRefusedFailsInit(t *testing.T) {
	h := install(t)
	m := NewMetricCounter("refused")
	if rc := deliver(t, abi.AppendInit(nil, abi.Init{Version: abi.Version}), callInit); rc == 0 ||
		!strings.Contains(h.failMsg, "metric refused:") {
		t.Fatalf("init: %d %q, want a failure naming the metric", rc, h.failMsg)
	}
	if err := m.Add(1); err == nil {
		t.Error("Add on a refused counter: no error")
	}
	if n := len(h.metricOps); n != 1 {
		t.Errorf("%d host calls, want the declaration only", n)
	}
}
