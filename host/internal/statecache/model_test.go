package statecache

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/store"
)

var errInjected = errors.New("injected load failure")

// cacheModel is what the cache should hold, kept with plain maps: the store's state, the true
// state of every key, what changed since the last Collect, and the cache entries the test holds.
type cacheModel struct {
	t       *testing.T
	rnd     *rand.Rand
	c       *Cache
	store   persisted                    // committed state: what Load reads
	truth   map[string]map[string]string // current state of each (stream, key)
	changed map[string]map[string]bool   // names written since the last Collect
	marks   map[string]int64             // the mark of each live entry (-1: never set)
	markSet map[string]bool              // a SetMark raised the mark since the last Collect
	pins    map[string]int               // pins the test holds
	failing bool                         // the next Load fails
}

var (
	modelKeys  = []string{"", "a", "b", "c"}
	modelNames = []string{"", "a", "a/1", "a/2", "a/20", "ab", "b", "b/1", "\xff"}
)

func modelKey(sk string) (uint32, []byte) {
	stream, key, _ := strings.Cut(sk, "/")
	return uint32(stream[0] - '0'), []byte(key)
}

// TestCacheModel drives the cache with random Pin/Load/Apply/SetMark/Collect/Evict/Unpin
// sequences and checks, after every step, Get and Scan against the model, that Collect emits
// exactly the names changed since the previous Collect, and the cache's bookkeeping.
func TestCacheModel(t *testing.T) {
	testCacheModel(t)
}

// TestCacheModelCollisions is TestCacheModel with every entry's lookup hash the same, so that
// every lookup, eviction and drop walks a chain of entries (Cache.entries).
func TestCacheModelCollisions(t *testing.T) {
	hashMask = 0
	defer func() { hashMask = ^uint64(0) }()
	testCacheModel(t)
}

func testCacheModel(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			m := &cacheModel{
				t: t, rnd: rand.New(rand.NewPCG(seed, 7)),
				store: persisted{}, truth: map[string]map[string]string{}, changed: map[string]map[string]bool{},
				marks: map[string]int64{}, markSet: map[string]bool{}, pins: map[string]int{},
			}
			m.c = New(func(stream uint32, key []byte, _ *Meta, fn func(name, val []byte)) error {
				if m.failing {
					m.failing = false
					return errInjected
				}
				return m.store.load(stream, key, nil, fn)
			}, 0)
			for step := range 600 {
				m.step(step)
				checkSizes(t, m.c)
				if t.Failed() {
					t.Fatalf("failed at step %d", step)
				}
			}
			m.collect()
		})
	}
}

func (m *cacheModel) randomKey() string {
	return fmt.Sprintf("%d/%s", 1+m.rnd.IntN(2), modelKeys[m.rnd.IntN(len(modelKeys))])
}

// entry returns the cache's entry of sk, or nil.
func (m *cacheModel) entry(sk string) *Entry {
	stream, key := modelKey(sk)
	e, _ := m.c.lookup(stream, key)
	return e
}

// pinned returns a random key the test holds a pin on, or "".
func (m *cacheModel) pinned() string {
	keys := make([]string, 0, len(m.pins))
	for sk := range m.pins {
		keys = append(keys, sk)
	}
	if len(keys) == 0 {
		return ""
	}
	slices.Sort(keys)
	return keys[m.rnd.IntN(len(keys))]
}

