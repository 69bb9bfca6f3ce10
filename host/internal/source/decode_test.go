package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeJSONKey(t *testing.T) {
	tests := []struct {
		name    string
		field   string
		line    string
		want    string
		wantErr bool
	}{
		{name: "string", field: "k", line: `{"k":"alice"}`, want: "alice"},
		{name: "string with escapes", field: "k", line: `{"k":"a\"b\\c\u00e9"}`, want: "a\"b\\cé"},
		{name: "empty string", field: "k", line: `{"k":""}`, want: ""},
		{name: "integer", field: "k", line: `{"k":42}`, want: "42"},
		{name: "number kept as written", field: "k", line: `{"k":-1.5e3}`, want: "-1.5e3"},
		{name: "true", field: "k", line: `{"k":true}`, want: "true"},
		{name: "false", field: "k", line: `{"k":false}`, want: "false"},
		{name: "null is empty", field: "k", line: `{"k":null}`, want: ""},
		{name: "missing is empty", field: "k", line: `{"other":"x"}`, want: ""},
		{name: "no key field configured", field: "", line: `{"k":"alice"}`, want: ""},
		{name: "object", field: "k", line: `{"k":{"a":1}}`, wantErr: true},
		{name: "array", field: "k", line: `{"k":[1]}`, wantErr: true},
		{name: "whitespace around value", field: "k", line: `{ "k" : "bob" }`, want: "bob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Format{JSON: true, KeyField: tt.field}
			d, err := f.Decode([]byte(tt.line))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Decode(%s) error = %v, want ErrMalformed", tt.line, err)
				}
				if !strings.Contains(err.Error(), `"`+tt.field+`"`) {
					t.Errorf("error %q does not name the field %q", err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.line, err)
			}
			if string(d.Key) != tt.want {
				t.Errorf("Key = %q, want %q", d.Key, tt.want)
			}
			if string(d.Value) != tt.line {
				t.Errorf("Value = %q, want the whole line", d.Value)
			}
			if d.Timestamp != -1 {
				t.Errorf("Timestamp = %d, want -1 (unknown)", d.Timestamp)
			}
		})
	}
}

// With KeyRequired, a line without the key field is malformed rather than a record of the
// empty key; an empty string is still a key.
func TestDecodeJSONKeyRequired(t *testing.T) {
	f := Format{JSON: true, KeyField: "k", KeyRequired: true}
	for _, line := range []string{`{"other":"x"}`, `{"k":null}`} {
		_, err := f.Decode([]byte(line))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `key field "k" is missing (key_required)`) {
			t.Errorf("Decode(%s) error = %v, want ErrMalformed naming the key field", line, err)
		}
	}
	if d, err := f.Decode([]byte(`{"k":""}`)); err != nil || string(d.Key) != "" {
		t.Errorf(`Decode({"k":""}) = %q, %v; want the empty key`, d.Key, err)
	}
}

