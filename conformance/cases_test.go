package conformance_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The contracts a case can be written for (README.md).
const (
	contractConform   = "conform"
	contractWordcount = "wordcount"
)

// What the runner configures around every case (README.md, "How a case runs").
const (
	inputName = "in"
	keyField  = "k"
	valField  = "v"
	tsField   = "ts"
)

// The files of a case directory.
const (
	fileInput    = "input.ndjson"
	fileCase     = "case.json"
	fileExpected = "expected.ndjson"
	fileState    = "expected-state.txt"
	fileDead     = "expected-deadletters.ndjson"
	fileMetrics  = "expected-metrics.txt" // optional: the guest metrics after the run
)

// caseSpec is a case's case.json.
type caseSpec struct {
	// Contract is the guest contract the case is for: "conform" or "wordcount".
	Contract string `json:"contract"`
	// Description says what the case exercises.
	Description string `json:"description"`
	// Config is the task config the host hands to the guest (a JSON object; none means {}).
	Config map[string]any `json:"config,omitempty"`
	// Retry is how a failing record is retried before it is dead-lettered.
	Retry retrySpec `json:"retry"`
	// Host tunes the host's batching, to shake the order in which keys run.
	Host hostSpec `json:"host"`
}

type retrySpec struct {
	MaxAttempts  int `json:"max_attempts"`   // default 3
	BackoffMs    int `json:"backoff_ms"`     // default 1
	MaxBackoffMs int `json:"max_backoff_ms"` // default 4
}

type hostSpec struct {
	Workers         int `json:"workers"`           // default 2
	MaxBatchRecords int `json:"max_batch_records"` // default: the host's (256)
	MaxKeyRecords   int `json:"max_key_records"`   // default: the host's (64)
}

// inputRecord is one line of a case's input.ndjson, as the host's file source decodes it.
type inputRecord struct {
	Offset int64 // the line's index from 0: the record's offset
	Key    string
	Value  string
	Null   bool // the value is null ("v":null: a tombstone, ABI 0.5); Value is empty
	Ts     int64
}

// testCase is one case directory, loaded.
type testCase struct {
	Name  string
	Dir   string
	Spec  caseSpec
	Input []inputRecord
}

// casesDir is where the cases live, relative to this package.
const casesDir = "cases"

// loadCases loads every case, sorted by name.
func loadCases(t *testing.T) []*testCase {
	t.Helper()
	entries, err := os.ReadDir(casesDir)
	if err != nil {
		t.Fatal(err)
	}
	var cases []*testCase
	for _, e := range entries {
		if e.IsDir() {
			cases = append(cases, loadCase(t, filepath.Join(casesDir, e.Name())))
		}
	}
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	return cases
}

func loadCase(t *testing.T, dir string) *testCase {
	t.Helper()
	c := &testCase{Name: filepath.Base(dir), Dir: dir}
	raw, err := os.ReadFile(filepath.Join(dir, fileCase))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers in the config reach the guest as written
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c.Spec); err != nil {
		t.Fatalf("%s: %v", filepath.Join(dir, fileCase), err)
	}
	s := &c.Spec
	if s.Contract != contractConform && s.Contract != contractWordcount {
		t.Fatalf("%s: contract %q is not %q or %q", dir, s.Contract, contractConform, contractWordcount)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Retry.MaxAttempts, 3)
	def(&s.Retry.BackoffMs, 1)
	def(&s.Retry.MaxBackoffMs, 4)
	def(&s.Host.Workers, 2)

	in, err := os.ReadFile(filepath.Join(dir, fileInput))
	if err != nil {
		t.Fatal(err)
	}
	if len(in) == 0 || in[len(in)-1] != '\n' {
		t.Fatalf("%s: must end with a newline", filepath.Join(dir, fileInput))
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(in), "\n"), "\n") {
		var l struct {
			K  *string         `json:"k"`
			V  json.RawMessage `json:"v"` // a string, or null: a tombstone
			Ts *int64          `json:"ts"`
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var v string
		err := dec.Decode(&l)
		if err == nil && len(l.V) > 0 && string(l.V) != "null" {
			err = json.Unmarshal(l.V, &v)
		}
		if err != nil || l.K == nil || len(l.V) == 0 || l.Ts == nil || *l.Ts < 0 {
			t.Fatalf("%s line %d: want {\"k\":string,\"v\":string or null,\"ts\":ms >= 0}: %s (%v)", fileInput, i+1, line, err)
		}
		c.Input = append(c.Input, inputRecord{Offset: int64(i), Key: *l.K, Value: v, Null: string(l.V) == "null", Ts: *l.Ts})
	}
	return c
}

