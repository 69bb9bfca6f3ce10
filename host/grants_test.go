package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// fakeEpoch is where wazero's fake wall clock starts (2022-01-01T00:00:00Z); it moves 1 ms per
// reading.
var fakeEpoch = time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)

// probeTask runs the hostile guest's probe over one record through a real host, with grants,
// and returns what the guest got for each capability ("ok: …" or "error: …").
func probeTask(t *testing.T, grants host.GrantsConfig, file string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	tc := kvTask("probe", guestbuild.Go(t, "testguests/hostile"), writeLines(t, dir, [][2]string{{"k", "probe " + file}}),
		filepath.Join(dir, "out.ndjson"))
	tc.Workers = 1
	tc.Grants = grants
	hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
	got := map[string]string{}
	for _, o := range readOutputs(t, tc.Output.Path) {
		if o.Output != "probe" {
			t.Fatalf("unexpected output %+v", o)
		}
		got[o.Key] = o.Value
	}
	for _, k := range []string{"file", "write", "env", "args", "clock", "random", "socket"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("no probe result for %s: %v", k, got)
		}
	}
	t.Logf("probe with grants %+v: %q", grants, got)
	return got
}

// clockOf parses the probe's clock result (ns since the epoch).
func clockOf(t *testing.T, v string) time.Time {
	t.Helper()
	ns, err := strconv.ParseInt(strings.TrimPrefix(v, "ok: "), 10, 64)
	if err != nil || !strings.HasPrefix(v, "ok: ") {
		t.Fatalf("clock probe %q", v)
	}
	return time.Unix(0, ns)
}

