package main

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// escape renders bytes for a column of the state command's text output: printable UTF-8 as
// is, a backslash as \\, and everything else as the escape strconv.Quote would use (\t, \n,
// \a, \x00 for a byte that is not UTF-8, \u200b for a non-printable character), without
// the surrounding quotes and leaving '"' alone. The result holds no tab, newline or control
// character, and unescape inverts it.
// nullKeyText is how text output shows the null key (abi.NullKey): a Kafka record's key that
// is null, as distinct from the empty key (shown as nothing).
const nullKeyText = "(null)"

func escape(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&sb, `\x%02x`, b[0])
		case r == '\\':
			sb.WriteString(`\\`)
		case strconv.IsPrint(r):
			sb.Write(b[:size])
		default:
			// Control characters and non-printable runes: strconv.Quote's own escape.
			q := strconv.Quote(string(b[:size]))
			sb.WriteString(q[1 : len(q)-1])
		}
		b = b[size:]
	}
	return sb.String()
}

// unescape parses the escapes escape writes (and the others of Go string literals except \"
// and \'), so a key can be copied from the text output into --key. Any other text stands for
// its own bytes.
func unescape(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for len(s) > 0 {
		if s[0] != '\\' {
			_, size := utf8.DecodeRuneInString(s)
			out = append(out, s[:size]...)
			s = s[size:]
			continue
		}
		r, multibyte, tail, err := strconv.UnquoteChar(s, 0)
		if err != nil {
			end := min(len(s), 4)
			return nil, fmt.Errorf("bad escape %q", s[:end])
		}
		if r < utf8.RuneSelf || !multibyte {
			out = append(out, byte(r))
		} else {
			out = utf8.AppendRune(out, r)
		}
		s = tail
	}
	return out, nil
}
