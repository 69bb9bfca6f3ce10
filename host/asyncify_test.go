package host_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// Deploying a module built with TinyGo's default scheduler (asyncify) works and logs a warning
// saying to rebuild with -scheduler=none; deploying one without asyncify does not.
func TestDeployWarnsAboutAsyncify(t *testing.T) {
	dir := t.TempDir()
	tc := versionedTask(t, dir, guestbuild.Retag(t, versionedModule(t), 0))
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	feed, stdin := newFeedLines()
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: log, Tasks: []host.TaskConfig{tc}})
	if d, err := h.Deploy(context.Background(), "versioned", guestbuild.Retag(t, versionedModule(t), 1)); err != nil || d.Version.Version != 2 {
		t.Fatalf("deploy of a plain module: %+v, %v", d, err)
	}
	if strings.Contains(logs.String(), "scheduler") {
		t.Errorf("a plain module's deploy warned:\n%s", logs.String())
	}
	if d, err := h.Deploy(context.Background(), "versioned", modrtFixture(t, "asyncify.wasm")); err != nil || d.Version.Version != 3 {
		t.Fatalf("deploy of the asyncify module: %+v, %v", d, err)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "-scheduler=none") || !strings.Contains(l, "task=versioned") {
		t.Errorf("deploying an asyncify module logged no warning naming the task and -scheduler=none:\n%s", l)
	}
	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
}
