package host_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// The HTTP grant's keys are validated, each problem naming its key.
func TestHTTPGrantValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		http host.HTTPGrantConfig
		want []string // keys named in the error; none: valid
	}{
		{name: "none", http: host.HTTPGrantConfig{}},
		{name: "allow only", http: host.HTTPGrantConfig{Allow: []string{"api.example.com", "*.example.org", "10.0.0.1:8080", "[::1]"}}},
		{name: "every key", http: host.HTTPGrantConfig{Allow: []string{"API.example.com:443"}, Timeout: time.Second,
			MaxTimeout: time.Minute, MaxConcurrent: 16, MaxRequestBytes: 1, MaxResponseBytes: 1}},
		{name: "timeout over the default max_timeout", http: host.HTTPGrantConfig{Allow: []string{"a"}, Timeout: 2 * time.Minute}},
		{name: "invalid allow entries", http: host.HTTPGrantConfig{Allow: []string{"ok.example.com", "https://api.example.com/", "a:0", ""}},
			want: []string{"tasks[0].grants.http.allow[1]", "tasks[0].grants.http.allow[2]", "tasks[0].grants.http.allow[3]"}},
		{name: "negative", http: host.HTTPGrantConfig{Allow: []string{"a"}, Timeout: -time.Second, MaxTimeout: -1,
			MaxConcurrent: -1, MaxRequestBytes: -1, MaxResponseBytes: -1},
			want: []string{"tasks[0].grants.http.timeout", "tasks[0].grants.http.max_timeout", "tasks[0].grants.http.max_concurrent",
				"tasks[0].grants.http.max_request_bytes", "tasks[0].grants.http.max_response_bytes"}},
		{name: "timeout over max_timeout", http: host.HTTPGrantConfig{Allow: []string{"a"}, MaxTimeout: time.Second},
			want: []string{"tasks[0].grants.http.timeout"}},
		{name: "keys without allow", http: host.HTTPGrantConfig{MaxConcurrent: 2},
			want: []string{"tasks[0].grants.http.allow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := kvTask("t", "m.wasm", "in.ndjson", "out.ndjson")
			task.Grants.HTTP = tc.http
			err := host.Config{Tasks: []host.TaskConfig{task}}.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want errors naming %v", tc.want)
			}
			for _, key := range tc.want {
				if !strings.Contains(err.Error(), key+": ") {
					t.Errorf("Validate: %v\nwant it to name %s", err, key)
				}
			}
			if n := strings.Count(err.Error(), "grants.http"); n != len(tc.want) {
				t.Errorf("Validate: %d problems, want %d: %v", n, len(tc.want), err)
			}
		})
	}
}

// Check reports the HTTP grant with its defaults, and notes a module that imports http_request
// without the grant or is granted HTTP it does not import.
func TestCheckReportsHTTPGrant(t *testing.T) {
	dir := t.TempDir()
	fixture := func(name string) string { return filepath.Join("internal", "modrt", "testdata", name+".wasm") }
	grant := host.HTTPGrantConfig{Allow: []string{"api.example.com", "*.example.org"}, MaxConcurrent: 2}
	fetcher := kvTask("fetcher", fixture("httpguest"), "in.ndjson", filepath.Join(dir, "a.ndjson"))
	fetcher.Grants.HTTP = grant
	ungranted := kvTask("ungranted", fixture("httpguest"), "in.ndjson", filepath.Join(dir, "b.ndjson"))
	unused := kvTask("unused", fixture("driver"), "in.ndjson", filepath.Join(dir, "c.ndjson"))
	unused.Grants.HTTP = grant
	reps, err := host.Check(context.Background(), host.Config{DataDir: filepath.Join(dir, "data"),
		Tasks: []host.TaskConfig{fetcher, ungranted, unused}})
	if err != nil || len(reps) != 3 {
		t.Fatalf("Check: %v, %d reports", err, len(reps))
	}
	want := "http api.example.com, *.example.org (timeout 10s, max timeout 1m0s, 2 at once, request body up to 1048576 bytes, response body up to 4194304 bytes)"
	for _, k := range []int{0, 2} {
		if len(reps[k].Grants) != 1 || reps[k].Grants[0] != want {
			t.Errorf("%s: grants %q, want [%q]", reps[k].Task, reps[k].Grants, want)
		}
	}
	if len(reps[0].Notes) != 0 {
		t.Errorf("fetcher: notes %q, want none", reps[0].Notes)
	}
	if len(reps[1].Grants) != 0 || len(reps[1].Notes) != 1 || !strings.Contains(reps[1].Notes[0], "imports http_request but grants.http is not set") {
		t.Errorf("ungranted: grants %q, notes %q", reps[1].Grants, reps[1].Notes)
	}
	if len(reps[2].Notes) != 1 || !strings.Contains(reps[2].Notes[0], "does not import http_request") {
		t.Errorf("unused: notes %q", reps[2].Notes)
	}
}

// A deploy of a module that imports a capability the task is not granted (http_request without
// grants.http, WASI path_* calls without grants.dirs) goes through: the Deployment carries the
// warnings and the log has them at warn, naming the task; so does a start on such a module.
// A module that imports neither gets none.
func TestDeployWarnsAboutUngrantedCapabilities(t *testing.T) {
	dir := t.TempDir()
	tc := versionedTask(t, dir, guestbuild.Retag(t, versionedModule(t), 0))
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	feed, stdin := newFeedLines()
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: log, Tasks: []host.TaskConfig{tc}})
	if l := logs.String(); l != "" {
		t.Errorf("starting on a plain Go module warned:\n%s", l)
	}
	d, err := h.Deploy(context.Background(), "versioned", guestbuild.Retag(t, versionedModule(t), 1))
	if err != nil || len(d.Warnings) != 0 {
		t.Fatalf("deploy of a plain module: warnings %q, %v", d.Warnings, err)
	}
	for _, c := range []struct{ fixture, want string }{
		{"httpguest.wasm", "imports http_request but grants.http is not set"},
		{"fsescape.wasm", "imports wasi_snapshot_preview1.path_open but grants.dirs is empty"},
	} {
		d, err := h.Deploy(context.Background(), "versioned", modrtFixture(t, c.fixture))
		if err != nil {
			t.Fatalf("deploy of %s: %v", c.fixture, err)
		}
		if len(d.Warnings) != 1 || !strings.Contains(d.Warnings[0], c.want) {
			t.Errorf("deploy of %s: warnings %q, want one saying %q", c.fixture, d.Warnings, c.want)
		}
		if l := logs.String(); !strings.Contains(l, "level=WARN msg=\""+c.want) || !strings.Contains(l, "task=versioned") {
			t.Errorf("deploy of %s logged no warning %q naming the task:\n%s", c.fixture, c.want, l)
		}
	}
	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}

	// The next start runs the active version, the path_open one: it warns again.
	logs = syncBuffer{}
	feed, stdin = newFeedLines()
	h = hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: log, Tasks: []host.TaskConfig{tc}})
	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "grants.dirs is empty") || !strings.Contains(l, "task=versioned") {
		t.Errorf("a start on the path_open module logged no warning:\n%s", l)
	}
}
