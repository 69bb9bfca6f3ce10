package task

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
)

// finish applies a finished job: effects on success; retry, dead letter, skip or halt on
// failure.
func (t *Task) finish(j *job) error {
	defer t.releaseTimerRoom(j) // after its timers are applied
	delete(t.inflight, j.id)
	j.ver.jobs--
	if j.tick != nil {
		j.ver.release(context.Background())
		return t.finishTick(j)
	}
	defer t.release(j)
	gone := 0 // items of streams revoked or lost meanwhile: the scheduler drops them
	for gi := range j.groups {
		g := &j.groups[gi]
		g.st.inflight -= len(g.work)
		if t.streams[g.stream] != g.st || g.st.revoking {
			gone += len(g.work)
		}
	}
	if j.err == nil && gone == 0 && len(j.items) > 1 {
		if keys := dueWithinCall(j); keys != nil {
			// A timer the call set fell due before a later item of its key in the same call:
			// that key's items run again one per call, so that the firing comes between them
			// (placeFiring); the other keys' items run again in batches. The call had no effects
			// yet; a deterministic guest does the same again.
			t.stats.TimerSplits++
			t.log.Debug("a timer set in a batch is due within it; its key's items run again one per call", "items", len(j.items), "keys", len(keys))
			partition := t.cfg.Policy == PolicyPartition
			return t.sched.RetryIsolating(j.id, func(seq string) bool { return partition || keys[seq] })
		}
	}
	if j.err == nil && t.changelog != nil {
		limit, err := t.changelogRoom(j)
		if err != nil {
			return err
		}
		j.err = limit
	}
	if j.err == nil {
		j.err = t.keyStateRoom(j)
	}
	if j.err == nil && t.chain != nil {
		j.err = t.chainRoom(j)
	}
	if j.err == nil {
		if j.ver.firstAt.IsZero() && t.cfg.ProvenGood != nil {
			t.cfg.ProvenGood(j.ver.id)
		}
		j.ver.ranBatch(t.cfg.Now())
	}
	j.ver.release(context.Background())
	if j.err == nil {
		return t.succeeded(j)
	}
	t.stats.Failures++
	if len(j.items) > 1 || gone > 0 {
		// Find the failing item: its keys run again, one item per call. Items of partitions no
		// longer ours are dropped, uncompleted.
		t.log.Debug("batch failed; isolating its items", "items", len(j.items), "err", j.err)
		t.pending -= gone
		return t.sched.Retry(j.id, true)
	}
	return t.itemFailed(j)
}

// succeeded applies a job that succeeded and completes its batch.
func (t *Task) succeeded(j *job) error {
	if t.outgrowsTxn(j) || t.chainOutgrows(j) {
		// Commit what the job's keys already hold first: a key's writes are committed in
		// one store transaction, which the job's would otherwise overflow.
		if err := t.checkpoint(); err != nil {
			return err
		}
	}
	if err := t.apply(j); err != nil {
		return err
	}
	t.chainApplied(j)
	if err := t.sched.Complete(j.id); err != nil {
		return err
	}
	dropItems(j)
	t.applyFlow()
	return nil
}

// itemFailed handles a job of one item that failed: the item is retried after a backoff or,
// after its last attempt, dead-lettered, skipped or halts the task (OnExhausted).
func (t *Task) itemFailed(j *job) error {
	it := j.items[0]
	st := t.streams[it.Stream]
	v := it.Value
	key, what := v.rec.Key, "record"
	where := st.where(it.Offset)
	if v.fire != nil {
		key, what = v.fire.Key, "timer firing"
		where = fmt.Sprintf("%s timer %q", st.name(), v.fire.Name)
	}
	if v.migrate {
		what, where = "state migration", st.name()+" state migration"
	}
	ak := attemptKey{it.Stream, it.Offset}
	t.attempts[ak]++
	n := t.attempts[ak]
	// A failure the guest declared permanent (fail_permanent, ABI §4.22) is not retried: it
	// fails as if on its last attempt.
	permanent := failedPermanently(j.err)
	recErr := &RecordError{Where: where, Key: key, Attempts: n, Permanent: permanent, Err: j.err}
	if n < t.cfg.MaxAttempts && !permanent {
		delay := t.backoff(n)
		t.stats.Retries++
		t.noteError("retry", where, key, j.err)
		t.log.Warn(what+" failed; retrying its key", "at", where,
			"key", shortKey(string(key)), "attempt", n, "retry_in", delay, "err", j.err)
		if err := t.sched.Retry(j.id, false); err != nil {
			return err
		}
		return t.sched.Delay(it.Stream, it.Key, t.cfg.Now().Add(delay))
	}
	delete(t.attempts, ak)
	return t.exhausted(j, st, what, recErr)
}

