// Command tokenizer is a CPU-heavy test guest, the benchmark load of the CPU bound (fuel
// metering): for each record it splits the value into tokens (runs of ASCII letters and digits,
// lowercased), hashes every token (FNV-1a, 64 bits), counts the distinct tokens with a small
// open-addressing table, and emits "<tokens> <distinct> <hash>" to output "tokens" (hash is the
// XOR of the distinct tokens' hashes, in hex). It touches no state: the time is the guest's.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o tokenizer.wasm .
package main

import (
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() { wasmstream.Handle(tokenize) }

const slots = 1024 // a power of two, more than the tokens of a 1 KiB record

var (
	table [slots]uint64 // token hashes; 0 = empty
	out   []byte
)

func tokenize(r *wasmstream.Record) error {
	clear(table[:])
	text := r.Value()
	tokens, distinct := 0, 0
	var sum uint64
	for i := 0; i < len(text); {
		if !isTokenByte(text[i]) {
			i++
			continue
		}
		h := uint64(14695981039346656037)
		for ; i < len(text) && isTokenByte(text[i]); i++ {
			c := text[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			h = (h ^ uint64(c)) * 1099511628211
		}
		h |= 1 // never 0, the empty mark
		tokens++
		for s := h & (slots - 1); ; s = (s + 1) & (slots - 1) {
			if table[s] == h {
				break
			}
			if table[s] == 0 {
				table[s] = h
				distinct++
				sum ^= h
				break
			}
		}
	}
	out = strconv.AppendInt(out[:0], int64(tokens), 10)
	out = append(out, ' ')
	out = strconv.AppendInt(out, int64(distinct), 10)
	out = append(out, ' ')
	out = strconv.AppendUint(out, sum, 16)
	return wasmstream.EmitWith(wasmstream.Output{Name: "tokens", Key: r.Key(), Value: out, Timestamp: r.Timestamp()})
}

func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
