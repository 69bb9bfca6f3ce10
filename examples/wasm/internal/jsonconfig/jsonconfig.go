// Package jsonconfig reads one unsigned integer member of a task config (a JSON object) without
// encoding/json, for guests that must stay small and TinyGo-compatible.
package jsonconfig

import (
	"errors"
	"strconv"
)

// UintMember reads the member name of the task config, a JSON object, without
// encoding/json (which would bloat the module and is unavailable in TinyGo's reflection subset).
//
// Accepted: an empty or all-white-space config (= {}); an object whose member name, if present,
// is a JSON integer from 1 to max with no sign, fraction or exponent. Without the member the
// result is def. Other members may hold any JSON value and are ignored; a repeated member counts
// the last time. Member names are compared as written, escapes undecoded.
func UintMember(cfg []byte, name string, def, max uint64) (uint64, error) {
	p := jsonParser{b: cfg}
	p.space()
	if p.i == len(p.b) {
		return def, nil
	}
	n := def
	if !p.eat('{') {
		return 0, p.errorf("the config is not a JSON object")
	}
	p.space()
	if !p.eat('}') {
		for {
			p.space()
			member, err := p.str()
			if err != nil {
				return 0, err
			}
			p.space()
			if !p.eat(':') {
				return 0, p.errorf("expected ':'")
			}
			p.space()
			if string(member) == name {
				if n, err = p.positive(name, max); err != nil {
					return 0, err
				}
			} else if err := p.value(0); err != nil {
				return 0, err
			}
			p.space()
			if p.eat('}') {
				break
			}
			if !p.eat(',') {
				return 0, p.errorf("expected ',' or '}'")
			}
		}
	}
	p.space()
	if p.i != len(p.b) {
		return 0, p.errorf("trailing bytes after the object")
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

// positive reads an integer from 1 to max written with digits only.
func (p *jsonParser) positive(name string, max uint64) (uint64, error) {
	start := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	digits := p.b[start:p.i]
	bad := len(digits) == 0 || digits[0] == '0' ||
		p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E')
	var n uint64
	if !bad {
		var err error
		n, err = strconv.ParseUint(string(digits), 10, 64)
		bad = err != nil || n > max
	}
	if bad {
		p.i = start
		return 0, p.errorf(name + " must be an integer from 1 to " + strconv.FormatUint(max, 10))
	}
	return n, nil
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
