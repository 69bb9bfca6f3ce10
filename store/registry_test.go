package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func moduleBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func mustAdd(t *testing.T, db *DB, task string, wasm []byte, origin string, keep int) ModuleVersion {
	t.Helper()
	mv, err := db.AddModule(task, wasm, ModuleVersion{Created: 1000, ABIVersion: 1, Origin: origin,
		Exports: []string{"memory", "wasmstream_process"}, Imports: []string{"wasmstream_v0.emit"}}, keep)
	if err != nil {
		t.Fatalf("AddModule: %v", err)
	}
	return mv
}

func versionNumbers(t *testing.T, db *DB, task string) []uint64 {
	t.Helper()
	vs, err := db.ModuleVersions(task)
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, v := range vs {
		out = append(out, v.Version)
	}
	return out
}

func TestRegistryRoundTripAndReopen(t *testing.T) {
	dir := t.TempDir()
	// A small transaction limit: the 700 KB module is stored in many pieces.
	db := openTestDBAt(t, dir, Options{MaxTxnBytes: 64 << 10})
	small, big := moduleBytes(1, 10), moduleBytes(2, 700_000)
	v1 := mustAdd(t, db, "wc", small, "file", 0)
	v2 := mustAdd(t, db, "wc", big, "deploy", 0)
	empty := mustAdd(t, db, "other", nil, "deploy", 0)
	if v1.Version != 1 || v2.Version != 2 || empty.Version != 1 {
		t.Fatalf("versions %d, %d, %d; want 1, 2 and 1 (numbered per task)", v1.Version, v2.Version, empty.Version)
	}
	if v2.SHA256 != sha256.Sum256(big) || v2.Size != int64(len(big)) {
		t.Errorf("version 2 hash/size = %x/%d", v2.SHA256, v2.Size)
	}
	if err := db.SetActiveModule("wc", ActiveModule{Version: 2, Since: 5, Origin: "deploy"}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, db)

	db = openTestDBAt(t, dir, Options{ReadOnly: true})
	got, err := db.ModuleBytes(v2.SHA256)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("ModuleBytes(v2) after reopen: %d bytes, %v", len(got), err)
	}
	if got, err := db.ModuleBytes(empty.SHA256); err != nil || len(got) != 0 || got == nil {
		t.Errorf("ModuleBytes(empty module) = %v, %v; want empty, non-nil", got, err)
	}
	vs, err := db.ModuleVersions("wc")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(vs, []ModuleVersion{v1, v2}) {
		t.Errorf("ModuleVersions = %+v\nwant %+v", vs, []ModuleVersion{v1, v2})
	}
	if mv, ok, err := db.ModuleVersion("wc", 1); err != nil || !ok || !reflect.DeepEqual(mv, v1) {
		t.Errorf("ModuleVersion(1) = %+v, %v, %v", mv, ok, err)
	}
	if _, ok, err := db.ModuleVersion("wc", 3); err != nil || ok {
		t.Errorf("ModuleVersion(3) = %v, %v; want not found", ok, err)
	}
	a, ok, err := db.ActiveModule("wc")
	if err != nil || !ok || a != (ActiveModule{Version: 2, Since: 5, Origin: "deploy"}) {
		t.Errorf("ActiveModule = %+v, %v, %v", a, ok, err)
	}
	if _, ok, _ := db.ActiveModule("other"); ok {
		t.Error("task other has an active version though none was set")
	}
	if _, err := db.AddModule("wc", small, ModuleVersion{}, 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("AddModule on a read-only store: %v, want ErrReadOnly", err)
	}
}

func TestRegistryActiveMustExist(t *testing.T) {
	db := openTestDB(t, Options{InMemory: true})
	mustAdd(t, db, "wc", moduleBytes(1, 10), "file", 0)
	err := db.SetActiveModule("wc", ActiveModule{Version: 2})
	if !errors.Is(err, ErrNoSuchVersion) {
		t.Fatalf("SetActiveModule(2) = %v, want ErrNoSuchVersion", err)
	}
	if _, ok, _ := db.ActiveModule("wc"); ok {
		t.Error("a refused SetActiveModule left an active version")
	}
}

func TestRegistryPrunesButKeepsActiveAndSharedBytes(t *testing.T) {
	db := openTestDB(t, Options{})
	mods := make([][]byte, 8)
	for i := range mods {
		mods[i] = moduleBytes(uint64(i), 1000+i)
	}
	// Task "b" shares the bytes of "a"'s version 2.
	mustAdd(t, db, "b", mods[1], "deploy", 3)
	for i := 0; i < 3; i++ {
		mustAdd(t, db, "a", mods[i], "deploy", 3)
	}
	if err := db.SetActiveModule("a", ActiveModule{Version: 1, Origin: "rollback"}); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		mustAdd(t, db, "a", mods[i], "deploy", 3)
	}
	// Keep 3: versions 4, 5, 6, and the active version 1.
	if got, want := versionNumbers(t, db, "a"), []uint64{1, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Fatalf("versions after pruning = %v, want %v", got, want)
	}
	if _, err := db.ModuleBytes(sha256.Sum256(mods[2])); !errors.Is(err, ErrNoSuchModule) {
		t.Errorf("bytes of pruned version 3: %v, want ErrNoSuchModule", err)
	}
	if b, err := db.ModuleBytes(sha256.Sum256(mods[1])); err != nil || !bytes.Equal(b, mods[1]) {
		t.Errorf("bytes of pruned version 2, still used by task b: %v", err)
	}
	// Numbers are never reused: the next version is 7.
	if mv := mustAdd(t, db, "a", mods[6], "deploy", 3); mv.Version != 7 {
		t.Errorf("next version = %d, want 7", mv.Version)
	}
	// keep ≤ 0 keeps everything.
	mustAdd(t, db, "a", mods[7], "deploy", 0)
	if got := versionNumbers(t, db, "a"); len(got) != 5 {
		t.Errorf("versions with keep 0 = %v, want 5 of them", got)
	}
	// checkDB (at cleanup) verifies no bytes are left without a version.
}

