package task

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedBuf is a log destination the task's goroutines share.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// deadLetters returns the dead letters written, as "key: error".
func (r *rig) deadLetters() []string {
	r.dl.mu.Lock()
	defer r.dl.mu.Unlock()
	var errs []string
	for _, d := range r.dl.all {
		errs = append(errs, fmt.Sprintf("%s: %v", d.Key, d.Err))
	}
	return errs
}

// waitDead waits until n dead letters are written and returns their errors.
func (r *rig) waitDead(n int) []string {
	r.t.Helper()
	var errs []string
	waitUntil(r.t, fmt.Sprintf("%d dead letters", n), func() bool {
		errs = r.deadLetters()
		return len(errs) >= n
	})
	return errs
}

// TestPendingTimersLimit: with time.max_pending_timers 5, the sixth distinct timer is refused
// with ERR_LIMIT (the guest fails its record: a dead letter), replacing a pending timer costs
// nothing, a delete frees room for a new one, and the count starts from the store after a
// restart. The host warns, naming the limit and its configuration key.
func TestPendingTimersLimit(t *testing.T) {
	dir := t.TempDir()
	logs := &lockedBuf{}
	opts := rigOpts{dir: dir, maxPendingTimers: 5, onExhausted: "deadletter",
		logger: slog.New(slog.NewTextHandler(logs, nil))}
	r := startRig(t, opts)
	for i := range 5 {
		r.send(r0(fmt.Sprintf("k%d", i), "set t p 100000"))
	}
	r.waitLines("log rec", 5)
	r.waitPending(5)

	r.send(r0("k5", "set t p 100000")) // the sixth: refused
	dead := r.waitDead(1)
	if len(dead) != 1 || !strings.HasPrefix(dead[0], "k5: ") || !strings.Contains(dead[0], "ERR_LIMIT") {
		t.Fatalf("dead letters %q, want k5's, refused with ERR_LIMIT", dead)
	}
	if n := r.tk.Stats().TimersRefused; n < 1 {
		t.Errorf("Stats().TimersRefused = %d after a refusal; want at least 1", n)
	}
	if l := logs.String(); !strings.Contains(l, "pending timers at the task's limit") ||
		!strings.Contains(l, "limit=5") || !strings.Contains(l, "tasks[].time.max_pending_timers") || !strings.Contains(l, "task=timers") {
		t.Errorf("no warning naming the task, the limit and its key; logs:\n%s", l)
	}

	// Replacing a pending timer, and setting a second name of the same key after a delete,
	// are within the limit.
	r.send(r0("k0", "set t p 200000"), r0("k1", "del t"))
	r.waitLines("log rec", 7)
	r.waitPending(4)
	r.send(r0("k5", "set t p 100000"))
	r.waitLines("log rec", 8)
	r.waitPending(5)
	r.stop()

	// After a restart the five committed timers count: a new one is refused, a replacement is not.
	r2 := startRig(t, opts)
	r2.send(r0("k6", "set t p 100000"))
	if dead := r2.waitDead(1); !strings.HasPrefix(dead[0], "k6: ") || !strings.Contains(dead[0], "ERR_LIMIT") {
		t.Fatalf("dead letters after restart %q, want k6's, refused with ERR_LIMIT", dead)
	}
	r2.send(r0("k5", "set t p 300000"))
	r2.waitLines("log rec", 1)
	r2.waitPending(5)
	if n := r2.tk.timers.used.Load(); n != 5 {
		t.Errorf("task counts %d pending timers, want 5", n)
	}

	// Firings free their room: all five fire, and five new timers fit again.
	r2.advance(400_000)
	r2.waitLines("log fired", 5)
	r2.waitPending(0)
	for i := range 5 {
		r2.send(r0(fmt.Sprintf("n%d", i), "set t p 900000"))
	}
	r2.waitLines("log rec", 6)
	r2.waitPending(5)
	if dead := r2.waitDead(1); len(dead) != 1 {
		t.Errorf("dead letters %q, want only k6's", dead)
	}
}
