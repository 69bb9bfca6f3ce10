package wasmstream

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// JSON helpers for records that are flat JSON objects of scalars, such as
// {"card":"c-17","amount":123.45,"ok":true,"note":null}. They use no reflection (encoding/json
// does not belong in a guest) and allocate only the parsed strings. Nested objects and arrays are
// refused with an error naming the field. The Rust SDK's json module reads and writes the same.

// JSONKind is the kind of a JSON scalar.
type JSONKind uint8

// The JSON scalar kinds.
const (
	JSONNull JSONKind = iota
	JSONBool
	JSONNumber
	JSONString
)

// JSONValue is one scalar field of a JSON object.
type JSONValue struct {
	Kind JSONKind
	// Str is the unescaped string of a JSONString, or the number's text as written for a
	// JSONNumber (so large integers keep every digit).
	Str string
	// Bool is the value of a JSONBool.
	Bool bool
}

// Float returns a number as a float64 (false for any other kind).
func (v JSONValue) Float() (float64, bool) {
	if v.Kind != JSONNumber {
		return 0, false
	}
	f, err := strconv.ParseFloat(v.Str, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true // a number beyond float64's range is ±Inf, as in the Rust SDK
}

// Int returns a number that is an integer within int64 range (false otherwise: another kind, a
// fraction or exponent, or an overflow).
func (v JSONValue) Int() (int64, bool) {
	if v.Kind != JSONNumber {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Str, 10, 64)
	return n, err == nil
}

// JSONField is one name and value of a JSONObject.
type JSONField struct {
	Name  string
	Value JSONValue
}

// JSONObject is a parsed flat JSON object: its fields in input order. When a name repeats, Get
// and the typed getters see the last one.
type JSONObject struct {
	Fields []JSONField
}

// Get returns the value of the field name and whether there is one.
func (o JSONObject) Get(name string) (JSONValue, bool) {
	for i := len(o.Fields) - 1; i >= 0; i-- {
		if o.Fields[i].Name == name {
			return o.Fields[i].Value, true
		}
	}
	return JSONValue{}, false
}

// String returns the string field name (false when missing or not a string).
func (o JSONObject) String(name string) (string, bool) {
	v, ok := o.Get(name)
	if !ok || v.Kind != JSONString {
		return "", false
	}
	return v.Str, true
}

// Float returns the number field name as a float64 (false when missing or not a number).
func (o JSONObject) Float(name string) (float64, bool) {
	v, _ := o.Get(name)
	return v.Float()
}

// Int returns the number field name as an int64 (false when missing, not a number or not an
// integer within range).
func (o JSONObject) Int(name string) (int64, bool) {
	v, _ := o.Get(name)
	return v.Int()
}

// Bool returns the bool field name (false, false when missing or not a bool).
func (o JSONObject) Bool(name string) (value, ok bool) {
	v, found := o.Get(name)
	if !found || v.Kind != JSONBool {
		return false, false
	}
	return v.Bool, true
}

// IsNull reports whether the field name is present and null.
func (o JSONObject) IsNull(name string) bool {
	v, ok := o.Get(name)
	return ok && v.Kind == JSONNull
}

// ParseJSONObject parses b, a JSON object whose values are strings, numbers, booleans or null.
// Whitespace is allowed where JSON allows it; anything after the closing brace other than
// whitespace is an error. Errors say what is wrong and at which byte offset.
func ParseJSONObject(b []byte) (JSONObject, error) {
	p := jsonParser{b: b}
	var o JSONObject
	p.ws()
	if !p.eat('{') {
		return o, p.err("expected '{' at the start of an object")
	}
	p.ws()
	if p.eat('}') {
		return o, p.end()
	}
	for {
		p.ws()
		if p.peek() != '"' {
			return o, p.err("expected a field name in double quotes")
		}
		name, err := p.str()
		if err != nil {
			return o, err
		}
		p.ws()
		if !p.eat(':') {
			return o, p.err("expected ':' after field name " + strconv.Quote(name))
		}
		p.ws()
		v, err := p.value(name)
		if err != nil {
			return o, err
		}
		o.Fields = append(o.Fields, JSONField{Name: name, Value: v})
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			return o, p.end()
		}
		return o, p.err("expected ',' or '}' after field " + strconv.Quote(name))
	}
}

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) err(msg string) error {
	at := "at byte " + strconv.Itoa(p.i)
	if p.i >= len(p.b) {
		at = "at the end of the input"
	}
	return errors.New("wasmstream: json: " + msg + " " + at)
}

