package host_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// TestBadModuleFileFallsBack: a task that follows its module file gets a file whose init
// exits. The start falls back to the version before, marks the file's version bad and keeps
// following the file: the bad bytes are not registered or tried again, and a fixed file is
// run at the next start.
func TestBadModuleFileFallsBack(t *testing.T) {
	dir := t.TempDir()
	base := versionedModule(t)
	modPath := filepath.Join(dir, "versioned.wasm")
	input := filepath.Join(dir, "in.ndjson")
	dataDir := filepath.Join(dir, "data")
	lines, n := "", 0
	run := func(module []byte, records int) {
		t.Helper()
		if err := os.WriteFile(modPath, module, 0o644); err != nil {
			t.Fatal(err)
		}
		for n < records {
			n++
			lines += `{"k":"a","v":"` + strconv.Itoa(n) + `"}` + "\n"
		}
		if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
			t.Fatal(err)
		}
		h, err := host.New(host.Config{DataDir: dataDir, Logger: quietLogger(t), Tasks: []host.TaskConfig{{
			Name: "versioned", Module: modPath,
			Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "k", ValueField: "v"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Run(context.Background()); err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	versions := func() string {
		t.Helper()
		vs, err := host.OfflineVersions(dataDir, "versioned")
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, v := range vs {
			b.WriteString(strconv.FormatInt(v.Version, 10) + " " + v.Status)
			if v.Active {
				b.WriteString(" active by " + v.ActiveOrigin)
			}
			b.WriteString("; ")
		}
		return b.String()
	}

	run(guestbuild.Retag(t, base, 1), 2)
	if got, want := versions(), "1 good active by file; "; got != want {
		t.Fatalf("after the first run: %s, want %s", got, want)
	}
	bad := modrtFixture(t, "initexit.wasm")
	run(bad, 3)
	if got, want := versions(), "1 good active by file; 2 bad; "; got != want {
		t.Fatalf("after a bad file: %s, want %s", got, want)
	}
	run(bad, 4)
	if got, want := versions(), "1 good active by file; 2 bad; "; got != want {
		t.Fatalf("after the bad file again: %s, want %s", got, want)
	}
	run(guestbuild.Retag(t, base, 3), 5)
	if got, want := versions(), "1 good; 2 bad; 3 good active by file; "; got != want {
		t.Fatalf("after a fixed file: %s, want %s", got, want)
	}
	outs := readOutputs(t, filepath.Join(dir, "out.ndjson"))
	if len(outs) != 5 {
		t.Fatalf("%d outputs, want one per record (5): %v", len(outs), outs)
	}
	for i, o := range outs {
		if strings.Contains(o.Value, "violation") {
			t.Errorf("output %d: %s", i, o.Value)
		}
	}
}

// TestRuntimeFailureHaltsAlone: a task that fails while running (its input cannot be opened)
// halts; the other task processes its whole input and Run then returns the failure, naming
// the task. With halt_host Run returns the failure too (the other task is stopped: how far it
// got is a race, so it is not checked).
func TestRuntimeFailureHaltsAlone(t *testing.T) {
	const records = 2000
	for _, policy := range []host.TaskFailure{"", host.HaltHost} {
		t.Run("on_task_failure="+string(policy), func(t *testing.T) {
			dir := t.TempDir()
			var lines strings.Builder
			for i := 1; i <= records; i++ {
				lines.WriteString(`{"k":"k` + strconv.Itoa(i%7) + `","v":"` + strconv.Itoa(i/7+1) + `"}` + "\n")
			}
			input := filepath.Join(dir, "in.ndjson")
			if err := os.WriteFile(input, []byte(lines.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			module := filepath.Join(dir, "versioned.wasm")
			if err := os.WriteFile(module, versionedModule(t), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out.ndjson")
			h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Logger: quietLogger(t), OnTaskFailure: policy,
				Tasks: []host.TaskConfig{{
					Name: "broken", Module: module,
					Inputs: []host.InputConfig{{Name: "in", Path: filepath.Join(dir, "missing.ndjson")}},
					Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "broken.ndjson")},
				}, {
					Name: "ok", Module: module, Workers: 1, MaxBatchRecords: 1,
					Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "k", ValueField: "v"}},
					Output: host.OutputConfig{Type: "file", Path: out},
				}}})
			if err != nil {
				t.Fatal(err)
			}
			err = h.Run(context.Background())
			var te *host.TaskError
			if !errors.As(err, &te) || te.Task != "broken" || !strings.Contains(err.Error(), "missing.ndjson") {
				t.Fatalf("Run = %v, want the broken task's error", err)
			}
			if n := len(readOutputs(t, out)); policy == "" && n != records {
				t.Errorf("the healthy task wrote %d outputs, want %d", n, records)
			}
		})
	}
}

// TestDamagedActiveVersionFallsBack: the stored bytes of the active version are damaged on
// disk. The start marks the version bad with the reason and runs the version before it.
func TestDamagedActiveVersionFallsBack(t *testing.T) {
	dir := t.TempDir()
	base := versionedModule(t)
	module := filepath.Join(dir, "versioned.wasm")
	if err := os.WriteFile(module, guestbuild.Retag(t, base, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"k":"a","v":"1"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), Logger: quietLogger(t), Tasks: []host.TaskConfig{{
		Name: "versioned", Module: module,
		Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "k", ValueField: "v"}},
		Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
	}}}
	run := func() error {
		h, err := host.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return h.Run(context.Background())
	}
	if err := run(); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(cfg.DataDir, "state")
	db, err := store.Open(stateDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v2 := guestbuild.Retag(t, base, 2)
	mv, err := db.AddModule("versioned", v2, store.ModuleVersion{Origin: host.OriginDeploy}, 0)
	if err == nil {
		err = db.SetActiveModule("versioned", store.ActiveModule{Version: mv.Version, Origin: host.OriginDeploy})
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	// Damage version 2's bytes: the first piece of the module (registry layout: 'b', SHA-256,
	// piece number).
	bdb, err := badger.Open(badger.DefaultOptions(stateDir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(v2)
	key := append(append([]byte{'b'}, sum[:]...), 0, 0, 0, 0)
	err = bdb.Update(func(txn *badger.Txn) error { return txn.Set(key, []byte("damaged")) })
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(input, []byte(`{"k":"a","v":"1"}`+"\n"+`{"k":"a","v":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(); err != nil {
		t.Fatalf("Run with the active version damaged: %v", err)
	}
	vs, err := host.OfflineVersions(cfg.DataDir, "versioned")
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || !vs[0].Active || vs[0].ActiveOrigin != host.OriginAutoRollback ||
		vs[1].Status != "bad" || !strings.Contains(vs[1].Reason, "does not hash") {
		t.Fatalf("versions: %+v", vs)
	}
	outs := readOutputs(t, filepath.Join(dir, "out.ndjson"))
	if len(outs) != 2 || !strings.HasSuffix(outs[1].Value, "000001 2") {
		t.Fatalf("outputs %+v, want the second record run by version 1", outs)
	}
}
