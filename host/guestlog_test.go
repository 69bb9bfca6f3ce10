package host_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// syncBuffer is a bytes.Buffer for a logger written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Issue 15 item 6: a guest's log lines (here the panic message its runtime prints to stderr
// before trapping) carry the task once, and the key, partition and offset of the record the
// call processes.
func TestGuestLogAttributes(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper")
	dir := t.TempDir()
	recs := [][2]string{{"a", "v0"}, {"b", "v1"}, {"c", "boom v2"}, {"a", "v3"}}
	tc := kvTask("trap", module, writeLines(t, dir, recs), filepath.Join(dir, "out.ndjson"))
	tc.Retry = host.RetryConfig{MaxAttempts: 1, Backoff: time.Millisecond}
	tc.DeadLetter.Path = filepath.Join(dir, "dead.ndjson")
	var logs syncBuffer
	h, err := host.New(host.Config{DataDir: filepath.Join(dir, "data"), Tasks: []host.TaskConfig{tc},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var alone bool
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "stream=stderr") || !strings.Contains(line, "trapper: boom") {
			continue
		}
		if n := strings.Count(line, "task="); n != 1 {
			t.Errorf("%d task attributes, want 1: %s", n, line)
		}
		// A call of several records names their offsets; the failing batch runs again one
		// record per call, and that call names its record.
		if strings.Contains(line, "partition=0 key=c offset=2 ") {
			alone = true
		} else if !strings.Contains(line, " offsets=") {
			t.Errorf("neither the record nor the call's offsets: %s", line)
		}
	}
	if !alone {
		t.Fatalf("no guest stderr line names the failing record's key, partition and offset:\n%s", logs.String())
	}
}
