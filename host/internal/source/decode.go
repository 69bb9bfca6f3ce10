package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/wasmstream/wasmstream/abi"
	"strconv"
)

// Format is how a line becomes a record.
type Format struct {
	// JSON: each line is a JSON object. Otherwise each line is text.
	JSON           bool
	KeyField       string // JSON field holding the key; "" = empty key
	ValueField     string // JSON field holding the value; "" = the whole line
	TimestampField string // JSON field holding the event time (ms); "" = unknown (-1)
	KeySeparator   string // text: the key is what precedes the first separator
}

// Decoded is the payload of one line.
type Decoded struct {
	Key       []byte
	Value     []byte
	Timestamp int64
	Fields    map[string]json.RawMessage // JSON lines only, for sequencing by field
	Headers   []abi.Header               // Kafka records only
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
		return d, fmt.Errorf("%w: not a JSON object: %v", ErrMalformed, err)
	}
	if d.Fields == nil {
		return d, fmt.Errorf("%w: not a JSON object: null", ErrMalformed)
	}
	var err error
	if f.KeyField != "" {
		if d.Key, err = scalar(d.Fields, f.KeyField); err != nil {
			return d, err
		}
	}
	d.Value = line
	if f.ValueField != "" {
		raw, ok := d.Fields[f.ValueField]
		if !ok {
			return d, fmt.Errorf("%w: value field %q is missing", ErrMalformed, f.ValueField)
		}
		if d.Value, err = scalarOrRaw(raw); err != nil {
			return d, fmt.Errorf("%w: value field %q: %v", ErrMalformed, f.ValueField, err)
		}
	}
	if f.TimestampField != "" {
		raw, ok := d.Fields[f.TimestampField]
		if ok && string(raw) != "null" {
			ts, err := strconv.ParseInt(string(raw), 10, 64)
			if err != nil {
				return d, fmt.Errorf("%w: timestamp field %q is not an integer of milliseconds: %s", ErrMalformed, f.TimestampField, raw)
			}
			d.Timestamp = ts
		}
	}
	return d, nil
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
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	return raw, nil
}
