package modrt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// TestGuestMetrics: metric_declare in init returns ids (the same series declared twice gets the
// same id) and refuses bad names, the reserved "task" label, a name redeclared with another kind
// and bad pointers; metric_add and metric_set update the series of the task's shared set, so two
// instances (workers, or a replacement) sum into one value; outside init a declaration is
// ERR_NOT_ALLOWED and a counter refuses a negative delta, metric_set and an unknown id.
func TestGuestMetrics(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "metrics03", Limits{})
	set := NewMetrics()
	i1 := instantiate(t, m, InstanceConfig{Metrics: set})
	i2 := instantiate(t, m, InstanceConfig{Metrics: set})
	rs := observe(i1)
	if _, err := i1.Process(ctx, []abi.Record{rec("a", nil), rec("b", nil)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := i2.Process(ctx, []abi.Record{rec("c", nil), rec("d", nil), rec("e", nil)}, nil); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(set.Snapshot())
	want := fmt.Sprint([]MetricValue{
		{Counter: true, Name: "words", Labels: []MetricLabel{{"lang", "en"}}, Value: 5},
		{Name: "last_batch", Value: 3},
	})
	if got != want {
		t.Errorf("metrics\n got %s\nwant %s", got, want)
	}
	wantRes := []hostResult{{hfMetricAdd, 0}, {hfMetricSet, 0}, {hfMetricDeclare, int64(abi.ErrNotAllowed)},
		{hfMetricAdd, int64(abi.ErrInvalid)}, {hfMetricSet, int64(abi.ErrInvalid)}, {hfMetricAdd, int64(abi.ErrInvalid)}}
	if !slices.Equal(*rs, wantRes) {
		t.Errorf("process results %v, want %v", *rs, wantRes)
	}

	// The declarations of init, seen by a third instance.
	var decl []int64
	m.observer = func(fn int, r int64) {
		if fn == hfMetricDeclare {
			decl = append(decl, r)
		}
	}
	instantiate(t, m, InstanceConfig{Metrics: set})
	m.observer = nil
	wantDecl := []int64{0, 1, 0, int64(abi.ErrInvalid), int64(abi.ErrInvalid), int64(abi.ErrInvalid), int64(abi.ErrOutOfBounds)}
	if !slices.Equal(decl, wantDecl) {
		t.Errorf("declare results %v, want %v", decl, wantDecl)
	}

	// A set of its own when none is given.
	i4 := instantiate(t, m, InstanceConfig{})
	if _, err := i4.Process(ctx, []abi.Record{rec("a", nil)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := set.Snapshot()[0].Value; got != 5 {
		t.Errorf("an instance without the set changed it: words = %d", got)
	}
}

// TestGuestHistogram: metric_declare_histogram in init returns ids (the same series again gets
// the same id) and refuses bounds that are not increasing, not whole f64s or absent, the name
// with other bounds, and metric_declare of a histogram; metric_observe counts into the bucket of
// the first bound >= the value (above every bound: +Inf) of the task's shared set, summing two
// instances, and refuses NaN, a counter, and metric_add on a histogram.
func TestGuestHistogram(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "histo03", Limits{})
	var decl []int64
	m.observer = func(fn int, r int64) {
		if fn == hfMetricDeclare || fn == hfMetricDeclareHistogram {
			decl = append(decl, r)
		}
	}
	set := NewMetrics()
	i1 := instantiate(t, m, InstanceConfig{Metrics: set})
	m.observer = nil
	inv := int64(abi.ErrInvalid)
	if want := []int64{0, 1, 0, inv, inv, inv, inv, inv}; !slices.Equal(decl, want) {
		t.Errorf("declare results %v, want %v", decl, want)
	}
	i2 := instantiate(t, m, InstanceConfig{Metrics: set})
	rs := observe(i1)
	for _, i := range []*Instance{i1, i2} {
		if _, err := i.Process(ctx, []abi.Record{rec("a", nil)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := fmt.Sprint(set.Snapshot())
	want := fmt.Sprint([]MetricValue{
		{Name: "latency_seconds", Labels: []MetricLabel{{"lang", "en"}}, Bounds: []float64{0.1, 1, 10},
			Counts: []uint64{2, 2, 0, 2}, Count: 6, Sum: 2 * 101.05},
		{Counter: true, Name: "calls"},
	})
	if got != want {
		t.Errorf("metrics\n got %s\nwant %s", got, want)
	}
	wantRes := []hostResult{{hfMetricObserve, 0}, {hfMetricObserve, 0}, {hfMetricObserve, 0},
		{hfMetricObserve, inv}, {hfMetricObserve, inv}, {hfMetricAdd, inv}}
	if !slices.Equal(*rs, wantRes) {
		t.Errorf("process results %v, want %v", *rs, wantRes)
	}
}

// TestHistogramBounds: bucket bounds are 1 to abi.MaxMetricBuckets whole little-endian f64s,
// finite and strictly increasing.
func TestHistogramBounds(t *testing.T) {
	enc := func(fs ...float64) []byte {
		var b []byte
		for _, f := range fs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		return b
	}
	many := make([]float64, abi.MaxMetricBuckets+1)
	for k := range many {
		many[k] = float64(k)
	}
	for _, c := range []struct {
		name string
		bb   []byte
		want abi.Errno
	}{
		{"one", enc(1), abi.OK},
		{"negative and increasing", enc(-5, -0.5, 0, 1e300), abi.OK},
		{"the most", enc(many[:abi.MaxMetricBuckets]...), abi.OK},
		{"too many", enc(many...), abi.ErrLimit},
		{"none", nil, abi.ErrInvalid},
		{"not whole f64s", enc(1, 2)[:12], abi.ErrInvalid},
		{"equal", enc(1, 1), abi.ErrInvalid},
		{"decreasing", enc(2, 1), abi.ErrInvalid},
		{"NaN", enc(1, math.NaN()), abi.ErrInvalid},
		{"+Inf", enc(1, math.Inf(1)), abi.ErrInvalid},
		{"-Inf", enc(math.Inf(-1), 1), abi.ErrInvalid},
	} {
		if _, e := decodeBounds(c.bb); e != c.want {
			t.Errorf("%s: %v, want %v", c.name, e, c.want)
		}
	}
}

// TestGuestMetricBounds: at most abi.MaxMetrics series, abi.MaxMetricLabels labels, and names
// and label values within their sizes.
func TestGuestMetricBounds(t *testing.T) {
	set := NewMetrics()
	for k := range abi.MaxMetrics {
		if _, e := set.declare(abi.MetricGauge, fmt.Appendf(nil, "g%d", k), nil, nil); e != abi.OK {
			t.Fatalf("series %d: %v", k, e)
		}
	}
	if _, e := set.declare(abi.MetricGauge, []byte("one_more"), nil, nil); e != abi.ErrLimit {
		t.Errorf("series %d: %v, want ERR_LIMIT", abi.MaxMetrics+1, e)
	}
	if _, e := set.declare(abi.MetricGauge, []byte("g0"), nil, nil); e != abi.OK {
		t.Errorf("an existing series once full: %v", e)
	}
	set = NewMetrics()
	var many []abi.Header
	for k := range abi.MaxMetricLabels + 1 {
		many = append(many, abi.Header{Name: fmt.Appendf(nil, "l%d", k), Value: []byte("v")})
	}
	long := make([]byte, abi.MaxMetricLabelValueBytes+1)
	for _, c := range []struct {
		kind   uint32
		name   string
		labels []abi.Header
		want   abi.Errno
	}{
		{abi.MetricCounter, "", nil, abi.ErrInvalid},
		{abi.MetricCounter, "9lives", nil, abi.ErrInvalid},
		{abi.MetricCounter, "__reserved", nil, abi.ErrInvalid},
		{abi.MetricCounter, "a:b", nil, abi.ErrInvalid},
		{2, "histo", nil, abi.ErrInvalid},
		{abi.MetricCounter, string(make([]byte, abi.MaxMetricNameBytes+1)), nil, abi.ErrTooLarge},
		{abi.MetricCounter, "x", many, abi.ErrLimit},
		{abi.MetricCounter, "x", many[:abi.MaxMetricLabels], abi.OK},
		{abi.MetricCounter, "y", []abi.Header{{Name: []byte("l"), Value: long}}, abi.ErrTooLarge},
		{abi.MetricCounter, "y", []abi.Header{{Name: []byte("l"), Value: []byte{0xff}}}, abi.ErrInvalid},
		{abi.MetricCounter, "y", []abi.Header{{Name: []byte("l"), Value: []byte("a")}, {Name: []byte("l"), Value: []byte("b")}}, abi.ErrInvalid},
		{abi.MetricCounter, "y", []abi.Header{{Name: []byte("l"), Value: []byte("a")}}, abi.OK},
		{abi.MetricCounter, "y", []abi.Header{{Name: []byte("l"), Value: []byte("b")}}, abi.OK},
		{abi.MetricCounter, "y", []abi.Header{{Name: []byte("m"), Value: []byte("b")}}, abi.ErrInvalid},
	} {
		if _, e := set.declare(c.kind, []byte(c.name), c.labels, nil); e != c.want {
			t.Errorf("declare(%d, %.20q, %d labels) = %v, want %v", c.kind, c.name, len(c.labels), e, c.want)
		}
	}
}

// TestMetricsNeedABI03: a guest declaring ABI 0.2 may not import a 0.3 metric function.
func TestMetricsNeedABI03(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	_, err := r.Compile(ctx, fixture(t, "metrics02"), Limits{})
	var me *ModuleError
	if !errors.As(err, &me) {
		t.Fatalf("error %v (%T), want a *ModuleError", err, err)
	}
	want := []string{"imports wasmstream_v0.metric_add, added in ABI 0.3, but declares ABI 0.2"}
	if !slices.Equal(me.Problems, want) {
		t.Errorf("problems %q, want %q", me.Problems, want)
	}
}

// FuzzMetricDeclare: any kind, name and labels bytes are accepted as a valid series or refused
// with a documented code, never a panic; an accepted series is found again by the same
// declaration and keeps to the bounds.
func FuzzMetricDeclare(f *testing.F) {
	f.Add(uint32(0), []byte("words"), abi.AppendHeaders(nil, []abi.Header{{Name: []byte("lang"), Value: []byte("en")}}))
	f.Add(uint32(1), []byte("g"), []byte{})
	f.Add(uint32(7), []byte("__x"), []byte{1, 0, 0, 0, 200, 0, 0, 0})
	f.Fuzz(func(t *testing.T, kind uint32, name, labels []byte) {
		set := NewMetrics()
		hs, err := abi.DecodeHeaders(labels)
		if err != nil {
			return // metric_declare answers ERR_INVALID before reaching declare
		}
		s, e := set.declare(kind, name, hs, nil)
		switch e {
		case abi.OK:
			if len(name) > abi.MaxMetricNameBytes || !validMetricName(name) || len(hs) > abi.MaxMetricLabels {
				t.Fatalf("accepted %q with %d labels", name, len(hs))
			}
			if again, e := set.declare(kind, name, hs, nil); e != abi.OK || again != s {
				t.Fatalf("declared again: %v, same series %v", e, again == s)
			}
		case abi.ErrInvalid, abi.ErrTooLarge, abi.ErrLimit:
		default:
			t.Fatalf("undocumented code %v", e)
		}
	})
}
