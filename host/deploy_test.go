package host_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// versionedModule builds testguests/versioned and returns its bytes.
func versionedModule(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(guestbuild.Go(t, "testguests/versioned"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// feeder writes records {"k": key, "v": seq} to a task's stdin input, round-robin over keys,
// until it is stopped and has written at least min records; then it closes the input.
type feeder struct {
	pw     *io.PipeWriter
	keys   int
	min    int
	stop   chan struct{}
	done   chan struct{}
	perKey map[string]int // the feeder's until done is closed
	n      int
	pause  time.Duration // after each 1000 records (newPacedFeeder)
	count  atomic.Int64  // n, for other goroutines
}

func newFeeder(keys, min int) (*feeder, io.Reader) {
	pr, pw := io.Pipe()
	f := &feeder{pw: pw, keys: keys, min: min, stop: make(chan struct{}), done: make(chan struct{}), perKey: map[string]int{}}
	go f.run()
	return f, pr
}

// newPacedFeeder is newFeeder writing 1000 records every pause at most.
func newPacedFeeder(keys, min int, pause time.Duration) (*feeder, io.Reader) {
	pr, pw := io.Pipe()
	f := &feeder{pw: pw, keys: keys, min: min, stop: make(chan struct{}), done: make(chan struct{}), perKey: map[string]int{}, pause: pause}
	go f.run()
	return f, pr
}

func (f *feeder) run() {
	defer close(f.done)
	w := bufio.NewWriterSize(f.pw, 64<<10)
	stopped := false
	for {
		if !stopped {
			select {
			case <-f.stop:
				stopped = true
			default:
			}
		}
		if stopped && f.n >= f.min {
			break
		}
		for range 1000 {
			k := "k" + strconv.Itoa(f.n%f.keys)
			f.perKey[k]++
			fmt.Fprintf(w, `{"k":%q,"v":"%d"}`+"\n", k, f.perKey[k])
			f.n++
		}
		if err := w.Flush(); err != nil {
			return // the host stopped reading
		}
		f.count.Store(int64(f.n))
		if f.pause > 0 {
			time.Sleep(f.pause)
		}
	}
	w.Flush()
	f.pw.Close()
}

// finish stops the feeder once it wrote its minimum and waits for it.
func (f *feeder) finish() {
	close(f.stop)
	<-f.done
}

// checkVersions asserts exactly-once and per-key version order on the outputs of
// testguests/versioned: every key's outputs are "<tag> 1", "<tag> 2", … up to the number of its
// records, and its tags follow the order versions were activated in (old-version effects
// strictly before new-version ones). It returns how many outputs each tag has.
func checkVersions(t *testing.T, outs []output, perKey map[string]int, activations []string) map[string]int {
	t.Helper()
	next := map[string]int{}
	at := map[string]int{} // per key: index in activations of its current version
	byTag := map[string]int{}
	for _, o := range outs {
		tag, rest, _ := strings.Cut(o.Value, " ")
		if strings.HasPrefix(rest, "violation") {
			t.Fatalf("key %s: the guest saw a record lost, repeated or out of order: %s", o.Key, o.Value)
		}
		n, err := strconv.Atoi(rest)
		if err != nil || n != next[o.Key]+1 {
			t.Fatalf("key %s: output %q after %d: an output lost or repeated", o.Key, o.Value, next[o.Key])
		}
		next[o.Key] = n
		i := at[o.Key]
		for i < len(activations) && activations[i] != tag {
			i++
		}
		if i == len(activations) {
			t.Fatalf("key %s: output %q on version %s after an output on %s: versions %v", o.Key, o.Value, tag, activations[at[o.Key]], activations)
		}
		at[o.Key] = i
		byTag[tag]++
	}
	for k, n := range perKey {
		if next[k] != n {
			t.Fatalf("key %s: %d outputs for %d records", k, next[k], n)
		}
	}
	if perKey != nil && len(next) != len(perKey) {
		t.Fatalf("outputs for %d keys, records for %d", len(next), len(perKey))
	}
	return byTag
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func versionedTask(t *testing.T, dir string, module []byte) host.TaskConfig {
	t.Helper()
	path := filepath.Join(dir, "versioned.wasm")
	if err := os.WriteFile(path, module, 0o644); err != nil {
		t.Fatal(err)
	}
	return host.TaskConfig{
		Name:   "versioned",
		Module: path,
		Inputs: []host.InputConfig{{Name: "in", Type: "stdin", KeyField: "k", ValueField: "v"}},
		Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
	}
}

// S19 under load: 20 deploys and 5 rollbacks while records flow (4 and 1 over 200,000 records
// unless hosttest.Long: each deploy compiles a 2 MB module). Every record's output appears
// exactly once, state is kept across versions, and per key every output of a version precedes
// every output of the versions activated after it.
func TestHotDeployUnderLoad(t *testing.T) {
	base := versionedModule(t)
	dir := t.TempDir()
	const keys = 1000
	minRecords, deploys := hosttest.Scale(200_000, 1_000_000), hosttest.Scale(4, 20)
	tc := versionedTask(t, dir, guestbuild.Retag(t, base, 0))
	feed, stdin := newFeeder(keys, minRecords)
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin,
		CheckpointInterval: 100 * time.Millisecond, Logger: quietLogger(t), Tasks: []host.TaskConfig{tc}})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	activations := []string{guestbuild.VersionTag(0)}
	tagOf := map[int64]string{1: guestbuild.VersionTag(0)}
	active := int64(1)
	var latencies, validations, switchToFirst []time.Duration
	startStats := h.Stats()[0]
	start := time.Now()
	live := func(d *host.Deployment) {
		t.Helper()
		first, err := d.FirstBatch(ctx)
		if err != nil {
			t.Fatalf("version %d: %v", d.Version.Version, err)
		}
		latencies = append(latencies, first.Sub(d.Requested))
		validations = append(validations, d.Switched.Sub(d.Requested))
		switchToFirst = append(switchToFirst, first.Sub(d.Switched))
		if got := h.Stats()[0].Version; got != d.Version.Version {
			t.Fatalf("Stats().Version = %d after switching to %d", got, d.Version.Version)
		}
	}
	for gen := 1; gen <= deploys; gen++ {
		d, err := h.Deploy(ctx, "versioned", guestbuild.Retag(t, base, gen))
		if err != nil {
			t.Fatalf("deploy %d: %v", gen, err)
		}
		tagOf[d.Version.Version] = guestbuild.VersionTag(gen)
		activations = append(activations, guestbuild.VersionTag(gen))
		if d.Previous != active || d.Unchanged || !d.Version.Active || d.Version.Origin != host.OriginDeploy {
			t.Fatalf("deploy %d over version %d: %+v", gen, active, d)
		}
		active = d.Version.Version
		live(d)
		if gen%4 == 0 {
			d, err := h.Rollback(ctx, "versioned", 0)
			if err != nil {
				t.Fatalf("rollback after deploy %d: %v", gen, err)
			}
			if d.Version.Version != d.Previous-1 {
				t.Fatalf("rollback from %d went to %d, want %d", d.Previous, d.Version.Version, d.Previous-1)
			}
			activations = append(activations, tagOf[d.Version.Version])
			active = d.Version.Version
			live(d)
		}
	}
	elapsed := time.Since(start)
	endStats := h.Stats()[0]
	feed.finish()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	outs := readOutputs(t, tc.Output.Path)
	byTag := checkVersions(t, outs, feed.perKey, activations)
	if len(outs) != feed.n {
		t.Fatalf("%d outputs for %d records", len(outs), feed.n)
	}
	for _, tag := range activations {
		if byTag[tag] == 0 {
			t.Errorf("no record ran on %s", tag)
		}
	}
	// State is kept: each key's count is its number of records.
	checkCounts(t, filepath.Join(dir, "data"), "versioned", feed.perKey)

	during := float64(endStats.Processed-startStats.Processed) / elapsed.Seconds()
	t.Logf("%d records, %d keys; %d deploys + %d rollbacks in %s (Go guest, %d KiB)",
		feed.n, keys, deploys, deploys/4, elapsed.Round(time.Millisecond), len(base)>>10)
	t.Logf("switch latency, request → first batch on the new version: p50 %s p99 %s (validation: compile + trial instance, p50 %s p99 %s)",
		percentile(latencies, .5).Round(time.Microsecond), percentile(latencies, .99).Round(time.Microsecond),
		percentile(validations, .5).Round(time.Microsecond), percentile(validations, .99).Round(time.Microsecond))
	t.Logf("switch → first batch on the new version (instantiation included): p50 %s p99 %s",
		percentile(switchToFirst, .5).Round(time.Microsecond), percentile(switchToFirst, .99).Round(time.Microsecond))
	t.Logf("throughput during deploys: %.0f records/s (without: BenchmarkHotDeployThroughput)", during)
}

// checkCounts asserts the versioned guest's state: n of every key is its record count.
func checkCounts(t *testing.T, dataDir, task string, perKey map[string]int) {
	t.Helper()
	sr, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close()
	got := map[string]int{}
	err = sr.Scan(task, nil, false, func(e host.StateEntry) bool {
		if string(e.Name) == "n" {
			got[string(e.Key)], _ = strconv.Atoi(string(e.Value))
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range perKey {
		if got[k] != n {
			t.Fatalf("state of key %s: n = %d, want %d", k, got[k], n)
		}
	}
}

// quietLogger logs warnings and errors only: a million records make too many info lines.
func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// feedLines is a stdin input the test writes records to, key by key, as it likes.
type feedLines struct {
	pw     *io.PipeWriter
	perKey map[string]int
}

func newFeedLines() (*feedLines, io.Reader) {
	pr, pw := io.Pipe()
	return &feedLines{pw: pw, perKey: map[string]int{}}, pr
}

// write writes one record for each key, in a goroutine: the pipe blocks until the host reads.
func (f *feedLines) write(t *testing.T, keys ...string) <-chan struct{} {
	var b strings.Builder
	for _, k := range keys {
		f.perKey[k]++
		fmt.Fprintf(&b, `{"k":%q,"v":"%d"}`+"\n", k, f.perKey[k])
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.WriteString(f.pw, b.String())
	}()
	return done
}

// liveOn returns a function that takes the results of a deploy or an activation, feeds
// records and waits until a batch ran on the new version: liveOn(t, f)(h.Deploy(…)).
func liveOn(t *testing.T, f *feedLines) func(*host.Deployment, error) *host.Deployment {
	return func(d *host.Deployment, err error) *host.Deployment {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.write(t, "a", "b", "c")
		if _, err := d.FirstBatch(ctx); err != nil {
			t.Fatalf("version %d: %v", d.Version.Version, err)
		}
		return d
	}
}

func e2eFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "e2e", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func modrtFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("internal", "modrt", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// S19: a module that fails validation is refused with its reasons, and the running version
// goes on untouched.
func TestDeployRefusesBadModules(t *testing.T) {
	base := versionedModule(t)
	dir := t.TempDir()
	tc := versionedTask(t, dir, guestbuild.Retag(t, base, 0))
	// The config the running guest ignores and the wordcount guest refuses in its init.
	tc.Config = map[string]any{"min_len": "not a number"}
	feed, stdin := newFeedLines()
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	ctx := context.Background()
	<-feed.write(t, "a")

	wordcount, err := os.ReadFile(guestbuild.Go(t, "wordcount"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		wasm       []byte
	}{
		{"wrong ABI version", "declares ABI 1.0", modrtFixture(t, "badversion.wasm")},
		{"missing export", "module exports no wasmstream_process", modrtFixture(t, "noabi.wasm")},
		{"unknown import", "imports unknown host function wasmstream_v0.frobnicate", modrtFixture(t, "unknownimport.wasm")},
		{"trap in start-up", "trapped", modrtFixture(t, "inittrap.wasm")},
		{"over the memory limit", "memory minimum 2000 pages exceeds the limit of 1024", modrtFixture(t, "bigmem.wasm")},
		{"corrupt bytes", "invalid wasm binary", base[:len(base)/2]},
		{"not wasm at all", "invalid wasm binary", []byte("#!/bin/sh\necho hello\n")},
		{"init fails with the task's config", "min_len", wordcount},
		// Issue 22: an init looping on memory.fill is stopped by its budget (it never answered),
		// tables and nesting are bounded.
		{"init loops on memory.fill", "exceeded its CPU budget", modrtFixture(t, "initfill.wasm")},
		{"over the table limit", "table minimum 50000000 elements exceeds the limit of 100000", e2eFixture(t, "tablebig.wasm")},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.Deploy(ctx, "versioned", c.wasm)
			var refused *host.ModuleRefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("Deploy = %v, want a *ModuleRefusedError", err)
			}
			if !strings.Contains(strings.Join(refused.Problems, "; "), c.want) {
				t.Errorf("problems %q do not mention %q", refused.Problems, c.want)
			}
			if v := h.Stats()[0].Version; v != 1 {
				t.Errorf("running version %d after a refused deploy, want 1", v)
			}
			vs, err := h.Versions("versioned")
			if err != nil || len(vs) != 1 || !vs[0].Active {
				t.Errorf("versions after a refused deploy: %+v, %v; want only version 1, active", vs, err)
			}
		})
	}
	// The running version still processes records.
	<-feed.write(t, "a", "b")
	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	outs := readOutputs(t, tc.Output.Path)
	checkVersions(t, outs, feed.perKey, []string{guestbuild.VersionTag(0)})
}

// S19: the active version survives a restart, overrides the module file, and can be rolled
// back after the restart; a version activated by the file follows the file.
func TestDeployedVersionSurvivesRestart(t *testing.T) {
	base := versionedModule(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	tc := versionedTask(t, dir, guestbuild.Retag(t, base, 0))
	tc.Inputs[0].Continue = true // every run feeds stdin new lines
	var activations []string
	perKey := map[string]int{} // across runs: the guest's state counts on
	run := func(wantVersion int64, during func(h *host.Host, f *feedLines)) {
		t.Helper()
		feed, stdin := newFeedLines()
		feed.perKey = perKey
		h := hosttest.Start(t, host.Config{DataDir: dataDir, Stdin: stdin, Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
		if v := h.Stats()[0].Version; v != wantVersion {
			t.Fatalf("the host started version %d, want %d", v, wantVersion)
		}
		<-feed.write(t, "a", "b")
		during(h.Host, feed)
		feed.pw.Close()
		if err := h.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// Run 1: the module file becomes version 1; deploy 2.
	run(1, func(h *host.Host, f *feedLines) {
		activations = append(activations, guestbuild.VersionTag(0), guestbuild.VersionTag(1))
		d := liveOn(t, f)(h.Deploy(ctx, "versioned", guestbuild.Retag(t, base, 1)))
		if d.Version.Version != 2 || d.Previous != 1 {
			t.Fatalf("deploy: %+v", d)
		}
	})
	// Run 2: version 2 runs, not the file; roll back to 1.
	run(2, func(h *host.Host, f *feedLines) {
		activations = append(activations, guestbuild.VersionTag(0))
		d := liveOn(t, f)(h.Rollback(ctx, "versioned", 0))
		if d.Version.Version != 1 || d.Version.ActiveOrigin != host.OriginRollback {
			t.Fatalf("rollback: %+v", d)
		}
		if _, err := h.Rollback(ctx, "versioned", 0); !errors.Is(err, host.ErrNoEarlierVersion) {
			t.Errorf("rollback from version 1: %v, want ErrNoEarlierVersion", err)
		}
	})
	// Run 3: the rolled-back version runs even though the file changed (it is pinned); then
	// activate 2 again; then make the file's version active: it follows the file from then on.
	if err := os.WriteFile(tc.Module, guestbuild.Retag(t, base, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	run(1, func(h *host.Host, f *feedLines) {
		activations = append(activations, guestbuild.VersionTag(1), guestbuild.VersionTag(3))
		liveOn(t, f)(h.Activate(ctx, "versioned", 2))
		d := liveOn(t, f)(h.ReloadModule(ctx, "versioned"))
		if d.Version.Version != 3 || d.Version.Origin != host.OriginFile {
			t.Fatalf("reload: %+v", d)
		}
		if _, err := h.Activate(ctx, "versioned", 9); !errors.Is(err, host.ErrUnknownVersion) {
			t.Errorf("Activate(9) = %v, want ErrUnknownVersion", err)
		}
	})
	// Run 4: the file changed while the host was down: it is registered as version 4 and runs.
	if err := os.WriteFile(tc.Module, guestbuild.Retag(t, base, 4), 0o644); err != nil {
		t.Fatal(err)
	}
	run(4, func(h *host.Host, f *feedLines) {
		activations = append(activations, guestbuild.VersionTag(4))
		vs, err := h.Versions("versioned")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range vs {
			got = append(got, fmt.Sprintf("%d:%s:%v", v.Version, v.Origin, v.Active))
		}
		if want := "1:file:false 2:deploy:false 3:file:false 4:file:true"; strings.Join(got, " ") != want {
			t.Errorf("versions = %s, want %s", strings.Join(got, " "), want)
		}
	})
	// Every key counted every record once across the four runs and five versions, in order.
	outs := readOutputs(t, tc.Output.Path)
	checkVersions(t, outs, perKey, activations)
}

// Pause stops new batches while records keep arriving; Resume lets them run; nothing is lost.
func TestPauseResume(t *testing.T) {
	dir := t.TempDir()
	tc := versionedTask(t, dir, guestbuild.Retag(t, versionedModule(t), 0))
	feed, stdin := newFeedLines()
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin,
		CheckpointInterval: 10 * time.Millisecond, Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	ctx := context.Background()
	if err := h.Pause(ctx, "versioned"); err != nil {
		t.Fatal(err)
	}
	if !h.Stats()[0].Paused {
		t.Fatal("Stats().Paused is false after Pause")
	}
	<-feed.write(t, "a", "b", "c")
	// The reader took the records (the write returned), but none may run while paused: a
	// deploy, which takes far longer than three records, switches before any of them does.
	d, err := h.Deploy(ctx, "versioned", guestbuild.Retag(t, versionedModule(t), 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Resume(ctx, "versioned"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.FirstBatch(ctx); err != nil {
		t.Fatal(err)
	}
	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := h.Pause(ctx, "versioned"); !errors.Is(err, host.ErrNotRunning) {
		t.Errorf("Pause after Run returned: %v, want ErrNotRunning", err)
	}
	outs := readOutputs(t, tc.Output.Path)
	// All three records ran after the resume, on version 2.
	checkVersions(t, outs, feed.perKey, []string{guestbuild.VersionTag(1)})
}

// Switch latency for a small module (the Rust wordcount, ~47 KB), measured like
// TestHotDeployUnderLoad measures it for the Go guest: 20 deploys and 5 rollbacks under load
// over 200,000 records with hosttest.Long, 4 deploys and 1 rollback over 50,000 records
// otherwise (the records flow for as long as the deploys last). Every record is processed exactly
// once: wordcount emits "<word> <count>", and every record's value is a word of its own
// ("<seq>"), so each output is "<seq> 1", once per record.
func TestHotDeploySmallModule(t *testing.T) {
	base, err := os.ReadFile(guestbuild.Rust(t, "wordcount-rust"))
	if err != nil {
		t.Fatal(err)
	}
	version := func(gen int) []byte { return guestbuild.WithCustomSection(base, fmt.Sprintf("version-%d", gen)) }
	dir := t.TempDir()
	path := filepath.Join(dir, "wordcount.wasm")
	if err := os.WriteFile(path, version(0), 0o644); err != nil {
		t.Fatal(err)
	}
	tc := host.TaskConfig{Name: "wc", Module: path, Config: map[string]any{"min_len": 1},
		Inputs: []host.InputConfig{{Type: "stdin", KeyField: "k", ValueField: "v"}},
		Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}
	feed, stdin := newFeeder(100, hosttest.Scale(50_000, 200_000))
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: quietLogger(t), Tasks: []host.TaskConfig{tc}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var latencies, validations []time.Duration
	live := func(d *host.Deployment, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		first, err := d.FirstBatch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		latencies = append(latencies, first.Sub(d.Requested))
		validations = append(validations, d.Switched.Sub(d.Requested))
	}
	for gen := 1; gen <= hosttest.Scale(4, 20); gen++ {
		live(h.Deploy(ctx, "wc", version(gen)))
		if gen%4 == 0 {
			live(h.Rollback(ctx, "wc", 0))
		}
	}
	feed.finish()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range readOutputs(t, tc.Output.Path) {
		word, count, _ := strings.Cut(o.Value, " ")
		id := o.Key + "/" + word
		if count != "1" || seen[id] {
			t.Fatalf("key %s: output %q (seen before: %v): a record processed twice", o.Key, o.Value, seen[id])
		}
		seen[id] = true
	}
	if len(seen) != feed.n {
		t.Fatalf("%d outputs for %d records", len(seen), feed.n)
	}
	t.Logf("small module (Rust wordcount, %d bytes), %d records: switch latency p50 %s p99 %s (validation p50 %s p99 %s)",
		len(base), feed.n, percentile(latencies, .5).Round(time.Microsecond), percentile(latencies, .99).Round(time.Microsecond),
		percentile(validations, .5).Round(time.Microsecond), percentile(validations, .99).Round(time.Microsecond))
}

// BenchmarkHotDeployThroughput compares records/s of the versioned Go guest over a stdin feed
// of 1M records without deploys and with back-to-back deploys all along (each waiting for its
// first batch).
//
//	go test ./host -run '^$' -bench HotDeployThroughput -benchtime 1x
func BenchmarkHotDeployThroughput(b *testing.B) {
	base, err := os.ReadFile(guestbuild.Go(b, "testguests/versioned"))
	if err != nil {
		b.Fatal(err)
	}
	for _, deploying := range []bool{false, true} {
		name := "no-deploys"
		if deploying {
			name = "deploying"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				dir := b.TempDir()
				path := filepath.Join(dir, "versioned.wasm")
				if err := os.WriteFile(path, guestbuild.Retag(b, base, 0), 0o644); err != nil {
					b.Fatal(err)
				}
				feed, stdin := newFeeder(1000, 1_000_000)
				h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Tasks: []host.TaskConfig{{
					Name: "versioned", Module: path,
					Inputs: []host.InputConfig{{Type: "stdin", KeyField: "k", ValueField: "v"}},
					Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}}})
				if err != nil {
					b.Fatal(err)
				}
				errc := make(chan error, 1)
				start := time.Now()
				go func() { errc <- h.Run(context.Background()) }()
				<-h.Ready()
				deploys := 0
				if deploying {
					ctx := context.Background()
					for gen := 1; feed.count.Load() < int64(feed.min); gen++ {
						d, err := h.Deploy(ctx, "versioned", guestbuild.Retag(b, base, gen))
						if err != nil {
							b.Fatal(err)
						}
						if _, err := d.FirstBatch(ctx); err != nil {
							b.Fatal(err)
						}
						deploys++
					}
				}
				feed.finish()
				if err := <-errc; err != nil {
					b.Fatal(err)
				}
				elapsed := time.Since(start)
				b.ReportMetric(float64(feed.n)/elapsed.Seconds(), "records/s")
				b.ReportMetric(float64(deploys), "deploys")
			}
		})
	}
}

// BenchmarkHotDeployLatency deploys 20 versions of the Go guest (~2 MB, each new bytes: nothing
// comes from the compilation cache) one after the other on a task fed 10k records/s, and reports
// the p50 and p99 of request → first batch on the new version. Unlike TestHotDeployUnderLoad,
// whose feed keeps every core busy, this leaves the deploy the spare CPU a lightly loaded host
// has.
//
//	go test ./host -run '^$' -bench HotDeployLatency -benchtime 1x
func BenchmarkHotDeployLatency(b *testing.B) {
	base, err := os.ReadFile(guestbuild.Go(b, "testguests/versioned"))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		dir := b.TempDir()
		path := filepath.Join(dir, "versioned.wasm")
		if err := os.WriteFile(path, guestbuild.Retag(b, base, 0), 0o644); err != nil {
			b.Fatal(err)
		}
		feed, stdin := newPacedFeeder(1000, 0, 100*time.Millisecond)
		h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Tasks: []host.TaskConfig{{
			Name: "versioned", Module: path,
			Inputs: []host.InputConfig{{Type: "stdin", KeyField: "k", ValueField: "v"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}}})
		if err != nil {
			b.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- h.Run(context.Background()) }()
		<-h.Ready()
		ctx := context.Background()
		var latencies []time.Duration
		for gen := 1; gen <= 20; gen++ {
			d, err := h.Deploy(ctx, "versioned", guestbuild.Retag(b, base, gen))
			if err != nil {
				b.Fatal(err)
			}
			first, err := d.FirstBatch(ctx)
			if err != nil {
				b.Fatal(err)
			}
			latencies = append(latencies, first.Sub(d.Requested))
		}
		feed.finish()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(percentile(latencies, .5).Seconds(), "p50-s")
		b.ReportMetric(percentile(latencies, .99).Seconds(), "p99-s")
	}
}
