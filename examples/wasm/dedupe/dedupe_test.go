//go:build !wasip1

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"github.com/wasmstream/wasmstream/examples/wasm/internal/jsonconfig"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

var update = flag.Bool("update", false, "rewrite expected.ndjson and expected-state.txt from the reference implementation")

// line is one line of input.ndjson, as the host's file source reads it with key field "id",
// timestamp field "ts" and value field "body".
type line struct {
	ID   string `json:"id"`
	Ts   int64  `json:"ts"`
	Body string `json:"body"`
}

// sinkLine is one line the host's file and stdout sinks write; the field order is the format.
type sinkLine struct {
	Output string `json:"output"`
	Key    string `json:"key"`
	Value  string `json:"value"`
	Ts     int64  `json:"ts"`
}

func readInput(t *testing.T) []line {
	t.Helper()
	f, err := os.Open("input.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l line
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("input line %d: %v", len(lines)+1, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// readConfig returns the task config of the example's config.yaml (read with a regular
// expression: the example's module has no YAML dependency).
func readConfig(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+window_seconds: (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("config.yaml lacks window_seconds")
	}
	return []byte(`{"window_seconds":` + string(m[1]) + `}`)
}

// reference is an implementation of README.md for an input read within one window (as a run
// over the sample file is), independent of the handler: the first record of each id, and per
// id its number of records. It returns the sink lines sorted by key (each key has one) and the
// state lines sorted bytewise.
func reference(t *testing.T, input []line) (outputs, state []string) {
	count := map[string]int{}
	for _, l := range input {
		count[l.ID]++
		if count[l.ID] > 1 {
			continue
		}
		out, err := json.Marshal(sinkLine{Output: "unique", Key: l.ID, Value: l.Body, Ts: l.Ts})
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(out))
	}
	sort.Strings(outputs) // one line per key, and the key comes first after the output name
	for id, n := range count {
		state = append(state, id+"\tseen\t"+strconv.Itoa(n))
	}
	sort.Strings(state)
	return outputs, state
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("%s must end with a newline", path)
	}
	return strings.Split(string(b[:len(b)-1]), "\n")
}

func writeLines(t *testing.T, path string, lines []string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sameLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d lines, want %d\ngot:\n%s", what, len(got), len(want), strings.Join(got, "\n"))
	}
	for i := 0; i < len(got) && i < len(want); i++ {
		if got[i] != want[i] {
			t.Errorf("%s line %d:\n got %s\nwant %s", what, i+1, got[i], want[i])
			return
		}
	}
}

// The expected files are what the reference implementation makes of input.ndjson.
func TestExpectedFiles(t *testing.T) {
	input := readInput(t)
	outputs, state := reference(t, input)
	if *update {
		writeLines(t, "expected.ndjson", outputs)
		writeLines(t, "expected-state.txt", state)
	}
	sameLines(t, "expected.ndjson", readLines(t, "expected.ndjson"), outputs)
	sameLines(t, "expected-state.txt", readLines(t, "expected-state.txt"), state)
	if len(outputs) == len(input) {
		t.Error("the sample input has no duplicates")
	}
}

func newHost(t *testing.T, cfg []byte, now int64) *wasmstreamtest.Host {
	t.Helper()
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: cfg, Outputs: []string{Output}, NowMs: now})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHandlerMatchesExpected(t *testing.T) {
	h := newHost(t, readConfig(t), 1_000_000)
	var outs []wasmstreamtest.Output
	for i, l := range readInput(t) {
		res, err := h.Process(wasmstreamtest.Input{Source: "input", Offset: int64(i), Timestamp: l.Ts,
			Key: []byte(l.ID), Value: []byte(l.Body)})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, res.Outputs...)
	}
	var lines []string
	for _, o := range outs {
		b, err := json.Marshal(sinkLine{Output: o.Name, Key: string(o.Key), Value: string(o.Value), Ts: o.Timestamp})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	sort.Strings(lines)
	sameLines(t, "outputs", lines, readLines(t, "expected.ndjson"))
	var state []string
	for _, e := range h.State() {
		state = append(state, string(e.Key)+"\t"+e.Name+"\t"+string(e.Value))
	}
	sameLines(t, "state", state, readLines(t, "expected-state.txt"))
	for _, tm := range h.Timers() {
		if tm.Name != TimerName || tm.Domain != wasmstream.ProcessingTime || tm.Time != 1_000_000+600_000 {
			t.Errorf("timer %v, want %q in processing time at 1600000", tm, TimerName)
		}
	}
}

func in(id, body string) wasmstreamtest.Input {
	return wasmstreamtest.Input{Key: []byte(id), Value: []byte(body), Timestamp: 7}
}

func values(res wasmstreamtest.Result) []string {
	var out []string
	for _, o := range res.Outputs {
		out = append(out, string(o.Key)+" "+string(o.Value))
	}
	return out
}

