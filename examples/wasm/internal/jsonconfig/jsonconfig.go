// Package jsonconfig reads one unsigned integer member of a task config (a JSON object) without
// encoding/json, for guests that must stay small and TinyGo-compatible.
package jsonconfig

import (
	"errors"
	"strconv"
)

// Member walks the task config, a JSON object, without encoding/json (which would bloat the
// module and is unavailable in TinyGo's reflection subset), and calls read for each occurrence of
// the member name, at its value; read must consume the value or return an error. An empty or
// all-white-space config is an empty object. Other members may hold any JSON value and are
// skipped. Member names are compared as written, escapes undecoded.
func Member(cfg []byte, name string, read func(v *Value) error) error {
	p := jsonParser{b: cfg}
	p.space()
	if p.i == len(p.b) {
		return nil
	}
	if !p.eat('{') {
		return p.errorf("the config is not a JSON object")
	}
	p.space()
	if !p.eat('}') {
		for {
			p.space()
			member, err := p.str()
			if err != nil {
				return err
			}
			p.space()
			if !p.eat(':') {
				return p.errorf("expected ':'")
			}
			p.space()
			if string(member) == name {
				if err := read(&Value{p: &p, start: p.i}); err != nil {
					return err
				}
			} else if err := p.value(0); err != nil {
				return err
			}
			p.space()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return p.errorf("expected ',' or '}'")
			}
		}
	}
	p.space()
	if p.i != len(p.b) {
		return p.errorf("trailing bytes after the object")
	}
	return nil
}

// Value is a member's value while Member's read function looks at it.
type Value struct {
	p     *jsonParser
	start int
}

// Digits reads the decimal digits at the value and reports whether a fraction or an exponent
// follows them (the value is then not an integer written with digits only).
func (v *Value) Digits() (digits []byte, more bool) {
	p := v.p
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	more = p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E')
	return p.b[v.start:p.i], more
}

// Errorf is an error naming the byte where the value starts.
func (v *Value) Errorf(msg string) error {
	v.p.i = v.start
	return v.p.errorf(msg)
}

// UintMember reads the member name of the task config with Member: an integer from 1 to max with
// no sign, fraction, exponent or leading zero. Without the member the result is def; a repeated
// member counts the last time.
func UintMember(cfg []byte, name string, def, max uint64) (uint64, error) {
	n := def
	err := Member(cfg, name, func(v *Value) error {
		digits, more := v.Digits()
		bad := len(digits) == 0 || digits[0] == '0' || more
		var x uint64
		if !bad {
			var err error
			x, err = strconv.ParseUint(string(digits), 10, 64)
			bad = err != nil || x > max
		}
		if bad {
			return v.Errorf(name + " must be an integer from 1 to " + strconv.FormatUint(max, 10))
		}
		n = x
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) errorf(msg string) error {
	return errors.New(msg + " at byte " + strconv.Itoa(p.i))
}

func (p *jsonParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string and returns its raw contents (escapes not decoded).
func (p *jsonParser) str() ([]byte, error) {
	if !p.eat('"') {
		return nil, p.errorf("expected a string")
	}
	start := p.i
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case '\\':
			p.i += 2
		case '"':
			p.i++
			return p.b[start : p.i-1], nil
		default:
			p.i++
		}
	}
	return nil, p.errorf("unterminated string")
}

// value skips one JSON value of any kind; depth bounds the nesting.
func (p *jsonParser) value(depth int) error {
	if depth > 64 {
		return p.errorf("nested too deep")
	}
	if p.i == len(p.b) {
		return p.errorf("expected a value")
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		p.i++
		p.space()
		if p.eat(end) {
			return nil
		}
		for {
			p.space()
			if c == '{' {
				if _, err := p.str(); err != nil {
					return err
				}
				p.space()
				if !p.eat(':') {
					return p.errorf("expected ':'")
				}
				p.space()
			}
			if err := p.value(depth + 1); err != nil {
				return err
			}
			p.space()
			if p.eat(end) {
				return nil
			}
			if !p.eat(',') {
				return p.errorf("expected ',' or '" + string(end) + "'")
			}
		}
	case c == '-' || '0' <= c && c <= '9':
		for p.i < len(p.b) && (p.b[p.i] == '-' || p.b[p.i] == '+' || p.b[p.i] == '.' ||
			p.b[p.i] == 'e' || p.b[p.i] == 'E' || '0' <= p.b[p.i] && p.b[p.i] <= '9') {
			p.i++
		}
		return nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
				p.i += len(lit)
				return nil
			}
		}
		return p.errorf("expected a value")
	}
}
