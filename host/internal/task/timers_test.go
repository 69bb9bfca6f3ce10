package task

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/store"
)

// These tests drive time step by step: the task's clock is a fakeClock the test moves, and no
// test waits for a timer to fall due on the wall clock.

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(ms int64) {
	c.mu.Lock()
	c.t = time.UnixMilli(ms)
	c.mu.Unlock()
}

// memOut collects outputs as "<output> <value>" lines.
type memOut struct {
	mu    sync.Mutex
	lines []string
}

func (m *memOut) WriteOutput(name string, key, value []byte, ts int64, _ []sink.Header) error {
	m.mu.Lock()
	m.lines = append(m.lines, name+" "+string(value))
	m.mu.Unlock()
	return nil
}
func (m *memOut) Flush() error { return nil }

func (m *memOut) snapshot() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.lines)
}

// holdingOut is a memOut that says it holds perLine bytes per output until Flush, as a file
// sink does.
type holdingOut struct {
	*memOut
	perLine, pending int
	flushes          atomic.Int64
}

func (h *holdingOut) WriteOutput(name string, key, value []byte, ts int64, hs []sink.Header) error {
	h.pending += h.perLine
	return h.memOut.WriteOutput(name, key, value, ts, hs)
}
func (h *holdingOut) Flush() error { h.pending = 0; h.flushes.Add(1); return nil }
func (h *holdingOut) Pending() int { return h.pending }

type memDL struct {
	mu  sync.Mutex
	all []*DeadLetter
}

func (m *memDL) WriteDeadLetter(d *DeadLetter) error {
	m.mu.Lock()
	m.all = append(m.all, d)
	m.mu.Unlock()
	return nil
}
func (m *memDL) Flush() error { return nil }

var (
	timersGuestOnce sync.Once
	timersGuest     []byte
	timersGuestErr  error
)