// configBytes is the task config as the host hands it to the guest: the JSON encoding of the
// case's config object (Go's encoding/json: members sorted by name, no white space, <, > and &
// escaped), "{}" when there is none.
func (c *testCase) configBytes() []byte {
	if len(c.Spec.Config) == 0 {
		return []byte("{}")
	}
	b, err := json.Marshal(c.Spec.Config)
	if err != nil {
		panic(err)
	}
	return b
}

// header is one output header.
type header struct{ Name, Value string }

// outputLine is one line of the host's file sink (README.md, "expected.ndjson"), with its newline.
func outputLine(output, key, value string, ts int64, headers []header) string {
	return sinkLine(output, key, &value, ts, headers)
}

// tombstoneLine is the file sink's line of an output with a null value: "value":null.
func tombstoneLine(output, key string, ts int64) string {
	return sinkLine(output, key, nil, ts, nil)
}

func sinkLine(output, key string, value *string, ts int64, headers []header) string {
	b := []byte(`{"output":`)
	b = appendJSONString(b, output)
	b = appendBytesField(b, "key", key)
	if value == nil {
		b = append(b, `,"value":null`...)
	} else {
		b = appendBytesField(b, "value", *value)
	}
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, ts, 10)
	if len(headers) > 0 {
		b = append(b, `,"headers":{`...)
		for i, h := range headers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, h.Name)
			b = append(b, ':')
			b = appendJSONString(b, h.Value)
		}
		b = append(b, '}')
	}
	return string(append(b, "}\n"...))
}

// appendBytesField appends ,"field":"text" for valid UTF-8, else ,"field_b64":"base64".
func appendBytesField(b []byte, field, v string) []byte {
	if utf8.ValidString(v) {
		b = append(b, `,"`+field+`":`...)
		return appendJSONString(b, v)
	}
	b = append(b, `,"`+field+`_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, []byte(v))
	return append(b, '"')
}

// appendJSONString appends s as the sink writes a JSON string: ", \ and the control characters
// \n \r \t escaped as such, other bytes below 0x20 and 0x7f as \u00XX, every other character
// as is, each invalid UTF-8 byte as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, `\n`...)
			case c == '\r':
				b = append(b, `\r`...)
			case c == '\t':
				b = append(b, `\t`...)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// stateLine is one line of expected-state.txt: key, name and value separated by tabs, each
// escaped by escapeState.
func stateLine(key, name, value string) string {
	return escapeState(key) + "\t" + escapeState(name) + "\t" + escapeState(value)
}

// escapeState writes \ as \\, tab as \t, newline as \n, carriage return as \r, the other bytes
// below 0x20 and 0x7f as \xNN (two lowercase hex digits), and every other byte as is.
func escapeState(s string) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20 || c == 0x7f:
			b.Write([]byte{'\\', 'x', hex[c>>4], hex[c&0xf]})
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// stateText sorts state lines bytewise and ends each with a newline.
func stateText(lines []string) string {
	sort.Strings(lines)
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// deadLetter is a dead letter's deterministic fields (README.md, "expected-deadletters.ndjson").
type deadLetter struct {
	Input    string `json:"input"`
	Offset   int64  `json:"offset"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
	Key      string `json:"key"`
	Record   string `json:"record"`
}

// line encodes d as a line of expected-deadletters.ndjson, fields in the order above.
func (d deadLetter) line() string {
	b := []byte(`{"input":`)
	b = appendJSONString(b, d.Input)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, d.Offset, 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	b = append(b, `,"error":`...)
	b = appendJSONString(b, d.Error)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, d.Key)
	b = append(b, `,"record":`...)
	b = appendJSONString(b, d.Record)
	return string(append(b, "}\n"...))
}

// parseDeadLetters reads dead-letter lines (the host's, or an expected file), sorted by offset.
func parseDeadLetters(data []byte) ([]deadLetter, error) {
	var out []deadLetter
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var d deadLetter
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return nil, fmt.Errorf("dead letter %q: %v", sc.Text(), err)
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Offset < out[j].Offset })
	return out, sc.Err()
}

// byKey groups output lines by their key (the raw JSON of the key or key_b64 member), keeping
// their order within a key: the order across keys depends on scheduling, within a key it may not.
func byKey(data []byte) (map[string][]string, error) {
	out := map[string][]string{}
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		var o map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			return nil, fmt.Errorf("output line %q: %v", line, err)
		}
		k, ok := o["key"]
		if !ok {
			k, ok = o["key_b64"]
			k = append([]byte("b64:"), k...)
		}
		if !ok {
			return nil, fmt.Errorf("output line without a key: %q", line)
		}
		out[string(k)] = append(out[string(k)], line)
	}
	return out, nil
}
