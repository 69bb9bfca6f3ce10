package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"plain", "alice", "alice"},
		{"empty", "", ""},
		{"space and quotes", `a "b" 'c'`, `a "b" 'c'`},
		{"printable unicode", "café ☕", "café ☕"},
		{"tab and newline", "a\tb\nc\r", `a\tb\nc\r`},
		{"backslash", `a\b`, `a\\b`},
		{"nul and control", "\x00\x07\x1b", `\x00\a\x1b`},
		{"invalid UTF-8", "\xff\xfe", `\xff\xfe`},
		{"big-endian count", "\x00\x00\x00\x00\x00\x00\x00\x03", `\x00\x00\x00\x00\x00\x00\x00\x03`},
		{"non-printable rune", "a\u200bb\u00a0", `a\u200bb\u00a0`},
		{"encoded replacement char", "\uFFFD", "\uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := escape([]byte(tc.in))
			if got != tc.want {
				t.Errorf("escape(%q) = %q, want %q", tc.in, got, tc.want)
			}
			back, err := unescape(got)
			if err != nil || string(back) != tc.in {
				t.Errorf("unescape(%q) = %q, %v; want %q", got, back, err, tc.in)
			}
		})
	}
}

func TestUnescapeErrors(t *testing.T) {
	for _, in := range []string{`\`, `\q`, `\x4`, `\u12`, `a\"b`} {
		if b, err := unescape(in); err == nil {
			t.Errorf("unescape(%q) = %q, want an error", in, b)
		}
	}
}

// FuzzEscape checks that escape's output fits a tab-separated column and unescape inverts it.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "alice", "a\tb\n", "\x00\xff", "\\x00", "café\u200b", "\uFFFD\xef\xbf"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := escape(b)
		if strings.ContainsAny(s, "\t\n\r\x00") {
			t.Fatalf("escape(%q) = %q holds a separator", b, s)
		}
		back, err := unescape(s)
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("unescape(escape(%q)) = %q, %v", b, back, err)
		}
	})
}

func TestJSONEntry(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, e := range []host.StateEntry{
		{Stream: "file:input0/0", Key: []byte("alice"), Name: []byte("hello"), Value: []byte("3")},
		{Stream: "s", Key: []byte{}, Name: []byte("<n>"), Value: []byte{0xff, 0x00}},
	} {
		if err := enc.Encode(jsonEntry(e)); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"stream":"file:input0/0","key":"alice","name":"hello","value":"3"}
{"stream":"s","key":"","name":"<n>","value_base64":"/wA="}
`
	if buf.String() != want {
		t.Errorf("got\n%swant\n%s", buf.String(), want)
	}
}

// --decode reads values in the SDKs' typed layout by name pattern; a value without the
// type's layout, or a name no rule matches, stays bytes.
func TestStateDecode(t *testing.T) {
	d, err := parseStateDecoder([]string{"seen=i64", "cards/*=u64", "ratio=f64", "on=bool", "label=string"})
	if err != nil {
		t.Fatal(err)
	}
	le := func(u uint64) []byte { return binary.LittleEndian.AppendUint64(nil, u) }
	for _, c := range []struct {
		name  string
		value []byte
		text  string // "" : not decoded
		json  string
	}{
		{"seen", le(uint64(0xffff_ffff_ffff_fffe)), "-2", "-2"},
		{"cards/c-17", le(12345), "12345", "12345"},
		{"cards/a/b", le(1), "", ""}, // * does not cross /
		{"ratio", le(math.Float64bits(0.5)), "0.5", "0.5"},
		{"ratio", le(math.Float64bits(math.Inf(1))), "+Inf", `"+Inf"`},
		{"on", []byte{1}, "true", "true"},
		{"on", []byte{2}, "", ""},
		{"label", []byte("a\tb"), `a\tb`, `"a\tb"`},
		{"seen", []byte("3"), "", ""}, // not 8 bytes
		{"other", le(1), "", ""},
	} {
		v, ok := d.Decode([]byte(c.name), c.value)
		if ok != (c.text != "") {
			t.Errorf("%s %q: decoded %v (%v), want %q", c.name, c.value, ok, v, c.text)
			continue
		}
		if !ok {
			continue
		}
		if got := decodedText(v); got != c.text {
			t.Errorf("%s: text %q, want %q", c.name, got, c.text)
		}
		if got := string(decodedJSON(v)); got != c.json {
			t.Errorf("%s: JSON %s, want %s", c.name, got, c.json)
		}
	}
	for _, bad := range []string{"seen", "=i64", "seen=int", "[=i64"} {
		if _, err := parseStateDecoder([]string{bad}); err == nil {
			t.Errorf("--decode %q accepted", bad)
		}
	}
	code, _, stderr := runCLI(t, "state", "--task", "t", "--decode", "seen=int")
	if code != exitUsage || !strings.Contains(stderr, `unknown type "int": use one of i64, u64, f64, bool, string`) {
		t.Errorf("state --decode seen=int: exit %d\n%s", code, stderr)
	}
}

// The null key of Kafka records without a key prints as null, apart from the empty key: "(null)"
// in text, "key_null": true in JSON.
func TestStateNullKey(t *testing.T) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, format := range []string{"text", "json"} {
		for _, key := range []string{abi.NullKey, ""} {
			e := host.StateEntry{Stream: "s", Key: []byte(key), Name: []byte("n"), Value: []byte("1")}
			if err := writeStateEntry(&buf, enc, e, format, stateDecoder{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := "(null)\tn\t1\n" + "\tn\t1\n" +
		`{"stream":"s","key_null":true,"name":"n","value":"1"}` + "\n" +
		`{"stream":"s","key":"","name":"n","value":"1"}` + "\n"
	if buf.String() != want {
		t.Errorf("got\n%swant\n%s", buf.String(), want)
	}
}