func TestDecodeJSONValue(t *testing.T) {
	tests := []struct {
		name     string
		line     string
		want     string
		wantNull bool
		wantErr  bool
	}{
		{name: "plain string", line: `{"v":"hello"}`, want: "hello"},
		{name: "tab and newline escapes", line: `{"v":"a\tb\nc"}`, want: "a\tb\nc"},
		{name: "quote and backslash escapes", line: `{"v":"say \"hi\" \\ bye"}`, want: `say "hi" \ bye`},
		{name: "unicode escapes", line: `{"v":"caf\u00e9 \u2603"}`, want: "café ☃"},
		{name: "surrogate pair", line: `{"v":"\ud83d\ude00"}`, want: "😀"},
		{name: "raw utf-8", line: `{"v":"naïve"}`, want: "naïve"},
		{name: "object is raw JSON text", line: `{"v":{"a": [1, 2], "b":"x"}}`, want: `{"a": [1, 2], "b":"x"}`},
		{name: "array is raw JSON text", line: `{"v":[1,"two"]}`, want: `[1,"two"]`},
		{name: "number is its text", line: `{"v":3.50}`, want: "3.50"},
		{name: "bool is its text", line: `{"v":false}`, want: "false"},
		{name: "empty string is empty, not null", line: `{"v":""}`, want: ""},
		{name: "the string null is its text", line: `{"v":"null"}`, want: "null"},
		// A null value field is a null value (ABI 0.5's tombstone), as a file output writes one.
		{name: "null is a null value", line: `{"v":null}`, want: "", wantNull: true},
		{name: "null with white space", line: `{"v": null }`, want: "", wantNull: true},
		{name: "missing", line: `{"w":"x"}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Format{JSON: true, ValueField: "v"}
			d, err := f.Decode([]byte(tt.line))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Decode(%s) error = %v, want ErrMalformed", tt.line, err)
				}
				if !strings.Contains(err.Error(), `"v"`) {
					t.Errorf("error %q does not name the value field", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.line, err)
			}
			if string(d.Value) != tt.want || d.ValueNull != tt.wantNull || d.Value == nil {
				t.Errorf("Value = %q (null %v), want %q", d.Value, d.ValueNull, tt.want)
			}
		})
	}
}

func TestDecodeJSONTimestamp(t *testing.T) {
	tests := []struct {
		name    string
		field   string
		line    string
		want    int64
		wantErr bool
	}{
		{name: "integer", field: "ts", line: `{"ts":1700000000000}`, want: 1700000000000},
		{name: "zero", field: "ts", line: `{"ts":0}`, want: 0},
		{name: "missing is unknown", field: "ts", line: `{"x":1}`, want: -1},
		{name: "null is unknown", field: "ts", line: `{"ts":null}`, want: -1},
		{name: "no field configured", field: "", line: `{"ts":5}`, want: -1},
		{name: "fraction", field: "ts", line: `{"ts":1.5}`, wantErr: true},
		{name: "exponent", field: "ts", line: `{"ts":1e3}`, wantErr: true},
		// A string of an integer, as protobuf's JSON mapping writes an int64, is that integer.
		{name: "string of an integer", field: "ts", line: `{"ts":"1700000000000"}`, want: 1700000000000},
		{name: "string of a negative integer", field: "ts", line: `{"ts":"-5"}`, want: -5},
		{name: "string of a fraction", field: "ts", line: `{"ts":"1.5"}`, wantErr: true},
		{name: "string with a plus", field: "ts", line: `{"ts":"+5"}`, wantErr: true},
		{name: "string with a leading zero", field: "ts", line: `{"ts":"05"}`, wantErr: true},
		{name: "string with a space", field: "ts", line: `{"ts":" 5"}`, wantErr: true},
		{name: "string with an escape", field: "ts", line: `{"ts":"\u0035"}`, wantErr: true},
		{name: "empty string", field: "ts", line: `{"ts":""}`, wantErr: true},
		{name: "date string", field: "ts", line: `{"ts":"2026-11-28T21:45:00Z"}`, wantErr: true},
		{name: "string overflows int64", field: "ts", line: `{"ts":"99999999999999999999"}`, wantErr: true},
		{name: "bool", field: "ts", line: `{"ts":true}`, wantErr: true},
		{name: "object", field: "ts", line: `{"ts":{}}`, wantErr: true},
		{name: "overflows int64", field: "ts", line: `{"ts":99999999999999999999}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Format{JSON: true, TimestampField: tt.field}
			d, err := f.Decode([]byte(tt.line))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Decode(%s) error = %v, want ErrMalformed", tt.line, err)
				}
				if !strings.Contains(err.Error(), `"`+tt.field+`"`) {
					t.Errorf("error %q does not name the field %q", err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode(%s): %v", tt.line, err)
			}
			if d.Timestamp != tt.want {
				t.Errorf("Timestamp = %d, want %d", d.Timestamp, tt.want)
			}
		})
	}
}

func TestDecodeJSONNotAnObject(t *testing.T) {
	tests := []struct {
		name string
		line string
	}{
		{name: "empty", line: ``},
		{name: "array", line: `[1,2]`},
		{name: "string", line: `"alice"`},
		{name: "number", line: `42`},
		{name: "null", line: `null`},
		{name: "truncated", line: `{"k":"a"`},
		{name: "trailing garbage", line: `{"k":"a"} x`},
		{name: "plain text", line: `hello world`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Format{JSON: true, KeyField: "k"}
			if _, err := f.Decode([]byte(tt.line)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode(%q) error = %v, want ErrMalformed", tt.line, err)
			}
		})
	}
}

