//go:build !wasip1

package wasmstreamtest

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// The ABI 0.3 side of the harness: guest metrics (counters, gauges, histograms). Like the host, the Host keeps one value per
// declared series for the whole test (every Init of the Host declares into the same set) and
// applies the host's rules to declarations.

type metricSeries struct {
	kind   int32
	name   string
	labels []string // name, value pairs
	value  int64
	hist   *Histogram
}

// Histogram is the value of a guest histogram: its bucket upper bounds, the observations in
// each bucket (not cumulative; the last is above every bound), their number and their sum.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Histogram returns the histogram name with exactly the labels given as name, value pairs, and
// whether the guest declared it.
func (h *Host) Histogram(name string, labels ...string) (Histogram, bool) {
	h.initForRead()
	for _, s := range h.metrics.series {
		if s.hist != nil && s.name == name && strings.Join(s.labels, "\x00") == strings.Join(labels, "\x00") {
			c := *s.hist
			c.Counts = append([]uint64(nil), c.Counts...)
			return c, true
		}
	}
	return Histogram{}, false
}

type metricSet struct {
	series []*metricSeries
	family map[string]string
	ids    []*metricSeries // the current instance's: an id indexes it
}

// Metric returns the value of the metric name with exactly the labels given as name, value pairs,
// and whether the guest declared it.
func (h *Host) Metric(name string, labels ...string) (int64, bool) {
	h.initForRead()
	for _, s := range h.metrics.series {
		if s.name == name && strings.Join(s.labels, "\x00") == strings.Join(labels, "\x00") {
			return s.value, true
		}
	}
	return 0, false
}

// initForRead runs init if no init ran yet, for a read of what init declares; a failed init
// declared nothing, so its metrics read as absent.
func (h *Host) initForRead() {
	if !h.inited && h.current("wasmstream_init") == nil {
		_ = h.Init()
	}
}

