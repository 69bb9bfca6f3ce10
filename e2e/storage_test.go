package e2e

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// storeFixture is a data directory that a clean run of the real binary left over 1000 users.
type storeFixture struct {
	bin, cfg, dir, data, state string
	want                       wordcountExpect
}

func newStoreFixture(t *testing.T) storeFixture {
	t.Helper()
	f := storeFixture{bin: guestbuild.Binary(t), dir: t.TempDir()}
	module := guestbuild.Go(t, "wordcount")
	input := filepath.Join(f.dir, "input.ndjson")
	f.want = writeWordcountInput(t, input, 5000, 1000, 3)
	f.cfg = writeConfig(t, f.dir, module, input, filepath.Join(f.dir, "out.ndjson"), "")
	f.data = filepath.Join(f.dir, "data")
	f.state = filepath.Join(f.data, "state")
	if code, _, stderr := f.run(t, "run", "-c", f.cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	return f
}

// run runs the binary and returns its exit status and outputs.
func (f storeFixture) run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(f.bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

// tables returns the store's table files, largest first.
func (f storeFixture) tables(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(f.state, "*.sst"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no table files in the store (%v)", err)
	}
	size := func(p string) int64 {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	slices.SortFunc(paths, func(a, b string) int { return int(size(b) - size(a)) })
	return paths
}

// refused checks that state and run both fail without output and with a message that holds
// every one of want, and no Go panic.
func (f storeFixture) refused(t *testing.T, want ...string) {
	t.Helper()
	for _, args := range [][]string{
		{"state", "-c", f.cfg, "--task", "wc"},
		{"run", "-c", f.cfg, "--log-level", "error"},
	} {
		code, stdout, stderr := f.run(t, args...)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\nstderr:\n%s", args[0], code, stderr)
		}
		if args[0] == "state" && stdout != "" {
			t.Errorf("state printed %d bytes of partial results", len(stdout))
		}
		for _, w := range append(want, "--reset-state") {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", args[0], w, stderr)
			}
		}
		if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
			t.Errorf("%s: Go panic:\n%s", args[0], stderr)
		}
	}
}

// TestStorageCorruptTable flips 4 bytes in the middle of a table file: state and run must refuse
// the store naming the file, instead of showing or running on part of the state.
func TestStorageCorruptTable(t *testing.T) {
	f := newStoreFixture(t)
	sst := f.tables(t)[0]
	b, err := os.ReadFile(sst)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		b[len(b)/3+i] ^= 0x5a
	}
	if err := os.WriteFile(sst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f.refused(t, filepath.Base(sst), "corrupt")
	if _, err := os.Stat(sst); err != nil {
		t.Errorf("the corrupt table is gone: %v", err)
	}
}

