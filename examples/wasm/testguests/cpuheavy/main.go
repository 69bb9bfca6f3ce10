// Command cpuheavy is the benchmarks' CPU-heavy task: per record it hashes the record's value
// `rounds` times over (FNV-1a, 64 bits, each round starting from the last round's hash) and emits
// the final hash, 16 hex digits, with the record's key to output "hash". It touches no state, so
// nearly all of its time is the guest's: it measures how the worker pool spreads guest work over
// the cores. rounds comes from the task's config ({"rounds": N}); the default, 220, is about
// 65 µs of CPU per ~100-byte record, the host's share included, on a 2-core x86-64 VM (the Rust
// port does the same work in about half the time).
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o cpuheavy.wasm .
package main

import (
	"errors"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.HandleInit(setup)
	wasmstream.Handle(hash)
}

const defaultRounds = 220

var (
	rounds = defaultRounds
	out    [16]byte
)

func setup(cfg []byte) error {
	o, err := wasmstream.ParseJSONObject(cfg)
	if err != nil {
		return err
	}
	if n, ok := o.Int("rounds"); ok {
		if n < 1 || n > 1_000_000 {
			return errors.New(`cpuheavy: config "rounds" must be 1 to 1000000`)
		}
		rounds = int(n)
	}
	return nil
}

func hash(r *wasmstream.Record) error {
	v := r.Value()
	h := uint64(14695981039346656037)
	for i := 0; i < rounds; i++ {
		for _, c := range v {
			h = (h ^ uint64(c)) * 1099511628211
		}
	}
	const hex = "0123456789abcdef"
	for i := 15; i >= 0; i-- {
		out[i] = hex[h&15]
		h >>= 4
	}
	return wasmstream.Emit("hash", r.Key(), out[:])
}
