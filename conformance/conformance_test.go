package conformance_test

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

var (
	moduleFlag   = flag.String("module", "", "TestThirdParty: the .wasm module to test (default: this repository's Go guest of -contract)")
	contractFlag = flag.String("contract", contractConform, "TestThirdParty: the contract the module implements: conform or wordcount")
)

// cacheDir is the host's compilation cache, shared by every run of this test binary so each
// module is compiled once.
var cacheDir string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "wasmstream-conformance-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cacheDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The languages this repository implements every contract in.
var languages = []string{"go", "rust"}

// buildGuest builds this repository's implementation of contract in lang and returns its path.
func buildGuest(t *testing.T, lang, contract string) string {
	t.Helper()
	switch lang + "/" + contract {
	case "go/" + contractConform:
		return guestbuild.Go(t, "testguests/conform")
	case "go/" + contractWordcount:
		return guestbuild.Go(t, "wordcount")
	case "rust/" + contractConform:
		return guestbuild.Rust(t, "conform-rust")
	case "rust/" + contractWordcount:
		return guestbuild.Rust(t, "wordcount-rust")
	}
	t.Fatalf("no %s guest for contract %q", lang, contract)
	return ""
}

// runResult is what one host run over a case produced.
type runResult struct {
	outputs map[string][]string // output lines by key, in order
	state   string              // in the format of expected-state.txt
	dead    []deadLetter        // by offset
	metrics string              // in the format of expected-metrics.txt
}