func (m *cacheModel) step(step int) {
	t := m.t
	switch op := m.rnd.IntN(100); {
	case op < 15: // Pin
		sk := m.randomKey()
		stream, key := modelKey(sk)
		before := m.entry(sk)
		e := m.c.Pin(stream, key)
		if before != nil && e != before {
			t.Errorf("Pin(%s) replaced a cached entry", sk)
		}
		if before == nil {
			m.marks[sk] = -1
			if e.Loaded() {
				t.Errorf("Pin(%s) made a loaded entry", sk)
			}
		}
		m.pins[sk]++
	case op < 25: // Unpin
		if sk := m.pinned(); sk != "" {
			m.c.Unpin(m.entry(sk))
			if m.pins[sk]--; m.pins[sk] == 0 {
				delete(m.pins, sk)
				if slices.ContainsFunc(m.entry(sk).slots.all(), func(s slot) bool { return s.deleted && !s.dirty }) {
					t.Errorf("%s: collected tombstones outlived the last Unpin", sk)
				}
			}
		}
	case op < 35: // Load, sometimes failing
		if sk := m.pinned(); sk != "" {
			e := m.entry(sk)
			was := e.Loaded()
			m.failing = !was && m.rnd.IntN(4) == 0
			fail := m.failing
			err := e.Load(m.c.Loader())
			switch {
			case fail && !errors.Is(err, errInjected):
				t.Errorf("Load(%s) with a failing loader = %v", sk, err)
			case fail && e.Loaded():
				t.Errorf("Load(%s) failed but the entry is loaded", sk)
			case !fail && (err != nil || !e.Loaded()):
				t.Errorf("Load(%s) = %v, loaded %v", sk, err, e.Loaded())
			}
			m.failing = false
		}
	case op < 65: // Apply, to a loaded entry or, rarely, blind
		sk := m.pinned()
		if sk == "" || !m.entry(sk).Loaded() && m.rnd.IntN(5) != 0 {
			return
		}
		name := modelNames[m.rnd.IntN(len(modelNames))]
		del := m.rnd.IntN(3) == 0
		val := fmt.Sprintf("v%d", step)
		m.c.Apply(m.entry(sk), []byte(name), []byte(val), del)
		if m.truth[sk] == nil {
			m.truth[sk] = map[string]string{}
		}
		if del {
			delete(m.truth[sk], name)
		} else {
			m.truth[sk][name] = val
		}
		if m.changed[sk] == nil {
			m.changed[sk] = map[string]bool{}
		}
		m.changed[sk][name] = true
	case op < 72: // SetMark
		if sk := m.pinned(); sk != "" {
			off := int64(m.rnd.IntN(50))
			m.c.SetMark(m.entry(sk), off)
			if off > m.marks[sk] {
				m.marks[sk] = off
				m.markSet[sk] = true
			}
			if e := m.entry(sk); e.mark != m.marks[sk] {
				t.Errorf("%s: mark %d, want %d", sk, e.mark, m.marks[sk])
			}
		}
	case op < 80:
		m.collect()
	case op < 87: // Evict under a random budget
		m.evict(int64(m.rnd.IntN(4000)))
	default: // Get and Scan every loaded pinned entry
		for sk := range m.pins {
			if e := m.entry(sk); e.Loaded() {
				m.checkReads(sk, e)
			}
		}
	}
}

