package wasmstream

import (
	"math"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// Metrics (ABI 0.3). A module declares counters, gauges and histograms by name, with label values fixed at
// declaration; the host keeps their values per task (summed over its workers, kept when an
// instance is replaced, starting at zero when a module version becomes current) and exports them
// to Prometheus as wasmstream_guest_<name> (counters with a _total suffix) with a task label.
//
// Declare them at package level or in the init handler; the SDK declares every one of them to
// the host at the start of each instance's init, and the instance fails to start, naming the
// metric, if the host refuses one (a name that is not [a-zA-Z_][a-zA-Z0-9_]* or starts with
// "__", a label named "task", more than 8 labels, more than 64 series, the same name with
// another kind or other label names or bounds; a histogram's bounds not increasing, not finite,
// none or more than 32). Updating is one host call, no allocation. Updates are not
// transactional: a batch that fails and is retried counts again.

// metric is one declaration.
type metric struct {
	kind   int32
	name   string
	labels []byte // a Headers layout
	bounds []byte // a histogram's bucket bounds, little-endian f64s
	id     int32  // the host's id; -1 until declared
	err    error
}

var (
	metrics []*metric
	inInit  bool // inside wasmstream_init: declarations go to the host at once
)

func newMetric(kind int32, name string, labels []string, bounds []float64) *metric {
	m := &metric{kind: kind, name: name, id: -1}
	if kind == abi.MetricHistogram {
		m.bounds = make([]byte, 0, 8*len(bounds))
		for _, b := range bounds {
			u := math.Float64bits(b)
			m.bounds = append(m.bounds, byte(u), byte(u>>8), byte(u>>16), byte(u>>24),
				byte(u>>32), byte(u>>40), byte(u>>48), byte(u>>56))
		}
	}
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
	fn, rc := abi.FuncMetricDeclare, int32(0)
	if m.kind == abi.MetricHistogram {
		fn, rc = abi.FuncMetricDeclareHistogram, host.MetricDeclareHistogram(strBytes(m.name), m.labels, m.bounds)
	} else {
		rc = host.MetricDeclare(m.kind, strBytes(m.name), m.labels)
	}
	if err := check(fn, rc); err != nil {
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
	return &MetricCounter{newMetric(abi.MetricCounter, name, labels, nil)}
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
	return &MetricGauge{newMetric(abi.MetricGauge, name, labels, nil)}
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

// MetricHistogram counts observations into buckets by value, with their count and sum: the host
// exports it as a Prometheus histogram.
type MetricHistogram struct{ m *metric }

// NewMetricHistogram declares a histogram name whose buckets have the upper bounds given (1 to
// 32, finite, strictly increasing; the host adds +Inf) with the fixed labels given as name, value
// pairs. Every series of one name must have the same bounds.
func NewMetricHistogram(name string, bounds []float64, labels ...string) *MetricHistogram {
	return &MetricHistogram{newMetric(abi.MetricHistogram, name, labels, bounds)}
}

// Observe records one observation of v: the count of the first bucket whose bound is >= v grows
// by one, and the sum by v. It is a no-op if the histogram was refused, and returns ErrInvalid
// for NaN.
func (h *MetricHistogram) Observe(v float64) error {
	if h.m.id < 0 {
		return h.m.err
	}
	return check(abi.FuncMetricObserve, host.MetricObserve(h.m.id, v))
}
