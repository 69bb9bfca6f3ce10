package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// `state --admin-addr` reads a running host through its admin API with the read-only token and
// prints exactly what the offline reader prints once the host stopped.
func TestStateOnline(t *testing.T) {
	b, err := os.ReadFile(guestbuild.Go(t, "testguests/versioned"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	module := filepath.Join(dir, "versioned.wasm")
	if err := os.WriteFile(module, guestbuild.Retag(t, b, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	pr, pw := io.Pipe()
	h, err := host.New(host.Config{
		DataDir: data, Stdin: pr, CheckpointInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Admin:  host.AdminConfig{Addr: "127.0.0.1:0", Token: "tok", ReadToken: "reader"},
		Tasks: []host.TaskConfig{{
			Name: "versioned", Module: module,
			Inputs: []host.InputConfig{{Type: "stdin", KeyField: "k", ValueField: "v"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wait := hosttest.Go(t, h).Wait
	t.Cleanup(func() { pw.Close(); h.Close() })
	keys := []string{"a", "b", "tab\there", "é", "a2", "bb"}
	lines := 0
	for i := range 40 {
		fmt.Fprintf(pw, "{\"k\":%q,\"v\":\"%d\"}\n", keys[i%len(keys)], i)
		lines++
	}
	// Wait until every record is counted (no checkpoint runs: the state is the cache's).
	counted := func() int {
		n := 0
		for _, k := range keys {
			ks, err := h.QueryState(t.Context(), "versioned", []byte(k))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range ks {
				for _, v := range s.Values {
					c, _ := strconv.Atoi(string(v.Value))
					n += c
				}
			}
		}
		return n
	}
	hosttest.WaitFor(t, time.Minute, fmt.Sprintf("every one of %d records counted", lines), func() bool { return counted() >= lines })
	addr := h.AdminAddr()
	t.Setenv("WASMSTREAM_ADMIN_TOKEN", "reader")
	online := map[string]string{}
	for name, args := range map[string][]string{
		"all":    {"state", "--admin-addr", addr, "--task", "versioned"},
		"json":   {"state", "--admin-addr", addr, "--task", "versioned", "--format", "json"},
		"key":    {"state", "--admin-addr", addr, "--task", "versioned", "--key", `tab\there`},
		"prefix": {"state", "--admin-addr", addr, "--task", "versioned", "--prefix", "a"},
		"none":   {"state", "--admin-addr", addr, "--task", "versioned", "--key", "nobody"},
		"tasks":  {"state", "--admin-addr", addr},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		online[name] = out
	}
	if !strings.Contains(online["all"], "tab\\there\tn\t7\n") || strings.Count(online["all"], "\n") != len(keys) {
		t.Errorf("online state:\n%s", online["all"])
	}
	if online["tasks"] != "versioned\n" || online["none"] != "" {
		t.Errorf("tasks %q, a key without state %q", online["tasks"], online["none"])
	}
	if code, _, errOut := runCLI(t, "state", "--admin-addr", addr, "--task", "nosuch"); code == 0 || !strings.Contains(errOut, "nosuch") {
		t.Errorf("an unknown task: exit %d, %s", code, errOut)
	}

	pw.Close() // the end of stdin: the host finishes, and its store is free to read
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"all":    {"state", "--data-dir", data, "--task", "versioned"},
		"json":   {"state", "--data-dir", data, "--task", "versioned", "--format", "json"},
		"key":    {"state", "--data-dir", data, "--task", "versioned", "--key", `tab\there`},
		"prefix": {"state", "--data-dir", data, "--task", "versioned", "--prefix", "a"},
	} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("offline %s: exit %d: %s", name, code, errOut)
		}
		sorted := func(s string) []string { l := strings.Split(s, "\n"); slices.Sort(l); return l }
		if !slices.Equal(sorted(out), sorted(online[name])) {
			t.Errorf("%s: online\n%s\noffline\n%s", name, online[name], out)
		}
	}
}
