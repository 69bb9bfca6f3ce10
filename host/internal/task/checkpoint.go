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

// Checkpoints are a pipeline of depth one. checkpoint collects checkpoint N on the loop — the
// sinks flushed, the cache's dirty entries, the streams' positions, the chain logs' entries, the
// changelog's records (planChangelog) — and hands it to the driver's checkpoint goroutine
// (cpPipe), which writes the changelog and waits for its acknowledgements, then commits N to
// the store (commitWork), and reports back; the loop then does what follows a commit
// (checkpointed): durable positions, group offsets, timers, eviction, stats. Meanwhile the loop
// goes on admitting, dispatching and applying. N+1 is collected only once N was reported
// (checkpoint waits for it), so the store holds every checkpoint before the one in flight, and
// the order changelog → store → group offsets holds for each.
//
// What must not run beside a checkpoint in flight waits for it: checkpointWait is the "commit
// and wait" form for whatever reads the store next (a tick, an activation migration pass, a
// revoke's last commit, the run's last checkpoint); awaitCheckpoint waits for the one in flight
// (a rebalance, a scan query, changelogRoom's exact check). The cache evicts nothing between
// a collect and its report (Evict runs in checkpointed), so no entry of N is read again from a
// store that lacks it.

// cpWork is a checkpoint in flight: collected by the loop, committed by the checkpoint goroutine
// (or inline), reported back to the loop.
type cpWork struct {
	cp    store.Checkpoint
	cl    *changelogPlan // its changelog records; nil: none
	start time.Time
	// Set by commitWork:
	next map[int32]int64 // the changelog partitions' next offsets after its records
	err  error
}

// checkpoint makes outputs durable, then hands the dirty state, marks and positions to the
// checkpoint goroutine, which writes the changelog (if any), then commits them to the store (S9);
// the group offsets follow when the loop hears of it (checkpointed). A checkpoint in flight is
// waited for first. Without a pipeline (pipe nil) it all happens here, before it returns.
func (t *Task) checkpoint() error {
	if err := t.awaitCheckpoint(); err != nil {
		return err
	}
	start := time.Now()
	if t.eos() {
		// Exactly once: state commits with the transactions (commitTxn).
		t.publish()
		t.meters.checkpointSeconds.Observe(time.Since(start).Seconds())
		return nil
	}
	t.cpDue = false
	if err := t.cfg.Output.Flush(); err != nil {
		return err
	}
	if err := t.cfg.DeadLetter.Flush(); err != nil {
		return err
	}
	w := &cpWork{cp: store.Checkpoint{Task: t.cfg.Name}, start: start}
	cp := &w.cp
	t.cache.Collect(cp)
	t.timersCollected()
	t.collectPositions(cp)
	t.chainCollect(cp)
	if len(cp.Keys) == 0 && len(cp.Positions) == 0 && len(cp.Chain) == 0 {
		return t.afterCommit(w)
	}
	w.cl = t.planChangelog(cp)
	t.flight = w
	if t.pipe == nil {
		t.commitWork(w)
		return t.checkpointed(w)
	}
	t.pipe.send(w)
	return nil
}

// checkpointWait is checkpoint, then waits until the store holds it: for what reads the store
// next.
func (t *Task) checkpointWait() error {
	if err := t.checkpoint(); err != nil {
		return err
	}
	return t.awaitCheckpoint()
}

// checkpointDue takes a checkpoint the interval (or the sinks, or a chain log) made due: at
// once, or when the one in flight is reported.
func (t *Task) checkpointDue() error {
	if t.flight != nil {
		t.cpDue = true
		return nil
	}
	return t.checkpoint()
}

// awaitCheckpoint waits for the checkpoint in flight, if any, and does what follows its commit.
// After a failed checkpoint it returns that failure: nothing is committed after it.
func (t *Task) awaitCheckpoint() error {
	if t.flight != nil {
		return t.checkpointed(t.pipe.wait())
	}
	return t.cpFailed
}