// runCase runs the real host over the case with module as the task and collects what it
// produced: outputs from its file sink, state from its store, dead letters from their file.
func runCase(t *testing.T, c *testCase, module string) *runResult {
	t.Helper()
	dir := t.TempDir()
	input, err := filepath.Abs(filepath.Join(c.Dir, fileInput))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Spec
	tc := host.TaskConfig{
		Name:   s.Contract,
		Module: module,
		Config: s.Config,
		Inputs: []host.InputConfig{{Name: inputName, Path: input, KeyField: keyField, ValueField: valField,
			TimestampField: tsField, OnMalformed: "halt"}},
		Output:          host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
		DeadLetter:      host.DeadLetterConfig{Path: filepath.Join(dir, "dead.ndjson")},
		Workers:         s.Host.Workers,
		MaxBatchRecords: s.Host.MaxBatchRecords,
		MaxKeyRecords:   s.Host.MaxKeyRecords,
		Retry: host.RetryConfig{
			MaxAttempts: s.Retry.MaxAttempts,
			Backoff:     time.Duration(s.Retry.BackoffMs) * time.Millisecond,
			MaxBackoff:  time.Duration(s.Retry.MaxBackoffMs) * time.Millisecond,
			OnExhausted: "deadletter",
		},
	}
	dataDir := filepath.Join(dir, "data")
	h, err := host.New(host.Config{DataDir: dataDir, CacheDir: cacheDir, Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.Run(ctx); err != nil {
		t.Fatalf("host run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the host run timed out")
	}

	res := &runResult{}
	var ms []string
	for _, s := range h.Stats() {
		for _, g := range s.GuestMetrics {
			var ls []string
			for _, l := range g.Labels {
				ls = append(ls, fmt.Sprintf("%s=%q", l.Name, l.Value))
			}
			if h := g.Histogram; h != nil {
				ms = append(ms, fmt.Sprintf("%s{%s} %s\n", g.Name, strings.Join(ls, ","), histogramText(h.Counts, h.Count, h.Sum)))
				continue
			}
			ms = append(ms, fmt.Sprintf("%s{%s} %d\n", g.Name, strings.Join(ls, ","), g.Value))
		}
	}
	sort.Strings(ms)
	res.metrics = strings.Join(ms, "")
	out, err := os.ReadFile(tc.Output.Path)
	if err != nil {
		t.Fatal(err)
	}
	if res.outputs, err = byKey(out); err != nil {
		t.Fatal(err)
	}
	dead, err := os.ReadFile(tc.DeadLetter.Path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if res.dead, err = parseDeadLetters(dead); err != nil {
		t.Fatal(err)
	}

	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var lines []string
	err = r.Scan(tc.Name, nil, false, func(e host.StateEntry) bool {
		lines = append(lines, stateLine(string(e.Key), string(e.Name), string(e.Value)))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	res.state = stateText(lines)
	return res
}

// checkExpected compares a run with the case's expected files.
func checkExpected(t *testing.T, c *testCase, got *runResult) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(c.Dir, fileExpected))
	if err != nil {
		t.Fatal(err)
	}
	wantOut, err := byKey(want)
	if err != nil {
		t.Fatal(err)
	}
	compareOutputs(t, "want", wantOut, "got", got.outputs)

	wantState, err := os.ReadFile(filepath.Join(c.Dir, fileState))
	if err != nil {
		t.Fatal(err)
	}
	if got.state != string(wantState) {
		t.Errorf("state differs from %s at line %d:\n got: %s\nwant: %s", fileState,
			firstDiffLine(got.state, string(wantState)), lineAt(got.state, string(wantState)), lineAt(string(wantState), got.state))
	}

	// The guest metrics, in cases that check them.
	if wantMetrics, err := os.ReadFile(filepath.Join(c.Dir, fileMetrics)); err == nil && got.metrics != string(wantMetrics) {
		t.Errorf("guest metrics after the run:\n got: %q\nwant: %q", got.metrics, wantMetrics)
	}

	wantDead, err := os.ReadFile(filepath.Join(c.Dir, fileDead))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	wd, err := parseDeadLetters(wantDead)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.dead) != len(wd) {
		t.Errorf("%d dead letters, want %d:\n got: %+v\nwant: %+v", len(got.dead), len(wd), got.dead, wd)
		return
	}
	for i, w := range wd {
		g := got.dead[i]
		// The host's error text wraps the guest's fail message (quoted); the rest is the host's.
		msgOK := strings.Contains(g.Error, w.Error) || strings.Contains(g.Error, quoted(w.Error))
		if g.Input != w.Input || g.Offset != w.Offset || g.Attempts != w.Attempts || g.Key != w.Key ||
			g.Record != w.Record || !msgOK {
			t.Errorf("dead letter %d:\n got: %+v\nwant: %+v (the error containing the message)", i, g, w)
		}
	}
}

// quoted is s as Go's strconv.Quote writes it, without the quotes.
func quoted(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// compareOutputs reports every key whose outputs differ, with the first difference.
func compareOutputs(t *testing.T, aName string, a map[string][]string, bName string, b map[string][]string) {
	t.Helper()
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		la, lb := a[k], b[k]
		for i := 0; i < max(len(la), len(lb)); i++ {
			var x, y string
			if i < len(la) {
				x = la[i]
			}
			if i < len(lb) {
				y = lb[i]
			}
			if x != y {
				t.Errorf("key %s: output %d differs (%s has %d outputs for the key, %s %d)\n%s: %s\n%s: %s",
					k, i+1, aName, len(la), bName, len(lb), aName, short(x), bName, short(y))
				break
			}
		}
	}
}

// lineAt is the line of a where a and b first differ, shortened.
func lineAt(a, b string) string {
	lines := strings.Split(a, "\n")
	i := firstDiffLine(a, b) - 1
	if i >= len(lines) {
		return "(end)"
	}
	return short(lines[i])
}

func short(s string) string {
	s = strings.TrimSuffix(s, "\n")
	if s == "" {
		return "(none)"
	}
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return s
}

// TestConformance runs every case through the real host with the Go and the Rust guest of its
// contract, compares each run with the expected files, and the two runs with each other.
func TestConformance(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			runs := map[string]*runResult{}
			for _, lang := range languages {
				t.Run(lang, func(t *testing.T) {
					r := runCase(t, c, buildGuest(t, lang, c.Spec.Contract))
					checkExpected(t, c, r)
					runs[lang] = r
				})
			}
			goRun, rustRun := runs["go"], runs["rust"]
			if goRun == nil || rustRun == nil {
				return
			}
			compareOutputs(t, "go", goRun.outputs, "rust", rustRun.outputs)
			if goRun.state != rustRun.state {
				t.Errorf("the Go and Rust runs left different state; first difference at line %d:\n  go: %s\nrust: %s",
					firstDiffLine(goRun.state, rustRun.state), lineAt(goRun.state, rustRun.state), lineAt(rustRun.state, goRun.state))
			}
			if !reflect.DeepEqual(goRun.dead, rustRun.dead) {
				t.Errorf("the Go and Rust runs dead-lettered differently:\n  go: %+v\nrust: %+v", goRun.dead, rustRun.dead)
			}
		})
	}
}

