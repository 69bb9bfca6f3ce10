package wasmstream

import (
	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// Metrics (ABI 0.3). A module declares counters and gauges by name, with label values fixed at
// declaration; the host keeps their values per task (summed over its workers, kept when an
// instance is replaced, starting at zero when a module version becomes current) and exports them
// to Prometheus as wasmstream_guest_<name> (counters with a _total suffix) with a task label.
//
// Declare them at package level or in the init handler; the SDK declares every one of them to
// the host at the start of each instance's init, and the instance fails to start, naming the
// metric, if the host refuses one (a name that is not [a-zA-Z_][a-zA-Z0-9_]* or starts with
// "__", a label named "task", more than 8 labels, more than 64 series, the same name with
// another kind or other label names). Updating is one host call, no allocation. Updates are not
// transactional: a batch that fails and is retried counts again.

// metric is one declaration.
type metric struct {
	kind   int32
	name   string
	labels []byte // a Headers layout
	id     int32  // the host's id; -1 until declared
	err    error
}

var (
	metrics []*metric
	inInit  bool // inside wasmstream_init: declarations go to the host at once
)

func newMetric(kind int32, name string, labels []string) *metric {
	m := &metric{kind: kind, name: name, id: -1}
	if len(labels)%2 != 0 {
		m.err = errorString("labels come in name, value pairs")
	} else if len(labels) > 0 {
		hs := make([]abi.Header, 0, len(labels)/2)
		for k := 0; k < len(labels); k += 2 {
			hs = append(hs, abi.Header{Name: []byte(labels[k]), Value: []byte(labels[k+1])})
		}
		m.labels = abi.AppendHeaders(nil, hs)
	}
	metrics = append(metrics, m)
	if inInit {
		m.declare()
	}
	return m
}

func (m *metric) declare() {
	if m.err != nil {
		return
	}
	m.id = -1
	rc := host.MetricDeclare(m.kind, strBytes(m.name), m.labels)
	if err := check(abi.FuncMetricDeclare, rc); err != nil {
		m.err = err
		return
	}
	m.id = rc
}

// declareMetrics declares every metric to the host (at the start of init) and returns the first
// refusal.
func declareMetrics() error {
	for _, m := range metrics {
		m.declare()
		if m.err != nil {
			return errorString("metric " + m.name + ": " + m.err.Error())
		}
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// MetricCounter is a count that only goes up.
type MetricCounter struct{ m *metric }

// NewMetricCounter declares a counter name with the fixed labels given as name, value pairs.
func NewMetricCounter(name string, labels ...string) *MetricCounter {
	return &MetricCounter{newMetric(abi.MetricCounter, name, labels)}
}

// Add adds n (>= 0) to the counter. It is a no-op if the counter was refused, and returns
// ErrInvalid for a negative n.
func (c *MetricCounter) Add(n int64) error {
	if c.m.id < 0 {
		return c.m.err
	}
	return check(abi.FuncMetricAdd, host.MetricAdd(c.m.id, n))
}

// Inc adds 1 to the counter.
func (c *MetricCounter) Inc() { c.Add(1) }

// MetricGauge is a value that goes up and down.
type MetricGauge struct{ m *metric }

// NewMetricGauge declares a gauge name with the fixed labels given as name, value pairs.
func NewMetricGauge(name string, labels ...string) *MetricGauge {
	return &MetricGauge{newMetric(abi.MetricGauge, name, labels)}
}

// Set sets the gauge to v.
func (g *MetricGauge) Set(v int64) {
	if g.m.id >= 0 {
		host.MetricSet(g.m.id, v)
	}
}

// Add adds d (which may be negative) to the gauge.
func (g *MetricGauge) Add(d int64) {
	if g.m.id >= 0 {
		host.MetricAdd(g.m.id, d)
	}
}
