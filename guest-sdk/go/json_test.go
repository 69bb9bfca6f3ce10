package wasmstream

import (
	"math"
	"testing"
)

func TestParseJSONObject(t *testing.T) {
	o, err := ParseJSONObject([]byte(" {\"card\" : \"c-17\", \"amount\":123.45,\"n\":-7,\"big\":12345678901234567890," +
		"\"ok\":true,\"no\":false,\"note\":null,\"esc\":\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\ud83d\\ude00\",\"e\":1.5e3} \n"))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := o.String("card"); s != "c-17" || !ok {
		t.Fatalf("card %q %v", s, ok)
	}
	if f, ok := o.Float("amount"); f != 123.45 || !ok {
		t.Fatalf("amount %v %v", f, ok)
	}
	if n, ok := o.Int("n"); n != -7 || !ok {
		t.Fatalf("n %v %v", n, ok)
	}
	if _, ok := o.Int("amount"); ok {
		t.Fatal("123.45 read as an integer")
	}
	if v, _ := o.Get("big"); v.Kind != JSONNumber || v.Str != "12345678901234567890" {
		t.Fatalf("big %+v", v)
	}
	if _, ok := o.Int("big"); ok {
		t.Fatal("an int64 overflow read as an integer")
	}
	if b, ok := o.Bool("ok"); !b || !ok {
		t.Fatal("ok")
	}
	if b, ok := o.Bool("no"); b || !ok {
		t.Fatal("no")
	}
	if !o.IsNull("note") || o.IsNull("card") || o.IsNull("missing") {
		t.Fatal("IsNull")
	}
	if s, _ := o.String("esc"); s != "a\"b\\c/d\n\té😀" {
		t.Fatalf("esc %q", s)
	}
	// Lone surrogates become U+FFFD, as encoding/json reads them.
	if o, err := ParseJSONObject([]byte(`{"a":"\ud83d\u0041\ude00x\ud83d"}`)); err != nil || o.Fields[0].Value.Str != "\uFFFDA\uFFFDx\uFFFD" {
		t.Fatalf("lone surrogates: %q, %v", o.Fields[0].Value.Str, err)
	}
	if f, _ := o.Float("e"); f != 1500 {
		t.Fatalf("e %v", f)
	}
	if _, ok := o.String("amount"); ok {
		t.Fatal("a number read as a string")
	}
	if o, err := ParseJSONObject([]byte(`{}`)); err != nil || len(o.Fields) != 0 {
		t.Fatal(o, err)
	}
}

func TestParseJSONObjectErrors(t *testing.T) {
	for in, want := range map[string]string{
		``:                 `wasmstream: json: expected '{' at the start of an object at the end of the input`,
		`[1]`:              `wasmstream: json: expected '{' at the start of an object at byte 0`,
		`{"a":1`:           `wasmstream: json: expected ',' or '}' after field "a" at the end of the input`,
		`{"a":1,}`:         `wasmstream: json: expected a field name in double quotes at byte 7`,
		`{a:1}`:            `wasmstream: json: expected a field name in double quotes at byte 1`,
		`{"a" 1}`:          `wasmstream: json: expected ':' after field name "a" at byte 5`,
		`{"a":{"b":1}}`:    `wasmstream: json: field "a": nested objects and arrays are not supported at byte 5`,
		`{"a":[1]}`:        `wasmstream: json: field "a": nested objects and arrays are not supported at byte 5`,
		`{"a":01}`:         `wasmstream: json: field "a": malformed number at byte 6`,
		`{"a":1.}`:         `wasmstream: json: field "a": malformed number at byte 7`,
		`{"a":-}`:          `wasmstream: json: field "a": malformed number at byte 6`,
		`{"a":1e}`:         `wasmstream: json: field "a": malformed number at byte 7`,
		`{"a":tru}`:        `wasmstream: json: field "a": expected a string, number, true, false or null at byte 5`,
		`{"a":"x}`:         `wasmstream: json: unterminated string at the end of the input`,
		`{"a":"\x"}`:       `wasmstream: json: unknown escape \x at byte 7`,
		`{"a":"\u12"}`:     `wasmstream: json: malformed \u escape at byte 8`,
		"{\"a\":\"\x01\"}": `wasmstream: json: control character in a string (escape it) at byte 6`,
		`{"a":1} x`:        `wasmstream: json: unexpected data after the object at byte 8`,
	} {
		_, err := ParseJSONObject([]byte(in))
		if err == nil || err.Error() != want {
			t.Errorf("%q: error %v, want %s", in, err, want)
		}
	}
}

func TestJSONWriter(t *testing.T) {
	var w JSONWriter
	if got := string(w.Bytes()); got != "{}" {
		t.Fatalf("empty %s", got)
	}
	w.String("card", "c-\"17\"\\\n\x01\x7fé\xff").Float("amount", 123.45).Int("n", -3).Bool("ok", true).Null("x").
		Float("nan", math.NaN()).Float("big", 1e21).Float("m", 1e6).Float("small", 1.5e-7).Float("z", 0)
	want := `{"card":"c-\"17\"\\\n\u0001\u007fé\ufffd","amount":123.45,"n":-3,"ok":true,"x":null,"nan":null,"big":1e+21,"m":1000000,"small":1.5e-7,"z":0}`
	if got := string(w.Bytes()); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// The writer is reusable, and what it writes parses back.
	w.String("a\tb", "v")
	b := w.Bytes()
	if string(b) != `{"a\tb":"v"}` {
		t.Fatalf("reuse %s", b)
	}
	o, err := ParseJSONObject(b)
	if err != nil || o.Fields[0].Name != "a\tb" {
		t.Fatal(o, err)
	}
}