// compileCache is the compilation cache the hosts of tests share (hosttest.CompileCache, which
// this package's tests cannot import: hosttest imports host, which imports task). Every rig
// compiles the timers guest, a 2 MB Go module: from the second rig on, in this test process or
// a later one (the race detector's run), it is read back from the cache instead.
func compileCache(t testing.TB) string {
	dir := filepath.Join(guestbuild.Dir(), "compile-cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func timersModule(t *testing.T, rt *modrt.Runtime) *modrt.Module {
	t.Helper()
	timersGuestOnce.Do(func() { timersGuest, timersGuestErr = os.ReadFile(guestbuild.Go(t, "testguests/timers")) })
	if timersGuestErr != nil {
		t.Fatal(timersGuestErr)
	}
	m, err := rt.Compile(context.Background(), timersGuest, modrt.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// rig runs the timers guest over a standard-input stream the test writes to.
type rig struct {
	t      *testing.T
	tk     *Task
	clock  *fakeClock
	in     *io.PipeWriter
	out    *memOut
	dl     *memDL
	db     *store.DB
	rt     *modrt.Runtime
	cancel context.CancelFunc
	done   chan error
}

type rigOpts struct {
	dir         string // data directory; "" = a new one
	start       int64  // the clock's start, ms
	lateness    time.Duration
	idle        time.Duration
	tick        time.Duration
	guestConfig string
	checkpoint  time.Duration            // the checkpoint interval; 0 = 20ms
	holdBytes   int                      // > 0: the output sink holds this many bytes per line until Flush
	output      func(*memOut) OutputSink // the output sink, over the rig's memOut; nil: the memOut
	wrap        func(Processor) Processor

	migrateAtActivation bool
	guest               string // a guest package of examples/wasm to run instead of testguests/timers

	maxPendingTimers int64        // Config.MaxPendingTimers
	onExhausted      string       // Config.OnExhausted; "" = halt
	logger           *slog.Logger // Config.Logger
}

func startRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	ctx := context.Background()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: compileCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	mod := timersModule(t, rt)
	if o.guest != "" {
		wasm, err := os.ReadFile(guestbuild.Go(t, o.guest))
		if err != nil {
			t.Fatal(err)
		}
		if mod, err = rt.Compile(ctx, wasm, modrt.Limits{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mod.Close(ctx) })
	}
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	db, err := store.Open(filepath.Join(o.dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.guestConfig == "" {
		o.guestConfig = "{}"
	}
	r := &rig{t: t, clock: &fakeClock{}, out: &memOut{}, dl: &memDL{}, db: db, rt: rt, done: make(chan error, 1)}
	r.clock.set(o.start)
	pr, pw := io.Pipe()
	r.in = pw
	cfg := Config{
		Name: "timers", Module: mod, GuestConfig: []byte(o.guestConfig),
		Inputs: []Input{{Name: "in", Stdin: pr, Format: source.Format{JSON: true, KeyField: "k", ValueField: "v", TimestampField: "ts"}}},
		Output: r.out, DeadLetter: r.dl, Store: db, Policy: PolicyKey, Workers: 2,
		MaxAttempts: 1, OnExhausted: "halt", Checkpoint: 20 * time.Millisecond,
		Lateness: o.lateness, IdleTimeout: o.idle, TickEvery: o.tick, MigrateAtActivation: o.migrateAtActivation,
		Now: r.clock.Now, MaxPendingTimers: o.maxPendingTimers, Logger: o.logger,
	}
	if o.onExhausted != "" {
		cfg.OnExhausted = o.onExhausted
	}
	cfg.Sched.MaxBatchItems = 16
	if o.checkpoint > 0 {
		cfg.Checkpoint = o.checkpoint
	}
	if o.holdBytes > 0 {
		cfg.Output = &holdingOut{memOut: r.out, perLine: o.holdBytes}
	}
	if o.output != nil {
		cfg.Output = o.output(r.out)
	}
	if o.wrap != nil {
		cfg.NewProcessor = func(ctx context.Context) (Processor, error) {
			inst, err := mod.Instantiate(ctx, modrt.InstanceConfig{Task: "timers", Config: []byte(o.guestConfig), Now: func() int64 { return r.clock.Now().UnixMilli() }})
			if err != nil {
				return nil, err
			}
			return o.wrap(inst), nil
		}
	}
	r.tk, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go func() { r.done <- r.tk.Run(runCtx) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop ends the task (a clean stop: a last checkpoint) and closes the store.
func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.in.Close()
	if err := <-r.done; err != nil {
		r.t.Errorf("task: %v", err)
	}
	r.cancel = nil
	r.db.Close()
}

// send writes records: each is key, value and event time (-1: none).
func (r *rig) send(recs ...rec) {
	r.t.Helper()
	for _, x := range recs {
		m := map[string]any{"k": x.k, "v": x.v}
		if x.ts >= 0 {
			m["ts"] = x.ts
		}
		b, _ := json.Marshal(m)
		if _, err := r.in.Write(append(b, '\n')); err != nil {
			r.t.Fatal(err)
		}
	}
}

type rec struct {
	k, v string
	ts   int64
}

func r0(k, v string) rec { return rec{k, v, -1} }

// advance moves the clock to ms and wakes the loop.
func (r *rig) advance(ms int64) {
	r.clock.set(ms)
	r.tk.Wake()
}

// waitLines waits until n outputs match the prefix, and returns all outputs matching it.
func (r *rig) waitLines(prefix string, n int) []string {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got []string
		for _, l := range r.out.snapshot() {
			if strings.HasPrefix(l, prefix) {
				got = append(got, l)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("waited for %d outputs %q; have %q; %s", n, prefix, r.out.snapshot(), r.state())
		}
		select {
		case err := <-r.done:
			r.done <- err
			r.t.Fatalf("the task stopped (%v) before %d outputs %q; have %q; %s", err, n, prefix, r.out.snapshot(), r.state())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// state describes the rig for a failure message: the committed pending timers, the room the
// task counts for the pending-timer limit, the refusals and the dead letters.
func (r *rig) state() string {
	s := r.tk.Stats()
	return fmt.Sprintf("pending timers %d (committed), timer room used %d of %d, timer_set refused %d, in flight %d, queued %d, dead letters %q",
		s.PendingTimers, r.tk.timers.used.Load(), r.tk.timers.limit, s.TimersRefused, s.InFlight, s.Queued, r.deadLetters())
}

// settle gives the loop time to act on an event that must have no effect, and returns the
// outputs matching prefix. It proves nothing by itself; the tests use it only before asserting
// that something did NOT happen, after asserting what did.
func (r *rig) settle(prefix string) []string {
	time.Sleep(100 * time.Millisecond)
	return r.waitLines(prefix, 0)
}

func TestTimersProcessingTimeOrder(t *testing.T) {
	const t0 = 1_000_000
	r := startRig(t, rigOpts{start: t0})
	r.send(
		r0("a", "set t1 p 1005000"),
		r0("a", "set t2 p 1003000 x"),
		r0("a", "set t3 p 1004000"),
		r0("b", "set t1 p 1001000"),
		r0("b", "del t1"),
		r0("c", "set t1 p 1002000 old"),
		r0("c", "set t1 p 1006000 new"), // replaces
	)
	r.waitLines("log rec", 7)
	if got := r.settle("log fired"); len(got) != 0 {
		t.Fatalf("fired before their time: %q", got)
	}
	r.advance(1003500)
	got := r.waitLines("log fired", 1)
	if want := "log fired a t2 1003000 x wm=-1"; got[0] != want {
		t.Fatalf("first firing %q, want %q", got[0], want)
	}
	if got := r.settle("log fired"); len(got) != 1 {
		t.Fatalf("after 1003500: %q, want only a/t2 (b/t1 was deleted, c/t1 replaced)", got)
	}
	r.advance(1010000)
	got = r.waitLines("log fired", 4)
	want := []string{"log fired a t2 1003000 x wm=-1", "log fired a t3 1004000  wm=-1", "log fired a t1 1005000  wm=-1"}
	var a []string
	for _, l := range got {
		if strings.HasPrefix(l, "log fired a ") {
			a = append(a, l)
		}
	}
	if !slices.Equal(a, want) {
		t.Errorf("key a fired %q, want %q (in time order)", a, want)
	}
	if !slices.Contains(got, "log fired c t1 1006000 new wm=-1") {
		t.Errorf("c/t1 did not fire with its replacement: %q", got)
	}
	if got := r.settle("log fired"); len(got) != 4 {
		t.Errorf("firings %q, want 4", got)
	}
}

func TestTimersEventTimeAndLate(t *testing.T) {
	r := startRig(t, rigOpts{start: 1, lateness: time.Second})
	r.send(
		rec{"a", "set e1 e 5000", 1000},
		rec{"a", "set p1 p 2", 1100}, // processing time: fires on the clock, not the watermark
		rec{"a", "count", 5500},      // watermark 4500
	)
	r.waitLines("log rec", 3)
	if got := r.settle("log fired"); len(got) != 0 {
		t.Fatalf("fired early: %q", got)
	}
	r.send(rec{"b", "count", 6100}) // watermark 5100 ≥ 5000
	got := r.waitLines("log fired", 1)
	if !strings.HasPrefix(got[0], "log fired a e1 5000  wm=") {
		t.Fatalf("firing %q, want a/e1 at 5000", got[0])
	}
	if got := r.settle("log fired"); len(got) != 1 {
		t.Fatalf("firings %q: the processing-time timer must wait for the clock", got)
	}
	r.send(rec{"a", "count", 2000}) // behind the watermark: late
	late := r.waitLines("log rec a 4", 1)
	if late[0] != "log rec a 4 late" {
		t.Errorf("record behind the watermark: %q, want the late flag", late[0])
	}
	r.advance(3)
	r.waitLines("log fired a p1", 1)
	r.stop()
	if s := r.tk.Stats(); s.Late != 1 || s.TimersFired != 2 {
		t.Errorf("stats late=%d fired=%d, want 1 and 2", s.Late, s.TimersFired)
	}
}

func TestTimerSetAgainFromFiring(t *testing.T) {
	r := startRig(t, rigOpts{start: 0})
	r.send(r0("a", "set r p 1000 again:3"))
	r.waitLines("log rec", 1)
	for i, at := range []int64{1000, 2000, 3000, 4000} {
		r.advance(at)
		got := r.waitLines("log fired", i+1)
		if !strings.HasPrefix(got[i], fmt.Sprintf("log fired a r %d again:%d", at, 3-i)) {
			t.Fatalf("firing %d: %q", i, got[i])
		}
	}
	r.advance(100_000)
	if got := r.settle("log fired"); len(got) != 4 {
		t.Errorf("firings %q, want exactly 4", got)
	}
}

func TestTimersSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, start: 0})
	for i := range 200 {
		r.send(r0(fmt.Sprintf("k%03d", i), fmt.Sprintf("set t p %d", 1000+i)))
	}
	r.waitLines("log rec", 200)
	r.advance(1099) // 100 fall due now, 100 stay pending
	r.waitLines("log fired", 100)
	r.stop()

	r2 := startRig(t, rigOpts{dir: dir, start: 50_000}) // the rest fell due while it was down
	r2.waitLines("log fired", 100)
	if got := r2.settle("log fired"); len(got) != 100 {
		t.Errorf("after restart %d firings, want the 100 pending ones", len(got))
	}
	r2.stop()
	db, err := store.Open(filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, err := db.StreamID("timers", "stdin:in/0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		v, ok, err := db.Get("timers", id, []byte(fmt.Sprintf("k%03d", i)), []byte("fired"))
		if err != nil || !ok || string(v) != "1" {
			t.Fatalf("k%03d fired=%q (ok %v, err %v), want exactly once", i, v, ok, err)
		}
	}
	if n, err := db.TimerCount("timers", id); err != nil || n != 0 {
		t.Errorf("%d timers left (err %v), want 0", n, err)
	}
}

func TestMigrateLazy(t *testing.T) {
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, guestConfig: `{"state_version":1}`})
	r.send(r0("a", "count"), r0("b", "count"))
	r.waitLines("log rec", 2)
	if got := r.waitLines("log migrate", 0); len(got) != 0 {
		t.Fatalf("migrations on first use: %q (a key without state needs none)", got)
	}
	r.stop()

	r2 := startRig(t, rigOpts{dir: dir, guestConfig: `{"state_version":2}`})
	r2.send(r0("a", "count"), r0("a", "count"), r0("c", "count"))
	r2.waitLines("log rec", 3)
	got := r2.out.snapshot()
	if !slices.Equal(got, []string{"log migrate a 1->2", "log rec a 2", "log rec a 3", "log rec c 4"}) &&
		!slices.Equal(got, []string{"log migrate a 1->2", "log rec a 2", "log rec c 4", "log rec a 3"}) &&
		!slices.Equal(got, []string{"log rec c 4", "log migrate a 1->2", "log rec a 2", "log rec a 3"}) {
		t.Errorf("outputs %q: want one migration of a (1->2) before its records, none for c", got)
	}
	r2.stop()
}

// gate wraps the task's processors to log when units begin and end, and to hold a record unit
// or a tick until the test releases it.
type gate struct {
	mu          sync.Mutex
	log         []string
	releaseRec  chan struct{} // a unit with a record "count block" waits for it
	releaseTick chan struct{} // a tick waits for it
}

func (g *gate) note(s string) {
	g.mu.Lock()
	g.log = append(g.log, s)
	g.mu.Unlock()
}

func (g *gate) entries() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.log)
}

type gated struct {
	Processor
	g *gate
}

func (p gated) Run(ctx context.Context, u *modrt.Unit, env modrt.Env) (modrt.Effects, error) {
	kind, wait := "rec", (chan struct{})(nil)
	for _, s := range u.Steps {
		switch s.Kind {
		case modrt.StepTick:
			kind, wait = "tick", p.g.releaseTick
		case modrt.StepRecords:
			for _, r := range s.Records {
				if string(r.Value) == "count block" {
					kind, wait = "blocked-rec", p.g.releaseRec
				}
			}
		}
	}
	p.g.note("begin " + kind)
	if wait != nil {
		<-wait
	}
	eff, err := p.Processor.Run(ctx, u, env)
	p.g.note("end " + kind)
	return eff, err
}

func (g *gate) waitFor(t *testing.T, entry string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(g.entries(), entry) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in %q", entry, g.entries())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestTickExclusive checks S16: a tick starts only when no unit of its partition is in flight, no
// unit of the partition starts before it ends, and missed ticks coalesce into one.
func TestTickExclusive(t *testing.T) {
	g := &gate{releaseRec: make(chan struct{}), releaseTick: make(chan struct{})}
	r := startRig(t, rigOpts{start: 0, tick: time.Second, wrap: func(p Processor) Processor { return gated{p, g} }})
	r.send(r0("a", "count"), r0("b", "count block"))
	r.waitLines("log rec a", 1)
	g.waitFor(t, "begin blocked-rec")

	r.advance(1500) // the tick is due while b's record is in flight
	time.Sleep(100 * time.Millisecond)
	if slices.Contains(g.entries(), "begin tick") {
		t.Fatalf("the tick began beside a unit in flight: %q", g.entries())
	}
	close(g.releaseRec)
	g.waitFor(t, "begin tick")

	r.send(r0("c", "count")) // arrives while the tick runs
	time.Sleep(100 * time.Millisecond)
	log := g.entries()
	if i := slices.Index(log, "begin tick"); slices.Contains(log[i:], "begin rec") {
		t.Fatalf("a unit began while the tick ran: %q", log)
	}
	if !slices.Contains(log, "end blocked-rec") || slices.Index(log, "end blocked-rec") > slices.Index(log, "begin tick") {
		t.Fatalf("the tick began before the unit in flight ended: %q", log)
	}
	close(g.releaseTick)
	r.waitLines("log rec c", 1)
	log = g.entries()
	last := len(log) - 1 - slices.Index(reversed(log), "begin rec")
	if slices.Index(log, "end tick") > last {
		t.Fatalf("c's unit began before the tick ended: %q", log)
	}
	ticks := r.waitLines("ticks", 1)
	if ticks[0] != "ticks tick 0 keys=2 wm=-1" {
		t.Errorf("tick output %q, want the two keys with state (a, b)", ticks[0])
	}

	r.advance(10_500) // nine intervals later: one tick, not nine
	r.waitLines("ticks", 2)
	if got := r.settle("ticks"); len(got) != 2 {
		t.Errorf("ticks %q: missed ticks must coalesce into one", got)
	}
}

// TestIdleTimeoutAdvancesWatermark checks that an idle partition's event-time timers fire with
// processing time once the idle timeout passes, and that the pause does not move the watermark
// that late flags come from (issue 23): a history replayed after it is not late.
func TestIdleTimeoutAdvancesWatermark(t *testing.T) {
	r := startRig(t, rigOpts{start: 1_000_000, idle: 10 * time.Second})
	r.send(rec{"a", "set e e 500000", 100_000}) // event time far behind processing time
	r.waitLines("log rec", 1)
	r.advance(1_005_000)
	if got := r.settle("log fired"); len(got) != 0 {
		t.Fatalf("fired before the idle timeout: %q", got)
	}
	r.advance(1_011_000)
	got := r.waitLines("log fired", 1)
	if got[0] != "log fired a e 500000  wm=100000" {
		t.Errorf("firing %q, want a/e with the watermark of the records", got[0])
	}
	r.send(rec{"b", "count", 200_000}) // more history: behind the clock, ahead of the records
	if got := r.waitLines("log rec b", 1); got[0] != "log rec b 1" {
		t.Errorf("after the idle pause: %q, want no late flag", got[0])
	}
}

func reversed(s []string) []string {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

// TestMigrateAtActivation switches a running task to a module of a newer state version with
// MigrateAtActivation: every key with state is migrated without being used, once.
func TestMigrateAtActivation(t *testing.T) {
	r := startRig(t, rigOpts{start: 0, migrateAtActivation: true}) // state version 0
	for i := range 50 {
		r.send(r0(fmt.Sprintf("k%02d", i), "count"))
	}
	r.waitLines("log rec", 50)
	wasm, err := os.ReadFile(guestbuild.Go(t, "testguests/timers/v2"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := r.rt.Compile(context.Background(), wasm, modrt.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// v2 declares state version 2.
	if _, err := r.tk.Switch(context.Background(), mod, 2); err != nil {
		t.Fatal(err)
	}
	got := r.waitLines("log migrate", 50)
	seen := map[string]bool{}
	for _, l := range got {
		if !strings.HasSuffix(l, " 0->2") || seen[l] {
			t.Fatalf("migration %q (all: %q)", l, got)
		}
		seen[l] = true
	}
	if got := r.settle("log migrate"); len(got) != 50 {
		t.Errorf("%d migrations, want exactly one per key", len(got))
	}
}

// TestWatermarkSurvivesRestart checks that a stream's watermark is restored from its checkpoint:
// after a restart, a record behind the old watermark is late, and an event-time timer set
// before it is not held back.
func TestWatermarkSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, start: 0})
	r.send(rec{"a", "count", 9000}, rec{"a", "set e e 20000", 9001})
	r.waitLines("log rec", 2)
	r.stop()

	r2 := startRig(t, rigOpts{dir: dir, start: 0})
	r2.send(rec{"b", "count", 5000}) // behind the restored watermark (9001)
	if got := r2.waitLines("log rec b", 1); got[0] != "log rec b 2 late" {
		t.Errorf("after restart: %q, want the late flag", got[0])
	}
	r2.send(rec{"b", "count", 20000})
	if got := r2.waitLines("log fired", 1); got[0] != "log fired a e 20000  wm=20000" {
		t.Errorf("firing %q", got[0])
	}
}

// sendTogether writes records in one write: the reader hands them over in one chunk, all read
// before any of them is processed.
func (r *rig) sendTogether(recs ...rec) {
	r.t.Helper()
	var b []byte
	for _, x := range recs {
		line, _ := json.Marshal(map[string]any{"k": x.k, "v": x.v, "ts": x.ts})
		b = append(append(b, line...), '\n')
	}
	if _, err := r.in.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

// keyLog is what key k saw, in order: "rec <offset or late>" and "fired <time>".
func (r *rig) keyLog(k string, n int) []string {
	r.t.Helper()
	var got []string
	for _, l := range r.waitLines("log ", n) {
		f := strings.Fields(l)
		if len(f) >= 4 && f[2] == k {
			if f[1] == "fired" {
				got = append(got, "fired "+f[4])
			} else {
				got = append(got, "rec "+f[len(f)-1])
			}
		}
	}
	return got
}

// TestFiringOrderThreeLines is the three-line input of issue 16: a sets an event-time timer, b
// moves the watermark past it, and a record of a behind the watermark follows. The third record
// was read after the watermark passed the timer's time, so the firing comes before it whether the
// host read it before a's call finished (the firing is placed in a's queue ahead of it when the
// set is applied) or after the firing ran (issue 23; ABI.md §4.12). It carries the late flag
// either way.
func TestFiringOrderThreeLines(t *testing.T) {
	lines := []rec{
		{"a", "set e1 e 5000", 1000},
		{"b", "count", 10000}, // watermark 10000 ≥ 5000
		{"a", "count", 2000},  // behind the watermark: late
	}
	t.Run("read together", func(t *testing.T) {
		r := startRig(t, rigOpts{start: 1})
		r.sendTogether(lines...)
		r.waitLines("log fired", 1)
		got := r.keyLog("a", 4)
		if want := []string{"rec 0", "fired 5000", "rec late"}; !slices.Equal(got, want) {
			t.Fatalf("key a saw %q, want %q: the record read after the watermark passed the timer's time comes after its firing, however far reading ran ahead", got, want)
		}
	})
	t.Run("third read after the firing", func(t *testing.T) {
		r := startRig(t, rigOpts{start: 1})
		r.sendTogether(lines[:2]...)
		r.waitLines("log fired", 1)
		r.sendTogether(lines[2])
		got := r.keyLog("a", 4)
		if want := []string{"rec 0", "fired 5000", "rec late"}; !slices.Equal(got, want) {
			t.Fatalf("key a saw %q, want %q", got, want)
		}
	})
}

// TestSessionsExampleThreeLines runs the sessions example on the three-line shape of issue 16
// (a's session, b moving the watermark past its close, a late event of a within the gap) in both
// readings: the outputs are the same, because the late event goes to output "late" and joins no
// session. (The example used to count a late event into the open session if the firing had not
// run yet and start a new session if it had: two results for one input.)
func TestSessionsExampleThreeLines(t *testing.T) {
	lines := []rec{
		{"a", "/1", 60_000},
		{"b", "/2", 10_000_000}, // watermark past a's close (minute 31)
		{"a", "/3", 90_000},     // late: within a's session's gap
	}
	want := []string{
		`late /3`,
		`sessions {"user":"a","count":1,"first":60000,"last":60000}`,
	}
	run := func(t *testing.T, together bool) {
		r := startRig(t, rigOpts{start: 1, guest: "sessions", guestConfig: `{"gap_minutes":30}`})
		if together {
			r.sendTogether(lines...)
		} else {
			r.sendTogether(lines[:2]...)
			r.waitLines("sessions", 1)
			r.sendTogether(lines[2])
		}
		r.waitLines("late", 1)
		r.stop() // b's session stays open: the input is cut, not ended
		got := r.out.snapshot()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("outputs %q, want %q", got, want)
		}
	}
	t.Run("read together", func(t *testing.T) { run(t, true) })
	t.Run("late event read after the firing", func(t *testing.T) { run(t, false) })
}

// waitPending waits until the published stats count want pending timers, in the task and in
// its one input.
func (r *rig) waitPending(want int64) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := r.tk.Stats()
		if s.PendingTimers == want && len(s.Inputs) == 1 && s.Inputs[0].PendingTimers == want {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("pending timers: task %d, inputs %+v; want %d; %s", s.PendingTimers, s.Inputs, want, r.state())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The pending-timers gauge follows sets, replacements, deletes and firings, and starts from the
// store's count after a restart.
func TestPendingTimersStats(t *testing.T) {
	dir := t.TempDir()
	r := startRig(t, rigOpts{dir: dir, start: 0})
	for i := range 10 {
		r.send(r0(fmt.Sprintf("k%d", i), fmt.Sprintf("set t p %d", 1000+i)))
	}
	r.send(r0("k0", "set t p 1000"), r0("k9", "set u p 5000"), r0("k9", "del u"), r0("k8", "del never"))
	r.waitLines("log rec", 14)
	r.waitPending(10)
	r.advance(1004) // k0..k4 fire
	r.waitLines("log fired", 5)
	r.waitPending(5)
	r.stop()

	r2 := startRig(t, rigOpts{dir: dir, start: 1004})
	r2.send(r0("k5", "count"))
	r2.waitLines("log rec", 1)
	r2.waitPending(5)
	r2.advance(2000)
	r2.waitLines("log fired", 5)
	r2.waitPending(0)
}

// TestTimerOpsDuringCheckpointInFlight: the timer ops applied while a checkpoint is in flight
// (collected, not yet committed) override the ones it carries and survive its commit, with
// their due-heap entries; the ones it carries are forgotten only then. Before the pipeline,
// timersCommitted forgot every dirty op, those applied since the collect included.
func TestTimerOpsDuringCheckpointInFlight(t *testing.T) {
	st := &stream{tm: newStreamTime(time.UnixMilli(0), 0)}
	tk := &Task{order: []*stream{st}}
	tm := &st.tm
	a, b := timerID{"k", "a"}, timerID{"k", "b"}
	set := func(id timerID, due int64) {
		tm.dirty[id] = dirtyTimer{due: due}
		tm.heaps[0] = append(tm.heaps[0], dueEntry{due: due, id: id})
	}
	set(a, 10)
	tk.timersCollected() // checkpoint N takes a's set
	if op, ok := tm.uncommitted(a); !ok || op.due != 10 || len(tm.dirty) != 0 {
		t.Fatalf("after the collect: a = %+v, %v; dirty %v", op, ok, tm.dirty)
	}
	// While N is in flight: b is set, a deleted.
	set(b, 20)
	tm.dirty[a] = dirtyTimer{del: true}
	if op, _ := tm.uncommitted(a); !op.del {
		t.Fatalf("a = %+v while N is in flight, want the delete applied since", op)
	}
	tk.timersCommitted() // N committed
	if len(tm.committing) != 0 {
		t.Errorf("committing after the commit: %v", tm.committing)
	}
	if op, ok := tm.uncommitted(b); !ok || op.due != 20 {
		t.Errorf("b = %+v, %v after N's commit, want its set (due 20)", op, ok)
	}
	if op, ok := tm.uncommitted(a); !ok || !op.del {
		t.Errorf("a = %+v, %v after N's commit, want its delete", op, ok)
	}
	if len(tm.heaps[0]) != 1 || tm.heaps[0][0].id != b {
		t.Errorf("due heap after N's commit: %v, want b's entry alone", tm.heaps[0])
	}
}
