package task

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
)

// Hot deploy (DESIGN S19). A task runs one current version of its module; Switch makes a new
// one current at a batch boundary: the loop handles the request between two events, so every
// batch dispatched after it runs on the new version and every batch dispatched before it
// finishes on the version it started on. Because a key is in at most one batch at a time,
// all of a key's effects from the old version are applied before its first batch on the new
// version is even formed. Workers replace their instance when they get a job of another
// version; a replaced version's module is closed once no job of it is left.

// ErrStopped is returned by Switch, Pause and Resume when the task's loop is not running
// (Run returned, or has not been called).
var ErrStopped = errors.New("the task is not running")

// version is one module version the task can run. id, mod and newProc are immutable; the
// rest is owned by the loop.
type version struct {
	id      int64
	mod     *modrt.Module
	newProc func(ctx context.Context) (Processor, error)

	jobs    int            // jobs dispatched on this version and not finished
	retired bool           // a newer version is current
	first   chan struct{}  // closed when the first batch on this version finished, or never will
	firstAt time.Time      // when; zero if none did
	metrics *modrt.Metrics // the metrics its guests declare (ABI 0.3): each version starts at zero
}

func newVersion(id int64, mod *modrt.Module, newProc func(ctx context.Context) (Processor, error)) *version {
	return &version{id: id, mod: mod, newProc: newProc, first: make(chan struct{}), metrics: modrt.NewMetrics()}
}

// ranBatch records that a batch on v finished successfully at now.
func (v *version) ranBatch(now time.Time) {
	if v.firstAt.IsZero() {
		v.firstAt = now
		close(v.first)
	}
}

// release closes v's module when v is retired and drained, and gives up on its first batch.
func (v *version) release(ctx context.Context) {
	if !v.retired || v.jobs > 0 {
		return
	}
	if v.firstAt.IsZero() {
		select {
		case <-v.first:
		default:
			close(v.first)
		}
	}
	if v.mod != nil {
		_ = v.mod.Close(ctx)
	}
}

// Switched describes a version switch.
type Switched struct {
	// Previous is the version that was current before.
	Previous int64
	// At is when the loop made the new version current.
	At time.Time

	v *version
}

