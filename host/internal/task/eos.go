package task

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/positions"
	"github.com/wasmstream/wasmstream/store"
)

// Exactly-once mode (KafkaInput.ExactlyOnce, DESIGN S11). The consumer's client is transactional
// and also produces the outputs, dead letters and changelog, so that one Kafka transaction per
// commit interval holds a partition's results, its state (the changelog) and its input offsets:
// a read_committed reader sees all of them or none.
//
// Kafka commits the offsets of every record the consumer polled, so a transaction can only end
// once every record polled in it has been processed. Once per interval the consumer stops
// polling and asks the loop for a barrier (kafkaHandler.Commit): the loop starts no new firing,
// runs its queues dry, writes the changelog from the store's committed state with the
// checkpoint's changes applied (the store itself is not touched yet), waits for every record's
// acknowledgement and ends the transaction. Only after Kafka committed it does the checkpoint go
// to the local store; after an abort the cache is dropped and every partition reads again from
// its committed offset, so the local state stays that of the last committed transaction.
// Rebalances are held between barriers, so a partition moves only between transactions, and
// the consumer takes no records while its group joins and syncs (kafka/join.go), so no
// transaction waits for a rebalance.
//
// A crash between the commit and the local write leaves the store behind the changelog: the
// next assignment restores the tail, as after any crash.

// barrierReq asks the loop to end the open transaction.
type barrierReq struct{ reply chan error }

// Commit is the TxnHandler side of the barrier: it hands it to the loop and waits.
func (h kafkaHandler) Commit(ctx context.Context) error {
	req := barrierReq{reply: make(chan error, 1)}
	select {
	case h.k.barrier <- req:
	case <-h.k.stopped:
		return errStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.reply:
		return err
	case <-h.k.stopped:
		return errStopped
	}
}

// eos reports whether the task runs in exactly-once mode.
func (t *Task) eos() bool { return t.kafka != nil && t.kafka.in.ExactlyOnce }

func (t *Task) kafkaBarriers() chan barrierReq {
	if t.kafka == nil {
		return nil
	}
	return t.kafka.barrier
}

// serveBarrier ends the transaction once the barrier has drained everything read.
func (t *Task) serveBarrier() error {
	if t.barrier == nil || t.pending > 0 || len(t.inflight) > 0 {
		return nil
	}
	err := t.commitTxn(true)
	reply := t.barrier.reply
	t.reply(func() { reply <- err })
	t.barrier = nil
	return err
}

// commitTxn ends the transaction: the changelog of what changed since the last one, then the
// commit (or the abort, if a record could not be written), then the local checkpoint or the
// rollback. Nothing may be in flight or queued. An error means the task must stop.
func (t *Task) commitTxn(startTicks bool) error {
	cp := store.Checkpoint{Task: t.cfg.Name}
	t.cache.Collect(&cp)
	t.timersCollected()
	// Changes of a partition revoked since the last commit (a firing or tick after it) belong to
	// this transaction, which the revoke aborts anyway; they never reach the store. The cache
	// forgets their entries too: Collect counted their marks as stored (MarkStored,
	// MarkUnchanged), and a later assignment must read the store's again.
	var gone []uint32
	cp.Keys = slices.DeleteFunc(cp.Keys, func(kw store.KeyWrites) bool {
		if t.streams[kw.Stream] != nil {
			return false
		}
		if !slices.Contains(gone, kw.Stream) {
			gone = append(gone, kw.Stream)
		}
		return true
	})
	for _, s := range gone {
		t.cache.DropStream(s)
	}
	t.collectPositions(&cp)
	pl := t.planChangelog(&cp)
	if pl != nil {
		if err := t.writeChangelog(pl); err != nil {
			return err
		}
	}
	waited := t.waitingOnCluster()
	next, ferr := t.flushTxn()
	idle := len(cp.Keys) == 0 && len(cp.Positions) == 0 && t.stats.Outputs == t.txnMark.outputs && t.stats.DeadLetters == t.txnMark.deadLetters
	t.txnMark.outputs, t.txnMark.deadLetters = t.stats.Outputs, t.stats.DeadLetters
	ctx, cancel := context.WithTimeout(context.Background(), t.txnBound())
	out, err := t.kafka.consumer.EndTxn(ctx, ferr == nil, idle)
	cancel()
	waited()
	if err != nil {
		var op *net.OpError
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("the cluster did not end the transaction within %s (kafka.unreachable_timeout; the cluster has been unreachable for that long, or has not acknowledged the transaction's records?): "+
				"once it answers, restart the task (wasmstream restart): it resumes from what the cluster committed: %w", t.txnBound(), err)
		case errors.As(err, &op) && op.Op == "dial":
			// The client gives up ending a transaction when it cannot connect to its
			// coordinator at all; whether the transaction committed is the cluster's to say.
			err = fmt.Errorf("the cluster was unreachable when the transaction was to end (whether it committed, the cluster says: a restart resumes from what it committed): %w", err)
		}
		return &txnEndError{fmt.Errorf("exactly-once: %w", err)}
	}
	if !out.Committed {
		t.rollback(out.Rewound)
		if ferr == nil {
			ferr = out.Cause
		}
		return t.txnFailed(ferr)
	}
	t.txnFailingSince = time.Time{}
	if err := t.committedTxn(&cp, pl, next); err != nil {
		return err
	}
	if !idle {
		t.stats.TxnCommits++
	}
	t.publish()
	if !startTicks {
		return nil
	}
	// Ticks read the store: they start only now, when it holds everything (tickDue).
	t.committedNow = true
	err = t.tickDue()
	t.committedNow = false
	return err
}

