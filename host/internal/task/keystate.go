package task

import (
	"fmt"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
)

// keyStateRoom checks that the job's writes leave each of its keys within
// Config.MaxStateBytesPerKey, counted as the cache counts an entry (Entry.Size: names, values
// and statecache.NameOverhead a name). The cache holds a key's whole state while a batch of it
// runs, whatever its budget, so without the bound one key putting a new name on every record
// grows the host's memory without end (10^6 names of 8 bytes on one key: 414 MB peak RSS to
// load it again after a restart). A key that would pass it fails the job (a record error:
// retried, then dead-lettered, naming the limit) with its state as it was. A write that
// replaces a name counts the difference of the values, a name written several times counts
// once, as the last write leaves it; deletes count nothing (an upper bound).
func (t *Task) keyStateRoom(j *job) error {
	limit := t.cfg.MaxStateBytesPerKey
	if limit <= 0 {
		return nil
	}
	for gi := range j.groups {
		g := &j.groups[gi]
		if t.streams[g.stream] != g.st || len(g.effects.Writes) == 0 {
			continue
		}
		// The common case first, with no lookup: every key within the bound counting the whole
		// group's writes as new names against each.
		var all int64
		for _, w := range g.effects.Writes {
			all += int64(statecache.NameOverhead + len(w.Name) + len(w.Value))
		}
		within := true
		for i := range g.effects.Writes {
			if e := g.writeEntry(i); e != nil && e.Size()+all > limit {
				within = false
				break
			}
		}
		if within {
			continue
		}
		// Each name counts once, as the group's writes leave it: a name written twice in a
		// batch (a hot key's counter on every record) is one name.
		type entryName struct {
			e    *statecache.Entry
			name string
		}
		var adds map[*statecache.Entry]int64
		var sizes map[entryName]int // a name's value size as the writes so far leave it; -1: absent
		for i, w := range g.effects.Writes {
			if w.Delete {
				continue // counts nothing: an upper bound
			}
			e := g.writeEntry(i)
			if e == nil || !e.Loaded() {
				continue
			}
			if adds == nil {
				adds, sizes = map[*statecache.Entry]int64{}, map[entryName]int{}
			}
			k := entryName{e, string(w.Name)}
			prev, seen := sizes[k]
			if !seen {
				prev = -1
				if old, ok := e.Get(w.Name); ok {
					prev = len(old)
				}
			}
			sizes[k] = len(w.Value)
			if prev < 0 {
				adds[e] += int64(statecache.NameOverhead + len(w.Name) + len(w.Value))
			} else {
				adds[e] += int64(len(w.Value) - prev)
			}
		}
		for e, add := range adds {
			if n := e.Size() + add; add > 0 && n > limit {
				return fmt.Errorf("%w: the state of key %q would take %d bytes in memory (names, values and %d bytes a name), over max_state_bytes_per_key (%d): the host holds a key's whole state at once; keep less state per key",
					modrt.ErrOverLimit, shortKey(string(e.Key())), n, statecache.NameOverhead, limit)
			}
		}
	}
	return nil
}
