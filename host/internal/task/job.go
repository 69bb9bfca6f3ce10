package task

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
	"github.com/wasmstream/wasmstream/store"
)

// job is one batch on its way through a worker. The loop builds it (newJob), a worker runs it
// (run) and fills effects or err, and the loop applies it (finish) and releases it.
type job struct {
	id     uint64
	items  []sched.Item[*item]
	groups []group   // one unit of work per stream: a key's state is scoped by its stream
	ver    *version  // the module version the job runs on: the current one when dispatched
	tick   *abi.Tick // a partition tick (S16): one group, no items
	err    error
}

// group is the part of a job from one stream.
type group struct {
	stream uint32
	st     *stream // the stream as it was at dispatch: a revoked one is replaced
	wm     int64   // the stream's watermark at dispatch
	groupBufs
	effects  modrt.Effects
	stateVer uint32              // the state version of the instance that ran the unit
	migrated []*statecache.Entry // keys whose state the unit migrated to stateVer
	owner    uint64              // the group's pins in the cache (PinOnce): unique to it
	// timerHeld is the pending-timer room the group's call holds (timerRoom): given back when
	// the loop is done with the job (releaseTimerRoom).
	timerHeld int64
}

// keyMark is a key's first and last record in a group. A key's items are consecutive in a
// batch (the scheduler takes them from its queue together), so a key has one keyMark per group;
// were it not so, SetMark keeps the highest of several and SetFirst the lowest.
type keyMark struct {
	e           *statecache.Entry
	first, last int64
}

func (t *Task) newJob(b sched.Batch[*item]) *job {
	j := &job{id: b.ID, items: b.Items}
	for n, it := range b.Items {
		var g *group
		for i := range j.groups {
			if j.groups[i].stream == it.Stream {
				g = &j.groups[i]
				break
			}
		}
		if g == nil {
			// Most batches hold one stream's records: its slices and maps are made once, for the
			// rest of the batch, rather than grown record by record.
			rest := len(b.Items) - n
			st := t.streams[it.Stream]
			t.owners++
			j.groups = append(j.groups, group{
				stream:    it.Stream,
				st:        st,
				wm:        st.tm.watermark(),
				owner:     t.owners,
				groupBufs: t.takeBufs(rest),
			})
			g = &j.groups[len(j.groups)-1]
		}
		v := it.Value
		g.work = append(g.work, v)
		g.st.inflight++
		key := v.rec.Key
		if v.fire != nil {
			key = v.fire.Key
		}
		// A key's items are adjacent in a batch (by the sequencing key; not so by partition):
		// the key of the item before is the first guess.
		var e *statecache.Entry
		if k := len(g.keys); k > 0 && bytes.Equal(g.keys[k-1].Key(), key) {
			e = g.keys[k-1]
		} else if pe, first := t.cache.PinOnce(it.Stream, key, g.owner); first {
			e = pe
			g.keys = append(g.keys, e)
		} else {
			e = pe
		}
		if v.fire == nil && !v.migrate {
			g.recs = append(g.recs, v.rec)
			if m := len(g.marks); m > 0 && g.marks[m-1].e == e {
				g.marks[m-1].last = v.rec.Offset
			} else {
				g.marks = append(g.marks, keyMark{e, v.rec.Offset, v.rec.Offset})
			}
		}
	}
	return j
}

// groupBufs are the slices and the map a group is built in. A released job's are cleared and
// kept for the next jobs (at most four sets per worker and four more: a batch takes keys from
// every partition in turn, so a job has a group per partition): making them anew for every batch
// was a fifth of the loop's work of forming it.
type groupBufs struct {
	recs  []abi.Record
	work  []*item             // records and firings in batch order
	marks []keyMark           // per record key: its first and last record in the call
	keys  []*statecache.Entry // the unit's state scope, each key once, pinned: the loop forms it
	// entries indexes keys by key. The worker that runs the group builds it (index), off the
	// loop; the loop builds it only for a group no worker ran (entry).
	entries map[string]*statecache.Entry
	// writeEntries and timerEntries are the entries of effects.Writes and effects.Timers, in
	// their order: the worker looks them up as it loads them, and the loop applies the effects
	// without looking them up again.
	writeEntries, timerEntries []*statecache.Entry
}

// index brings entries up to date with keys: keys only grow, and entries holds a prefix of them.
func (g *group) index() {
	if g.entries == nil {
		g.entries = make(map[string]*statecache.Entry, len(g.keys))
	}
	for _, e := range g.keys[len(g.entries):] {
		g.entries[e.KeyString()] = e
	}
}

// entry returns the entry of key in the group's scope, nil if it has none. Only the goroutine
// that holds the job calls it (the worker while it runs it, the loop after).
func (g *group) entry(key []byte) *statecache.Entry {
	if len(g.entries) < len(g.keys) {
		g.index()
	}
	return g.entries[string(key)]
}

// entryOf is entry for a key held as a string.
func (g *group) entryOf(key string) *statecache.Entry {
	if len(g.entries) < len(g.keys) {
		g.index()
	}
	return g.entries[key]
}

