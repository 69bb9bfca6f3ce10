package sink

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOpenFileCutsTornTail(t *testing.T) {
	bigLine := strings.Repeat("x", 200<<10) // longer than the block cutTornTail reads backwards
	tests := []struct {
		name    string
		initial *string // nil: the file does not exist
		want    string  // after opening, before writing
	}{
		{name: "missing file", initial: nil, want: ""},
		{name: "empty file", initial: ptr(""), want: ""},
		{name: "complete lines kept", initial: ptr("a\nb\n"), want: "a\nb\n"},
		{name: "torn last line cut", initial: ptr("a\nb"), want: "a\n"},
		{name: "no newline at all", initial: ptr(`{"output":"o","ke`), want: ""},
		{name: "only a newline", initial: ptr("\n"), want: "\n"},
		{name: "torn tail longer than a read block", initial: ptr("a\n" + bigLine), want: "a\n"},
		{name: "long complete line and torn tail", initial: ptr(bigLine + "\n" + bigLine), want: bigLine + "\n"},
		{name: "long line without newline", initial: ptr(bigLine + bigLine), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.ndjson")
			if tt.initial != nil {
				if err := os.WriteFile(path, []byte(*tt.initial), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			w, err := OpenFile(path, false)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if got := readFile(t, path); got != tt.want {
				t.Fatalf("after OpenFile the file holds %.60q (%d bytes), want %.60q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			if err := w.WriteLine([]byte(`{"n":1}`)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got, want := readFile(t, path), tt.want+`{"n":1}`+"\n"; got != want {
				t.Errorf("after a write the file holds %.60q, want %.60q", got, want)
			}
		})
	}
}

func ptr(s string) *string { return &s }

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestOpenFileAppends checks that a reopened file keeps its lines and continues after them.
func TestOpenFileAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.ndjson")
	for i := range 3 {
		w, err := OpenFile(path, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteOutput("o", []byte("k"), []byte{byte('a' + i)}, int64(i), nil); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"output":"o","key":"k","value":"a","ts":0}` + "\n" +
		`{"output":"o","key":"k","value":"b","ts":1}` + "\n" +
		`{"output":"o","key":"k","value":"c","ts":2}` + "\n"
	if got := readFile(t, path); got != want {
		t.Errorf("file = %q, want %q", got, want)
	}
}

// Two writers of one file (two hosts given one output path: Validate refuses it within a host)
// each flush to the end of the file as it is then: every line of both is there. Before, each
// wrote at its own offset and the second overwrote the first's lines (4 of 8 left).
func TestTwoWritersOfOneFileKeepEveryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.ndjson")
	a, err := OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		for _, w := range []*Writer{a, b} {
			if err := w.WriteOutput("o", []byte("k"), []byte{byte('a' + i)}, int64(i), nil); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, w := range []*Writer{a, b} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if lines := strings.Count(readFile(t, path), "\n"); lines != 8 {
		t.Errorf("%d lines, want the 8 both wrote:\n%s", lines, readFile(t, path))
	}
}

func TestOpenFileError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "out.ndjson")
	if _, err := OpenFile(path, false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenFile in a missing directory: %v, want ErrNotExist", err)
	}
}

func TestWriteOutput(t *testing.T) {
	tests := []struct {
		name    string
		output  string
		key     []byte
		value   []byte
		ts      int64
		headers []Header
		want    string
	}{
		{
			name: "plain", output: "counts", key: []byte("alice"), value: []byte("hello 1"), ts: 1700000000000,
			want: `{"output":"counts","key":"alice","value":"hello 1","ts":1700000000000}`,
		},
		{
			name: "empty key and value", output: "o", key: nil, value: []byte{}, ts: -1,
			want: `{"output":"o","key":"","value":"","ts":-1}`,
		},
		{
			name: "null value (a tombstone)", output: "o", key: []byte("k"), value: nil, ts: 3,
			want: `{"output":"o","key":"k","value":null,"ts":3}`,
		},
		{
			name: "escapes", output: "o\"1", key: []byte("a\tb"), value: []byte("line\nnext \\ \"q\""), ts: 0,
			want: `{"output":"o\"1","key":"a\tb","value":"line\nnext \\ \"q\"","ts":0}`,
		},
		{
			name: "control characters", output: "o", key: []byte("\x00"), value: []byte("a\x01b\x1fc\x7f\rd"), ts: 5,
			want: `{"output":"o","key":"\u0000","value":"a\u0001b\u001fc\u007f\rd","ts":5}`,
		},
		{
			name: "unicode kept", output: "o", key: []byte("café"), value: []byte("☃ 😀"), ts: 1,
			want: `{"output":"o","key":"café","value":"☃ 😀","ts":1}`,
		},
		{
			name: "key not UTF-8", output: "o", key: []byte{0xff, 0x00, 'k'}, value: []byte("v"), ts: 1,
			want: `{"output":"o","key_b64":"/wBr","value":"v","ts":1}`,
		},
		{
			name: "value not UTF-8", output: "o", key: []byte("k"), value: []byte{'a', 0xc3}, ts: 1,
			want: `{"output":"o","key":"k","value_b64":"YcM=","ts":1}`,
		},
		{
			name: "both not UTF-8", output: "o", key: []byte{0x80}, value: []byte{0xfe, 0xff}, ts: 1,
			want: `{"output":"o","key_b64":"gA==","value_b64":"/v8=","ts":1}`,
		},
		{
			name: "headers", output: "o", key: []byte("k"), value: []byte("v"), ts: 2,
			headers: []Header{{Name: []byte("h1"), Value: []byte("x")}, {Name: []byte("h\"2"), Value: []byte("y\n")}},
			want:    `{"output":"o","key":"k","value":"v","ts":2,"headers":{"h1":"x","h\"2":"y\n"}}`,
		},
		{
			name: "empty headers are omitted", output: "o", key: []byte("k"), value: []byte("v"), ts: 2,
			headers: []Header{},
			want:    `{"output":"o","key":"k","value":"v","ts":2}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewStream(&buf)
			if err := w.WriteOutput(tt.output, tt.key, tt.value, tt.ts, tt.headers); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			got := buf.String()
			if got != tt.want+"\n" {
				t.Fatalf("line = %s\n want %s", got, tt.want)
			}
			var obj map[string]any
			if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
				t.Fatalf("line is not JSON: %v", err)
			}
			if obj["output"] != tt.output {
				t.Errorf("output decodes to %q, want %q", obj["output"], tt.output)
			}
			checkBytesField(t, obj, "key", tt.key)
			if v, ok := obj["value"]; tt.value == nil && (!ok || v != nil) {
				t.Errorf("value = %v (present %v), want null", v, ok)
			} else if tt.value != nil {
				checkBytesField(t, obj, "value", tt.value)
			}
			if ts, ok := obj["ts"].(float64); !ok || int64(ts) != tt.ts {
				t.Errorf("ts decodes to %v, want %d", obj["ts"], tt.ts)
			}
			if hs, _ := obj["headers"].(map[string]any); len(hs) != len(tt.headers) {
				t.Errorf("%d headers decoded, want %d", len(hs), len(tt.headers))
			} else {
				for _, h := range tt.headers {
					if hs[string(h.Name)] != string(h.Value) {
						t.Errorf("header %q = %v, want %q", h.Name, hs[string(h.Name)], h.Value)
					}
				}
			}
		})
	}
}

