package host_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// lockedBuffer is a bytes.Buffer several goroutines log to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// What a guest writes to stderr is logged with the task named once (it was named twice).
func TestGuestLogNamesTaskOnce(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, []byte("k:boom\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	runHost(t, host.Config{
		DataDir: filepath.Join(dir, "data"),
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Tasks: []host.TaskConfig{{
			Name: "trap", Module: module,
			Inputs: []host.InputConfig{{Name: "in", Type: "file", Path: input, Format: "text", KeySeparator: ":"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "out.ndjson")},
			Retry:  host.RetryConfig{MaxAttempts: 1, Backoff: time.Millisecond},
		}},
	})
	n := 0
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, "stream=stderr") {
			continue
		}
		n++
		if c := strings.Count(l, "task=trap"); c != 1 {
			t.Errorf("task named %d times: %s", c, l)
		}
	}
	if n == 0 {
		t.Fatalf("no guest stderr line logged:\n%s", logs.String())
	}
}