// secretDir makes a host directory holding secret.txt.
func secretDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("the secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Issue 6 §3, §6: without grants a guest gets no file system, no environment, no arguments, a
// fake clock, deterministic random and no socket.
func TestGrantsNone(t *testing.T) {
	t.Setenv("WS_TEST", "host value")
	sec := secretDir(t)
	for _, file := range []string{"/data/secret.txt", filepath.Join(sec, "secret.txt")} {
		got := probeTask(t, host.GrantsConfig{}, file)
		if !strings.HasPrefix(got["file"], "error: ") {
			t.Errorf("file %s without a grant: %q, want an error", file, got["file"])
		}
		if !strings.HasPrefix(got["write"], "error: ") {
			t.Errorf("write %s.new without a grant: %q, want an error", file, got["write"])
		}
		if _, err := os.Stat(filepath.Join(sec, "secret.txt.new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the guest wrote to the host without a grant: %v", err)
		}
		if got["env"] != "error: WS_TEST not set; environment has 0 variables" {
			t.Errorf("env without a grant: %q", got["env"])
		}
		if got["args"] != "ok: 0" {
			t.Errorf("args: %q, want none", got["args"])
		}
		if c := clockOf(t, got["clock"]); c.Before(fakeEpoch) || c.After(fakeEpoch.Add(time.Hour)) {
			t.Errorf("clock without a grant reads %s, want wazero's fake clock near %s", c.UTC(), fakeEpoch)
		}
		if !strings.HasPrefix(got["socket"], "error: errno ") {
			t.Errorf("sock_accept: %q, want an errno", got["socket"])
		}
	}
	// Deterministic random: two runs draw the same bytes.
	a, b := probeTask(t, host.GrantsConfig{}, ""), probeTask(t, host.GrantsConfig{}, "")
	if !strings.HasPrefix(a["random"], "ok: ") || a["random"] != b["random"] {
		t.Errorf("random without a grant: %q then %q, want the same bytes twice", a["random"], b["random"])
	}
}

// Each grant gives exactly its capability.
func TestGrantsEach(t *testing.T) {
	t.Setenv("WS_TEST", "host value")
	t.Setenv("WS_OTHER", "not granted")
	sec := secretDir(t)

	t.Run("read-only dir", func(t *testing.T) {
		got := probeTask(t, host.GrantsConfig{Dirs: []host.DirGrantConfig{{Host: sec, Guest: "/data"}}}, "/data/secret.txt")
		if got["file"] != "ok: the secret" {
			t.Errorf("file: %q, want the secret", got["file"])
		}
		if !strings.HasPrefix(got["write"], "error: ") {
			t.Errorf("write to a read-only dir: %q, want an error", got["write"])
		}
		if _, err := os.Stat(filepath.Join(sec, "secret.txt.new")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the guest wrote to a read-only dir: %v", err)
		}
		if !strings.HasPrefix(got["env"], "error: ") || !strings.HasPrefix(got["socket"], "error: ") {
			t.Errorf("a dir grant gave more: %v", got)
		}
	})
	t.Run("writable dir", func(t *testing.T) {
		got := probeTask(t, host.GrantsConfig{Dirs: []host.DirGrantConfig{{Host: sec, Guest: "/data", Writable: true}}}, "/data/secret.txt")
		if got["file"] != "ok: the secret" || got["write"] != "ok: " {
			t.Errorf("file %q, write %q; want both to work", got["file"], got["write"])
		}
		b, err := os.ReadFile(filepath.Join(sec, "secret.txt.new"))
		if err != nil || string(b) != "written by the guest" {
			t.Errorf("the guest's file on the host: %q, %v", b, err)
		}
	})
	t.Run("env", func(t *testing.T) {
		got := probeTask(t, host.GrantsConfig{Env: []string{"WS_TEST", "WS_UNSET_ON_THE_HOST"}}, "/data/secret.txt")
		if got["env"] != "ok: host value" {
			t.Errorf("env: %q, want the host value", got["env"])
		}
		if !strings.HasPrefix(got["file"], "error: ") {
			t.Errorf("an env grant gave a file: %q", got["file"])
		}
		if c := clockOf(t, got["clock"]); c.After(fakeEpoch.Add(time.Hour)) {
			t.Errorf("an env grant gave the real clock: %s", c)
		}
	})
	t.Run("real clock", func(t *testing.T) {
		before := time.Now()
		got := probeTask(t, host.GrantsConfig{RealClock: true}, "")
		after := time.Now()
		if c := clockOf(t, got["clock"]); c.Before(before) || c.After(after) {
			t.Errorf("real clock reads %s, want between %s and %s", c, before, after)
		}
		if !strings.HasPrefix(got["env"], "error: ") {
			t.Errorf("a clock grant gave env: %q", got["env"])
		}
	})
	t.Run("random", func(t *testing.T) {
		det := probeTask(t, host.GrantsConfig{}, "")["random"]
		a := probeTask(t, host.GrantsConfig{Random: true}, "")["random"]
		b := probeTask(t, host.GrantsConfig{Random: true}, "")["random"]
		if !strings.HasPrefix(a, "ok: ") || a == b || a == det || b == det {
			t.Errorf("random with a grant: %q, %q (deterministic: %q); want fresh bytes each run", a, b, det)
		}
	})
}

// A grant naming a missing directory or a relative guest path is refused, naming the key.
func TestGrantsValidate(t *testing.T) {
	dir := t.TempDir()
	tc := kvTask("t", "m.wasm", "in.ndjson", "out.ndjson")
	tc.Grants = host.GrantsConfig{Dirs: []host.DirGrantConfig{
		{Host: dir, Guest: "/ok"},
		{Host: filepath.Join(dir, "missing"), Guest: "data"},
	}, Env: []string{"A=B"}}
	err := host.Config{Tasks: []host.TaskConfig{tc}}.Validate()
	for _, want := range []string{"tasks[0].grants.dirs[1].host", "tasks[0].grants.dirs[1].guest", "tasks[0].grants.env[0]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want it to name %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "dirs[0]") {
		t.Errorf("Validate: %v; dirs[0] is valid", err)
	}
}

// Check reports the capabilities a task is granted.
func TestCheckReportsGrants(t *testing.T) {
	dir := t.TempDir()
	mod := guestbuild.Go(t, "testguests/hostile")
	plain := kvTask("plain", mod, "in.ndjson", filepath.Join(dir, "a.ndjson"))
	granted := kvTask("granted", mod, "in.ndjson", filepath.Join(dir, "b.ndjson"))
	granted.Grants = host.GrantsConfig{Dirs: []host.DirGrantConfig{{Host: dir, Guest: "/data"}}, Env: []string{"WS_TEST"}, RealClock: true, Random: true}
	reps, err := host.Check(context.Background(), host.Config{DataDir: t.TempDir(), Tasks: []host.TaskConfig{plain, granted}})
	if err != nil || len(reps) != 2 {
		t.Fatalf("Check: %v, %d reports", err, len(reps))
	}
	if len(reps[0].Grants) != 0 {
		t.Errorf("plain task grants %v, want none", reps[0].Grants)
	}
	want := []string{"dir " + dir + " -> /data (read-only)", "env WS_TEST", "real clock", "random"}
	if strings.Join(reps[1].Grants, "|") != strings.Join(want, "|") {
		t.Errorf("granted task grants %q, want %q", reps[1].Grants, want)
	}
}
