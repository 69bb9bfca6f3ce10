//go:build !wasip1

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

var update = flag.Bool("update", false, "rewrite expected.ndjson and expected-state.txt from the reference implementation")

// line is one line of input.ndjson, as the host's file source reads it with key field "user",
// timestamp field "ts" and value field "text".
type line struct {
	User string `json:"user"`
	Ts   int64  `json:"ts"`
	Text string `json:"text"`
}

// sinkLine is one line the host's file sink writes; the field order is the file format.
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

func readConfig(t *testing.T) []byte {
	t.Helper()
	cfg, err := os.ReadFile("config.json")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// reference is an implementation of README.md independent of the handler (regexp and
// encoding/json instead of a byte loop and a hand parser). It returns the sink lines sorted by
// key, in input order within a key, and the final state lines sorted bytewise.
func reference(t *testing.T, cfg []byte, input []line) (outputs, state []string) {
	var c struct {
		MinLen *int `json:"min_len"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		t.Fatal(err)
	}
	minLen := 1
	if c.MinLen != nil {
		minLen = *c.MinLen
	}
	words := regexp.MustCompile(`[A-Za-z0-9]+`)
	counts := map[string]map[string]int{}
	perKey := map[string][]string{}
	for _, l := range input {
		for _, w := range words.FindAllString(l.Text, -1) {
			if len(w) < minLen {
				continue
			}
			w = strings.ToLower(w) // the match is ASCII only
			if counts[l.User] == nil {
				counts[l.User] = map[string]int{}
			}
			counts[l.User][w]++
			out, err := json.Marshal(sinkLine{Output: "counts", Key: l.User, Value: w + " " + strconv.Itoa(counts[l.User][w]), Ts: l.Ts})
			if err != nil {
				t.Fatal(err)
			}
			perKey[l.User] = append(perKey[l.User], string(out))
		}
	}
	var keys []string
	for k := range perKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		outputs = append(outputs, perKey[k]...)
	}
	for user, m := range counts {
		for w, n := range m {
			state = append(state, user+"\t"+w+"\t"+strconv.Itoa(n))
		}
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
		t.Errorf("%s: %d lines, want %d", what, len(got), len(want))
	}
	for i := 0; i < len(got) && i < len(want); i++ {
		if got[i] != want[i] {
			t.Errorf("%s line %d:\n got %s\nwant %s", what, i+1, got[i], want[i])
			return
		}
	}
}

// The expected files are what the reference implementation makes of input.ndjson and config.json.
func TestExpectedFiles(t *testing.T) {
	outputs, state := reference(t, readConfig(t), readInput(t))
	if *update {
		writeLines(t, "expected.ndjson", outputs)
		writeLines(t, "expected-state.txt", state)
	}
	sameLines(t, "expected.ndjson", readLines(t, "expected.ndjson"), outputs)
	sameLines(t, "expected-state.txt", readLines(t, "expected-state.txt"), state)
}

// run feeds input to the handler through the test harness, batch by batch, and returns the sink
// lines sorted by key (stable: emit order within a key) and the final state lines.
func run(t *testing.T, cfg []byte, batches [][]line) (outputs, state []string) {
	t.Helper()
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: cfg, Outputs: []string{Output}})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	var all []wasmstreamtest.Output
	offset := int64(0)
	for _, b := range batches {
		var in []wasmstreamtest.Input
		for _, l := range b {
			offset++
			in = append(in, wasmstreamtest.Input{Source: "input", Offset: offset, Timestamp: l.Ts,
				Key: []byte(l.User), Value: []byte(l.Text)})
		}
		res, err := h.Process(in...)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, res.Outputs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return bytes.Compare(all[i].Key, all[j].Key) < 0 })
	for _, o := range all {
		out, err := json.Marshal(sinkLine{Output: o.Name, Key: string(o.Key), Value: string(o.Value), Ts: o.Timestamp})
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(out))
	}
	for _, e := range h.State() {
		state = append(state, string(e.Key)+"\t"+e.Name+"\t"+string(e.Value))
	}
	return outputs, state
}

func TestHandlerMatchesExpected(t *testing.T) {
	input := readInput(t)
	wantOut, wantState := readLines(t, "expected.ndjson"), readLines(t, "expected-state.txt")

	// One batch with every record, in file order.
	out, state := run(t, readConfig(t), [][]line{input})
	sameLines(t, "one batch: outputs", out, wantOut)
	sameLines(t, "one batch: state", state, wantState)

	// One batch per record, keys in the reverse order of their first appearance (not
	// interleaved): per key the result is the same.
	byKey := map[string][]line{}
	var keys []string
	for _, l := range input {
		if byKey[l.User] == nil {
			keys = append(keys, l.User)
		}
		byKey[l.User] = append(byKey[l.User], l)
	}
	var batches [][]line
	for i := len(keys) - 1; i >= 0; i-- {
		for _, l := range byKey[keys[i]] {
			batches = append(batches, []line{l})
		}
	}
	out, state = run(t, readConfig(t), batches)
	sameLines(t, "batch per record: outputs", out, wantOut)
	sameLines(t, "batch per record: state", state, wantState)
}

func TestDefaultMinLen(t *testing.T) {
	out, state := run(t, []byte("{}"), [][]line{{{User: "u", Ts: -1, Text: "a B a"}}})
	sameLines(t, "outputs", out, []string{
		`{"output":"counts","key":"u","value":"a 1","ts":-1}`,
		`{"output":"counts","key":"u","value":"b 1","ts":-1}`,
		`{"output":"counts","key":"u","value":"a 2","ts":-1}`,
	})
	sameLines(t, "state", state, []string{"u\ta\t2", "u\tb\t1"})
}

func TestParseMinLen(t *testing.T) {
	cases := []struct {
		cfg  string
		want uint64 // 0: invalid
	}{
		{``, 1},
		{" \n", 1},
		{`{}`, 1},
		{` { } `, 1},
		{`{"min_len":3}`, 3},
		{`{"min_len": 0}`, 1},
		{`{"min_len":1,"min_len":4}`, 4},
		{`{"min_len":4294967295}`, 4294967295},
		{`{"other":[1,-2.5e+3,{"x":"y\"}"},true,false,null,[]],"min_len":2,"more":{}}`, 2},
		{"{\r\n\t\"min_len\" :\t7\n}\n", 7},
		{`{"min\u005flen":3}`, 1}, // names are compared as written
		{`[]`, 0},
		{`2`, 0},
		{`{"min_len":-1}`, 0},
		{`{"min_len":"2"}`, 0},
		{`{"min_len":2.5}`, 0},
		{`{"min_len":2.0}`, 0},
		{`{"min_len":1e2}`, 0},
		{`{"min_len":02}`, 0},
		{`{"min_len":4294967296}`, 0},
		{`{"min_len":null}`, 0},
		{`{"min_len":2`, 0},
		{`{"min_len":2,}`, 0},
		{`{"min_len":2} x`, 0},
		{`{"min_len" 2}`, 0},
		{`{"a":tru}`, 0},
		{`{"a":"unterminated}`, 0},
		{`{"a":[1 2]}`, 0},
		{`{min_len:2}`, 0},
		{strings.Repeat("[", 100), 0},
	}
	for _, c := range cases {
		got, err := parseMinLen([]byte(c.cfg))
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
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: []byte(`{"min_len":-3}`)})
	err := h.Init()
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Reason != "wordcount: invalid config: min_len must be a non-negative integer at byte 11" {
		t.Fatalf("init error %v", err)
	}
	minLen = 1
}
