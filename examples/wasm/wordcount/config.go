package main

import (
	"strconv"

	"github.com/wasmstream/wasmstream/examples/wasm/internal/jsonconfig"
)

// parseMinLen reads min_len from the task config, a JSON object (jsonconfig.Member).
//
// Accepted: an empty or all-white-space config (= {}); an object whose member "min_len", if
// present, is a JSON integer from 0 to 4294967295 with no sign, fraction or exponent. 0 behaves
// like 1 (a word has at least one byte). Other members may hold any JSON value and are ignored; a
// repeated min_len counts the last time.
func parseMinLen(cfg []byte) (uint64, error) {
	n := uint64(1)
	err := jsonconfig.Member(cfg, "min_len", func(v *jsonconfig.Value) error {
		digits, more := v.Digits()
		if len(digits) == 0 || len(digits) > 1 && digits[0] == '0' || more {
			return v.Errorf("min_len must be a non-negative integer")
		}
		x, err := strconv.ParseUint(string(digits), 10, 32)
		if err != nil {
			return v.Errorf("min_len is too large")
		}
		n = x
		return nil
	})
	if err != nil {
		return 0, err
	}
	if n == 0 {
		n = 1
	}
	return n, nil
}