func TestDecodeJSONAllFields(t *testing.T) {
	f := Format{JSON: true, KeyField: "user", ValueField: "text", TimestampField: "ts"}
	d, err := f.Decode([]byte(`{"user":"alice","text":"hello\tworld","ts":1700000000000,"n":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Key) != "alice" || string(d.Value) != "hello\tworld" || d.Timestamp != 1700000000000 {
		t.Errorf("got key %q value %q ts %d", d.Key, d.Value, d.Timestamp)
	}
	if n, err := d.Field("n"); err != nil || string(n) != "7" {
		t.Errorf(`Field("n") = %q, %v; want "7"`, n, err)
	}
	if u, err := d.Field("user"); err != nil || string(u) != "alice" {
		t.Errorf(`Field("user") = %q, %v; want "alice"`, u, err)
	}
	if m, err := d.Field("missing"); err != nil || len(m) != 0 {
		t.Errorf(`Field("missing") = %q, %v; want empty`, m, err)
	}
}

func TestDecodeText(t *testing.T) {
	tests := []struct {
		name      string
		sep       string
		line      string
		wantKey   string
		wantValue string
	}{
		{name: "no separator configured", sep: "", line: "alice:hello", wantKey: "", wantValue: "alice:hello"},
		{name: "separator present", sep: ":", line: "alice:hello", wantKey: "alice", wantValue: "hello"},
		{name: "first separator only", sep: ":", line: "a:b:c", wantKey: "a", wantValue: "b:c"},
		{name: "separator absent", sep: ":", line: "just a value", wantKey: "", wantValue: "just a value"},
		{name: "separator first", sep: ":", line: ":value", wantKey: "", wantValue: "value"},
		{name: "separator last", sep: ":", line: "key:", wantKey: "key", wantValue: ""},
		{name: "multi-byte separator", sep: " | ", line: "k1 | v | w", wantKey: "k1", wantValue: "v | w"},
		{name: "tab separator", sep: "\t", line: "bob\t42", wantKey: "bob", wantValue: "42"},
		{name: "JSON-looking text is not parsed", sep: "", line: `{"k":1}`, wantKey: "", wantValue: `{"k":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Format{KeySeparator: tt.sep}
			d, err := f.Decode([]byte(tt.line))
			if err != nil {
				t.Fatalf("Decode(%q): %v", tt.line, err)
			}
			if string(d.Key) != tt.wantKey || string(d.Value) != tt.wantValue {
				t.Errorf("Decode(%q) = key %q value %q, want key %q value %q", tt.line, d.Key, d.Value, tt.wantKey, tt.wantValue)
			}
			if d.Timestamp != -1 {
				t.Errorf("Timestamp = %d, want -1", d.Timestamp)
			}
			if d.Fields != nil {
				t.Errorf("Fields = %v, want nil for text", d.Fields)
			}
		})
	}
}

// FuzzDecode checks that no line makes Decode panic or fail other than with ErrMalformed, that
// text lines split around their first separator, and that a JSON object whose key field is a
// string decodes to exactly that key (and value, and timestamp).
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"k":"alice","v":"x","ts":1}`), "alice", ":")
	f.Add([]byte(`{"k":{"a":1},"v":[1,2],"ts":1.5}`), "a\tb\n\"c\"", " | ")
	f.Add([]byte(`alice:hello`), "\u2028\x00\x7f", "")
	f.Add([]byte(`null`), "", ":")
	f.Add([]byte(`{"k":null,"ts":null}`), "<&>", "\xff")
	f.Add([]byte(`x`), "bin-\xff\xc3\"\\\x01", ":")
	f.Fuzz(func(t *testing.T, line []byte, key, sep string) {
		formats := []Format{
			{JSON: true},
			{JSON: true, KeyField: "k", ValueField: "v", TimestampField: "ts"},
			{KeySeparator: sep},
		}
		for _, format := range formats {
			d, err := format.Decode(line)
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%+v: error %v does not wrap ErrMalformed", format, err)
				}
				continue
			}
			if d.ValueNull && (len(d.Value) != 0 || format.ValueField == "" || string(d.Fields[format.ValueField]) != "null") {
				t.Fatalf("%+v: %q has a null value %q: only a value field that is JSON null is one, and empty", format, line, d.Value)
			}
			if format.JSON {
				continue
			}
			wantKey, wantValue := []byte(nil), line
			if i := bytes.Index(line, []byte(sep)); sep != "" && i >= 0 {
				wantKey, wantValue = line[:i], line[i+len(sep):]
			}
			if !bytes.Equal(d.Key, wantKey) || !bytes.Equal(d.Value, wantValue) {
				t.Fatalf("text %q with separator %q = key %q value %q, want key %q value %q", line, sep, d.Key, d.Value, wantKey, wantValue)
			}
		}

		// Any key, valid UTF-8 or not, written into a JSON string with only the escapes JSON
		// requires, decodes to exactly its bytes.
		raw := []byte(`{"k":"`)
		for i := 0; i < len(key); i++ {
			switch c := key[i]; {
			case c == '"' || c == '\\':
				raw = append(raw, '\\', c)
			case c < 0x20:
				raw = fmt.Appendf(raw, `\u%04x`, c)
			default:
				raw = append(raw, c)
			}
		}
		raw = append(raw, `"}`...)
		if d, err := (&Format{JSON: true, KeyField: "k"}).Decode(raw); err != nil || string(d.Key) != key {
			t.Fatalf("Decode(%q) = key %q, %v; want %q", raw, d.Key, err, key)
		}

		if !utf8.ValidString(key) {
			return
		}
		obj, err := json.Marshal(map[string]any{"k": key, "v": key, "ts": int64(len(key)), "other": string(line)})
		if err != nil {
			t.Fatal(err)
		}
		format := Format{JSON: true, KeyField: "k", ValueField: "v", TimestampField: "ts"}
		d, err := format.Decode(obj)
		if err != nil {
			t.Fatalf("Decode(%s): %v", obj, err)
		}
		if string(d.Key) != key || string(d.Value) != key || d.Timestamp != int64(len(key)) {
			t.Fatalf("Decode(%s) = key %q value %q ts %d, want key and value %q ts %d", obj, d.Key, d.Value, d.Timestamp, key, len(key))
		}
	})
}