// TestThirdParty runs the cases of one contract against any module:
//
//	go test ./conformance -run TestThirdParty -args -module path/to/x.wasm -contract conform
//
// Without -module it runs this repository's Go guest of the contract, so it always asserts
// something.
func TestThirdParty(t *testing.T) {
	contract := *contractFlag
	if contract != contractConform && contract != contractWordcount {
		t.Fatalf("-contract %q: want %q or %q", contract, contractConform, contractWordcount)
	}
	module := *moduleFlag
	if module == "" {
		module = buildGuest(t, "go", contract)
		t.Logf("no -module: testing this repository's Go %s guest", contract)
	} else {
		module = findModule(t, module)
		t.Logf("testing %s against the %s contract", module, contract)
	}
	ran := 0
	for _, c := range loadCases(t) {
		if c.Spec.Contract != contract {
			continue
		}
		ran++
		t.Run(c.Name, func(t *testing.T) {
			checkExpected(t, c, runCase(t, c, module))
		})
	}
	if ran == 0 {
		t.Fatalf("no case for contract %q", contract)
	}
}

// findModule resolves -module: an absolute path, or a path relative to this package's directory
// (where go test runs the tests) or to the repository's root.
func findModule(t *testing.T, path string) string {
	t.Helper()
	candidates := []string{path}
	if !filepath.IsAbs(path) {
		candidates = append(candidates, filepath.Join(guestbuild.Root(), path))
	}
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	t.Fatalf("-module %s: no such file (a relative path is taken from the conformance directory or the "+
		"repository root; pass an absolute path to be sure)", path)
	return ""
}

// TestGoldenVectorsListed checks that every ABI golden vector listed in the golden README exists
// and is well-formed hex, and that every vector file is listed. Both SDKs' own tests decode and
// re-encode them.
func TestGoldenVectorsListed(t *testing.T) {
	dir := filepath.Join(guestbuild.Root(), "abi", "testdata", "golden")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9_]+\\.hex)` \\|").FindAllStringSubmatch(string(readme), -1) {
		listed[m[1]] = true
	}
	if len(listed) == 0 {
		t.Fatal("the golden README lists no vectors")
	}
	for name := range listed {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("listed golden vector: %v", err)
			continue
		}
		var digits strings.Builder
		for _, line := range strings.Split(string(raw), "\n") {
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			digits.WriteString(strings.Join(strings.Fields(line), ""))
		}
		if b, err := hex.DecodeString(digits.String()); err != nil || len(b) == 0 {
			t.Errorf("%s: not hex byte pairs (%v)", name, err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.hex"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not listed in the golden README", filepath.Base(f))
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// histogramText is a histogram's value in expected-metrics.txt: "count=C sum=S buckets=a,b,…"
// with the non-cumulative bucket counts, the last above every bound.
func histogramText(counts []uint64, count uint64, sum float64) string {
	bs := make([]string, len(counts))
	for k, c := range counts {
		bs[k] = strconv.FormatUint(c, 10)
	}
	return fmt.Sprintf("count=%d sum=%s buckets=%s", count, strconv.FormatFloat(sum, 'f', -1, 64), strings.Join(bs, ","))
}
