// Package statedecode decodes state values written with the typed layout the SDKs share (a
// Counter or an i64 Value is 8 bytes little-endian, a bool 1 byte, a string its bytes). The
// layout does not say which type a value has: rules map a name pattern to a type. Both
// `wasmstream state` (--decode, offline or online) and the admin API (?decode=) use it.
package statedecode

import (
	"encoding/binary"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
)

// Decoder decodes state values by name: each rule maps a name pattern (path.Match: "seen",
// "cards/*" for a Map's entries, "items/*" for a List's items) to a type. The first rule that
// matches a name decodes its value.
type Decoder []Rule

// Rule maps a name pattern to a type.
type Rule struct {
	Pattern, Type string
}

// Types are the types a rule may name, those of the SDKs' codecs.
var Types = []string{"i64", "u64", "f64", "bool", "string"}

// Parse reads rules, "PATTERN=TYPE" each; what names them in errors ("--decode", "decode").
func Parse(what string, rules []string) (Decoder, error) {
	var d Decoder
	for _, f := range rules {
		pattern, typ, ok := strings.Cut(f, "=")
		if !ok || pattern == "" {
			return nil, fmt.Errorf("%s %q: want NAME=TYPE, e.g. seen=i64 or 'cards/*=i64'", what, f)
		}
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("%s %q: bad name pattern: %v", what, f, err)
		}
		if !slices.Contains(Types, typ) {
			return nil, fmt.Errorf("%s %q: unknown type %q: use one of %s", what, f, typ, strings.Join(Types, ", "))
		}
		d = append(d, Rule{pattern, typ})
	}
	return d, nil
}

// Decode returns the value of the state name as its rule's type (int64, uint64, float64, bool
// or string) and ok; ok is false when no rule matches or the value does not have the type's
// layout (the caller shows its bytes then).
func (d Decoder) Decode(name, value []byte) (v any, ok bool) {
	for _, r := range d {
		if m, _ := path.Match(r.Pattern, string(name)); !m {
			continue
		}
		switch r.Type {
		case "i64", "u64", "f64":
			if len(value) != 8 {
				return nil, false
			}
			u := binary.LittleEndian.Uint64(value)
			switch r.Type {
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
