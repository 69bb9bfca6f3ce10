package task

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sink"
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

// stallingOut is a memOut whose first write of an output value with a prefix stalls the loop
// (it writes outputs while it applies a job, after the job's timers) until the test lets it go.
type stallingOut struct {
	*memOut
	prefix  string
	once    sync.Once
	reached chan struct{} // closed when the loop is at the write
	resume  chan struct{} // closed by the test
}

func (s *stallingOut) WriteOutput(name string, key, value []byte, ts int64, hs []sink.Header) error {
	if strings.HasPrefix(string(value), s.prefix) {
		s.once.Do(func() {
			close(s.reached)
			<-s.resume
		})
	}
	return s.memOut.WriteOutput(name, key, value, ts, hs)
}

// holdKey holds the first call of a record of one key until the test lets it run, and reports
// how it ended; heldCall is a worker's processor under it.
type holdKey struct {
	key     string
	once    sync.Once
	started chan struct{} // closed when the call is held
	run     chan struct{} // closed by the test
	done    chan error    // the call's error
}

type heldCall struct {
	Processor
	h *holdKey
}

func (p heldCall) Run(ctx context.Context, u *modrt.Unit, env modrt.Env) (eff modrt.Effects, err error) {
	held := false
	for _, s := range u.Steps {
		for _, rec := range s.Records {
			held = held || string(rec.Key) == p.h.key
		}
	}
	ran := false
	if held {
		p.h.once.Do(func() {
			close(p.h.started)
			<-p.h.run
			eff, err = p.Processor.Run(ctx, u, env)
			p.h.done <- err
			ran = true
		})
	}
	if ran {
		return eff, err
	}
	return p.Processor.Run(ctx, u, env)
}

// TestTimerRoomWhileApplied: a new timer's room is the call's until the loop applies the timer,
// and then the timer's: the two are never counted together. With max_pending_timers 2, one
// pending timer (a's, being applied) leaves room for b's. The loop is stalled in the middle of
// applying a's job (at its output, after its timers) while b's call sets its timer. (The room
// used to be given back only after the whole job was applied, so a's timer counted twice
// meanwhile and b's timer_set was refused: TestPendingTimersLimit lost a key's record that way
// when a worker's call ran in that window, under load.)
func TestTimerRoomWhileApplied(t *testing.T) {
	out := &stallingOut{prefix: "rec a ", reached: make(chan struct{}), resume: make(chan struct{})}
	b := &holdKey{key: "b", started: make(chan struct{}), run: make(chan struct{}), done: make(chan error, 1)}
	r := startRig(t, rigOpts{maxPendingTimers: 2, onExhausted: "deadletter",
		output: func(m *memOut) OutputSink { out.memOut = m; return out },
		wrap:   func(p Processor) Processor { return heldCall{p, b} }})
	resume := sync.OnceFunc(func() { close(out.resume) })
	defer resume() // a failed wait below must not leave the loop stalled

	r.send(r0("b", "set t p 100000")) // held before it runs: it sets its timer later
	waitClosed(t, b.started, "b's call to start")
	r.send(r0("a", "set t p 100000")) // the other worker runs it; the loop applies it
	waitClosed(t, out.reached, "the loop to apply a's job")
	used := r.tk.timers.used.Load()
	close(b.run) // b sets its timer while the loop is inside a's job
	err := <-b.done
	if err != nil {
		t.Fatalf("b's timer_set refused with one timer pending (a's, being applied: the task counted %d), limit 2: %v", used, err)
	}
	if used != 1 {
		t.Errorf("the task counted %d pending timers while applying a's (the only one), want 1", used)
	}
	resume()
	r.waitLines("log rec", 2)
	r.waitPending(2)
	if n := r.tk.timers.used.Load(); n != 2 {
		t.Errorf("the task counts %d pending timers, want 2", n)
	}
}

// waitClosed waits until c is closed.
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	waitUntil(t, what, func() bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	})
}