func TestRegistryDeletesOrphanedBytes(t *testing.T) {
	db := openTestDB(t, Options{})
	// A crash between writing a module's pieces and its version record leaves orphaned bytes.
	orphan := sha256.Sum256([]byte("orphan"))
	err := db.bdb.Update(func(txn *badger.Txn) error {
		return txn.Set(appendModuleChunkKey(nil, orphan, 0), []byte("orphan"))
	})
	if err != nil {
		t.Fatal(err)
	}
	mustAdd(t, db, "a", moduleBytes(1, 10), "deploy", 0)
	if _, err := db.ModuleBytes(orphan); !errors.Is(err, ErrNoSuchModule) {
		t.Errorf("orphaned bytes after AddModule: %v, want deleted", err)
	}
}

func TestRegistryDetectsCorruptBytes(t *testing.T) {
	db := openTestDB(t, Options{MaxTxnBytes: 64 << 10})
	mv := mustAdd(t, db, "a", moduleBytes(1, 100_000), "deploy", 0)
	err := db.bdb.Update(func(txn *badger.Txn) error {
		return txn.Set(appendModuleChunkKey(nil, mv.SHA256, 1), []byte("flipped"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ModuleBytes(mv.SHA256); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ModuleBytes of altered bytes = %v, want ErrCorrupt", err)
	}
	// Put it back so the cleanup check passes.
	mustAdd(t, db, "a", moduleBytes(1, 100_000), "deploy", 0)
}

// The registry's byte layout, as the package documentation gives it.
func TestRegistryLayoutGolden(t *testing.T) {
	mv := ModuleVersion{Version: 2, SHA256: [32]byte{0xaa, 31: 0xbb}, Size: 3, Created: 4, ABIVersion: 1,
		Origin: "x", Exports: []string{"m"}, Imports: nil}
	for _, c := range []struct{ name, got, want string }{
		{"version key", hex.EncodeToString(appendVersionKey(nil, "wc", 2)), "72" + "0002" + "7763" + "0000000000000002"},
		{"active key", hex.EncodeToString(appendActiveKey(nil, "wc")), "61" + "0002" + "7763"},
		{"module key", hex.EncodeToString(appendModuleChunkKey(nil, mv.SHA256, 1)), "62" + "aa" + "000000000000000000000000000000000000000000000000000000000000" + "bb" + "00000001"},
		{"version value", hex.EncodeToString(appendVersionValue(nil, mv)),
			"0000000000000002" + "aa" + "000000000000000000000000000000000000000000000000000000000000" + "bb" +
				"0000000000000003" + "0000000000000004" + "00000001" + "00000001" + "78" +
				"00000001" + "00000001" + "6d" + "00000000"},
		{"active value", hex.EncodeToString(appendActiveValue(nil, ActiveModule{Version: 2, Since: 5, Origin: "x"})),
			"0000000000000002" + "0000000000000005" + "00000001" + "78"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %s\nwant %s", c.name, c.got, c.want)
		}
	}
	back, err := decodeVersionValue(appendVersionValue(nil, mv))
	if err != nil || !reflect.DeepEqual(back, mv) {
		t.Errorf("version value round trip = %+v, %v", back, err)
	}
	for n := range len(appendVersionValue(nil, mv)) {
		if _, err := decodeVersionValue(appendVersionValue(nil, mv)[:n]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decoding %d-byte prefix: %v, want ErrCorrupt", n, err)
		}
	}
}

// TestRegistryModuleStatus: a version's status survives a reopen; records without one decode
// as before; a status of a version that does not exist is an error.
func TestRegistryModuleStatus(t *testing.T) {
	dir := t.TempDir()
	db := openTestDBAt(t, dir, Options{})
	v1 := mustAdd(t, db, "wc", moduleBytes(1, 10), "file", 0)
	v2 := mustAdd(t, db, "wc", moduleBytes(2, 10), "deploy", 0)
	if err := db.SetModuleStatus("wc", v1.Version, ModuleStatus{State: ModuleGood, At: 5}); err != nil {
		t.Fatal(err)
	}
	bad := ModuleStatus{State: ModuleBad, At: 6, Reason: "init trapped: unreachable"}
	if err := db.SetModuleStatus("wc", v2.Version, bad); err != nil {
		t.Fatal(err)
	}
	if err := db.SetModuleStatus("wc", 9, bad); !errors.Is(err, ErrNoSuchVersion) {
		t.Errorf("status of version 9: %v, want ErrNoSuchVersion", err)
	}
	mustClose(t, db)
	db = openTestDBAt(t, dir, Options{})
	vs, err := db.ModuleVersions("wc")
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0].Status != (ModuleStatus{State: ModuleGood, At: 5}) || vs[1].Status != bad {
		t.Fatalf("versions after reopen: %+v", vs)
	}
	if vs[1].Origin != "deploy" || vs[1].Size != 10 || len(vs[1].Imports) != 1 {
		t.Errorf("the status changed the rest of the record: %+v", vs[1])
	}
}