// checkBytesField checks that obj carries want under field, or base64-encoded under field_b64
// when want is not UTF-8, and not both.
func checkBytesField(t *testing.T, obj map[string]any, field string, want []byte) {
	t.Helper()
	plain, hasPlain := obj[field].(string)
	b64, hasB64 := obj[field+"_b64"].(string)
	if hasPlain == hasB64 {
		t.Errorf("%s: plain %v, base64 %v; want exactly one", field, hasPlain, hasB64)
		return
	}
	if utf8.Valid(want) != hasPlain {
		t.Errorf("%s: UTF-8 %v but written plain %v", field, utf8.Valid(want), hasPlain)
	}
	got := []byte(plain)
	if hasB64 {
		var err error
		if got, err = base64.StdEncoding.DecodeString(b64); err != nil {
			t.Errorf("%s_b64: %v", field, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s decodes to %q, want %q", field, got, want)
	}
}

func TestWriteLine(t *testing.T) {
	var buf bytes.Buffer
	w := NewStream(&buf)
	if err := w.WriteLine([]byte(`{"task":"t"}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteOutput("o", nil, []byte{}, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteLine([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes reached the stream before Flush", buf.Len())
	}
	if w.Lines() != 3 {
		t.Errorf("Lines() = %d, want 3", w.Lines())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := `{"task":"t"}` + "\n" + `{"output":"o","key":"","value":"","ts":0}` + "\n{}\n"
	if buf.String() != want {
		t.Errorf("stream = %q, want %q", buf.String(), want)
	}
}

func TestAppendString(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "empty", in: "", want: `""`},
		{name: "plain", in: "hello world", want: `"hello world"`},
		{name: "quote and backslash", in: `a"b\c`, want: `"a\"b\\c"`},
		{name: "newline, return, tab", in: "a\nb\rc\td", want: `"a\nb\rc\td"`},
		{name: "NUL and other C0", in: "\x00\x01\x08\x0b\x0c\x1b\x1f", want: `"\u0000\u0001\u0008\u000b\u000c\u001b\u001f"`},
		{name: "DEL", in: "\x7f", want: `"\u007f"`},
		{name: "HTML characters kept", in: "<a&b>", want: `"<a&b>"`},
		{name: "multi-byte UTF-8 kept", in: "é☃😀", want: `"é☃😀"`},
		{name: "U+FFFD itself kept", in: "\uFFFD", want: "\"\uFFFD\""},
		{name: "line separators kept", in: "\u2028\u2029", want: "\"\u2028\u2029\""},
		{name: "invalid byte", in: "a\xffb", want: `"a\ufffdb"`},
		{name: "truncated sequence", in: "\xe2\x98", want: `"\ufffd\ufffd"`},
		{name: "surrogate encoded in UTF-8", in: "\xed\xa0\x80", want: `"\ufffd\ufffd\ufffd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendString([]byte("prefix:"), tt.in)
			if string(got) != "prefix:"+tt.want {
				t.Fatalf("AppendString(%q) = %s, want %s", tt.in, got[len("prefix:"):], tt.want)
			}
			var back string
			if err := json.Unmarshal(got[len("prefix:"):], &back); err != nil {
				t.Fatalf("not a JSON string: %v", err)
			}
			if want := string([]rune(tt.in)); back != want { // each invalid byte becomes U+FFFD
				t.Errorf("decodes to %q, want %q", back, want)
			}
		})
	}
}

// FuzzAppendString checks that AppendString always writes one valid JSON string, which decodes
// to the input with every invalid byte replaced by U+FFFD (to the input itself if it is UTF-8).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\/\b\f\n\r\t", "\x00\x1f\x7f", "é☃😀\u2028", "\xff\xfe", "\xe2\x98", "\xed\xa0\x80", "a\uFFFDb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, s)
		if !json.Valid(out) {
			t.Fatalf("AppendString(%q) = %s, not valid JSON", s, out)
		}
		for _, c := range out {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("AppendString(%q) = %q holds a raw control character", s, out)
			}
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s: %v", s, out, err)
		}
		if want := string([]rune(s)); back != want {
			t.Fatalf("AppendString(%q) decodes to %q, want %q", s, back, want)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("AppendString(%q) decodes to %q", s, back)
		}
	})
}

