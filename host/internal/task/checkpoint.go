package task

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/wasmstream/wasmstream/store"
)

// checkpoint makes outputs durable, then commits state, marks and positions in the store (S9).
func (t *Task) checkpoint() error {
	defer func(start time.Time) { t.meters.checkpointSeconds.Observe(time.Since(start).Seconds()) }(time.Now())
	if t.eos() {
		// Exactly once: state commits with the transactions (commitTxn).
		t.publish()
		return nil
	}
	if err := t.cfg.Output.Flush(); err != nil {
		return err
	}
	if err := t.cfg.DeadLetter.Flush(); err != nil {
		return err
	}
	cp := store.Checkpoint{Task: t.cfg.Name}
	t.cache.Collect(&cp)
	t.collectPositions(&cp)
	t.chainCollect(&cp)
	if len(cp.Keys) > 0 || len(cp.Positions) > 0 || len(cp.Chain) > 0 {
		if err := t.cfg.Store.Commit(&cp); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := t.chainCommitted(&cp); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := t.produceChangelog(&cp); err != nil {
			return err
		}
		if err := t.confirmChangelog(&cp); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		for _, sp := range cp.Positions {
			t.streams[sp.Stream].durable = sp.Position
		}
		t.commitKafka(cp.Positions)
		t.timersCommitted()
		t.stats.Checkpoints++
		t.cache.Evict()
	}
	t.commitStarts()
	if err := t.replaysCaughtUp(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	t.publish()
	return nil
}

// loadReplay reads the replay a reset started on st (store.Replay), if any.
func (t *Task) loadReplay(st *stream) error {
	r, ok, err := t.cfg.Store.ReplayOf(t.cfg.Name, st.id)
	if err != nil || !ok {
		return err
	}
	st.replayRun = &r
	return nil
}

// replaysCaughtUp ends the replays whose stream's durable position reached the head captured at
// the reset: the store forgets them and the log says so.
func (t *Task) replaysCaughtUp() error {
	for _, st := range t.order {
		r := st.replayRun
		if r == nil || st.durable.Next < r.Head {
			continue
		}
		if err := t.cfg.Store.SetReplay(t.cfg.Name, st.id, nil); err != nil {
			return err
		}
		st.replayRun = nil
		args := []any{"input", st.in.Name, "from", r.From, "head", r.Head,
			"took", time.Since(time.UnixMilli(r.At)).Round(time.Millisecond)}
		if st.kafka {
			args = append(args, "topic", st.tp.Topic, "partition", st.tp.Partition)
		}
		t.log.Info("replay caught up with the head at the reset", args...)
	}
	return nil
}

// collectPositions adds to cp the streams' new positions: their committed prefix as of now.
func (t *Task) collectPositions(cp *store.Checkpoint) {
	// The streams whose keys the checkpoint writes: with a changelog, a Kafka partition's
	// position goes with them even when it did not move (state changed by timers), to be
	// marked unconfirmed until the changelog has them.
	var keyed map[uint32]bool
	if t.changelog != nil && !t.eos() {
		keyed = map[uint32]bool{}
		for i := range cp.Keys {
			keyed[cp.Keys[i].Stream] = true
		}
	}
	for _, st := range t.order {
		if st.tracker == nil {
			continue // a Kafka partition that has not had a record yet
		}
		next := st.tracker.Committable()
		pos := st.durable
		pos.Next = next
		partial := len(cp.Partial)
		if !st.kafka && st.in.Stdin == nil && next > st.durable.Next {
			cp.Partial = partialPositions(cp.Partial, cp.Keys, st, next)
		}
		i := 0
		for i < len(st.ends) && st.ends[i].offset < next {
			pos.Resume = st.ends[i].end
			i++
		}
		st.ends = st.ends[:copy(st.ends, st.ends[i:])]
		if h := st.tracker.Horizon(); h > st.horizon {
			st.horizon = h
		}
		pos.Horizon = st.horizon
		if st.in.Stdin != nil {
			pos.Resume = 0
		}
		if st.kafka && t.changelog != nil {
			// What this store covers of the changelog: a restore here replays only what follows.
			pos.Resume = max(pos.Resume, t.changelog.next[st.tp.Partition])
		}
		pos.Watermark = st.tm.committedWatermark(next, t.cfg.Lateness, pos.Watermark)
		confirm := st.kafka && t.changelog != nil && !t.eos()
		if pos != st.durable || (confirm && keyed[st.id]) {
			if confirm {
				// Unconfirmed until this checkpoint's changelog records are acknowledged
				// (confirmChangelog): a host that stops before then has state here that the
				// changelog may lack, and a restore here must start from scratch (replayFrom).
				pos.Resume = changelogUnconfirmed
			}
			cp.Positions = append(cp.Positions, store.StreamPosition{Stream: st.id, Position: pos})
		} else {
			cp.Partial = cp.Partial[:partial]
		}
	}
	if len(cp.Partial) > 0 {
		// Keys in order of their first record: a split commit writes the keys of the earliest
		// records first, so that its partial positions advance with every transaction.
		slices.SortFunc(cp.Keys, func(a, b store.KeyWrites) int { return cmp.Compare(a.First, b.First) })
	}
}

// partialPositions appends to partial the positions of a file stream that a split commit may
// write before its last transaction (store.Checkpoint.Partial): one at the first record of each
// key the checkpoint changes, between the durable position and next, and next itself. The
// stream's ends still hold the records since the durable position.
func partialPositions(partial []store.StreamPosition, keys []store.KeyWrites, st *stream, next int64) []store.StreamPosition {
	var firsts []int64
	for i := range keys {
		if kw := &keys[i]; kw.Stream == st.id && kw.First > st.durable.Next && kw.First < next {
			firsts = append(firsts, kw.First)
		}
	}
	firsts = append(firsts, next)
	slices.Sort(firsts)
	firsts = slices.Compact(firsts)
	for _, f := range firsts {
		pos := st.durable // its watermark is safe at any later Next
		pos.Next = f
		// Resume: the byte after the last line below f.
		if i, _ := slices.BinarySearchFunc(st.ends, f, func(e endMark, f int64) int { return cmp.Compare(e.offset, f) }); i > 0 {
			pos.Resume = st.ends[i-1].end
		}
		partial = append(partial, store.StreamPosition{Stream: st.id, Position: pos})
	}
	return partial
}

// publish makes the figures visible to Stats.
func (t *Task) publish() {
	if t.changelog != nil && t.changelog.standby != nil {
		t.stats.StandbyRecords = t.changelog.standby.records.Load()
		t.stats.StandbyBytes = t.changelog.standby.bytes.Load()
	}
	t.stats.Version = t.cur.id
	if t.cur.mod != nil {
		t.stats.LogDropped = t.cur.mod.LogDropped()
	}
	t.stats.Paused = t.paused
	t.stats.Pending = t.pending
	t.stats.InFlight = 0
	for _, j := range t.inflight {
		t.stats.InFlight += len(j.items)
	}
	t.stats.Queued = t.sched.Stats().QueuedItems
	t.stats.StateKeys = t.cache.Len()
	t.stats.StateBytes = t.cache.Size()
	t.stats.CacheHits, t.stats.CacheMisses = t.cache.Lookups()
	t.stats.Inputs = t.stats.Inputs[:0:0]
	t.stats.PendingTimers = 0
	for _, st := range t.order {
		in := InputStats{Name: st.in.Name, Partition: -1, Records: st.records, Committed: st.durable.Next,
			Lag: -1, Watermark: st.tm.wm, InFlight: st.inflight}
		// An error here (a closed or damaged store) is the checkpoint's to report: the figure
		// stays 0.
		if n, err := t.cfg.Store.PendingTimers(t.cfg.Name, st.id); err == nil {
			in.PendingTimers = n
			t.stats.PendingTimers += n
		}
		in.ReplayHead, in.ReplayRemaining = -1, -1
		if r := st.replayRun; r != nil {
			in.ReplayFrom, in.ReplayHead = r.From, r.Head
			in.ReplayRemaining = max(r.Head-max(st.durable.Next, 0), 0)
		}
		if st.kafka {
			in.Topic, in.Partition = st.tp.Topic, st.tp.Partition
			if st.highWater >= 0 {
				in.Lag = max(st.highWater-max(st.durable.Next, 0), 0)
			}
		}
		chainInputStats(st, &in)
		t.stats.Inputs = append(t.stats.Inputs, in)
	}
	t.statsMu.Lock()
	t.published = t.stats
	t.statsMu.Unlock()
}

func (t *Task) logProgress(msg string) {
	var committed []any
	for _, st := range t.order {
		switch {
		case st.tracker == nil:
		case st.kafka:
			committed = append(committed, st.tp.Topic+"/"+strconv.Itoa(int(st.tp.Partition)), st.tracker.Committable())
		default:
			committed = append(committed, st.in.Name, st.tracker.Committable())
		}
	}
	t.log.Info(msg, "records", t.stats.Records, "processed", t.stats.Processed,
		"outputs", t.stats.Outputs, "skipped_replayed", t.stats.Skipped, "dead_letters", t.stats.DeadLetters,
		"retries", t.stats.Retries, "checkpoints", t.stats.Checkpoints, "state_keys_cached", t.cache.Len(),
		"guest_log_dropped", t.stats.LogDropped, slog.Group("committed_line", committed...))
}
