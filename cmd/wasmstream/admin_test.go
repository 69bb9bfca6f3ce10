package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// adminHost runs a real host with the testguests/versioned module (tag 0) on a stdin feed and
// the admin API on a free loopback port. It returns the host, the module's bytes, the feed
// (close it to let Run return) and a wait for Run.
func adminHost(t *testing.T, token string) (h *host.Host, base []byte, modulePath string, feed *io.PipeWriter, wait func() error) {
	t.Helper()
	b, err := os.ReadFile(guestbuild.Go(t, "testguests/versioned"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	modulePath = filepath.Join(dir, "versioned.wasm")
	if err := os.WriteFile(modulePath, guestbuild.Retag(t, b, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	h, err = host.New(host.Config{
		DataDir: filepath.Join(dir, "data"),
		Stdin:   pr,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Admin:   host.AdminConfig{Addr: "127.0.0.1:0", Token: token},
		Tasks: []host.TaskConfig{{
			Name:   "versioned",
			Module: modulePath,
			Inputs: []host.InputConfig{{Type: "stdin", KeyField: "k", ValueField: "v"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	run := hosttest.Go(t, h).Wait
	t.Cleanup(func() { pw.Close(); h.Close() })
	return h, b, modulePath, pw, func() error { pw.Close(); return run() }
}

func TestAdminCommands(t *testing.T) {
	h, base, _, _, wait := adminHost(t, "tok")
	addr := h.AdminAddr()
	t.Setenv("WASMSTREAM_ADMIN_TOKEN", "tok")
	dir := t.TempDir()
	v1 := filepath.Join(dir, "v1.wasm")
	if err := os.WriteFile(v1, guestbuild.Retag(t, base, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.wasm")
	if err := os.WriteFile(bad, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf("admin:\n  addr: %q\n  token: tok\n", addr))

	for _, c := range []struct {
		name   string
		args   []string
		code   int
		stdout []string // each must appear
		stderr []string
	}{
		{"versions", []string{"versions", "--admin-addr", addr, "--task", "versioned"}, 0,
			[]string{"VERSION", "1 ", "* (file)"}, nil},
		{"deploy", []string{"deploy", "--admin-addr", addr, "--task", "versioned", v1}, 0,
			[]string{"task versioned: deployed: version 2 active (was 1)"}, nil},
		{"deploy again: unchanged", []string{"deploy", "--admin-addr", addr, "--task", "versioned", v1}, 0,
			[]string{"version 2", "already active"}, nil},
		{"deploy a bad module", []string{"deploy", "--admin-addr", addr, "--task", "versioned", bad}, 1,
			nil, []string{"module refused", "(HTTP 422)", "exports no"}},
		{"status", []string{"status", "--admin-addr", addr}, 0,
			[]string{"task versioned: running, version 2"}, nil},
		{"rollback", []string{"rollback", "--admin-addr", addr, "--task", "versioned"}, 0,
			[]string{"rolled back: version 1 active (was 2)"}, nil},
		{"rollback --to", []string{"rollback", "--admin-addr", addr, "--task", "versioned", "--to", "2"}, 0,
			[]string{"version 2 active (was 1)"}, nil},
		{"rollback --to unknown", []string{"rollback", "--admin-addr", addr, "--task", "versioned", "--to", "7"}, 1,
			nil, []string{"no version 7", "(HTTP 404)"}},
		{"pause", []string{"pause", "--admin-addr", addr, "--task", "versioned"}, 0, []string{"task versioned: paused"}, nil},
		{"status when paused, address from the config file", []string{"status", "-c", cfg}, 0,
			[]string{"task versioned: paused, version 2"}, nil},
		{"resume", []string{"resume", "-c", cfg, "--task", "versioned"}, 0, []string{"task versioned: resumed"}, nil},
		{"restart a running task", []string{"restart", "-c", cfg, "--task", "versioned"}, 1, nil, []string{"has not halted", "(HTTP 409)"}},
		{"versions --json", []string{"versions", "-c", cfg, "--task", "versioned", "--json"}, 0, []string{`"sha256"`, `"active": true`}, nil},
		{"wrong token", []string{"status", "--admin-addr", addr, "--admin-token", "nope"}, 1, nil, []string{"wrong bearer token (HTTP 401)",
			"the token sent came from --admin-token: pass the host's admin token with --admin-token, WASMSTREAM_ADMIN_TOKEN, or admin.token in the configuration file (-c)"}},
		{"unknown task", []string{"versions", "--admin-addr", addr, "--task", "nosuch"}, 1, nil, []string{"no such task", "(HTTP 404)", "the host's tasks: versioned"}},
		{"deploy to an unknown task", []string{"deploy", "--admin-addr", addr, "--task", "nosuch", v1}, 1, nil, []string{"no such task", "(HTTP 404)", "the host's tasks: versioned"}},
		{"no task", []string{"deploy", "--admin-addr", addr, v1}, 2, nil, []string{"--task is required"}},
		{"no module file", []string{"deploy", "--admin-addr", addr, "--task", "versioned", filepath.Join(dir, "none.wasm")}, 2, nil, []string{"module:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout, stderr)
			}
			for _, want := range c.stdout {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range c.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
	// A refused token: the client says where it took it from.
	t.Setenv("WASMSTREAM_ADMIN_TOKEN", "stale")
	if code, _, stderr := runCLI(t, "status", "--admin-addr", addr); code != 1 || !strings.Contains(stderr, "the token sent came from WASMSTREAM_ADMIN_TOKEN: ") {
		t.Errorf("status with a wrong token from the environment: exit %d\n%s", code, stderr)
	}
	t.Setenv("WASMSTREAM_ADMIN_TOKEN", "")
	if code, _, stderr := runCLI(t, "status", "--admin-addr", addr); code != 1 || !strings.Contains(stderr, "no token was given: pass the host's admin token") {
		t.Errorf("status without a token: exit %d\n%s", code, stderr)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// Run returned: the API is gone, and the client says so.
	code, _, stderr := runCLI(t, "status", "--admin-addr", addr)
	if code != 1 || !strings.Contains(stderr, "is the host running") {
		t.Errorf("status after the host stopped: exit %d\n%s", code, stderr)
	}
}

func TestAdminCommandsNeedAnAddress(t *testing.T) {
	t.Chdir(t.TempDir())
	code, _, stderr := runCLI(t, "status")
	if code != 2 || !strings.Contains(stderr, "no admin API address") {
		t.Errorf("status without an address: exit %d\n%s", code, stderr)
	}
}

// run --watch: a change of the module file goes through the deploy path; a bad module file is
// refused and the running version stays.
func TestWatchReloadsModule(t *testing.T) {
	h, base, modulePath, feed, wait := adminHost(t, "")
	tick := make(chan time.Time)
	type reload struct {
		d   *host.Deployment
		err error
	}
	reloads := make(chan reload, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	tasks := []host.TaskConfig{{Name: "versioned", Module: modulePath}}
	go func() {
		defer close(done)
		watchModules(ctx, h, tasks, slog.New(slog.NewTextHandler(io.Discard, nil)), tick,
			func(_ string, d *host.Deployment, err error) { reloads <- reload{d, err} })
	}()
	defer func() { cancel(); <-done }()
	tick <- time.Now() // taken once the watcher noted the file as it is

	// A bad file: refused, version 1 keeps running.
	if err := os.WriteFile(modulePath, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	tick <- time.Now()
	r := <-reloads
	var refused *host.ModuleRefusedError
	if !errors.As(r.err, &refused) || h.Stats()[0].Version != 1 {
		t.Fatalf("bad module file: %v, version %d", r.err, h.Stats()[0].Version)
	}
	// A good one: version 2, which follows the file.
	if err := os.WriteFile(modulePath, guestbuild.Retag(t, base, 7), 0o644); err != nil {
		t.Fatal(err)
	}
	tick <- time.Now()
	r = <-reloads
	if r.err != nil || r.d.Version.Version != 2 || r.d.Version.Origin != host.OriginFile {
		t.Fatalf("reload: %+v, %v", r.d, r.err)
	}
	fmt.Fprintln(feed, `{"k":"a","v":"1"}`)
	fctx, fcancel := context.WithTimeout(context.Background(), time.Minute)
	defer fcancel()
	if _, err := r.d.FirstBatch(fctx); err != nil {
		t.Fatal(err)
	}
	// No change, no reload. The second tick is taken only once the first was handled.
	tick <- time.Now()
	tick <- time.Now()
	if len(reloads) != 0 {
		t.Errorf("a reload without a change of the file: %+v", <-reloads)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}