// FirstBatch waits until the first batch on the new version finished successfully and returns
// when. It fails if ctx is done first, or if no batch will ever run on the version (it was
// replaced before one did, or the task stopped).
func (s Switched) FirstBatch(ctx context.Context) (time.Time, error) {
	select {
	case <-s.v.first:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	// first is closed by the loop after it set firstAt.
	if s.v.firstAt.IsZero() {
		return time.Time{}, fmt.Errorf("no batch ran on version %d", s.v.id)
	}
	return s.v.firstAt, nil
}

type requestKind uint8

const (
	reqSwitch requestKind = iota
	reqPause
	reqResume
	reqQuery // a state query (query.go)
)

// request is a call into the loop from another goroutine; the loop answers at once.
type request struct {
	kind  requestKind
	ver   *version
	query *queryReq // reqQuery, which answers through it
	reply chan Switched
}

// Trial instantiates mod with this task's configuration (which runs the guest's init with the
// task's config) and closes the instance: the check a module must pass before Switch.
func (t *Task) Trial(ctx context.Context, mod *modrt.Module) error {
	inst, err := t.instantiate(ctx, newVersion(0, mod, nil))
	if err != nil {
		return err
	}
	return inst.Close(ctx)
}

// Switch makes mod, registered as version id, the task's current version, and passes
// ownership of mod to the task: it is closed once a later version replaced it and its last
// batch finished, or when Run returns. Callers check mod with Trial first. Safe from any
// goroutine while Run runs; on error (ErrStopped, or ctx's) mod remains the caller's.
func (t *Task) Switch(ctx context.Context, mod *modrt.Module, id int64) (Switched, error) {
	return t.call(ctx, request{kind: reqSwitch, ver: newVersion(id, mod, nil)})
}

// Pause stops dispatching batches; batches in flight finish, checkpoints go on, and reading
// stops once the queues are full. Safe from any goroutine while Run runs. Pausing a paused
// task does nothing.
func (t *Task) Pause(ctx context.Context) error {
	_, err := t.call(ctx, request{kind: reqPause})
	return err
}

// Resume undoes Pause.
func (t *Task) Resume(ctx context.Context) error {
	_, err := t.call(ctx, request{kind: reqResume})
	return err
}

func (t *Task) call(ctx context.Context, r request) (Switched, error) {
	r.reply = make(chan Switched, 1)
	select {
	case t.ctl <- r:
	case <-t.stopped:
		return Switched{}, ErrStopped
	case <-ctx.Done():
		return Switched{}, ctx.Err()
	}
	return <-r.reply, nil
}

// serve handles a request in the loop.
func (t *Task) serve(ctx context.Context, r request) {
	var out Switched
	switch r.kind {
	case reqQuery:
		t.startQuery(r.query)
		return
	case reqSwitch:
		old := t.cur
		out = Switched{Previous: old.id, At: t.cfg.Now(), v: r.ver}
		t.cur = r.ver
		t.meters.guest.Store(r.ver.metrics)
		t.stats.Deploys++
		old.retired = true
		old.release(ctx)
		t.log.Info("module version switched", "version", r.ver.id, "previous", old.id,
			"batches_in_flight_on_previous", old.jobs)
		if t.cfg.MigrateAtActivation {
			t.passes = t.passes[:0]
			for _, st := range t.order {
				t.passes = append(t.passes, &migrationPass{st: st})
			}
		}
	case reqPause:
		if !t.paused {
			t.log.Info("paused: no new batches until resumed", "batches_in_flight", len(t.inflight))
		}
		t.paused = true
		t.pauseFetching(true)
	case reqResume:
		if t.paused {
			t.log.Info("resumed")
		}
		t.paused = false
		t.pauseFetching(false)
	}
	t.statsMu.Lock()
	t.published.Version = t.cur.id
	t.published.Paused = t.paused
	t.published.Deploys = t.stats.Deploys
	t.statsMu.Unlock()
	t.reply(func() { r.reply <- out })
}

// closeVersions runs when Run returns: nobody waits for a first batch any more, and the
// current version's module is closed unless it is Config.Module, which stays the caller's.
func (t *Task) closeVersions(ctx context.Context) {
	cur := t.cur
	select {
	case <-cur.first:
	default:
		close(cur.first)
	}
	if cur.mod != nil && cur.mod != t.cfg.Module {
		_ = cur.mod.Close(ctx)
	}
}

// migrationPass walks the keys with state of one stream after a switch (MigrateAtActivation),
// queueing a migration item for each: a unit with no record, in which the worker migrates the key
// if its state version differs from the instance's (ABI.md §4.16). Keys already migrated, or
// written by the new version meanwhile, cost a lookup and no guest call.
type migrationPass struct {
	st      *stream
	after   []byte
	started bool
	queued  int64
}

// migrationChunk is how many keys a pass reads per loop turn; a pass waits while the scheduler
// holds more than migrationBacklog items, so that it never floods memory.
const (
	migrationChunk   = 256
	migrationBacklog = 4 * migrationChunk
)

// feedMigrations advances the activation passes by one chunk each.
func (t *Task) feedMigrations() error {
	if len(t.passes) == 0 || t.sched.Stats().QueuedItems > migrationBacklog {
		return nil
	}
	if !t.passes[0].started {
		// A new pass reads the store: commit first, so that it sees every key written so far.
		if err := t.checkpointWait(); err != nil {
			return err
		}
	}
	live := t.passes[:0]
	for _, p := range t.passes {
		if t.streams[p.st.id] != p.st || p.st.revoking {
			continue // the partition went away; its new owner migrates lazily
		}
		n := 0
		var perr error
		err := t.cfg.Store.Keys(t.cfg.Name, p.st.id, p.after, !p.started, func(key []byte) bool {
			k := append([]byte(nil), key...)
			p.after, p.started = k, true
			t.fireSeq--
			seq := string(k)
			if t.cfg.Policy == PolicyPartition {
				seq = ""
			}
			t.pending++
			// The stream is live (checked above), so Push cannot fail; were it a bug, the task stops.
			perr = t.sched.Push(sched.Item[*item]{Stream: p.st.id, Key: seq, Offset: t.fireSeq, Size: len(k) + 64,
				Value: &item{migrate: true, rec: abi.Record{Key: k}}})
			n++
			return perr == nil && n < migrationChunk
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			return err
		}
		p.queued += int64(n)
		if n == migrationChunk {
			live = append(live, p)
		} else {
			t.log.Info("activation migration pass queued every key", "at", p.st.name(), "keys", p.queued)
		}
	}
	t.passes = live
	return nil
}
