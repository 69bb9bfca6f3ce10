package task

import (
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
	"github.com/wasmstream/wasmstream/store"
)

// apply makes a succeeded job's effects part of the task's state and outputs. An error (the
// scheduler refused a firing) is a bug and stops the task.
func (t *Task) apply(j *job) error {
	for gi := range j.groups {
		g := &j.groups[gi]
		st := t.streams[g.stream]
		if st != g.st {
			// The partition was revoked or lost and its stream dropped: its new owner
			// processes these records again; nothing of them is applied here.
			t.pending -= len(g.work)
			continue
		}
		changed := len(g.effects.Writes) > 0 || len(g.effects.Timers) > 0 || len(g.migrated) > 0
		for i, w := range g.effects.Writes {
			e := g.writeEntry(i)
			t.applyWrite(e, w)
			t.cache.SetStateVersion(e, g.stateVer)
		}
		for _, e := range g.migrated {
			t.cache.SetStateVersion(e, g.stateVer)
		}
		// A fired timer is deleted before the unit's own timer ops apply: a firing that sets its
		// timer again keeps it.
		for _, it := range g.work {
			if it.fire == nil || it.cancelled {
				continue
			}
			changed = true
			id := timerID{string(it.fire.Key), string(it.fire.Name)}
			delete(st.tm.queued, id)
			if err := t.applyTimer(st, g.entry(it.fire.Key), it.fire.Name, dirtyTimer{del: true}, nil); err != nil {
				return err
			}
			if it.dropped {
				t.stats.TimersDropped++
				t.log.Warn("timer dropped: the module has no timer callback (wasmstream_on_timer)",
					"at", st.name(), "key", shortKey(id.key), "timer", id.name)
			} else {
				t.stats.TimersFired++
			}
		}
		for i, op := range g.effects.Timers {
			if err := t.applyTimer(st, g.timerEntry(i), op.Name, dirtyTimer{del: op.Delete, domain: op.Domain, due: op.Due, payload: op.Payload}, &g.timerHeld); err != nil {
				return err
			}
		}
		if changed {
			for _, m := range g.marks {
				t.cache.SetMark(m.e, m.last)
				t.cache.SetFirst(m.e, m.first)
			}
		}
		t.writeOutputs(g.effects.Outputs, func() *outputOrigin { return g.origin(st) })
		for _, it := range g.work {
			if it.fire != nil || it.migrate {
				continue
			}
			st.tracker.Complete(it.rec.Offset)
			delete(t.attempts, attemptKey{g.stream, it.rec.Offset})
		}
		t.pending -= len(g.work)
		t.stats.Processed += int64(len(g.recs))
		if len(g.recs) > 0 || len(g.work) > 0 {
			t.failStreak = 0
		}
	}
	return nil
}

// applyWrite applies one write of a succeeded job to e and charges its cost in the key's next
// store transaction (outgrowsTxn): a name written again since the last checkpoint adds no entry.
func (t *Task) applyWrite(e *statecache.Entry, w modrt.Write) {
	n, b := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, len(w.Value))
	if prev := t.cache.Apply(e, w.Name, w.Value, w.Delete); prev >= 0 {
		_, pb := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, prev)
		n, b = 0, b-pb
	}
	t.cache.Charge(e, n, b)
}

// outgrowsTxn reports whether applying j's effects would give one of its keys more uncommitted
// writes than one store transaction takes (store.DB.KeyLimits). A guest call's own writes per key
// are bounded by the same limits (modrt.Limits.KeyTxnEntries), so a checkpoint before applying
// them keeps every key's writes committable. In exactly-once mode the state commits with the
// Kafka transaction and a checkpoint here does nothing.
func (t *Task) outgrowsTxn(j *job) bool {
	if t.eos() {
		return false
	}
	maxEntries, maxBytes := t.cfg.Store.KeyLimits()
	costs := t.txnCosts
	defer clear(costs) // drop the references to the entries
	for gi := range j.groups {
		g := &j.groups[gi]
		if t.streams[g.stream] != g.st || (len(g.effects.Writes) == 0 && len(g.effects.Timers) == 0 && len(g.work) == 0) {
			continue
		}
		if !t.mayOutgrowTxn(g, maxEntries, maxBytes) {
			continue
		}
		clear(costs)
		add := func(key []byte, n, b int) {
			if e := g.entry(key); e != nil {
				c := costs[e]
				costs[e] = txnCost{c.entries + n, c.bytes + b}
			}
		}
		for _, w := range g.effects.Writes {
			n, b := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, len(w.Value))
			add(w.Key, n, b)
		}
		for _, op := range g.effects.Timers {
			n, b := store.TimerOpCost(t.cfg.Name, op.Key, op.Name, len(op.Payload))
			add(op.Key, n, b)
		}
		for _, it := range g.work {
			if it.fire != nil && !it.cancelled {
				n, b := store.TimerOpCost(t.cfg.Name, it.fire.Key, it.fire.Name, 0)
				add(it.fire.Key, n, b)
			}
		}
		for e, c := range costs {
			pe, pb := e.Pending()
			if pe == 0 {
				continue // nothing to commit first
			}
			me, mb := store.MarkCost(t.cfg.Name, e.Key())
			if pe+c.entries+me > maxEntries || pb+c.bytes+mb > maxBytes {
				return true
			}
		}
	}
	return false
}

