package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"strings"
)

// stateDecoder decodes state values by name with the typed layout both SDKs share (a Counter
// or an i64 Value is 8 bytes little-endian, a bool 1 byte, a string its bytes): each rule maps
// a name pattern (path.Match: "seen", "cards/*" for a Map's entries, "items/*" for a List's
// items) to a type. The first rule that matches a name decodes its value.
type stateDecoder []decodeRule

type decodeRule struct {
	pattern, typ string
}

// stateTypes are the types --decode knows, those of the SDKs' codecs.
var stateTypes = []string{"i64", "u64", "f64", "bool", "string"}

// parseStateDecoder reads --decode flags, "PATTERN=TYPE" each.
func parseStateDecoder(flags []string) (stateDecoder, error) {
	var d stateDecoder
	for _, f := range flags {
		pattern, typ, ok := strings.Cut(f, "=")
		if !ok || pattern == "" {
			return nil, fmt.Errorf("--decode %q: want NAME=TYPE, e.g. seen=i64 or 'cards/*=i64'", f)
		}
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("--decode %q: bad name pattern: %v", f, err)
		}
		if !strings.Contains(" "+strings.Join(stateTypes, " ")+" ", " "+typ+" ") {
			return nil, fmt.Errorf("--decode %q: unknown type %q: use one of %s", f, typ, strings.Join(stateTypes, ", "))
		}
		d = append(d, decodeRule{pattern, typ})
	}
	return d, nil
}

// decode returns the value of the state name as its rule's type (int64, uint64, float64,
// bool or string) and ok; ok is false when no rule matches or the value does not have the
// type's layout (the caller shows its bytes then).
func (d stateDecoder) decode(name, value []byte) (v any, ok bool) {
	for _, r := range d {
		if m, _ := path.Match(r.pattern, string(name)); !m {
			continue
		}
		switch r.typ {
		case "i64", "u64", "f64":
			if len(value) != 8 {
				return nil, false
			}
			u := binary.LittleEndian.Uint64(value)
			switch r.typ {
			case "i64":
				return int64(u), true
			case "u64":
				return u, true
			}
			return math.Float64frombits(u), true
		case "bool":
			if len(value) != 1 || value[0] > 1 {
				return nil, false
			}
			return value[0] == 1, true
		case "string":
			return string(value), true
		}
		return nil, false
	}
	return nil, false
}

// decodedText is a decoded value in the text output: a string escaped as the other columns are.
func decodedText(v any) string {
	if s, ok := v.(string); ok {
		return escape([]byte(s))
	}
	return fmt.Sprint(v)
}

// decodedJSON is a decoded value in the JSON output (a float JSON cannot hold, as a string).
func decodedJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	return b
}
