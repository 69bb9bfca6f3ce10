package task

import (
	"context"
	"errors"
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
	groups []group // one guest call per stream: a key's state is scoped by its stream
	err    error
}

// group is the part of a job from one stream.
type group struct {
	stream     uint32
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
				entries:    map[string]*statecache.Entry{},
				lastOffset: map[string]int64{},
			})
			g = &j.groups[len(j.groups)-1]
		}
		r := it.Value.rec
		g.recs = append(g.recs, r)
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

// work runs jobs on one instance until the jobs channel closes. A trapped instance is replaced;
// if no replacement can be made the error goes to fatal and the worker stops.
func (t *Task) work(ctx context.Context, inst Processor, fatal chan<- error) {
	defer func() {
		if inst != nil {
			inst.Close(ctx)
		}
	}()
	load := t.cache.Loader()
	for j := range t.jobs {
		if inst == nil {
			j.err = errors.New("no instance")
			t.results <- j
			continue
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
			inst.Close(ctx)
			inst = nil
			fresh, err := t.instantiate(ctx)
			if err != nil {
				select {
				case fatal <- fmt.Errorf("replacing a failed instance: %w", err):
				default:
				}
			} else {
				inst = fresh
			}
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
