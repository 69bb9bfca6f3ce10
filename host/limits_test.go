package host

import (
	"testing"

	"github.com/wasmstream/wasmstream/store"
)

// A guest call's writes per key are bounded by modrt's KeyTxnEntries and KeyTxnBytes, whose
// defaults are the store's defaults: they must be what the store the host opens really allows
// (Open lowers its limits to Badger's), or a call's writes to one key could still fail the
// checkpoint.
func TestKeyTxnLimitsAreTheStores(t *testing.T) {
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entries, bytes := db.KeyLimits()
	lim := limits(TaskConfig{})
	if lim.KeyTxnEntries != 0 || lim.KeyTxnBytes != 0 {
		t.Fatalf("the host sets KeyTxnEntries %d, KeyTxnBytes %d: update this test", lim.KeyTxnEntries, lim.KeyTxnBytes)
	}
	if entries != store.DefaultMaxTxnEntries || bytes != store.DefaultMaxTxnBytes {
		t.Errorf("the store allows %d entries, %d bytes per key; modrt's defaults are %d, %d",
			entries, bytes, store.DefaultMaxTxnEntries, store.DefaultMaxTxnBytes)
	}
}
