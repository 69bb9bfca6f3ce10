package modrt

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/wasmstream/wasmstream/abi"
)

// Metrics holds the metrics a module's guests declare with metric_declare (ABI 0.3): one set per
// task and module version, shared by every instance of it, so values survive instance
// replacement and sum across a task's workers. The number of series is bounded (abi.MaxMetrics)
// and their labels are fixed at declaration. Safe for concurrent use; the zero value is not
// usable: use NewMetrics.
type Metrics struct {
	mu     sync.Mutex
	series []*metricSeries
	byKey  map[string]*metricSeries
	family map[string]string // name -> kind and label names, which every series of a name shares
}

type metricSeries struct {
	kind   int
	name   string
	labels []MetricLabel
	value  atomic.Int64 // a counter's or gauge's value
	hist   *histogram   // a histogram's
}

// histogram is a guest histogram's buckets: counts[k] observations were at most bounds[k] (and
// above bounds[k-1]), counts[len(bounds)] above every bound. Each observation is a few atomic
// operations, never a lock; a snapshot taken during one may see it in some of count, sum and
// its bucket and not the others.
type histogram struct {
	bounds  []float64
	counts  []atomic.Uint64
	count   atomic.Uint64
	sumBits atomic.Uint64 // the sum of the observations, as float64 bits
}

func (h *histogram) observe(v float64) {
	k, _ := slices.BinarySearch(h.bounds, v) // the first bound >= v; len(bounds): +Inf
	h.counts[k].Add(1)
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
	h.count.Add(1)
}

// MetricLabel is one label of a guest metric.
type MetricLabel struct{ Name, Value string }

// MetricValue is the value of one guest metric series.
type MetricValue struct {
	Counter bool // a counter (abi.MetricCounter); otherwise a gauge, or a histogram if Bounds is set
	Name    string
	Labels  []MetricLabel
	Value   int64
	// A histogram's (abi.MetricHistogram): its bucket upper bounds, the observations in each
	// bucket (not cumulative; the last is above every bound), their number and their sum.
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// NewMetrics returns an empty set of guest metrics.
func NewMetrics() *Metrics {
	return &Metrics{byKey: make(map[string]*metricSeries), family: make(map[string]string)}
}

// Snapshot returns the value of every series, in declaration order.
func (m *Metrics) Snapshot() []MetricValue {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MetricValue, len(m.series))
	for k, s := range m.series {
		out[k] = MetricValue{Counter: s.kind == abi.MetricCounter, Name: s.name, Labels: s.labels, Value: s.value.Load()}
		if h := s.hist; h != nil {
			v := &out[k]
			v.Bounds, v.Counts = h.bounds, make([]uint64, len(h.counts))
			for b := range h.counts {
				v.Counts[b] = h.counts[b].Load()
			}
			v.Count, v.Sum = h.count.Load(), math.Float64frombits(h.sumBits.Load())
		}
	}
	return out
}