// mayOutgrowTxn is outgrowsTxn's first look at a group, without a map: what the whole group adds
// on top of the most any of its keys holds uncommitted (with its mark). Only when that could pass
// a limit are the costs gathered per key; a group of small writes to keys committed a moment ago
// (the common case) is a walk of its writes and its keys.
func (t *Task) mayOutgrowTxn(g *group, maxEntries, maxBytes int) bool {
	n, b := 0, 0
	for _, w := range g.effects.Writes {
		wn, wb := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, len(w.Value))
		n, b = n+wn, b+wb
	}
	for _, op := range g.effects.Timers {
		on, ob := store.TimerOpCost(t.cfg.Name, op.Key, op.Name, len(op.Payload))
		n, b = n+on, b+ob
	}
	for _, it := range g.work {
		if it.fire != nil && !it.cancelled {
			fn, fb := store.TimerOpCost(t.cfg.Name, it.fire.Key, it.fire.Name, 0)
			n, b = n+fn, b+fb
		}
	}
	if n == 0 && b == 0 {
		return false
	}
	worstN, worstB := 0, 0
	for _, e := range g.keys {
		pe, pb := e.Pending()
		if pe == 0 {
			continue // nothing to commit first
		}
		me, mb := store.MarkCost(t.cfg.Name, e.Key())
		worstN, worstB = max(worstN, pe+me), max(worstB, pb+mb)
	}
	return worstN > 0 && (worstN+n > maxEntries || worstB+b > maxBytes)
}

// txnCost is what a job adds to a key's next store transaction (outgrowsTxn).
type txnCost struct{ entries, bytes int }

// writeOutputs hands a unit's outputs to the output sink, in order; from says what they came
// from, to a sink that can name it (fromSink), made only then (nil: not said).
func (t *Task) writeOutputs(outs []modrt.Output, from func() *outputOrigin) {
	fs, _ := t.cfg.Output.(fromSink)
	var origin *outputOrigin
	if fs != nil && from != nil && len(outs) > 0 {
		origin = from()
	}
	for _, o := range outs {
		if t.chainOutput(&o) {
			t.stats.Outputs++
			continue
		}
		var hs []sink.Header
		for _, h := range o.Headers {
			hs = append(hs, sink.Header{Name: h.Name, Value: h.Value})
		}
		v := o.Value
		switch {
		case o.ValueNull:
			v = nil // a tombstone: OutputSink's nil value
		case v == nil:
			v = []byte{}
		}
		if origin != nil {
			fs.WriteOutputFrom(o.Name, o.Key, v, o.Timestamp, hs, origin)
		} else {
			t.cfg.Output.WriteOutput(o.Name, o.Key, v, o.Timestamp, hs)
		}
		t.stats.Outputs++
	}
}

// origin is what the group's outputs came from (outputOrigin): its records and firings.
func (g *group) origin(st *stream) *outputOrigin {
	o := &outputOrigin{st: st, first: -1, last: -1}
	for _, it := range g.work {
		switch {
		case it.fire != nil:
			o.firings++
		case it.migrate:
		case o.first < 0:
			o.first, o.last = it.rec.Offset, it.rec.Offset
		default:
			o.first, o.last = min(o.first, it.rec.Offset), max(o.last, it.rec.Offset)
		}
	}
	return o
}