func process(t *testing.T, h *wasmstreamtest.Host, inputs ...wasmstreamtest.Input) wasmstreamtest.Result {
	t.Helper()
	res, err := h.Process(inputs...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func advance(t *testing.T, h *wasmstreamtest.Host, now int64) wasmstreamtest.Result {
	t.Helper()
	res, err := h.AdvanceTime(now)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// After the window the id is forgotten: its state and timer are gone and it is accepted again.
// The window starts at the first record, not at the duplicates.
func TestIdExpiresAfterTheWindow(t *testing.T) {
	h := newHost(t, []byte(`{"window_seconds": 60}`), 10_000)
	res := process(t, h, in("a", "first"), in("a", "dup in the same batch"))
	sameLines(t, "first batch", values(res), []string{"a first"})
	advance(t, h, 69_999)
	res = process(t, h, in("a", "dup before the window ends"))
	if len(res.Outputs) != 0 {
		t.Fatalf("a duplicate was emitted: %v", values(res))
	}
	if st := h.State(); len(st) != 1 || string(st[0].Value) != "3" {
		t.Fatalf("state %v, want seen = 3", st)
	}
	if tm := h.Timers(); len(tm) != 1 || tm[0].Time != 70_000 {
		t.Fatalf("timers %v, want one expire at 70000 (duplicates do not extend the window)", tm)
	}
	res = advance(t, h, 70_000)
	if len(res.Fired) != 1 || res.Fired[0].Name != TimerName || string(res.Fired[0].Key) != "a" {
		t.Fatalf("fired %v, want a's expire", res.Fired)
	}
	if st, tm := h.State(), h.Timers(); len(st) != 0 || len(tm) != 0 {
		t.Fatalf("after the window: state %v, timers %v; want none", st, tm)
	}
	res = process(t, h, in("a", "again"))
	sameLines(t, "after the window", values(res), []string{"a again"})
	if tm := h.Timers(); len(tm) != 1 || tm[0].Time != 130_000 {
		t.Fatalf("timers %v, want a new expire at 130000", tm)
	}
}

// Over many ids, state and timers hold only the ids of the last window.
func TestStateStaysBounded(t *testing.T) {
	const (
		window  = 60 // seconds
		perSec  = 20 // new ids per second
		seconds = 300
	)
	h := newHost(t, []byte(`{"window_seconds": 60}`), 0)
	emitted, peak := 0, 0
	for s := 1; s <= seconds; s++ {
		advance(t, h, int64(s)*1000)
		var batch []wasmstreamtest.Input
		for i := 0; i < perSec; i++ {
			id := "id-" + strconv.Itoa(s*perSec+i)
			batch = append(batch, in(id, "x"))
			// A duplicate of an id from half a window ago, and of one from two windows ago
			// (forgotten, so accepted again).
			if s > window/2 {
				batch = append(batch, in("id-"+strconv.Itoa((s-window/2)*perSec+i), "dup"))
			}
			if s > 2*window && i == 0 {
				batch = append(batch, in("id-"+strconv.Itoa((s-2*window)*perSec+i), "old"))
			}
		}
		res := process(t, h, batch...)
		emitted += len(res.Outputs)
		peak = max(peak, len(h.State()))
		if n := len(h.Timers()); n != len(h.State()) {
			t.Fatalf("second %d: %d timers for %d ids in state", s, n, len(h.State()))
		}
	}
	if limit := (window + 1) * (perSec + 1); peak > limit {
		t.Errorf("state peaked at %d ids, want at most %d (one window of ids)", peak, limit)
	}
	if want := seconds*perSec + (seconds - 2*window); emitted != want {
		t.Errorf("emitted %d records, want %d", emitted, want)
	}
	advance(t, h, (seconds+window)*1000)
	if st := h.State(); len(st) != 0 {
		t.Errorf("one window after the last record, %d ids are left in state", len(st))
	}
}

func TestParseWindow(t *testing.T) {
	cases := []struct {
		cfg  string
		want uint64 // 0: invalid
	}{
		{``, 600},
		{`{}`, 600},
		{`{"window_seconds":1}`, 1},
		{`{"window_seconds":1000000000, "x": null}`, 1000000000},
		{`{"window_seconds":0}`, 0},
		{`{"window_seconds":1000000001}`, 0},
		{`{"window_seconds":-5}`, 0},
		{`{"window_seconds":60.0}`, 0},
		{`{"window_seconds":true}`, 0},
		{`{"window_seconds":60} x`, 0},
	}
	for _, c := range cases {
		got, err := jsonconfig.UintMember([]byte(c.cfg), "window_seconds", defaultWindowSeconds, maxWindowSeconds)
		if c.want == 0 {
			if err == nil {
				t.Errorf("%q: got %d, want an error", c.cfg, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: got %d, %v, want %d", c.cfg, got, err, c.want)
		}
	}
}

func TestInvalidConfigFailsInit(t *testing.T) {
	defer func() { windowMs = defaultWindowSeconds * 1000 }()
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: []byte(`{"window_seconds":"10m"}`)})
	err := h.Init()
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Reason, "dedupe: invalid config: window_seconds must be an integer from 1 to") {
		t.Fatalf("init error %v", err)
	}
}

// The module stays TinyGo-compatible, like the SDK: its non-test code imports only the packages
// below (no fmt, reflect or encoding/json) and starts no goroutine.
func TestTinyGoFriendly(t *testing.T) {
	allowed := map[string]bool{"errors": true, "strconv": true, "math": true,
		"github.com/wasmstream/wasmstream/guest-sdk/go":                      true,
		"github.com/wasmstream/wasmstream/examples/wasm/internal/jsonconfig": true} // itself: errors and strconv only
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); !allowed[p] {
				t.Errorf("%s imports %s", path, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if _, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s starts a goroutine", path)
			}
			return true
		})
	}
}