// commitWork writes w's changelog records and waits for them, then commits w to the store. It
// runs on the checkpoint goroutine (or inline) and touches nothing of the loop's but the
// changelog writer, which only checkpoints use.
func (t *Task) commitWork(w *cpWork) {
	if w.cl != nil {
		// The changelog first: the store must never hold what the changelog lacks.
		if w.next, w.err = t.produceChangelog(w.cl); w.err != nil {
			return
		}
	}
	if err := t.cfg.Store.Commit(&w.cp); err != nil {
		w.err = fmt.Errorf("checkpoint: %w", err)
	}
}

// checkpointed does what follows the commit of w, the checkpoint in flight: the streams'
// positions become durable, the group offsets are committed, the committed timers leave the
// loop's maps, the cache may evict. A failed w halts the task (its error).
func (t *Task) checkpointed(w *cpWork) error {
	t.flight = nil
	if w.err != nil {
		t.cpFailed = w.err
		return w.err
	}
	cp := &w.cp
	if w.cl != nil {
		t.changelogWritten(w.cl, w.next)
	}
	if err := t.chainCommitted(cp); err != nil {
		t.cpFailed = fmt.Errorf("checkpoint: %w", err)
		return t.cpFailed
	}
	for _, sp := range cp.Positions {
		if st := t.streams[sp.Stream]; st != nil {
			st.durable = sp.Position
		}
	}
	t.commitKafka(cp.Positions)
	t.timersCommitted()
	t.stats.Checkpoints++
	t.cache.Evict()
	return t.afterCommit(w)
}

// afterCommit ends a checkpoint, committed or with nothing to commit.
func (t *Task) afterCommit(w *cpWork) error {
	t.commitStarts()
	err := t.replaysCaughtUp()
	t.publish()
	t.meters.checkpointSeconds.Observe(time.Since(w.start).Seconds())
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
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
		if st.print != nil {
			pos.TopicID = st.print.at(pos.Resume)
		}
		if st.kafka {
			pos.LeaderEpoch = store.KnownLeaderEpoch(st.epochBelow(next))
		}
		if st.kafka && t.changelog != nil {
			// What this store covers of the changelog: a restore here replays only what follows.
			pos.Resume = max(pos.Resume, t.changelog.next[st.tp.Partition])
		} else if st.kafka && pos.Resume > 0 {
			// A run without the changelog changes a copy that covered changelog offset Resume:
			// negated, it says so to the next run with the changelog, which publishes the copy
			// (replayChangelog) rather than leave these changes out of the changelog.
			pos.Resume = -pos.Resume
		}
		pos.Watermark = st.tm.committedWatermark(next, t.cfg.Lateness, pos.Watermark)
		if pos != st.durable {
			cp.Positions = append(cp.Positions, store.StreamPosition{Stream: st.id, Position: pos})
			// The offsets completed above next: their effects are in the state collected
			// (apply completes a record with its effects), so a key's stored mark need not be
			// rewritten when its new one is among them (store.StreamApplied). With a changelog,
			// the checkpoint's position records carry the set the store then holds
			// (writeChangelog): a key record written again from the store alone carries the
			// stored mark, which the set may have left low.
			if bits, ok := st.tracker.AppendDone(nil, t.appliedSpan()); ok {
				cp.Applied = append(cp.Applied, store.StreamApplied{Stream: st.id, Bits: bits})
			}
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
			pos.TopicID = st.print.at(pos.Resume)
		}
		partial = append(partial, store.StreamPosition{Stream: st.id, Position: pos})
	}
	return partial
}

// publish makes the figures visible to Stats.
func (t *Task) publish() {
	if t.changelog != nil && t.changelog.standby != nil && t.changelog.tails {
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

// appliedSpan is the most offsets past Next a checkpoint's applied set spans (Config.AppliedSpan).
func (t *Task) appliedSpan() int64 {
	if s := t.cfg.AppliedSpan; s > 0 && s < store.MaxAppliedSpan {
		return s
	}
	return store.MaxAppliedSpan
}

// loadApplied reads st's stored applied set (store.DB.Applied), which its replay skips.
func (t *Task) loadApplied(st *stream) error {
	set, err := t.cfg.Store.Applied(t.cfg.Name, st.id)
	if err != nil {
		return fmt.Errorf("input %s: %w", st.in.Name, err)
	}
	st.applied = set
	return nil
}