// writeEntry returns the entry of the group's i-th write, as the worker found it.
func (g *group) writeEntry(i int) *statecache.Entry {
	if len(g.writeEntries) == len(g.effects.Writes) {
		return g.writeEntries[i]
	}
	return g.entry(g.effects.Writes[i].Key) // effects the worker did not produce (tests)
}

// timerEntry returns the entry of the group's i-th timer operation, as the worker found it.
func (g *group) timerEntry(i int) *statecache.Entry {
	if len(g.timerEntries) == len(g.effects.Timers) {
		return g.timerEntries[i]
	}
	return g.entry(g.effects.Timers[i].Key)
}

// takeBufs returns empty buffers with room for n records, a released job's if there is one.
func (t *Task) takeBufs(n int) groupBufs {
	var g groupBufs
	if k := len(t.freeBufs); k > 0 {
		g = t.freeBufs[k-1]
		t.freeBufs = t.freeBufs[:k-1]
	}
	if cap(g.recs) < n {
		g.recs = make([]abi.Record, 0, n)
	}
	if cap(g.work) < n {
		g.work = make([]*item, 0, n)
	}
	if cap(g.marks) < n {
		g.marks = make([]keyMark, 0, n)
	}
	if cap(g.keys) < n {
		g.keys = make([]*statecache.Entry, 0, n)
	}
	return g
}

// release unpins a finished job's keys and keeps its groups' buffers for later jobs: nothing
// refers to them once the job is back on the loop (the guest call copied the records into guest
// memory, and effects hold copies). Its items go back to the scheduler for a later batch once
// their batch is completed or retried (sched.Reuse).
func (t *Task) release(j *job) {
	if j.items != nil {
		t.sched.Reuse(sched.Batch[*item]{ID: j.id, Items: j.items})
		j.items = nil
	}
	for gi := range j.groups {
		g := &j.groups[gi]
		for _, e := range g.keys {
			t.cache.Unpin(e)
		}
		if g.keys != nil && len(t.freeBufs) < 4*(t.cfg.Workers+1) {
			// Cleared: the buffers must not keep records, items or cache entries alive.
			clear(g.recs)
			clear(g.work)
			clear(g.marks)
			clear(g.keys)
			clear(g.entries)
			clear(g.writeEntries)
			clear(g.timerEntries)
			t.freeBufs = append(t.freeBufs, groupBufs{recs: g.recs[:0], work: g.work[:0], marks: g.marks[:0],
				keys: g.keys[:0], entries: g.entries, writeEntries: g.writeEntries[:0], timerEntries: g.timerEntries[:0]})
		}
		g.groupBufs = groupBufs{}
	}
}

// work runs jobs on one instance (of version ver) until the jobs channel closes. It replaces
// its instance when a job is of another version (a deploy: the old instance is closed) and
// after a trap; if no instance can be made the error goes to fatal and the job fails.
func (t *Task) work(ctx context.Context, inst Processor, ver *version, fatal chan<- error) {
	defer func() {
		if inst != nil {
			inst.Close(ctx)
		}
	}()
	load := t.cache.Loader()
	for j := range t.jobs {
		if inst != nil && ver != j.ver {
			inst.Close(ctx)
			inst = nil
		}
		if inst == nil {
			fresh, err := t.instantiate(ctx, j.ver)
			if err != nil {
				j.err = fmt.Errorf("instantiating version %d: %w", j.ver.id, err)
				select {
				case fatal <- fmt.Errorf("replacing an instance: %w", err):
				default:
				}
				t.results <- j
				continue
			}
			inst, ver = fresh, j.ver
		}
		for gi := range j.groups {
			g := &j.groups[gi]
			var err error
			if j.tick != nil {
				err = t.runTick(ctx, inst, j, g)
			} else {
				err = t.runUnit(ctx, inst, g, load)
			}
			if err != nil {
				j.err = err
				break
			}
		}
		if inst.Broken() {
			t.meters.traps.Add(1)
			// Replaced when the next job comes, on that job's version.
			inst.Close(ctx)
			inst = nil
		}
		t.results <- j
	}
}