func (p *jsonParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *jsonParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) end() error {
	p.ws()
	if p.i != len(p.b) {
		return p.err("unexpected data after the object")
	}
	return nil
}

func (p *jsonParser) lit(word string) bool {
	if len(p.b)-p.i >= len(word) && string(p.b[p.i:p.i+len(word)]) == word {
		p.i += len(word)
		return true
	}
	return false
}

func (p *jsonParser) value(name string) (JSONValue, error) {
	switch c := p.peek(); {
	case c == '"':
		s, err := p.str()
		return JSONValue{Kind: JSONString, Str: s}, err
	case c == 't' && p.lit("true"):
		return JSONValue{Kind: JSONBool, Bool: true}, nil
	case c == 'f' && p.lit("false"):
		return JSONValue{Kind: JSONBool}, nil
	case c == 'n' && p.lit("null"):
		return JSONValue{Kind: JSONNull}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(name)
	case c == '{' || c == '[':
		return JSONValue{}, p.err("field " + strconv.Quote(name) + ": nested objects and arrays are not supported")
	default:
		return JSONValue{}, p.err("field " + strconv.Quote(name) + ": expected a string, number, true, false or null")
	}
}

func (p *jsonParser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// number scans a number with JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *jsonParser) number(name string) (JSONValue, error) {
	start := p.i
	bad := func() (JSONValue, error) {
		return JSONValue{}, p.err("field " + strconv.Quote(name) + ": malformed number")
	}
	p.eat('-')
	if p.eat('0') {
		if c := p.peek(); c >= '0' && c <= '9' {
			return bad()
		}
	} else if p.digits() == 0 {
		return bad()
	}
	if p.eat('.') && p.digits() == 0 {
		return bad()
	}
	if p.eat('e') || p.eat('E') {
		if !p.eat('+') {
			p.eat('-')
		}
		if p.digits() == 0 {
			return bad()
		}
	}
	return JSONValue{Kind: JSONNumber, Str: string(p.b[start:p.i])}, nil
}

