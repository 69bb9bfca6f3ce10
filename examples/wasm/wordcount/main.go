// Command wordcount is the wasmstream example task: it counts words per record key.
//
// For each record the value is text. It is split into words on every byte that is not an ASCII
// letter or digit, ASCII letters are lowercased, and words shorter than the config's min_len
// bytes are skipped. For each remaining word, in order of appearance, the count in the key's
// state (state name = the word, value = the count in decimal ASCII, missing = 0) is incremented
// and "<word> <count>" is emitted to output "counts" with the record's key and timestamp.
//
// README.md next to this file is the exact specification (a Rust port produces the same bytes).
//
// Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o wordcount.wasm .
//	tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none -no-debug -o wordcount.wasm .
package main

import (
	"errors"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

// A wasip1 reactor never runs main: the handlers are registered in init.
func main() {}

func init() {
	wasmstream.HandleInit(configure)
	wasmstream.Handle(count)
}

// Output is the output the counts are emitted to.
const Output = "counts"

// minLen is the config's min_len: words shorter than this many bytes are skipped.
var minLen uint64 = 1

func configure(cfg []byte) error {
	n, err := parseMinLen(cfg)
	if err != nil {
		return errors.New("wordcount: invalid config: " + err.Error())
	}
	minLen = n
	return nil
}

// Reused between words and records.
var (
	wordBuf  []byte
	countBuf []byte
	outBuf   []byte
)

func count(r *wasmstream.Record) error {
	st := r.State()
	text := r.Value()
	for i := 0; i < len(text); {
		if !isWordByte(text[i]) {
			i++
			continue
		}
		start := i
		for i < len(text) && isWordByte(text[i]) {
			i++
		}
		if uint64(i-start) < minLen {
			continue
		}
		wordBuf = appendLower(wordBuf[:0], text[start:i])
		n, err := load(st, wordBuf)
		if err != nil {
			return err
		}
		countBuf = strconv.AppendUint(countBuf[:0], n+1, 10)
		if err := st.PutBytes(wordBuf, countBuf); err != nil {
			return err
		}
		outBuf = append(append(append(outBuf[:0], wordBuf...), ' '), countBuf...)
		err = wasmstream.EmitWith(wasmstream.Output{Name: Output, Key: r.Key(), Value: outBuf, Timestamp: r.Timestamp()})
		if err != nil {
			return err
		}
	}
	return nil
}

// load returns the stored count of word, 0 when there is none.
func load(st wasmstream.State, word []byte) (uint64, error) {
	v, ok, err := st.GetBytes(word)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, errors.New("wordcount: the count of " + strconv.Quote(string(word)) + " is not a number: " + strconv.Quote(string(v)))
	}
	return n, nil
}

func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func appendLower(dst, word []byte) []byte {
	for _, c := range word {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}
