package wasmstream

import (
	"testing"
	"unicode/utf8"

	"github.com/wasmstream/wasmstream/abi"
)

// TestRecordKeyNull: ABI 0.4's flag bit 1 is Record.KeyNull, and the record's key is NullKey,
// not the empty key; a record with the empty key has neither.
func TestRecordKeyNull(t *testing.T) {
	install(t)
	var null, keys []string
	Handle(func(r *Record) error {
		keys = append(keys, string(r.Key()))
		if r.KeyNull() && IsNullKey(r.Key()) {
			null = append(null, string(r.Key()))
		}
		return nil
	})
	b := abi.AppendBatchHeader(nil, 2)
	b = abi.AppendRecord(b, &abi.Record{Flags: abi.FlagKeyNull, Timestamp: -1, Key: []byte(NullKey)})
	b = abi.AppendRecord(b, &abi.Record{Timestamp: -1, Key: []byte{}})
	if rc := deliver(t, b, callProcess); rc != 0 {
		t.Fatalf("process returned %d", rc)
	}
	if len(keys) != 2 || len(null) != 1 || null[0] != "\xffnull\xff" || keys[1] != "" {
		t.Fatalf("keys %q, null keys %q; want the first record's key null and the second's empty", keys, null)
	}
	if utf8.ValidString(NullKey) {
		t.Fatal("NullKey is UTF-8: a key read from a JSON line could be it")
	}
}