// str scans a string literal at p.i (the opening quote) and returns it unescaped.
func (p *jsonParser) str() (string, error) {
	p.i++ // opening quote
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	out := append([]byte{}, p.b[start:p.i]...)
	for {
		if p.i >= len(p.b) {
			return "", p.err("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.err("control character in a string (escape it)")
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		p.i++ // backslash
		var err error
		if out, err = p.escape(out); err != nil {
			return "", err
		}
	}
}

// escape appends the character of the escape sequence at p.i (after its backslash) to out.
func (p *jsonParser) escape(out []byte) ([]byte, error) {
	if p.i >= len(p.b) {
		return nil, p.err("unterminated string")
	}
	e := p.b[p.i]
	p.i++
	switch e {
	case '"', '\\', '/':
		out = append(out, e)
	case 'b':
		out = append(out, '\b')
	case 'f':
		out = append(out, '\f')
	case 'n':
		out = append(out, '\n')
	case 'r':
		out = append(out, '\r')
	case 't':
		out = append(out, '\t')
	case 'u':
		r, ok := p.unicode()
		if !ok {
			return nil, p.err(`malformed \u escape`)
		}
		out = utf8.AppendRune(out, r)
	default:
		p.i--
		return nil, p.err("unknown escape \\" + string(rune(e)))
	}
	return out, nil
}

// unicode reads the four hex digits of a \u escape at p.i, and a low surrogate's escape after a
// high surrogate's: a high surrogate pairs with a following \uDC00-\uDFFF; alone it is U+FFFD
// (and whatever follows it is read on its own), as in encoding/json; so is a low one alone.
func (p *jsonParser) unicode() (rune, bool) {
	r, ok := p.hex4()
	if !ok {
		return 0, false
	}
	if hi := r; hi >= 0xD800 && hi < 0xDC00 {
		r = utf8.RuneError
		if save := p.i; p.lit(`\u`) {
			if lo, ok := p.hex4(); ok && lo >= 0xDC00 && lo < 0xE000 {
				r = 0x10000 + (hi-0xD800)<<10 + (lo - 0xDC00)
			} else {
				p.i = save
			}
		}
	} else if r >= 0xDC00 && r < 0xE000 {
		r = utf8.RuneError
	}
	return r, true
}

func (p *jsonParser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// JSONWriter builds a flat JSON object field by field, e.g.
//
//	var w wasmstream.JSONWriter
//	w.String("card", card).Float("amount", sum).Int("count", n)
//	err := wasmstream.Emit("alerts", key, w.Bytes())
//
// Bytes closes the object; the next field starts a new one (so one JSONWriter can be reused
// without allocating). Strings are escaped as JSON requires (quotes, backslashes, control
// characters; invalid UTF-8 becomes U+FFFD).
type JSONWriter struct {
	buf  []byte
	open bool
}

func (w *JSONWriter) name(n string) {
	if !w.open {
		w.buf = append(w.buf[:0], '{')
		w.open = true
	} else {
		w.buf = append(w.buf, ',')
	}
	w.buf = AppendJSONString(w.buf, n)
	w.buf = append(w.buf, ':')
}

// String adds a string field.
func (w *JSONWriter) String(name, v string) *JSONWriter {
	w.name(name)
	w.buf = AppendJSONString(w.buf, v)
	return w
}

// Int adds an integer field.
func (w *JSONWriter) Int(name string, v int64) *JSONWriter {
	w.name(name)
	w.buf = strconv.AppendInt(w.buf, v, 10)
	return w
}

// Float adds a number field in the shortest form that reads back as v (exponent form below 1e-6
// and from 1e21, like JavaScript and encoding/json); NaN and infinities, which JSON cannot
// express, are written as null.
func (w *JSONWriter) Float(name string, v float64) *JSONWriter {
	w.name(name)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		w.buf = append(w.buf, "null"...)
		return w
	}
	w.buf = appendJSONFloat(w.buf, v)
	return w
}

// appendJSONFloat appends a finite v as encoding/json does.
func appendJSONFloat(b []byte, v float64) []byte {
	format := byte('f')
	if a := math.Abs(v); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, v, format, -1, 64)
	if format == 'e' {
		// 1e-07 becomes 1e-7, as JSON writers and the Rust SDK write it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// Bool adds a boolean field.
func (w *JSONWriter) Bool(name string, v bool) *JSONWriter {
	w.name(name)
	w.buf = strconv.AppendBool(w.buf, v)
	return w
}

// Null adds a null field.
func (w *JSONWriter) Null(name string) *JSONWriter {
	w.name(name)
	w.buf = append(w.buf, "null"...)
	return w
}

// Bytes closes the object and returns it ("{}" when no field was added). The slice is the
// writer's buffer: it is valid until the writer's next use (Emit and State.Put copy it).
func (w *JSONWriter) Bytes() []byte {
	if !w.open {
		w.buf = append(w.buf[:0], '{')
	}
	w.buf = append(w.buf, '}')
	w.open = false
	return w.buf
}

// AppendJSONString appends s as a JSON string literal, quoted and escaped.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
