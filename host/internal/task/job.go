package task

import (
	"context"
	"fmt"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
)

// job is one batch on its way through a worker. The loop builds it (newJob), a worker runs it
// (run) and fills effects or err, and the loop applies it (finish) and releases it.
type job struct {
	id     uint64
	items  []sched.Item[*item]
	groups []group  // one guest call per stream: a key's state is scoped by its stream
	ver    *version // the module version the job runs on: the current one when dispatched
	err    error
}

// group is the part of a job from one stream.
type group struct {
	stream     uint32
	st         *stream // the stream as it was at dispatch: a revoked one is replaced
	recs       []abi.Record
	entries    map[string]*statecache.Entry // by record key: the call's state scope
	lastOffset map[string]int64             // by record key: its last record in the call
	effects    modrt.Effects
}

func (t *Task) newJob(b sched.Batch[*item]) *job {
	j := &job{id: b.ID, items: b.Items}
	for _, it := range b.Items {
		var g *group
		for i := range j.groups {
			if j.groups[i].stream == it.Stream {
				g = &j.groups[i]
				break
			}
		}
		if g == nil {
			j.groups = append(j.groups, group{
				stream:     it.Stream,
				st:         t.streams[it.Stream],
				entries:    map[string]*statecache.Entry{},
				lastOffset: map[string]int64{},
			})
			g = &j.groups[len(j.groups)-1]
		}
		r := it.Value.rec
		g.recs = append(g.recs, r)
		g.st.inflight++
		k := string(r.Key)
		if _, ok := g.entries[k]; !ok {
			g.entries[k] = t.cache.Pin(it.Stream, r.Key)
		}
		g.lastOffset[k] = r.Offset
	}
	return j
}

func (t *Task) release(j *job) {
	for gi := range j.groups {
		for _, e := range j.groups[gi].entries {
			t.cache.Unpin(e)
		}
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
			env := &env{entries: g.entries, load: load}
			eff, err := inst.Process(ctx, g.recs, env)
			if err == nil {
				// Every written key must be loaded before the loop applies its writes.
				for _, w := range eff.Writes {
					if lerr := g.entries[string(w.Key)].Load(load); lerr != nil {
						err = lerr
						break
					}
				}
			}
			if err != nil {
				j.err = err
				break
			}
			g.effects = eff
		}
		if inst.Broken() {
			// Replaced when the next job comes, on that job's version.
			inst.Close(ctx)
			inst = nil
		}
		t.results <- j
	}
}

// env serves a guest call's state reads from the cache (S13); the entries belong to the call's
// worker until the call's job is returned to the loop.
type env struct {
	entries map[string]*statecache.Entry
	load    statecache.Loader
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