func validMetricName(s []byte) bool {
	if len(s) == 0 || len(s) > abi.MaxMetricNameBytes || strings.HasPrefix(string(s), "__") {
		return false
	}
	for k, c := range s {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || k > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// MetricDeclare implements metric_declare (ABI.md §4.17).
func (h *Host) MetricDeclare(kind int32, name, labels []byte) int32 {
	if kind == abi.MetricHistogram {
		kind = -1 // a histogram needs its bounds: metric_declare_histogram
	}
	return h.declare(kind, name, labels, nil)
}

// MetricDeclareHistogram implements metric_declare_histogram (ABI.md §4.20).
func (h *Host) MetricDeclareHistogram(name, labels, bounds []byte) int32 {
	if bounds == nil {
		bounds = []byte{}
	}
	return h.declare(abi.MetricHistogram, name, labels, bounds)
}

// declare checks a declaration as the host does, in the same order, and returns the id of the
// series (kind, name, labels), adding it if it is new.
func (h *Host) declare(kind int32, name, labels, bb []byte) int32 {
	if h.phase != phaseInit {
		return int32(abi.ErrNotAllowed)
	}
	hs, err := abi.DecodeHeaders(labels)
	if err != nil || (kind != abi.MetricCounter && kind != abi.MetricGauge && kind != abi.MetricHistogram) {
		return int32(abi.ErrInvalid)
	}
	var bounds []float64
	if kind == abi.MetricHistogram {
		var e abi.Errno
		if bounds, e = decodeBounds(bb); e != abi.OK {
			return int32(e)
		}
	}
	if e := checkMetric(name, hs); e != abi.OK {
		return int32(e)
	}
	fam := []string{string(rune('0' + kind))}
	var lv []string
	for _, l := range hs {
		fam = append(fam, string(l.Name))
		lv = append(lv, string(l.Name), string(l.Value))
	}
	if bounds != nil {
		fam = append(fam, "\x01"+fmt.Sprint(bounds))
	}
	return h.metrics.id(kind, string(name), strings.Join(fam, "\x00"), lv, bounds)
}

// decodeBounds decodes a histogram's bucket bounds (little-endian f64s): finite, increasing, at
// most abi.MaxMetricBuckets.
func decodeBounds(bb []byte) ([]float64, abi.Errno) {
	switch {
	case len(bb) == 0 || len(bb)%8 != 0:
		return nil, abi.ErrInvalid
	case len(bb)/8 > abi.MaxMetricBuckets:
		return nil, abi.ErrLimit
	}
	var bounds []float64
	for k := 0; k < len(bb); k += 8 {
		b := math.Float64frombits(binary.LittleEndian.Uint64(bb[k:]))
		if math.IsNaN(b) || math.IsInf(b, 0) || len(bounds) > 0 && b <= bounds[len(bounds)-1] {
			return nil, abi.ErrInvalid
		}
		bounds = append(bounds, b)
	}
	return bounds, abi.OK
}

// checkMetric checks a metric's name and labels: at most abi.MaxMetricLabels, names valid and
// distinct and not "task", values UTF-8, each within its size limit.
func checkMetric(name []byte, hs []abi.Header) abi.Errno {
	if len(name) > abi.MaxMetricNameBytes {
		return abi.ErrTooLarge
	}
	if !validMetricName(name) {
		return abi.ErrInvalid
	}
	if len(hs) > abi.MaxMetricLabels {
		return abi.ErrLimit
	}
	for k, l := range hs {
		if len(l.Name) > abi.MaxMetricNameBytes || len(l.Value) > abi.MaxMetricLabelValueBytes {
			return abi.ErrTooLarge
		}
		if !validMetricName(l.Name) || string(l.Name) == "task" || !utf8.Valid(l.Value) {
			return abi.ErrInvalid
		}
		for _, p := range hs[:k] {
			if string(p.Name) == string(l.Name) {
				return abi.ErrInvalid
			}
		}
	}
	return abi.OK
}

// id returns the id of the series (name, label names and values lv) of family fam, adding the
// series if it is new and the id if the guest has none for it yet.
func (m *metricSet) id(kind int32, name, fam string, lv []string, bounds []float64) int32 {
	if m.family == nil {
		m.family = map[string]string{}
	}
	if f, ok := m.family[name]; ok && f != fam {
		return int32(abi.ErrInvalid)
	}
	var s *metricSeries
	for _, p := range m.series {
		if p.name == name && strings.Join(p.labels, "\x00") == strings.Join(lv, "\x00") {
			s = p
		}
	}
	if s == nil {
		if len(m.series) >= abi.MaxMetrics {
			return int32(abi.ErrLimit)
		}
		s = &metricSeries{kind: kind, name: name, labels: lv}
		if bounds != nil {
			s.hist = &Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
		}
		m.series = append(m.series, s)
		m.family[name] = fam
	}
	for id, p := range m.ids {
		if p == s {
			return int32(id)
		}
	}
	m.ids = append(m.ids, s)
	return int32(len(m.ids) - 1)
}

func (h *Host) metricUpdate(id int32, v int64, set bool) int32 {
	if id < 0 || int(id) >= len(h.metrics.ids) {
		return int32(abi.ErrInvalid)
	}
	s := h.metrics.ids[id]
	switch {
	case s.kind == abi.MetricHistogram:
		return int32(abi.ErrInvalid)
	case s.kind == abi.MetricCounter && (set || v < 0):
		return int32(abi.ErrInvalid)
	case set:
		s.value = v
	default:
		s.value += v
	}
	return 0
}

// MetricAdd implements metric_add (ABI.md §4.18).
func (h *Host) MetricAdd(id int32, v int64) int32 { return h.metricUpdate(id, v, false) }

// MetricSet implements metric_set (ABI.md §4.19).
func (h *Host) MetricSet(id int32, v int64) int32 { return h.metricUpdate(id, v, true) }

// MetricObserve implements metric_observe (ABI.md §4.21).
func (h *Host) MetricObserve(id int32, v float64) int32 {
	if id < 0 || int(id) >= len(h.metrics.ids) || math.IsNaN(v) || h.metrics.ids[id].hist == nil {
		return int32(abi.ErrInvalid)
	}
	hs := h.metrics.ids[id].hist
	k, _ := slices.BinarySearch(hs.Bounds, v)
	hs.Counts[k]++
	hs.Count++
	hs.Sum += v
	return 0
}

var _ host.Host = (*Host)(nil)
