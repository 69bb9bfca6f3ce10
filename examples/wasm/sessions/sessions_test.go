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
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

var update = flag.Bool("update", false, "rewrite expected.ndjson from the reference implementation")

// line is one line of input.ndjson, as the host's file source reads it with key field "user",
// timestamp field "ts" and value field "page".
type line struct {
	User string `json:"user"`
	Ts   int64  `json:"ts"`
	Page string `json:"page"`
}

// sinkLine is one line the host's file and stdout sinks write; the field order is the format.
type sinkLine struct {
	Output string `json:"output"`
	Key    string `json:"key"`
	Value  string `json:"value"`
	Ts     int64  `json:"ts"`
}

// summary is the value of an output; the field order is the format.
type summaryJSON struct {
	User  string `json:"user"`
	Count int    `json:"count"`
	First int64  `json:"first"`
	Last  int64  `json:"last"`
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

// settings are what config.yaml gives the task: the module's config and the allowed lateness.
type settings struct {
	config   []byte // the task config as the host hands it to the module
	gap      int64  // ms
	lateness int64  // ms
}

// readSettings reads the example's config.yaml (two keys, read with regular expressions: the
// example's module has no YAML dependency).
func readSettings(t *testing.T) settings {
	t.Helper()
	b, err := os.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	gap := regexp.MustCompile(`(?m)^\s+gap_minutes: (\d+)$`).FindSubmatch(b)
	late := regexp.MustCompile(`(?m)^\s+allowed_lateness: (\S+)$`).FindSubmatch(b)
	if gap == nil || late == nil {
		t.Fatal("config.yaml lacks gap_minutes or allowed_lateness")
	}
	minutes, err := strconv.Atoi(string(gap[1]))
	if err != nil {
		t.Fatal(err)
	}
	d, err := time.ParseDuration(string(late[1]))
	if err != nil {
		t.Fatal(err)
	}
	return settings{config: []byte(`{"gap_minutes":` + string(gap[1]) + `}`), gap: int64(minutes) * 60_000, lateness: d.Milliseconds()}
}

// flagged is an input line with what the host's file source makes of it: the late flag and the
// watermark before and after reading it (ABI.md §4.12).
type flagged struct {
	line
	late              bool
	wmBefore, wmAfter int64
}

// watermarks computes the late flags and watermarks of input as the host does.
func watermarks(input []line, lateness int64) []flagged {
	maxTs, wm := int64(-1), int64(-1)
	out := make([]flagged, len(input))
	for i, l := range input {
		out[i] = flagged{line: l, wmBefore: wm, late: wm >= 0 && l.Ts < wm}
		if l.Ts > maxTs {
			maxTs = l.Ts
			wm = max(wm, maxTs-lateness)
		}
		out[i].wmAfter = wm
	}
	return out
}

// reference is an implementation of README.md independent of the handler (sorting, maps and
// encoding/json, no timers or windows): a late event or one without a timestamp goes to "late";
// a user's other events, sorted by time, split into sessions wherever two consecutive ones are
// gap or more apart. It returns the sink lines in the order of sortSinkLines.
func reference(t *testing.T, s settings, input []flagged) []string {
	var lines []sinkLine
	times := map[string][]int64{}
	for _, l := range input {
		if l.late || l.Ts < 0 {
			lines = append(lines, sinkLine{Output: "late", Key: l.User, Value: l.Page, Ts: l.Ts})
			continue
		}
		times[l.User] = append(times[l.User], l.Ts)
	}
	for user, ts := range times {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		first := 0
		for i := range ts {
			if i+1 < len(ts) && ts[i+1]-ts[i] < s.gap {
				continue
			}
			v, err := json.Marshal(summaryJSON{User: user, Count: i + 1 - first, First: ts[first], Last: ts[i]})
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, sinkLine{Output: "sessions", Key: user, Value: string(v), Ts: ts[i] + s.gap})
			first = i + 1
		}
	}
	var out []string
	for _, l := range lines {
		b, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return sortSinkLines(t, out)
}

// sortSinkLines sorts sink lines by key, output, timestamp and value: the outputs of one run in
// a canonical order (a host emits the late events and the summaries of a user, and the summaries
// of different users, in an order that depends on how far it read ahead).
func sortSinkLines(t *testing.T, lines []string) []string {
	t.Helper()
	parsed := make([]sinkLine, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &parsed[i]); err != nil {
			t.Fatalf("sink line %q: %v", l, err)
		}
	}
	idx := make([]int, len(lines))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := parsed[idx[a]], parsed[idx[b]]
		switch {
		case x.Key != y.Key:
			return x.Key < y.Key
		case x.Output != y.Output:
			return x.Output < y.Output
		case x.Ts != y.Ts:
			return x.Ts < y.Ts
		}
		return x.Value < y.Value
	})
	out := make([]string, len(lines))
	for i, k := range idx {
		out[i] = lines[k]
	}
	return out
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