// validMetricName reports whether s is a Prometheus metric or label name without colons
// ([a-zA-Z_][a-zA-Z0-9_]*) that does not start with "__" (reserved by Prometheus).
func validMetricName(s []byte) bool {
	if len(s) == 0 || strings.HasPrefix(string(s), "__") {
		return false
	}
	for k, c := range s {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || k > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// declare finds or adds the series (kind, name, labels).
// A histogram (bounds != nil) has its bounds in its family: every series of a name has the same.
func (m *Metrics) declare(kind uint32, name []byte, labels []abi.Header, bounds []float64) (*metricSeries, abi.Errno) {
	if e := checkMetric(kind, name, labels, bounds); e != abi.OK {
		return nil, e
	}
	key, fam := metricKeys(kind, name, labels, bounds)
	m.mu.Lock()
	defer m.mu.Unlock()
	if f, ok := m.family[string(name)]; ok && f != fam {
		return nil, abi.ErrInvalid // the name was declared with another kind or other label names
	}
	if s, ok := m.byKey[key]; ok {
		return s, abi.OK
	}
	if len(m.series) >= abi.MaxMetrics {
		return nil, abi.ErrLimit
	}
	s := &metricSeries{kind: int(kind), name: string(name), labels: make([]MetricLabel, len(labels))}
	if bounds != nil {
		s.hist = &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
	}
	for k, l := range labels {
		s.labels[k] = MetricLabel{Name: string(l.Name), Value: string(l.Value)}
	}
	m.series = append(m.series, s)
	m.byKey[key] = s
	m.family[string(name)] = fam
	return s, abi.OK
}

// checkMetric checks a declaration: the kind (a histogram, and only a histogram, has bounds), the
// name, and the labels: at most abi.MaxMetricLabels, names valid and distinct and not "task"
// (the host's label), values UTF-8 (the exposition format's rule), each within its size limit.
func checkMetric(kind uint32, name []byte, labels []abi.Header, bounds []float64) abi.Errno {
	if kind != abi.MetricCounter && kind != abi.MetricGauge && kind != abi.MetricHistogram ||
		(kind == abi.MetricHistogram) != (bounds != nil) {
		return abi.ErrInvalid
	}
	if len(name) > abi.MaxMetricNameBytes {
		return abi.ErrTooLarge
	}
	if !validMetricName(name) {
		return abi.ErrInvalid
	}
	if len(labels) > abi.MaxMetricLabels {
		return abi.ErrLimit
	}
	for k, l := range labels {
		if len(l.Name) > abi.MaxMetricNameBytes || len(l.Value) > abi.MaxMetricLabelValueBytes {
			return abi.ErrTooLarge
		}
		if !validMetricName(l.Name) || string(l.Name) == "task" || !utf8.Valid(l.Value) {
			return abi.ErrInvalid
		}
		for _, p := range labels[:k] {
			if string(p.Name) == string(l.Name) {
				return abi.ErrInvalid
			}
		}
	}
	return abi.OK
}

// metricKeys returns the key of the series (name, label names and values) and its family (kind,
// label names and a histogram's bounds), which every series of a name shares.
func metricKeys(kind uint32, name []byte, labels []abi.Header, bounds []float64) (key, family string) {
	var k, fam strings.Builder
	k.Write(name)
	fam.WriteByte(byte('0' + kind))
	for _, l := range labels {
		k.WriteByte(0)
		k.Write(l.Name)
		k.WriteByte(0)
		k.Write(l.Value)
		fam.WriteByte(0)
		fam.Write(l.Name)
	}
	if bounds != nil {
		fam.WriteByte(1)
		for _, b := range bounds {
			fam.WriteString(strconv.FormatFloat(b, 'g', -1, 64))
			fam.WriteByte(0)
		}
	}
	return k.String(), fam.String()
}

// metricDeclare implements metric_declare (ABI §4.17): allowed during wasmstream_init only.
// The id it returns indexes the instance's own list of series.
func (i *Instance) metricDeclare(kind, namePtr, nameLen, labelsPtr, labelsLen uint32) int64 {
	if kind == abi.MetricHistogram {
		kind = math.MaxUint32 // a histogram needs its bounds: metric_declare_histogram
	}
	return i.declareSeries(kind, namePtr, nameLen, labelsPtr, labelsLen, 0, 0)
}

// metricDeclareHistogram implements metric_declare_histogram (ABI §4.20): metric_declare of a
// histogram whose bucket upper bounds are little-endian f64s, finite and strictly increasing.
func (i *Instance) metricDeclareHistogram(namePtr, nameLen, labelsPtr, labelsLen, boundsPtr, boundsLen uint32) int64 {
	return i.declareSeries(abi.MetricHistogram, namePtr, nameLen, labelsPtr, labelsLen, boundsPtr, boundsLen)
}

func (i *Instance) declareSeries(kind, namePtr, nameLen, labelsPtr, labelsLen, boundsPtr, boundsLen uint32) int64 {
	name, ok1 := i.view(namePtr, nameLen)
	lb, ok2 := i.view(labelsPtr, labelsLen)
	bb, ok3 := i.view(boundsPtr, boundsLen)
	if !ok1 || !ok2 || !ok3 {
		return int64(abi.ErrOutOfBounds)
	}
	if i.phase != phaseInit {
		return int64(abi.ErrNotAllowed)
	}
	labels, err := abi.DecodeHeaders(lb)
	if err != nil {
		return int64(abi.ErrInvalid)
	}
	var bounds []float64
	if kind == abi.MetricHistogram {
		var e abi.Errno
		if bounds, e = decodeBounds(bb); e != abi.OK {
			return int64(e)
		}
	}
	s, e := i.metrics.declare(kind, name, labels, bounds)
	if e != abi.OK {
		return int64(e)
	}
	for id, p := range i.myMetrics {
		if p == s {
			return int64(id)
		}
	}
	i.myMetrics = append(i.myMetrics, s)
	return int64(len(i.myMetrics) - 1)
}

// metricAdd implements metric_add (§4.18) and, with set, metric_set (§4.19): no allocation, one
// atomic operation.
func (i *Instance) metricUpdate(id uint32, v int64, set bool) int64 {
	if uint64(id) >= uint64(len(i.myMetrics)) {
		return int64(abi.ErrInvalid)
	}
	s := i.myMetrics[id]
	switch {
	case s.kind == abi.MetricHistogram:
		return int64(abi.ErrInvalid)
	case s.kind == abi.MetricCounter && (set || v < 0):
		return int64(abi.ErrInvalid)
	case set:
		s.value.Store(v)
	default:
		s.value.Add(v)
	}
	return int64(abi.OK)
}

// decodeBounds decodes a histogram's bucket bounds (ABI §4.20): 1 to abi.MaxMetricBuckets
// little-endian f64s, finite and strictly increasing.
func decodeBounds(bb []byte) ([]float64, abi.Errno) {
	switch {
	case len(bb) == 0 || len(bb)%8 != 0:
		return nil, abi.ErrInvalid
	case len(bb)/8 > abi.MaxMetricBuckets:
		return nil, abi.ErrLimit
	}
	bounds := make([]float64, len(bb)/8)
	for k := range bounds {
		b := math.Float64frombits(binary.LittleEndian.Uint64(bb[8*k:]))
		if math.IsNaN(b) || math.IsInf(b, 0) || k > 0 && b <= bounds[k-1] {
			return nil, abi.ErrInvalid
		}
		bounds[k] = b
	}
	return bounds, abi.OK
}

// metricObserve implements metric_observe (§4.21): one observation of a histogram, a few atomic
// operations and no allocation. NaN is refused: it would make the sum NaN for good.
func (i *Instance) metricObserve(id uint32, v float64) int64 {
	if uint64(id) >= uint64(len(i.myMetrics)) || math.IsNaN(v) {
		return int64(abi.ErrInvalid)
	}
	s := i.myMetrics[id]
	if s.hist == nil {
		return int64(abi.ErrInvalid)
	}
	s.hist.observe(v)
	return int64(abi.OK)
}