// txnFailed follows an aborted transaction: the cause goes to the task's recent errors (its
// status) and, while the aborts go on for less than the input's DeliveryTimeout, the consumer
// backs off before reading again (Consumer.EndTxn); after that the task halts with the cause.
// An abort without a cause (the broker's) is retried likewise.
func (t *Task) txnFailed(cause error) error {
	if cause == nil {
		cause = errors.New("the broker aborted the transaction")
	}
	t.noteError("transaction aborted", "exactly-once commit", nil, cause)
	now := t.cfg.Now()
	if t.txnFailingSince.IsZero() {
		t.txnFailingSince = now
	}
	bound := t.kafka.in.DeliveryTimeout
	if bound <= 0 {
		bound = kafka.DefaultDeliveryTimeout
	}
	if failing := now.Sub(t.txnFailingSince); failing >= bound {
		return fmt.Errorf("exactly-once: no transaction could commit for %s (kafka.delivery_timeout %s); the last cause: %w",
			failing.Round(time.Millisecond), bound, cause)
	}
	return nil
}

// flushTxn waits until every record of the transaction (changelog, outputs, dead letters) is
// acknowledged, and returns the changelog's next offsets and the first failure: with one, the
// transaction cannot commit.
func (t *Task) flushTxn() (next map[int32]int64, ferr error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.txnBound())
	next, ferr = t.changelog.w.Flush(ctx)
	cancel()
	if ferr == nil {
		ferr = t.cfg.Output.Flush()
	}
	if ferr == nil {
		ferr = t.cfg.DeadLetter.Flush()
	}
	if ferr != nil {
		t.log.Warn("a record of the transaction could not be written; aborting it", "err", ferr)
	}
	return next, ferr
}

// committedTxn brings the store up to the transaction Kafka committed: its keys and positions
// (each position's resume offset past the changelog records written), then the counts.
func (t *Task) committedTxn(cp *store.Checkpoint, pl *changelogPlan, next map[int32]int64) error {
	if pl != nil {
		pl.resume(next)
	}
	t.changelogWritten(pl, next)
	if len(cp.Keys) == 0 && len(cp.Positions) == 0 {
		return nil
	}
	if err := t.cfg.Store.Commit(cp); err != nil {
		return fmt.Errorf("checkpoint (committed in Kafka; a restart restores it from the changelog): %w", err)
	}
	for _, sp := range cp.Positions {
		t.streams[sp.Stream].durable = sp.Position
	}
	t.timersCommitted()
	t.stats.Checkpoints++
	t.cache.Evict()
	return nil
}

// rollback makes the loop's view of every partition that of the last committed transaction
// after an abort: the cache forgets what it applied since (the store never had it), timers and
// the watermark return to the committed ones, and each partition polled in the transaction
// reads again from where the consumer was rewound to.
func (t *Task) rollback(rewound map[kafka.TopicPartition]int64) {
	t.stats.TxnAborts++
	t.log.Warn("transaction aborted: every partition goes back to its last committed state and reads again from there",
		"partitions_rewound", len(rewound))
	for tp, st := range t.kafka.streams {
		t.cache.DropStream(st.id)
		tick := st.tm.nextTick
		live := st.tm.live
		t.timers.mu.Lock()
		st.tm = newStreamTime(t.cfg.Now(), t.cfg.TickEvery)
		t.timers.mu.Unlock()
		st.tm.nextTick = tick
		// Back to the committed timers: the store counts them (it never had the aborted ones).
		st.tm.live = live
		if n, err := t.cfg.Store.PendingTimers(t.cfg.Name, st.id); err == nil {
			t.timers.used.Add(n - live)
			st.tm.live = n
		}
		st.tm.wm = st.durable.Watermark
		st.horizon, st.replay = st.durable.Horizon, st.durable.Horizon
		if at, ok := rewound[tp]; ok {
			st.tracker = positions.NewTracker(at)
			st.lastAdded = at - 1
			if at == st.durable.Next {
				// Back at the committed position: its epoch, as when the partition was assigned
				// (the marks below the aborted transaction's positions may be gone).
				st.epochs = st.epochs[:0]
				st.noteEpoch(at-1, st.durable.LeaderEpoch.Epoch())
			}
		}
	}
	clear(t.attempts)
	t.publish()
}

