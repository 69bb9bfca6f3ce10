package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestGuestMetricsAcrossDeploy: a guest's counter (ABI 0.3) sums the records of both workers in
// Host.Stats, and starts again from zero when a deploy makes a new version current, as
// documented.
func TestGuestMetricsAcrossDeploy(t *testing.T) {
	base, err := os.ReadFile(guestbuild.Go(t, "testguests/gmetrics"))
	if err != nil {
		t.Fatal(err)
	}
	version := func(gen int) []byte { return guestbuild.WithCustomSection(base, fmt.Sprintf("version-%d", gen)) }
	dir := t.TempDir()
	path := filepath.Join(dir, "gm.wasm")
	if err := os.WriteFile(path, version(0), 0o644); err != nil {
		t.Fatal(err)
	}
	tc := host.TaskConfig{Name: "gm", Module: path, Workers: 2,
		Inputs: []host.InputConfig{{Type: "stdin", KeyField: "k", ValueField: "v"}},
		Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")}}
	feed, stdin := newFeedLines()
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: quietLogger(t), Tasks: []host.TaskConfig{tc}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	seen := func() (int64, bool) {
		for _, g := range h.Stats()[0].GuestMetrics {
			if g.Name == "records_seen" && g.Counter && len(g.Labels) == 1 && g.Labels[0] == (host.GuestLabel{Name: "stage", Value: "demo"}) {
				return g.Value, true
			}
		}
		return 0, false
	}
	await := func(want int64) {
		t.Helper()
		for {
			if v, _ := seen(); v == want {
				return
			}
			select {
			case <-ctx.Done():
				v, ok := seen()
				t.Fatalf("records_seen = %d (declared %v), want %d", v, ok, want)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	<-feed.write(t, keys...)
	await(40)

	d, err := h.Deploy(ctx, "gm", version(1))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := seen(); v != 0 {
		t.Errorf("records_seen = %d right after the deploy, want 0 (absent until the version's first instance starts)", v)
	}
	<-feed.write(t, keys[:7]...)
	if _, err := d.FirstBatch(ctx); err != nil {
		t.Fatal(err)
	}
	await(7)
	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
}
