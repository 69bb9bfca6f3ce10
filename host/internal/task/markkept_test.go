package task

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// TestMarksAfterMigration: a checkpoint may leave a key's stored mark entry as it is when the new
// mark is below the position it commits (store.KeyWrites.MarkStored), but only a mark entry that
// exists and carries the key's state version. Keys written for the first time, then migrated to
// a new state version and written again, all in checkpoints whose positions pass their marks
// (checkpoints only at the activation and the stop, the input drained before each): in the
// store every key has a mark entry, with the new version, and its records counted once each.
// A rule that kept the marks of new keys (MarkStored without a stored entry) fails it: the keys
// have state and no mark, and the activation finds none of them to migrate ('waited for 40
// outputs "log migrate"'); one that ignored the version leaves them at version 0, for the next
// start to migrate again ('version 0, want 2').
func TestMarksAfterMigration(t *testing.T) {
	const keys = 40
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, start: 0, migrateAtActivation: true, checkpoint: time.Hour}) // state version 0
	for i := range keys {
		r.send(r0(fmt.Sprintf("k%02d", i), "count"))
	}
	r.waitLines("log rec", keys)
	wasm, err := os.ReadFile(guestbuild.Go(t, "testguests/timers/v2"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := r.rt.Compile(context.Background(), wasm, modrt.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Close(context.Background()) })
	// The switch commits the records so far (new keys: their marks written), then migrates
	// every key to version 2.
	if _, err := r.tk.Switch(context.Background(), mod, 2); err != nil {
		t.Fatal(err)
	}
	r.waitLines("log migrate", keys)
	for i := range keys {
		r.send(r0(fmt.Sprintf("k%02d", i), "count"))
	}
	r.waitLines("log rec", 2*keys)
	r.stop() // the last checkpoint: every key's new version, its mark below the new position

	db, err := store.Open(filepath.Join(dir, "db"), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	streams, err := db.Streams("timers")
	if err != nil || len(streams) != 1 {
		t.Fatalf("streams %v, %v; want one", streams, err)
	}
	s := streams[0].ID
	pos, _, err := db.Position("timers", s)
	if err != nil {
		t.Fatal(err)
	}
	if pos.Next != 2*keys {
		t.Fatalf("position %+v, want Next %d", pos, 2*keys)
	}
	for i := range keys {
		key := []byte(fmt.Sprintf("k%02d", i))
		mark, v, ok, err := db.MarkInfo("timers", s, key)
		switch {
		case err != nil:
			t.Fatal(err)
		case !ok:
			t.Errorf("key %s: no mark (state %q)", key, getState(t, db, s, key, "records"))
		case v != 2:
			t.Errorf("key %s: version %d, want 2", key, v)
		case mark >= pos.Next:
			t.Errorf("key %s: mark %d at or above Next %d", key, mark, pos.Next)
		}
		if got := getState(t, db, s, key, "records"); got != "2" {
			t.Errorf("key %s: records = %q, want 2", key, got)
		}
	}
	n := 0
	if err := db.KeysWithVersionNot("timers", s, 2, func([]byte, uint32) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d keys left for a migration to version 2, want 0", n)
	}
}

func getState(t *testing.T, db *store.DB, s uint32, key []byte, name string) string {
	t.Helper()
	v, ok, err := db.Get("timers", s, key, []byte(name))
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "(none)"
	}
	return string(v)
}
