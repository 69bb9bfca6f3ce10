package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/wasmstream/wasmstream/abi"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Format is how a line becomes a record.
type Format struct {
	// JSON: each line is a JSON object. Otherwise each line is text.
	JSON     bool
	KeyField string // JSON field holding the key; "" = empty key
	// KeyRequired makes a JSON line without KeyField (missing or null) malformed instead of a
	// record of the empty key.
	KeyRequired    bool
	ValueField     string // JSON field holding the value; "" = the whole line
	TimestampField string // JSON field holding the event time (ms); "" = unknown (-1)
	KeySeparator   string // text: the key is what precedes the first separator
	// MaxLineBytes is the longest line accepted (without its line ending), at most
	// MaxKeptLineBytes; a longer line is a malformed record. 0: DefaultMaxLineBytes.
	MaxLineBytes int
}

func (f *Format) maxLineBytes() int {
	if f.MaxLineBytes <= 0 {
		return DefaultMaxLineBytes
	}
	return min(f.MaxLineBytes, MaxKeptLineBytes)
}

// Decoded is the payload of one line.
type Decoded struct {
	Key       []byte
	Value     []byte
	Timestamp int64
	Fields    map[string]json.RawMessage // JSON lines only, for sequencing by field
	Headers   []abi.Header               // Kafka records only
	// ValueNull: the value is null (a Kafka tombstone, a chained upstream's null-valued output,
	// or a JSON line whose value field is null), not empty; Value is then empty.
	ValueNull bool
}

// ErrMalformed wraps every decoding failure.
var ErrMalformed = errors.New("malformed line")

// Decode decodes one line (without its newline). The result may share memory with line.
func (f *Format) Decode(line []byte) (Decoded, error) {
	d := Decoded{Timestamp: -1}
	if !f.JSON {
		d.Value = line
		if f.KeySeparator != "" {
			if i := bytes.Index(line, []byte(f.KeySeparator)); i >= 0 {
				d.Key, d.Value = line[:i], line[i+len(f.KeySeparator):]
			}
		}
		return d, nil
	}
	if err := json.Unmarshal(line, &d.Fields); err != nil {
		return d, fmt.Errorf("%w: not a JSON object: %v%s", ErrMalformed, err, wholeObjectHint(line, err))
	}
	if d.Fields == nil {
		return d, fmt.Errorf("%w: not a JSON object: null", ErrMalformed)
	}
	var err error
	if f.KeyField != "" {
		if d.Key, err = scalar(d.Fields, f.KeyField); err != nil {
			return d, err
		}
		if raw, ok := d.Fields[f.KeyField]; f.KeyRequired && (!ok || string(raw) == "null") {
			return d, fmt.Errorf("%w: key field %q is missing (key_required)", ErrMalformed, f.KeyField)
		}
	}
	d.Value = line
	if f.ValueField != "" {
		raw, ok := d.Fields[f.ValueField]
		if !ok {
			return d, fmt.Errorf("%w: value field %q is missing", ErrMalformed, f.ValueField)
		}
		if string(raw) == "null" {
			// A null value (a tombstone, ABI 0.5), as a file output writes one: not the text null.
			d.Value, d.ValueNull = []byte{}, true
		} else if d.Value, err = scalarOrRaw(raw); err != nil {
			return d, fmt.Errorf("%w: value field %q: %v", ErrMalformed, f.ValueField, err)
		}
	}
	if f.TimestampField != "" {
		raw, ok := d.Fields[f.TimestampField]
		if ok && string(raw) != "null" {
			ts, err := timestamp(raw)
			if err != nil {
				return d, fmt.Errorf("%w: timestamp field %q is not an integer of milliseconds (a JSON number, or a string of one): %s", ErrMalformed, f.TimestampField, raw)
			}
			d.Timestamp = ts
		}
	}
	return d, nil
}

// timestamp reads a timestamp field: a JSON integer, or a string holding one exactly as a JSON
// number writes it ("1700000000000", as protobuf's JSON mapping writes an int64; not "+1", "01",
// " 1" or "1.0").
func timestamp(raw json.RawMessage) (int64, error) {
	if len(raw) > 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		s := string(raw[1 : len(raw)-1])
		ts, err := strconv.ParseInt(s, 10, 64)
		if err != nil || strconv.FormatInt(ts, 10) != s {
			return 0, errors.New("not an integer")
		}
		return ts, nil
	}
	return strconv.ParseInt(string(raw), 10, 64)
}

// wholeObjectHint says why a line that starts an array or ends before its object does is
// malformed: a pretty-printed JSON document or a JSON array fed as an input makes every line so.
func wholeObjectHint(line []byte, err error) string {
	if utf16Line(line) {
		return " (the input looks like UTF-16, Windows \"Unicode\", not UTF-8: convert it first, iconv -f UTF-16 -t UTF-8)"
	}
	t := bytes.TrimSpace(line)
	var se *json.SyntaxError
	ends := errors.As(err, &se) && se.Error() == "unexpected end of JSON input" // the line ended inside the value
	if len(t) > 0 && (t[0] == '[' || (t[0] == '{' && ends)) {
		return " (an input holds one whole JSON object per line, newline-delimited JSON: a document spread over several lines, or an array, is not read)"
	}
	return ""
}

// utf16Line reports whether a line looks like UTF-16 text read as bytes: it starts with a UTF-16
// byte order mark, or with an ASCII character and a NUL byte ('{', 0 in UTF-16LE; the line after
// a UTF-16LE line ending starts with that ending's NUL) or the reverse (UTF-16BE).
func utf16Line(line []byte) bool {
	if len(line) < 2 {
		return false
	}
	a, b := line[0], line[1]
	return a == 0xFF && b == 0xFE || a == 0xFE && b == 0xFF ||
		a == 0 && (b == '{' || len(line) > 2 && line[2] == 0) || b == 0 && a == '{'
}

// Field returns the text of a JSON field as scalar returns it, for sequencing by field.
func (d *Decoded) Field(name string) ([]byte, error) { return scalar(d.Fields, name) }

// scalar returns a field's string content, or the JSON text of a number or boolean; a missing
// or null field is empty.
func scalar(fields map[string]json.RawMessage, name string) ([]byte, error) {
	raw, ok := fields[name]
	if !ok || string(raw) == "null" {
		return []byte{}, nil
	}
	if len(raw) > 0 && (raw[0] == '{' || raw[0] == '[') {
		return nil, fmt.Errorf("%w: field %q is an object or array, not a key", ErrMalformed, name)
	}
	return scalarOrRaw(raw)
}

func scalarOrRaw(raw json.RawMessage) ([]byte, error) {
	if len(raw) > 0 && raw[0] == '"' {
		return unquote(raw)
	}
	return raw, nil
}

// unquote decodes a JSON string (quotes included) to its bytes. Unlike encoding/json, it keeps
// bytes that are not valid UTF-8 exactly as they are in the line instead of replacing each with
// U+FFFD: keys and values are bytes, and two keys that differ only there must stay two keys.
// Escapes decode as in encoding/json (a lone surrogate escape becomes U+FFFD).
func unquote(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, errors.New("not a JSON string")
	}
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return nil, errors.New("string ends in a backslash")
		}
		switch e := s[i+1]; e {
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
			r, ok := hex4(s[i+2:])
			if !ok {
				return nil, errors.New(`bad \u escape`)
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if bytes.HasPrefix(s[i:], []byte(`\u`)) {
					r2, ok = hex4(s[i+2:])
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					out = utf8.AppendRune(out, d)
					i += 6
					continue
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, fmt.Errorf("bad escape \\%c", e)
		}
		i += 2
	}
	return out, nil
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