// TestDecodeJSONKeepsBytes checks that bytes that are not valid UTF-8 inside a JSON string stay
// exactly as they are: encoding/json would turn each into U+FFFD and so merge the keys
// "bin-\xff", "bin-\xfe" and "bin-\xc3" into one.
func TestDecodeJSONKeepsBytes(t *testing.T) {
	f := Format{JSON: true, KeyField: "k", ValueField: "v"}
	seen := map[string]bool{}
	for _, key := range []string{"bin-\xff", "bin-\xfe", "bin-\xc3", "bin-\ufffd"} {
		line := `{"k":"` + key + `","v":"x` + key + `\n"}`
		d, err := f.Decode([]byte(line))
		if err != nil {
			t.Fatalf("Decode(%q): %v", line, err)
		}
		if string(d.Key) != key || string(d.Value) != "x"+key+"\n" {
			t.Errorf("Decode(%q) = key %q value %q, want key %q value %q", line, d.Key, d.Value, key, "x"+key+"\n")
		}
		seen[string(d.Key)] = true
	}
	if len(seen) != 4 {
		t.Errorf("%d distinct keys, want 4", len(seen))
	}
}

// TestUnquoteMatchesEncodingJSON checks unquote against encoding/json on strings that are valid
// UTF-8, escapes and surrogates included.
func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	for _, raw := range []string{
		`""`, `"plain"`, `"a\"b\\c\/d"`, `"\b\f\n\r\t"`, `"caf\u00e9 \u2603"`, `"\u00E9\u00e9"`,
		`"\ud83d\ude00"`, `"\ud800"`, `"\ud800x"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud83d\ud83d\ude00"`,
		`"naïve ☃"`, `"\u0000"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("json.Unmarshal(%s): %v", raw, err)
		}
		got, err := unquote([]byte(raw))
		if err != nil || string(got) != want {
			t.Errorf("unquote(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

func BenchmarkDecodeJSON(b *testing.B) {
	f := Format{JSON: true, KeyField: "user", ValueField: "text", TimestampField: "ts"}
	line := []byte(`{"user":"alice","text":"the quick brown fox jumps over the lazy dog","ts":1700000000000}`)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := f.Decode(line); err != nil {
			b.Fatal(err)
		}
	}
}

// A pretty-printed JSON document or a JSON array fed as an input makes every line malformed;
// the lines that start an array or an object that does not end on them say why (before, only
// "unexpected end of JSON input"). Other malformed lines do not.
func TestDecodeWholeObjectHint(t *testing.T) {
	f := Format{JSON: true, KeyField: "k"}
	for _, line := range []string{"[", `[{"k":"a"}]`, "  {", `{"k": "a",`} {
		if _, err := f.Decode([]byte(line)); err == nil || !strings.Contains(err.Error(), "one whole JSON object per line") {
			t.Errorf("Decode(%q) = %v; want the hint", line, err)
		}
	}
	for _, line := range []string{`"k": "a"`, "}", `{"k": 1} x`, "not json", "\x00", "\x00\x00"} {
		if _, err := f.Decode([]byte(line)); err == nil || strings.Contains(err.Error(), "one whole JSON object per line") || strings.Contains(err.Error(), "UTF-16") {
			t.Errorf("Decode(%q) = %v; want an error without a hint", line, err)
		}
	}
	// A UTF-16 file read as UTF-8 (saved as Windows "Unicode"): each line says so, the first
	// (after its byte order mark), and the next ones, little- and big-endian.
	le := func(s string) string { return string(utf16Bytes(s, false)) }
	be := func(s string) string { return string(utf16Bytes(s, true)) }
	for _, line := range []string{"\xff\xfe" + le(`{"k":"a"}`), "\x00" + le(`{"k":"b"}`), le(`{"k":"c"}`),
		"\xfe\xff" + be(`{"k":"a"}`), be(`{"k":"b"}`)} {
		if _, err := f.Decode([]byte(line)); err == nil || !strings.Contains(err.Error(), "looks like UTF-16") || !strings.Contains(err.Error(), "iconv") {
			t.Errorf("Decode(%q) = %v; want the UTF-16 hint", line, err)
		}
	}
}

// utf16Bytes encodes ASCII s as UTF-16, big-endian or little-endian.
func utf16Bytes(s string, big bool) []byte {
	var b []byte
	for _, c := range []byte(s) {
		if big {
			b = append(b, 0, c)
		} else {
			b = append(b, c, 0)
		}
	}
	return b
}