// runUnit runs one group's records and firings on inst, after migrating the state of its keys
// that an instance of another state version wrote (ABI.md §4.16).
func (t *Task) runUnit(ctx context.Context, inst Processor, g *group, load statecache.Loader) error {
	u := unitOf(g, g.wm)
	g.stateVer = inst.StateVersion()
	g.migrated = g.migrated[:0]
	g.index()
	if inst.HasExport(modrt.StepMigrate) {
		var mig []modrt.Step
		for _, e := range g.keys {
			if err := e.Load(load); err != nil {
				return err
			}
			if e.HasState() && e.StateVersion() != g.stateVer {
				mig = append(mig, modrt.Step{Kind: modrt.StepMigrate, Migrate: abi.Migrate{
					From: e.StateVersion(), To: g.stateVer, Partition: g.partition(), Key: e.Key()}})
				g.migrated = append(g.migrated, e)
			}
		}
		u.Steps = append(mig, u.Steps...)
	}
	if len(u.Steps) == 0 {
		return nil // only cancelled firings
	}
	if !inst.HasExport(modrt.StepFirings) {
		// The module has no timer callback (a version deployed since the timers were set): its
		// firings are dropped, with their timers, and logged when applied.
		steps := u.Steps[:0]
		for _, s := range u.Steps {
			if s.Kind != modrt.StepFirings {
				steps = append(steps, s)
			}
		}
		u.Steps = steps
		for _, it := range g.work {
			if it.fire != nil {
				it.dropped = true
			}
		}
		if len(u.Steps) == 0 {
			return nil
		}
	}
	start := time.Now()
	ev := &env{entries: g.entries, load: load, t: t, st: g.st}
	eff, err := inst.Run(ctx, &u, ev)
	g.timerHeld += ev.held
	t.meters.callSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	t.meters.fuel.Add(eff.Fuel)
	// Every key the unit changed must be loaded before the loop applies its changes: its mark
	// and state version come from the store.
	g.writeEntries, g.timerEntries = g.writeEntries[:0], g.timerEntries[:0]
	for _, w := range eff.Writes {
		e := g.entries[string(w.Key)]
		if err := e.Load(load); err != nil {
			return err
		}
		g.writeEntries = append(g.writeEntries, e)
	}
	for _, op := range eff.Timers {
		e := g.entries[string(op.Key)]
		if err := e.Load(load); err != nil {
			return err
		}
		g.timerEntries = append(g.timerEntries, e)
	}
	for _, it := range g.work {
		if it.fire != nil && !it.cancelled {
			if err := g.entries[string(it.fire.Key)].Load(load); err != nil {
				return err
			}
		}
	}
	g.effects = eff
	return nil
}

// runTick runs a partition tick; its state reads go to the store (the loop committed everything
// of the partition before dispatching it, and holds the partition until it returns).
func (t *Task) runTick(ctx context.Context, inst Processor, j *job, g *group) error {
	g.stateVer = inst.StateVersion()
	if !inst.HasExport(modrt.StepTick) {
		return nil
	}
	u := modrt.Unit{Watermark: j.tick.Watermark, Steps: []modrt.Step{{Kind: modrt.StepTick, Tick: *j.tick}}}
	start := time.Now()
	ev := &tickEnv{db: t.cfg.Store, task: t.cfg.Name, stream: g.stream, t: t, st: g.st}
	eff, err := inst.Run(ctx, &u, ev)
	g.timerHeld += ev.held
	t.meters.callSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return err
	}
	t.meters.fuel.Add(eff.Fuel)
	g.effects = eff
	return nil
}

// partition is the partition number records of the group carry.
func (g *group) partition() uint32 {
	if g.st != nil && g.st.kafka {
		return uint32(g.st.tp.Partition)
	}
	return 0
}

// tickEnv serves a tick's reads from the store.
type tickEnv struct {
	db     *store.DB
	task   string
	stream uint32
	t      *Task
	st     *stream
	held   int64 // pending-timer room taken (ReserveTimer)
}

func (e *tickEnv) StateGet(key, name []byte) ([]byte, bool, error) {
	return e.db.Get(e.task, e.stream, key, name)
}

func (e *tickEnv) StateScan(key, prefix, after []byte, fromStart bool, fn func(name, val []byte) bool) error {
	if fromStart {
		after = nil
	} else if after == nil {
		after = []byte{} // after the empty name, not from the start
	}
	return e.db.Scan(e.task, e.stream, key, prefix, after, fn)
}

func (e *tickEnv) StateKeys(after []byte, fromStart bool, fn func(key []byte) bool) error {
	if !fromStart && after == nil {
		after = []byte{}
	}
	return e.db.Keys(e.task, e.stream, after, fromStart, fn)
}

// env serves a guest call's state reads from the cache (S13); the entries belong to the call's
// worker until the call's job is returned to the loop.
type env struct {
	entries map[string]*statecache.Entry
	load    statecache.Loader
	t       *Task
	st      *stream
	held    int64 // pending-timer room taken (ReserveTimer)
}

func (e *env) entry(key []byte) (*statecache.Entry, error) {
	en, ok := e.entries[string(key)]
	if !ok {
		return nil, fmt.Errorf("key %q is not in the call's scope", key)
	}
	if err := en.Load(e.load); err != nil {
		return nil, err
	}
	return en, nil
}

func (e *env) StateGet(key, name []byte) ([]byte, bool, error) {
	en, err := e.entry(key)
	if err != nil {
		return nil, false, err
	}
	v, ok := en.Get(name)
	return v, ok, nil
}

func (e *env) StateScan(key, prefix, after []byte, fromStart bool, fn func(name, val []byte) bool) error {
	en, err := e.entry(key)
	if err != nil {
		return err
	}
	en.Scan(prefix, after, fromStart, fn)
	return nil
}