// exhausted ends a job of one item (what: a record, a timer firing or a state migration of
// stream st) that failed on its last attempt, as OnExhausted says.
func (t *Task) exhausted(j *job, st *stream, what string, re *RecordError) error {
	it := j.items[0]
	v := it.Value
	key, where, n := re.Key, re.Where, re.Attempts
	how := " failed on every attempt"
	if re.Permanent {
		how = " failed permanently (the guest said so: not retried)"
	}
	if t.cfg.OnExhausted != "halt" && t.cfg.MaxConsecutiveFailures > 0 && t.failStreak+1 >= t.cfg.MaxConsecutiveFailures {
		// Halt before this one goes to the dead letters: it is not completed, and is processed
		// again when the task is restarted.
		return &FailureStreakError{Failures: t.failStreak + 1, Last: re}
	}
	t.failStreak++
	switch t.cfg.OnExhausted {
	case "halt":
		return re
	case "skip":
		t.stats.Skips++
		t.noteError("skipped", where, key, j.err)
		t.log.Error(what+how+"; skipped as configured", "at", where,
			"key", shortKey(string(key)), "attempts", n, "err", j.err)
	default:
		t.log.Error(what+how+"; sent to the dead letters", "at", where,
			"key", shortKey(string(key)), "attempts", n, "err", j.err)
		value, null := v.rec.Value, v.rec.Flags&abi.FlagValueNull != 0
		if v.fire != nil {
			value, null = v.fire.Payload, false
		}
		if err := t.deadLetter(st, it.Offset, key, value, null, fmt.Errorf("%s: %w", where, j.err), n); err != nil {
			return err
		}
	}
	if v.migrate {
		// Nothing to complete: the key's next use tries its migration again.
	} else if v.fire != nil {
		// The timer is spent: deleted like a fired one, so it does not fire again.
		e := j.groups[0].entry(key)
		if err := e.Load(t.cache.Loader()); err != nil {
			return err
		}
		id := timerID{string(key), string(v.fire.Name)}
		delete(st.tm.queued, id)
		if err := t.applyTimer(st, e, v.fire.Name, dirtyTimer{del: true}, nil); err != nil {
			return err
		}
	} else {
		st.tracker.Complete(it.Offset)
		t.stats.Processed++
	}
	t.pending--
	if err := t.sched.Complete(j.id); err != nil {
		return err
	}
	dropItems(j)
	t.applyFlow()
	return nil
}

func (t *Task) backoff(attempt int) time.Duration {
	d := t.cfg.Backoff
	for i := 1; i < attempt && d < t.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, t.cfg.MaxBackoff)
}

// RecordError is a record or timer firing that failed on every attempt (or permanently) with
// OnExhausted "halt"; the last of a FailureStreakError.
type RecordError struct {
	Where    string // e.g. "input x line 42", "topic t partition 3 offset 41", "x timer \"n\""
	Key      []byte
	Attempts int
	// Permanent: the guest failed it with fail_permanent, and it was not retried.
	Permanent bool
	Err       error
}

func (e *RecordError) Error() string {
	return e.what() + "; halting as configured: " + e.Err.Error()
}

// what says where the record failed and how often.
func (e *RecordError) what() string {
	if e.Permanent {
		return fmt.Sprintf("%s key %q failed permanently (not retried)", e.Where, shortKey(string(e.Key)))
	}
	return fmt.Sprintf("%s key %q failed %d times", e.Where, shortKey(string(e.Key)), e.Attempts)
}

// FailureStreakError halts a task whose last Failures records and timer firings all failed on
// every attempt or permanently (Config.MaxConsecutiveFailures): a module that fails everything
// stops instead of sending the whole stream to the dead letters. Last, the one that reached the
// limit, was not dead-lettered or skipped: it is processed again when the task restarts.
type FailureStreakError struct {
	Failures int
	Last     *RecordError
}

func (e *FailureStreakError) Error() string {
	return fmt.Sprintf("halting: the last %d records failed one after another (retry.max_consecutive_failures: %d); the last, %s: %v",
		e.Failures, e.Failures, e.Last.what(), e.Last.Err)
}

func (e *FailureStreakError) Unwrap() error { return e.Last }

// failedPermanently reports whether err is a guest call the guest failed with fail_permanent.
func failedPermanently(err error) bool {
	var ce *modrt.CallError
	return errors.As(err, &ce) && ce.Permanent
}

func (e *RecordError) Unwrap() error { return e.Err }