// expected.ndjson is what the reference implementation makes of input.ndjson and config.yaml.
func TestExpectedFile(t *testing.T) {
	s := readSettings(t)
	outputs := reference(t, s, watermarks(readInput(t), s.lateness))
	if *update {
		if err := os.WriteFile("expected.ndjson", []byte(strings.Join(outputs, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sameLines(t, "expected.ndjson", readLines(t, "expected.ndjson"), outputs)
}

// The sample input exercises every case README.md describes.
func TestSampleInputCoverage(t *testing.T) {
	s := readSettings(t)
	input := watermarks(readInput(t), s.lateness)
	final := input[len(input)-1].wmAfter
	users := map[string]bool{}
	var outOfOrder, late, lateInSession, midStream, atEnd int
	maxTs := int64(-1)
	times := map[string][]int64{}
	for _, l := range input {
		users[l.User] = true
		if l.late {
			late++
			for _, ts := range times[l.User] {
				if ts-s.gap < l.Ts && l.Ts < ts+s.gap {
					lateInSession++ // an on-time event of its user is near it: not joined all the same
					break
				}
			}
			continue
		}
		if l.Ts < maxTs {
			outOfOrder++
		}
		maxTs = max(maxTs, l.Ts)
		near := 0
		for _, ts := range times[l.User] {
			if ts-s.gap < l.Ts && l.Ts < ts+s.gap {
				near++
			}
		}
		if near == 0 {
			for _, ts := range times[l.User] {
				_ = ts
			}
		}
		times[l.User] = append(times[l.User], l.Ts)
	}
	for _, ts := range times {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for i := range ts {
			if i+1 < len(ts) && ts[i+1]-ts[i] < s.gap {
				continue
			}
			if ts[i]+s.gap <= final {
				midStream++
			} else {
				atEnd++
			}
		}
	}
	bridges := countBridges(input, s.gap)
	for what, n := range map[string]int{
		"users": len(users) - 3, "sessions closed mid-stream": midStream, "sessions closed at the end": atEnd,
		"out-of-order events within the lateness": outOfOrder, "late events": late,
		"late events near an open session": lateInSession, "events that merge two sessions": bridges,
	} {
		if n < 1 {
			t.Errorf("the sample input has too few %s", what)
		}
	}
	t.Logf("%d users, %d sessions closed mid-stream, %d at the end; %d out-of-order events, %d late (%d near an open session), %d merging two sessions",
		len(users), midStream, atEnd, outOfOrder, late, lateInSession, bridges)
}

// countBridges counts the on-time events that, in input order, are within gap of two sessions of
// their user that were apart until then.
func countBridges(input []flagged, gap int64) int {
	type span struct{ first, last int64 }
	open := map[string][]span{}
	n := 0
	for _, l := range input {
		if l.late || l.Ts < 0 {
			continue
		}
		merged := span{l.Ts, l.Ts}
		var rest []span
		joined := 0
		for _, sp := range open[l.User] {
			if sp.first-gap < l.Ts && l.Ts < sp.last+gap {
				joined++
				merged = span{min(merged.first, sp.first), max(merged.last, sp.last)}
				continue
			}
			rest = append(rest, sp)
		}
		if joined > 1 {
			n++
		}
		open[l.User] = append(rest, merged)
	}
	return n
}

// newHost starts a harness with the handlers and config.
func newHost(t *testing.T, cfg []byte) *wasmstreamtest.Host {
	t.Helper()
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: cfg, Outputs: []string{Output, LateOutput}})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	return h
}

// sinkLines formats outputs as the host's sinks write them, in sortSinkLines' order.
func sinkLines(t *testing.T, outs []wasmstreamtest.Output) []string {
	t.Helper()
	var lines []string
	for _, o := range outs {
		b, err := json.Marshal(sinkLine{Output: o.Name, Key: string(o.Key), Value: string(o.Value), Ts: o.Timestamp})
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(b))
	}
	return sortSinkLines(t, lines)
}

func input(l flagged, offset int) wasmstreamtest.Input {
	return wasmstreamtest.Input{Source: "input", Offset: int64(offset), Timestamp: l.Ts, Late: l.late,
		Key: []byte(l.User), Value: []byte(l.Page)}
}

// The handlers reproduce expected.ndjson whether each firing runs as soon as the watermark
// passes it or only after every record: the two extremes of when a host may run it (ABI.md
// §4.12).
func TestHandlersMatchExpected(t *testing.T) {
	s := readSettings(t)
	in := watermarks(readInput(t), s.lateness)
	want := readLines(t, "expected.ndjson")

	t.Run("firings as soon as due", func(t *testing.T) {
		h := newHost(t, s.config)
		var outs []wasmstreamtest.Output
		for i, l := range in {
			res, err := h.Process(input(l, i))
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, res.Outputs...)
			if l.wmAfter >= 0 {
				res, err = h.AdvanceWatermark(0, l.wmAfter)
				if err != nil {
					t.Fatal(err)
				}
				outs = append(outs, res.Outputs...)
			}
		}
		res, err := h.AdvanceWatermark(0, math.MaxInt64) // the end of the file
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, res.Outputs...)
		sameLines(t, "outputs", sinkLines(t, outs), want)
		if st, tm := h.State(), h.Timers(); len(st) != 0 || len(tm) != 0 {
			t.Errorf("after the end: state %v, timers %v; want none", st, tm)
		}
	})

	t.Run("firings after every record", func(t *testing.T) {
		h := newHost(t, s.config)
		var batch []wasmstreamtest.Input
		for i, l := range in {
			batch = append(batch, input(l, i))
		}
		res, err := h.Process(batch...)
		if err != nil {
			t.Fatal(err)
		}
		outs := res.Outputs
		res, err = h.AdvanceWatermark(0, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, res.Outputs...)
		sameLines(t, "outputs", sinkLines(t, outs), want)
		if st, tm := h.State(), h.Timers(); len(st) != 0 || len(tm) != 0 {
			t.Errorf("after the end: state %v, timers %v; want none", st, tm)
		}
	})
}

