package task

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// TestHTTPSlowKeyDoesNotStallOthers runs the fetch guest through a task with two workers and one
// record per call (max_batch_records: 1, as an IO-bound task is configured): key
// "slow" requests a URL whose server does not answer until the test lets it, and meanwhile key
// "fast" keeps being processed — a blocked request ties up one instance, not the task. Requests
// to a host not on the allowlist fail with a clear error.
func TestHTTPSlowKeyDoesNotStallOthers(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	u, _ := url.Parse(srv.URL)

	ctx := context.Background()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: compileCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	wasm, err := os.ReadFile(guestbuild.Go(t, "testguests/fetch"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Compile(ctx, wasm, modrt.Limits{Grants: modrt.Grants{HTTP: &modrt.HTTPGrant{
		Allow: []string{u.Host}, Timeout: 30 * time.Second, MaxConcurrent: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Close(ctx)

	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	var lines []string
	lines = append(lines, fmt.Sprintf(`{"k":"slow","v":%q}`, srv.URL+"/slow"))
	for i := range 20 {
		lines = append(lines, fmt.Sprintf(`{"k":"fast","v":%q}`, fmt.Sprintf("%s/fast%d", srv.URL, i)))
	}
	lines = append(lines, `{"k":"denied","v":"http://not-allowed.example/"}`)
	if err := os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := &memOut{}
	tk, err := New(Config{
		Name: "fetch", Module: mod, GuestConfig: []byte("{}"),
		Inputs: []Input{{Name: "in", Path: input, Format: source.Format{JSON: true, KeyField: "k", ValueField: "v"}}},
		Output: out, DeadLetter: &memDL{}, Store: db, Policy: PolicyKey, Workers: 2,
		MaxAttempts: 1, OnExhausted: "halt", Checkpoint: 20 * time.Millisecond,
		// An IO-bound task runs one record per call: a batch holds its keys until its call
		// returns, so a blocked request would hold every key of its batch.
		Sched: sched.Config{MaxBatchItems: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tk.Run(ctx) }()

	// Every fast record and the denied one complete while the slow request is still blocked.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := out.snapshot()
		if len(got) == 21 {
			for _, l := range got {
				if strings.Contains(l, "/slow") {
					t.Fatalf("the slow request completed before it was released: %q", got)
				}
			}
			if !strings.Contains(strings.Join(got, "\n"), "fetched 200 hello /fast19") {
				t.Errorf("outputs %q lack the last fast response", got)
			}
			if !strings.Contains(strings.Join(got, "\n"), "fetched error") || !strings.Contains(strings.Join(got, "\n"), "NOT_ALLOWED") {
				t.Errorf("outputs %q: a host off the allowlist must fail with ERR_NOT_ALLOWED", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fast keys stalled behind the slow request: %q", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := out.snapshot(); got[len(got)-1] != "fetched 200 hello /slow" {
		t.Errorf("last output %q, want the slow response", got[len(got)-1])
	}
}