func TestFlushAndClose(t *testing.T) {
	tests := []struct {
		name string
		sync bool
	}{
		{name: "without sync", sync: false},
		{name: "with sync", sync: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.ndjson")
			w, err := OpenFile(path, tt.sync)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteLine([]byte(`{"a":1}`)); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, path); got != "" {
				t.Errorf("file holds %q before Flush", got)
			}
			for i := range 2 {
				if err := w.Flush(); err != nil {
					t.Fatalf("Flush %d: %v", i+1, err)
				}
				if got := readFile(t, path); got != "{\"a\":1}\n" {
					t.Fatalf("after Flush %d the file holds %q", i+1, got)
				}
			}
			if err := w.WriteLine([]byte(`{"b":2}`)); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := w.Close(); err != nil {
					t.Fatalf("Close %d: %v", i+1, err)
				}
			}
			if got := readFile(t, path); got != "{\"a\":1}\n{\"b\":2}\n" {
				t.Errorf("after Close the file holds %q", got)
			}
			if err := w.Flush(); err != nil {
				t.Errorf("Flush after Close with nothing buffered: %v", err)
			}
			// A write after Close is not silently lost: its Flush fails.
			if err := w.WriteLine([]byte(`{"c":3}`)); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); !errors.Is(err, os.ErrClosed) {
				t.Errorf("Flush of a write after Close: %v, want os.ErrClosed", err)
			}
		})
	}
}