const minute = 60_000

// ev is an event of user at minute m (of the epoch, for short).
func ev(user string, m int64, late bool) wasmstreamtest.Input {
	return wasmstreamtest.Input{Key: []byte(user), Timestamp: m * minute, Late: late, Value: []byte("/")}
}

func value(user string, count int, first, last int64) string {
	return `{"user":"` + user + `","count":` + strconv.Itoa(count) +
		`,"first":` + strconv.FormatInt(first*minute, 10) + `,"last":` + strconv.FormatInt(last*minute, 10) + `}`
}

func process(t *testing.T, h *wasmstreamtest.Host, in ...wasmstreamtest.Input) wasmstreamtest.Result {
	t.Helper()
	res, err := h.Process(in...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func advance(t *testing.T, h *wasmstreamtest.Host, minutes int64) wasmstreamtest.Result {
	t.Helper()
	res, err := h.AdvanceWatermark(0, minutes*minute)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func outputs(res wasmstreamtest.Result) []string {
	var out []string
	for _, o := range res.Outputs {
		out = append(out, o.Name+" "+string(o.Key)+" "+string(o.Value)+" @"+strconv.FormatInt(o.Timestamp/minute, 10))
	}
	return out
}

// timerAt is the session timer of a session starting at minute start, due at minute due.
func timerAt(tm []wasmstreamtest.Timer, i int, start, due int64) bool {
	return i < len(tm) && tm[i].Name == WindowsName+"/"+strconv.FormatInt(start*minute, 10) &&
		tm[i].Time == due*minute && tm[i].Domain == wasmstream.EventTime
}

func TestSessionClosesWhenTheWatermarkPassesTheGap(t *testing.T) {
	h := newHost(t, []byte(`{"gap_minutes": 30}`))
	process(t, h, ev("alice", 100, false), ev("alice", 110, false), ev("bob", 115, false))
	if tm := h.Timers(); len(tm) != 2 || !timerAt(tm, 0, 100, 140) {
		t.Fatalf("timers %v, want alice's session/… at minute 140 and bob's", tm)
	}
	if res := advance(t, h, 139); len(res.Outputs) != 0 {
		t.Fatalf("before the gap: %v", outputs(res))
	}
	res := advance(t, h, 140)
	sameLines(t, "outputs", outputs(res), []string{"sessions alice " + value("alice", 2, 100, 110) + " @140"})
	if st := h.State(); len(st) == 0 || string(st[0].Key) != "bob" || string(st[len(st)-1].Key) != "bob" {
		t.Errorf("state %v, want only bob's session", st)
	}
	res = advance(t, h, 1000)
	sameLines(t, "outputs", outputs(res), []string{"sessions bob " + value("bob", 1, 115, 115) + " @145"})
	if st, tm := h.State(), h.Timers(); len(st) != 0 || len(tm) != 0 {
		t.Errorf("state %v, timers %v; want none", st, tm)
	}
}

func TestNewEventReplacesTheTimer(t *testing.T) {
	h := newHost(t, []byte(`{"gap_minutes": 30}`))
	process(t, h, ev("alice", 100, false))
	advance(t, h, 120)
	process(t, h, ev("alice", 125, false))
	if tm := h.Timers(); len(tm) != 1 || !timerAt(tm, 0, 100, 155) {
		t.Fatalf("timers %v, want one at minute 155", tm)
	}
	if res := advance(t, h, 154); len(res.Outputs) != 0 || len(res.Fired) != 0 {
		t.Fatalf("the first setting (minute 130) fired: %v %v", res.Fired, outputs(res))
	}
	// An out-of-order event does not move the close time back.
	process(t, h, ev("alice", 122, false))
	res := advance(t, h, 155)
	sameLines(t, "outputs", outputs(res), []string{"sessions alice " + value("alice", 3, 100, 125) + " @155"})
}

// An event gap or more after its user's session starts another one, and each closes on its own
// timer, whether or not the host has run the first firing when the event comes: here it has not.
func TestEventAfterTheGapStartsASession(t *testing.T) {
	h := newHost(t, []byte(`{"gap_minutes": 30}`))
	res := process(t, h, ev("alice", 100, false), ev("alice", 130, false), ev("alice", 131, false))
	if len(res.Outputs) != 0 {
		t.Fatalf("outputs before any firing: %v", outputs(res))
	}
	res = advance(t, h, 200)
	sameLines(t, "outputs", outputs(res), []string{
		"sessions alice " + value("alice", 1, 100, 100) + " @130",
		"sessions alice " + value("alice", 2, 130, 131) + " @161",
	})
}

// An event less than gap from two sessions of its user merges them into one.
func TestEventMergesTwoSessions(t *testing.T) {
	h := newHost(t, []byte(`{"gap_minutes": 30}`))
	process(t, h, ev("alice", 100, false), ev("alice", 150, false))
	if tm := h.Timers(); len(tm) != 2 {
		t.Fatalf("timers %v, want two sessions", tm)
	}
	process(t, h, ev("alice", 125, false))
	if tm := h.Timers(); len(tm) != 1 || !timerAt(tm, 0, 100, 180) {
		t.Fatalf("timers %v, want the merged session's at minute 180", tm)
	}
	res := advance(t, h, 180)
	sameLines(t, "outputs", outputs(res), []string{"sessions alice " + value("alice", 3, 100, 150) + " @180"})
}

// A late event goes to output "late" as it is and joins no session, whether its user's session
// is still open or not: where the host runs a firing among a user's late events does not matter.
func TestLateEvents(t *testing.T) {
	h := newHost(t, []byte(`{"gap_minutes": 30}`))
	process(t, h, ev("alice", 100, false))
	advance(t, h, 110)
	res := process(t, h, ev("alice", 95, true), ev("bob", 90, true))
	sameLines(t, "outputs", outputs(res), []string{"late alice / @95", "late bob / @90"})
	res = advance(t, h, 130)
	sameLines(t, "outputs", outputs(res), []string{"sessions alice " + value("alice", 1, 100, 100) + " @130"})
	res = process(t, h, ev("alice", 99, true))
	sameLines(t, "outputs", outputs(res), []string{"late alice / @99"})
	if st, tm := h.State(), h.Timers(); len(st) != 0 || len(tm) != 0 {
		t.Errorf("state %v, timers %v; want none", st, tm)
	}
}

func TestEventWithoutTimestampIsLate(t *testing.T) {
	h := newHost(t, nil)
	res := process(t, h, wasmstreamtest.Input{Key: []byte("alice"), Value: []byte("/x"), Timestamp: -1})
	sameLines(t, "outputs", outputs(res), []string{"late alice /x @0"})
	if len(h.State()) != 0 || len(h.Timers()) != 0 {
		t.Errorf("state %v, timers %v; want none", h.State(), h.Timers())
	}
}

func TestSummaryEscapesTheUser(t *testing.T) {
	h := newHost(t, []byte(`{"gap_minutes": 1}`))
	process(t, h, ev("a\"b\\c\n", 0, false))
	res := advance(t, h, 1)
	var got summaryJSON
	if len(res.Outputs) != 1 || json.Unmarshal(res.Outputs[0].Value, &got) != nil || got.User != "a\"b\\c\n" {
		t.Fatalf("outputs %v", res.Outputs)
	}
}

func TestParseGap(t *testing.T) {
	cases := []struct {
		cfg  string
		want uint64 // 0: invalid
	}{
		{``, 30},
		{`{}`, 30},
		{`{"gap_minutes":5}`, 5},
		{` {"other":[1,{"x":"y"}], "gap_minutes" : 1000000000 } `, 1000000000},
		{`{"gap_minutes":0}`, 0},
		{`{"gap_minutes":1000000001}`, 0},
		{`{"gap_minutes":-1}`, 0},
		{`{"gap_minutes":1.5}`, 0},
		{`{"gap_minutes":"5"}`, 0},
		{`{"gap_minutes":05}`, 0},
		{`{"gap_minutes":5`, 0},
		{`[]`, 0},
	}
	for _, c := range cases {
		got, err := jsonconfig.UintMember([]byte(c.cfg), "gap_minutes", defaultGapMinutes, maxGapMinutes)
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
	defer func() { sessions.Kind = wasmstream.Session(defaultGapMinutes * minute) }()
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: []byte(`{"gap_minutes":0}`)})
	err := h.Init()
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || !strings.HasPrefix(ce.Reason, "sessions: invalid config: gap_minutes must be an integer from 1 to") {
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