// TestStorageTruncatedTable cuts a table file in half: a named error, not a panic.
func TestStorageTruncatedTable(t *testing.T) {
	f := newStoreFixture(t)
	sst := f.tables(t)[0]
	st, err := os.Stat(sst)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(sst, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.refused(t, filepath.Base(sst), "corrupt")
}

// TestStorageLostManifest deletes, then empties the MANIFEST: the store must be refused, not
// reopened empty (which would also delete its tables).
func TestStorageLostManifest(t *testing.T) {
	f := newStoreFixture(t)
	manifest := filepath.Join(f.state, "MANIFEST")
	saved, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	tables := f.tables(t)
	for _, damage := range []func() error{
		func() error { return os.Remove(manifest) },
		func() error { return os.WriteFile(manifest, nil, 0o644) },
		func() error { return os.WriteFile(manifest, saved[:5], 0o644) },
	} {
		if err := damage(); err != nil {
			t.Fatal(err)
		}
		f.refused(t, "MANIFEST", f.state)
		for _, p := range tables {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("table %s is gone: %v", filepath.Base(p), err)
			}
		}
	}
	// Restored, the store is whole again.
	if err := os.WriteFile(manifest, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	if diffs := diffState(f.want, readState(t, f.data, "wc")); len(diffs) > 0 {
		t.Fatalf("state after restoring the MANIFEST differs: %v", diffs[:min(len(diffs), 10)])
	}
}

// TestStorageResetState moves a damaged store aside with run --reset-state and starts afresh.
func TestStorageResetState(t *testing.T) {
	f := newStoreFixture(t)
	if err := os.Remove(filepath.Join(f.state, "MANIFEST")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := f.run(t, "run", "-c", f.cfg, "--log-level", "warn", "--reset-state")
	if code != 0 {
		t.Fatalf("run --reset-state: exit %d\n%s", code, stderr)
	}
	aside, _ := filepath.Glob(filepath.Join(f.data, "state.damaged-*[^D]")) // not its .STORE-ID
	if len(aside) != 1 {
		t.Fatalf("damaged store not moved aside: %v\n%s", aside, stderr)
	}
	if !strings.Contains(stderr, aside[0]) {
		t.Errorf("run does not say where the damaged store went:\n%s", stderr)
	}
	if diffs := diffState(f.want, readState(t, f.data, "wc")); len(diffs) > 0 {
		t.Fatalf("state after the reset differs: %v", diffs[:min(len(diffs), 10)])
	}
}

// TestStorageStateDirectoryGone deletes the whole state directory, then every file in it,
// keeping the rest of the data directory: the host must refuse to start afresh (which would
// reprocess every input), and --reset-state then starts over exactly.
func TestStorageStateDirectoryGone(t *testing.T) {
	f := newStoreFixture(t)
	if err := os.RemoveAll(f.state); err != nil {
		t.Fatal(err)
	}
	f.refused(t, f.state, "missing")
	if err := os.Mkdir(f.state, 0o755); err != nil {
		t.Fatal(err)
	}
	f.refused(t, f.state)
	code, _, stderr := f.run(t, "run", "-c", f.cfg, "--log-level", "warn", "--reset-state")
	if code != 0 {
		t.Fatalf("run --reset-state: exit %d\n%s", code, stderr)
	}
	if diffs := diffState(f.want, readState(t, f.data, "wc")); len(diffs) > 0 {
		t.Fatalf("state after the reset differs: %v", diffs[:min(len(diffs), 10)])
	}
}

// TestStorageStateAfterKill reads the state of a host killed with SIGKILL.
func TestStorageStateAfterKill(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	writeWordcountInput(t, input, 400_000, 1000, 5)
	cfg := writeConfig(t, dir, module, input, output, "")
	cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Outputs are written before their checkpoint commits: wait for several checkpoints' worth.
	for i := 0; i < 20; i++ {
		waitGrowth(output, done)
	}
	// While the host runs, state refuses clearly.
	f := storeFixture{bin: bin}
	code, _, stderr := f.run(t, "state", "-c", cfg)
	if code != 1 || !strings.Contains(stderr, "in use by a running host") {
		t.Errorf("state while a host runs: exit %d\n%s", code, stderr)
	}
	select {
	case err := <-done:
		t.Fatalf("the run ended before its kill: %v", err)
	default:
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done

	code, stdout, stderr := f.run(t, "state", "-c", cfg)
	if code != 0 || stdout != "wc\n" {
		t.Fatalf("state after SIGKILL: exit %d, stdout %q\nstderr:\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = f.run(t, "state", "-c", cfg, "--task", "wc")
	if code != 0 || stdout == "" {
		t.Fatalf("state --task after SIGKILL: exit %d, %d bytes\nstderr:\n%s", code, len(stdout), stderr)
	}
	st, _ := os.Stat(output)
	t.Logf("state after SIGKILL (%d output bytes): %d bytes", st.Size(), len(stdout))
}

// TestStorageDiskFull fills the data directory's file system to the last byte while a host runs:
// the host must stop with exit 1 and a "disk full" message naming the store, not die of SIGBUS
// (as it did at its next checkpoint, or when closing wrote the memtable to a table), and after
// space is freed a rerun must finish with the exact state and no output lost. It mounts a
// small tmpfs, so it needs root (CI runs as root).
func TestStorageDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs for the data directory")
	}
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=160m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, b)
	}
	t.Cleanup(func() {
		if b, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, b)
		}
	})
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	want := writeWordcountInput(t, input, 20_000, 1000, 9)
	// The data directory on the tmpfs; the compilation cache and the output elsewhere.
	cfg := writeConfig(t, dir, module, input, output, "cache_dir: "+filepath.Join(dir, "cache")+"\n")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), "\n") // writeConfig's data_dir line
	if err := os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(mnt, "data")+"\n"+rest), 0o644); err != nil {
		t.Fatal(err)
	}
	f := storeFixture{bin: bin}
	if code, _, stderr := f.run(t, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	writeMore(t, input, want, rand.New(rand.NewPCG(1, 2)), 80_000)

	cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitGrowth(output, done)
	filler := filepath.Join(mnt, "filler")
	fill(t, filler, mnt, 0)
	err = <-done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("run on a full disk: %v, want exit 1\n%s", err, stderr.String())
	}
	state := filepath.Join(mnt, "data", "state")
	for _, w := range []string{"disk full", state} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := f.run(t, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run after freeing space: exit %d\n%s", code, stderr)
	}
	if diffs := diffState(want, readState(t, filepath.Join(mnt, "data"), "wc")); len(diffs) > 0 {
		t.Fatalf("state after the disk-full stop differs: %v", diffs[:min(len(diffs), 10)])
	}
	checkOutputs(t, output, want)
}

// fill writes path until the file system of dir has only leave bytes free, or none.
func fill(t *testing.T, path, dir string, leave int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	n := int64(st.Bavail)*int64(st.Bsize) - leave
	if n <= 0 {
		return
	}
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	chunk := make([]byte, 1<<20)
	for n > 0 {
		w := min(n, int64(len(chunk)))
		if _, err := file.Write(chunk[:w]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return // the host wrote meanwhile: the disk is full all the same
			}
			t.Fatal(err)
		}
		n -= w
	}
}