func TestStreamCloseIsFlush(t *testing.T) {
	var buf bytes.Buffer
	w := NewStream(&buf)
	if err := w.WriteLine([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.Close(); err != nil {
			t.Fatalf("Close %d: %v", i+1, err)
		}
	}
	if buf.String() != "{}\n" {
		t.Errorf("stream = %q, want %q", buf.String(), "{}\n")
	}
	// Closing a stream only flushes it: the Writer stays usable (standard output is shared).
	if err := w.WriteLine([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil || buf.String() != "{}\n{}\n" {
		t.Errorf("after Close, Flush = %v and stream %q", err, buf.String())
	}
}

var errBroken = errors.New("broken pipe")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errBroken }

func TestFlushReportsWriteError(t *testing.T) {
	w := NewStream(failingWriter{})
	if err := w.WriteOutput("o", []byte("k"), []byte("v"), 1, nil); err != nil {
		t.Fatalf("buffered write failed early: %v", err)
	}
	for _, op := range []struct {
		name string
		fn   func() error
	}{{"Flush", w.Flush}, {"Flush again", w.Flush}, {"Close", w.Close}} {
		if err := op.fn(); !errors.Is(err, errBroken) {
			t.Errorf("%s: %v, want %v", op.name, err, errBroken)
		}
	}
}

// TestFileHoldsUntilFlush checks that a file Writer writes nothing before Flush however much it
// holds: a line reaches the file only with the checkpoint that covers its record, so a killed
// host leaves no output of work it redoes after a restart.
func TestFileHoldsUntilFlush(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.ndjson")
	w, err := OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	value := []byte(strings.Repeat("v", 1000))
	for range 2000 { // about 2 MB
		if err := w.WriteOutput("o", []byte("k"), value, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(readFile(t, path)); got != 0 {
		t.Fatalf("the file holds %d bytes before Flush", got)
	}
	if n := w.Pending(); n < 2000*1000 {
		t.Errorf("Pending = %d, want the 2000 lines", n)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(readFile(t, path), "\n"); got != 2000 || w.Pending() != 0 {
		t.Errorf("after Flush: %d lines in the file, %d bytes pending", got, w.Pending())
	}
}

// C1 control characters (U+009B is a terminal's CSI) are escaped in every JSON string the sinks
// write, like the C0 ones: a dead letter's key or error never carries them raw.
func TestAppendStringEscapesC1(t *testing.T) {
	got := string(AppendString(nil, "a\u009b2Jb\u0085c\u00a0d\x1b"))
	want := `"a\u009b2Jb\u0085c` + "\u00a0" + `d\u001b"`
	if got != want {
		t.Errorf("AppendString = %s, want %s", got, want)
	}
}