// finalTxn ends the last transaction when the task stops: with the poller stopped, it processes
// what was read and commits it; what cannot be processed now (a paused task, a retry waiting for
// its backoff) is aborted, to be read again by the partition's next owner, and so is a
// transaction with records the poller polled but never handed over (kafka.Consumer.Unhanded:
// it stopped mid-poll), whose offsets Kafka would commit with it.
func (t *Task) finalTxn() error {
	for t.pending > 0 || len(t.inflight) > 0 {
		if !t.paused {
			t.dispatch()
			t.carryOut()
		}
		if len(t.inflight) == 0 {
			break
		}
		err := t.finish(<-t.results)
		t.carryOut()
		if err != nil {
			return err
		}
	}
	var err error
	if unhanded := t.kafka.consumer.Unhanded(); t.pending > 0 || unhanded {
		// A poller stopped mid-poll left records polled that never reached the loop: Kafka
		// would commit their offsets with the transaction, though they were not processed.
		t.log.Info("stopping: aborting the open transaction; its records are read again by the next owner", "records", t.pending, "polled_not_processed", unhanded)
		ctx, cancel := context.WithTimeout(context.Background(), t.txnBound())
		_, aerr := t.kafka.consumer.EndTxn(ctx, false, false)
		cancel()
		if aerr != nil {
			err = &txnEndError{fmt.Errorf("exactly-once: %w", aerr)}
		}
	} else {
		err = t.commitTxn(false)
	}
	var te *txnEndError
	if errors.As(err, &te) {
		// The last transaction did not commit: the broker aborted it (a stop that outlasted the
		// transaction timeout: the final transaction processes everything read first) or a
		// newer producer fenced it. Nothing of it is in the store or visible to read_committed
		// readers, and the partitions' next owner reads its records again from the offsets
		// the last committed transaction left: the stop loses nothing, so it is no failure.
		t.log.Warn("stopping: the last transaction did not commit; its records are read again by the next owner", "err", te.err)
		return nil
	}
	return err
}

// txnBound bounds each wait of a transaction's commit on the cluster (the changelog's
// acknowledgements, ending the transaction): kafka.unreachable_timeout. While the loop waits
// there the consumer's poller, which hands its fetches to the loop, cannot notice an outage;
// past the bound the commit fails and the task halts with the cause (a transactional client
// retries its records for as long as it is let: they cannot time out on their own).
func (t *Task) txnBound() time.Duration {
	if d := t.kafka.in.UnreachableTimeout; d > 0 {
		return d
	}
	return kafka.DefaultUnreachableTimeout
}

// txnSlow is how long a commit may wait on the cluster before the task reports itself not ready.
const txnSlow = 2 * time.Second

// waitingOnCluster starts the wait of a commit on the cluster and returns the function that ends
// it: a wait longer than txnSlow marks the task not ready (/readyz 503, as an outage the poller
// notices does) until it ends. (A runtime timer: the core itself starts no goroutine and waits on
// no channel.)
func (t *Task) waitingOnCluster() (end func()) {
	var mu sync.Mutex
	done, set := false, false
	tm := time.AfterFunc(txnSlow, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			set = true
			t.meters.unreachable.Store(true)
			t.log.Warn("exactly-once: the commit waits on the cluster; not ready meanwhile", "bound", t.txnBound())
		}
	})
	return func() {
		tm.Stop()
		mu.Lock()
		defer mu.Unlock()
		done = true
		if set {
			t.meters.unreachable.Store(false)
		}
	}
}

// txnEndError is a failure to end a transaction (Consumer.EndTxn): the transaction did not
// commit, and nothing of it reached the store.
type txnEndError struct{ err error }

func (e *txnEndError) Error() string { return e.err.Error() }
func (e *txnEndError) Unwrap() error { return e.err }

// pauseFetching stops (or restarts) reading every partition of a paused exactly-once task. The
// barriers go on while it is paused and would otherwise process whatever is read meanwhile: a
// transaction cannot end before everything read is processed.
func (t *Task) pauseFetching(pause bool) {
	if !t.eos() {
		return
	}
	for tp := range t.kafka.streams {
		t.pausePartition(tp, pause)
	}
}