func (m *cacheModel) checkReads(sk string, e *Entry) {
	t := m.t
	for _, name := range modelNames {
		v, ok := e.Get([]byte(name))
		want, wantOK := m.truth[sk][name]
		if ok != wantOK || string(v) != want {
			t.Errorf("%s: Get(%q) = %q, %v; want %q, %v", sk, name, v, ok, want, wantOK)
		}
	}
	prefixes := []string{"", "a", "a/", "a/2", "b", "c", "\xff"}
	for range 4 {
		prefix := prefixes[m.rnd.IntN(len(prefixes))]
		after := modelNames[m.rnd.IntN(len(modelNames))]
		if m.rnd.IntN(3) == 0 {
			after += "0" // not a name
		}
		fromStart := m.rnd.IntN(4) == 0
		var names []string
		for name := range m.truth[sk] {
			if strings.HasPrefix(name, prefix) && (fromStart || name > after) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		var want []string
		for _, name := range names {
			want = append(want, name+"="+m.truth[sk][name])
		}
		if got := scanNames(e, prefix, after, fromStart); !slices.Equal(got, want) {
			t.Errorf("%s: Scan(%q, %q, %v) = %q, want %q", sk, prefix, after, fromStart, got, want)
		}
	}
}

// collect runs Collect, checks it against the changes the model recorded, and commits it to
// the model's store.
func (m *cacheModel) collect() {
	t := m.t
	var cp store.Checkpoint
	m.c.Collect(&cp)
	seen := map[string]bool{}
	for _, kw := range cp.Keys {
		sk := fmt.Sprintf("%d/%s", kw.Stream, kw.Key)
		if seen[sk] {
			t.Errorf("Collect emitted %s twice", sk)
		}
		seen[sk] = true
		if len(m.changed[sk]) == 0 && !m.markSet[sk] {
			t.Errorf("Collect emitted %s, which did not change", sk)
		}
		if kw.Mark != m.marks[sk] {
			t.Errorf("%s: Collect mark %d, want %d", sk, kw.Mark, m.marks[sk])
		}
		var names []string
		for _, w := range kw.Writes {
			names = append(names, string(w.Name))
			want, live := m.truth[sk][string(w.Name)]
			if w.Delete == live || !w.Delete && string(w.Value) != want {
				t.Errorf("%s: Collect wrote %q = %q (delete %v), want %q (live %v)", sk, w.Name, w.Value, w.Delete, want, live)
			}
			if m.store[sk] == nil {
				m.store[sk] = map[string]string{}
			}
			if w.Delete {
				delete(m.store[sk], string(w.Name))
			} else {
				m.store[sk][string(w.Name)] = string(w.Value)
			}
		}
		var want []string
		for name := range m.changed[sk] {
			want = append(want, name)
		}
		sort.Strings(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: Collect wrote names %q, want the changed ones %q", sk, names, want)
		}
	}
	for sk, names := range m.changed {
		if len(names) > 0 && !seen[sk] {
			t.Errorf("Collect left out %s, which changed %d names", sk, len(names))
		}
	}
	for sk := range m.markSet {
		if !seen[sk] {
			t.Errorf("Collect left out %s, whose mark rose", sk)
		}
	}
	clear(m.changed)
	clear(m.markSet)
	if m.c.Dirty() != 0 {
		t.Errorf("Dirty() = %d after Collect", m.c.Dirty())
	}
	for sk, e := range m.liveEntries() {
		if e.pins == 0 && slices.ContainsFunc(e.slots.all(), func(s slot) bool { return s.deleted }) {
			t.Errorf("%s: unpinned entry kept tombstones after Collect", sk)
		}
	}
	// The store now holds everything collected: it is the truth of every clean key.
	for sk := range m.truth {
		if !maps.Equal(m.store[sk], m.truth[sk]) {
			t.Errorf("%s: store %v, truth %v after Collect", sk, m.store[sk], m.truth[sk])
		}
	}
}

func (m *cacheModel) liveEntries() map[string]*Entry {
	out := map[string]*Entry{}
	m.c.each(func(e *Entry, _ uint64) bool {
		out[fmt.Sprintf("%d/%s", e.stream, e.key)] = e
		return true
	})
	if len(out) != m.c.Len() {
		m.t.Errorf("the cache holds %d entries, Len() = %d", len(out), m.c.Len())
	}
	return out
}

func (m *cacheModel) evict(budget int64) {
	t := m.t
	m.c.budget = budget
	before := m.liveEntries()
	n := m.c.Evict()
	after := m.liveEntries()
	if n != len(before)-len(after) {
		t.Errorf("Evict() = %d, but %d entries went", n, len(before)-len(after))
	}
	canGo := false
	for sk, e := range before {
		if after[sk] == nil {
			if e.pins > 0 || e.dirty {
				t.Errorf("Evict dropped %s (pins %d, dirty %v)", sk, e.pins, e.dirty)
			}
			delete(m.marks, sk)
			continue
		}
		if after[sk] != e {
			t.Errorf("Evict replaced %s", sk)
		}
		if e.pins == 0 && !e.dirty {
			canGo = true
		}
	}
	if m.c.Size() > budget && canGo {
		t.Errorf("Evict stopped at %d bytes over a budget of %d with evictable entries left", m.c.Size(), budget)
	}
	if n > 0 && m.c.Size() <= budget {
		// It stops as soon as it is within budget: adding back the last entry it dropped would
		// take it over again. (Checked loosely: some entry's bytes must bridge the gap.)
		gap := budget - m.c.Size()
		bridged := false
		for sk, e := range before {
			if after[sk] == nil && e.counted > gap {
				bridged = true
			}
		}
		if !bridged {
			t.Errorf("Evict went on below the budget: %d bytes left of %d", m.c.Size(), budget)
		}
	}
}
