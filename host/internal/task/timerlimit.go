package task

import (
	"sync"
	"sync/atomic"
	"time"
)

// The pending-timer limit (ABI.md §4.10, §10: time.max_pending_timers).
//
// timerRoom.used is the task's pending timers as the loop applied them (committed or not) plus
// the room that guest calls in flight hold for the new timers they set. The loop keeps each
// stream's part exact: it starts from the store's count of the stream's committed timers
// (store.DB.PendingTimers, read when the stream opens: exact after a restart or a crash, which
// loses only uncommitted ops) and adds 1 for every set of a timer that did not exist and
// subtracts 1 for every delete or firing of one that did (applyTimer; whether it existed comes
// from the stream's uncommitted ops, else from the store). A call's first timer_set of a
// (key, name) takes one unit of room while used is below the limit; at the limit it is refused
// unless the timer exists already (a replacement: no room needed). When the loop applies a new
// timer the call set, the call's held room becomes the timer's (applyTimer): the timer is
// counted once, not as held room and as a pending timer both (which, until the job was done,
// refused other workers' calls room that was free). What the call still holds goes back when
// the loop is done with its job (finish). So used never passes the limit, and a replacement or
// a delete applied earlier costs nothing; but a delete in the same call as a new set frees its
// room only once applied, and room held by a call in flight for a timer that turns out to exist
// is counted until that call is applied.
type timerRoom struct {
	limit  int64 // 0: no limit
	used   atomic.Int64
	warned atomic.Int64 // unix nanoseconds of the last warning
	// refused counts every refusal (Stats.TimersRefused): a call that retries its refused
	// timer_set counts each time. reported is refused as of the last warning.
	refused, reported atomic.Int64

	// mu guards the streams' dirty and committing timer maps (streamTime) for readers off the
	// loop (exists): the loop takes it to change them and reads them without it.
	mu sync.RWMutex
}

// timerWarnEvery is how often at most the task logs that timer_set was refused.
const timerWarnEvery = 10 * time.Second

// countStreamTimers adds a stream's committed timers to the task's count when the stream
// opens: the store counts them (exact, whatever happened before the restart).
func (t *Task) countStreamTimers(st *stream) error {
	n, err := t.cfg.Store.PendingTimers(t.cfg.Name, st.id)
	if err != nil {
		return err
	}
	st.tm.live = n
	t.timers.used.Add(n)
	return nil
}

// uncountStreamTimers takes a dropped stream's timers off the task's count.
func (t *Task) uncountStreamTimers(st *stream) {
	t.timers.used.Add(-st.tm.live)
	st.tm.live = 0
}

// timerExists reports whether the timer exists as the loop applied it: its uncommitted op, else
// the store. A worker asks it for a key its job holds: nothing changes that key's timers until
// the job is back, and an op the loop collected stays in the committing map until committed.
func (t *Task) timerExists(st *stream, key, name []byte) (bool, error) {
	id := timerID{string(key), string(name)}
	t.timers.mu.RLock()
	op, ok := st.tm.uncommitted(id)
	t.timers.mu.RUnlock()
	if ok {
		return !op.del, nil
	}
	_, ok, err := t.cfg.Store.Timer(t.cfg.Name, st.id, key, name)
	return ok, err
}

// reserveTimer serves a call's TimerGate (modrt): see timerRoom. held counts the room taken.
func (t *Task) reserveTimer(st *stream, key, name []byte, held *int64) (bool, error) {
	r := &t.timers
	if r.limit <= 0 {
		return true, nil
	}
	for {
		u := r.used.Load()
		if u >= r.limit {
			break
		}
		if r.used.CompareAndSwap(u, u+1) {
			*held++
			return true, nil
		}
	}
	ok, err := t.timerExists(st, key, name)
	if err != nil || ok {
		return ok, err
	}
	total := r.refused.Add(1)
	now := time.Now().UnixNano()
	if last := r.warned.Load(); now-last >= int64(timerWarnEvery) && r.warned.CompareAndSwap(last, now) {
		n := total - r.reported.Swap(total) // refusals since the last warning
		t.log.Warn("pending timers at the task's limit: timer_set of a new timer returns ERR_LIMIT until timers fire or are deleted",
			"limit", r.limit, "config", "tasks[].time.max_pending_timers", "refused", n)
	}
	return false, nil
}

// releaseTimerRoom gives back the room a job's calls held, once the loop applied (or dropped)
// what they set.
func (t *Task) releaseTimerRoom(j *job) {
	for gi := range j.groups {
		if g := &j.groups[gi]; g.timerHeld != 0 {
			t.timers.used.Add(-g.timerHeld)
			g.timerHeld = 0
		}
	}
}

// TimerGate for a record unit's calls.
func (e *env) ReserveTimer(key, name []byte) (bool, error) {
	return e.t.reserveTimer(e.st, key, name, &e.held)
}

// TimerGate for a tick's calls.
func (e *tickEnv) ReserveTimer(key, name []byte) (bool, error) {
	return e.t.reserveTimer(e.st, key, name, &e.held)
}
