package task

import (
	"context"
	"fmt"

	"github.com/wasmstream/wasmstream/host/internal/chain"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/positions"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

// Task chaining (package chain): a task whose output names are other tasks' inputs appends what
// it emits to them to chain logs in the store, in its checkpoint's one transaction with the
// state and marks of the records that emitted it; a task with an input of type task reads such
// a log as a stream whose offsets are the log's entry numbers.

// inputReader is what the loop asks of an input's reader: a file or stdin input's
// source.Reader, or a chain input's chain.Reader.
type inputReader interface {
	Run(ctx context.Context, out chan<- source.Chunk)
	Pause()
	Resume()
}

// ChainStream is the store's name of the stream of an input that reads the chain log of task's
// output.
func ChainStream(task, output string) string { return "chain:" + task + "/" + output }

// chainSide is what a task whose outputs feed chain logs keeps between checkpoints (loop only).
type chainSide struct {
	logs    map[string]*chain.Log // by output name
	pending []store.ChainEntry    // emitted since the last checkpoint; offsets set at the checkpoint
	// pendingBy counts pending's entries by output name: at a log's bound the task checkpoints
	// early (chainPendingFull), so what waits for a reader stays near its max_backlog.
	pendingBy map[string]uint64
	// cost is the estimated cost of the next checkpoint's transaction: every write, timer
	// operation, mark and entry applied since the last one (an upper bound: a name written
	// twice counts twice).
	cost txnCost
}

// startChain readies the task's chain logs for a run: the loop is woken when a reader's
// checkpoint lets a held upstream go on.
func (t *Task) startChain() {
	if len(t.cfg.ChainOutputs) == 0 {
		return
	}
	t.chain = &chainSide{logs: t.cfg.ChainOutputs, pendingBy: make(map[string]uint64, len(t.cfg.ChainOutputs))}
	for _, l := range t.chain.logs {
		l.Begin()
		l.SetUpstream(t.Wake)
	}
}

// endChain tells the task's chain logs' readers that no entry follows in this run: the task
// ended its inputs and took its last checkpoint.
func (t *Task) endChain() {
	if t.chain == nil {
		return
	}
	for _, l := range t.chain.logs {
		l.End()
	}
}

// chainBlocked reports whether the task must hold because a reader of one of its logs has
// MaxBacklog entries or more its checkpoint does not cover (back-pressure up the chain).
func (t *Task) chainBlocked() bool {
	if t.chain == nil {
		return false
	}
	for _, l := range t.chain.logs {
		if l.Blocked() {
			if !t.chainHeld {
				t.chainHeld = true
				t.stats.ChainHolds++
			}
			return true
		}
	}
	t.chainHeld = false
	return false
}

// chainPendingFull reports whether the entries emitted to some log since the last checkpoint
// reach its bound: the task checkpoints early, appending them, and then holds (chainBlocked)
// until the readers cover them. Without it a fast upstream would keep a whole checkpoint
// interval's entries, however many, before its readers' bound could hold it.
func (t *Task) chainPendingFull() bool {
	if t.chain == nil {
		return false
	}
	for name, n := range t.chain.pendingBy {
		if n >= t.chain.logs[name].Bound() {
			return true
		}
	}
	return false
}

// chainOutput takes an output emitted to a chained name, to be appended to its log by the next
// checkpoint, and reports whether it did.
func (t *Task) chainOutput(o *modrt.Output) bool {
	if t.chain == nil {
		return false
	}
	l, ok := t.chain.logs[o.Name]
	if !ok {
		return false
	}
	e := chain.Entry{Key: o.Key, Value: o.Value, ValueNull: o.ValueNull, Timestamp: o.Timestamp, Headers: o.Headers}
	v := chain.Encode(make([]byte, 0, chain.EncodedLen(e)), e)
	t.chain.pending = append(t.chain.pending, store.ChainEntry{Output: l.Output(), Value: v})
	t.chain.pendingBy[o.Name]++
	n, b := store.ChainEntryCost(t.cfg.Name, o.Name, len(v))
	t.chain.cost.entries, t.chain.cost.bytes = t.chain.cost.entries+n, t.chain.cost.bytes+b
	return true
}

// jobChainCost estimates what applying j adds to the next checkpoint's transaction; with
// outputs, its chain entries too (chainOutput counts those as they are taken).
func (t *Task) jobChainCost(j *job, outputs bool) txnCost {
	var c txnCost
	add := func(n, b int) { c.entries, c.bytes = c.entries+n, c.bytes+b }
	for gi := range j.groups {
		g := &j.groups[gi]
		if t.streams[g.stream] != g.st {
			continue
		}
		for _, w := range g.effects.Writes {
			add(store.StateWriteCost(t.cfg.Name, w.Key, w.Name, len(w.Value)))
		}
		for _, op := range g.effects.Timers {
			add(store.TimerOpCost(t.cfg.Name, op.Key, op.Name, len(op.Payload)))
		}
		for _, it := range g.work {
			if it.fire != nil {
				add(store.TimerOpCost(t.cfg.Name, it.fire.Key, it.fire.Name, 0))
			}
		}
		for _, e := range g.keys {
			add(store.MarkCost(t.cfg.Name, e.Key())) // every key of the unit's scope may get a mark
		}
		for _, o := range g.effects.Outputs {
			if _, ok := t.chain.logs[o.Name]; ok && outputs {
				add(store.ChainEntryCost(t.cfg.Name, o.Name, chain.EncodedLen(chain.Entry{Key: o.Key, Value: o.Value, Headers: o.Headers})))
			}
		}
	}
	return c
}

// chainTxnLimits are the entries and bytes a chained task's checkpoint may cost: those of one
// store transaction, less a tenth for the positions and what the estimate misses.
func (t *Task) chainTxnLimits() (entries, bytes int) {
	e, b := t.cfg.Store.KeyLimits()
	return e - e/10, b - b/10
}

// chainRoom returns an error when j alone would need more than one checkpoint transaction: a
// chained task commits its state and its entries in one (store.Checkpoint.Chain). The job fails
// like a call over a limit (retried, then dead-lettered or halting).
func (t *Task) chainRoom(j *job) error {
	if t.chain == nil {
		return nil
	}
	c := t.jobChainCost(j, true)
	me, mb := t.chainTxnLimits()
	if c.entries > me || c.bytes > mb {
		return fmt.Errorf("%w: the call's state changes and outputs to chained outputs need about %d store entries and %d bytes, more than one checkpoint of a chained task holds (%d entries, %d bytes): emit less per call",
			modrt.ErrOverLimit, c.entries, c.bytes, me, mb)
	}
	return nil
}

// chainOutgrows reports whether applying j would take the next checkpoint past one store
// transaction: the task checkpoints first.
func (t *Task) chainOutgrows(j *job) bool {
	if t.chain == nil || (t.chain.cost.entries == 0 && t.chain.cost.bytes == 0) {
		return false
	}
	c := t.jobChainCost(j, true)
	me, mb := t.chainTxnLimits()
	return t.chain.cost.entries+c.entries > me || t.chain.cost.bytes+c.bytes > mb
}

// chainApplied adds j's state changes to the next checkpoint's cost (after apply; its entries
// were counted by chainOutput).
func (t *Task) chainApplied(j *job) {
	if t.chain == nil {
		return
	}
	c := t.jobChainCost(j, false)
	t.chain.cost.entries += c.entries
	t.chain.cost.bytes += c.bytes
}

// chainCollect numbers the entries emitted since the last checkpoint after each log's head and
// hands them to cp: the entries emitted from now on are the next checkpoint's. The heads are
// those of the checkpoints committed: the one before cp is reported before cp is collected.
func (t *Task) chainCollect(cp *store.Checkpoint) {
	if t.chain == nil {
		return
	}
	defer func() {
		t.chain.pending = nil // cp.Chain has them
		clear(t.chain.pendingBy)
		t.chain.cost = txnCost{}
	}()
	if len(t.chain.pending) == 0 {
		return
	}
	next := make(map[string]uint64, len(t.chain.logs))
	for name, l := range t.chain.logs {
		next[name] = l.Head()
	}
	for i := range t.chain.pending {
		e := &t.chain.pending[i]
		e.Offset = next[e.Output]
		next[e.Output]++
	}
	cp.Chain = t.chain.pending
}

// chainCommitted is called once cp committed: the logs' readers may read the new entries, and
// the positions of the task's chain inputs are covered (their logs may be trimmed).
func (t *Task) chainCommitted(cp *store.Checkpoint) error {
	if t.chain != nil {
		heads := map[string]uint64{}
		for _, e := range cp.Chain {
			heads[e.Output] = e.Offset + 1
		}
		for name, h := range heads {
			t.chain.logs[name].Committed(h)
		}
		t.stats.ChainEntries += int64(len(cp.Chain))
	}
	for _, sp := range cp.Positions {
		if st := t.streams[sp.Stream]; st != nil && st.in != nil && st.in.Chain != nil {
			if err := st.in.Chain.Covered(uint64(sp.Position.Next)); err != nil {
				return err
			}
		}
	}
	return nil
}

// openChainStream opens an input that reads a chain log, from its stream's committed position.
func (t *Task) openChainStream(in *Input) (*stream, error) {
	r := in.Chain
	id, pos, err := t.streamPosition(ChainStream(r.Log().Task(), r.Log().Output()))
	if err != nil {
		return nil, err
	}
	if h := r.Log().Head(); uint64(pos.Next) > h {
		return nil, fmt.Errorf("input %s: the chain log of task %s, output %s, ends at entry %d but this task processed up to %d: the log was changed outside this host", in.Name, r.Log().Task(), r.Log().Output(), h, pos.Next)
	}
	st := &stream{id: id, in: in, durable: pos, horizon: pos.Horizon, replay: pos.Horizon,
		source: []byte(in.Name), tm: newStreamTime(t.cfg.Now(), t.cfg.TickEvery)}
	st.tm.wm = pos.Watermark
	if err := t.loadApplied(st); err != nil {
		return nil, err
	}
	st.tracker = positions.NewTracker(pos.Next)
	r.Start(id, uint64(pos.Next))
	st.reader = r
	if err := t.countStreamTimers(st); err != nil {
		return nil, err
	}
	t.streams[id] = st
	t.order = append(t.order, st)
	t.sched.AddStream(id)
	if pos.Next > 0 || pos.Horizon >= 0 {
		t.log.Info("resuming chained input", "input", in.Name, "task", r.Log().Task(), "output", r.Log().Output(), "entry", pos.Next, "replay_through", st.replay)
	}
	return st, nil
}

// chainInputStats sets the figures of a chained input: the task and output it reads and its
// lag, the log's entries beyond its committed position.
func chainInputStats(st *stream, in *InputStats) {
	if st.in == nil || st.in.Chain == nil {
		return
	}
	l := st.in.Chain.Log()
	in.Chain = l.Task() + "/" + l.Output()
	in.Lag = int64(l.Head()) - max(st.durable.Next, 0)
	if in.Lag < 0 {
		in.Lag = 0
	}
}
