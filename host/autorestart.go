package host

import (
	"errors"
	"time"
)

// Automatic restarts (Config.OnTaskFailure "restart"): a task that halts is restarted by the
// host itself through RestartTask, after a back-off, on a goroutine of its own that holds a
// task run (h.taskRuns) while it waits, so that Run does not return meanwhile. A restart that
// fails (the cluster still away, the version refused) counts as a halt in a row: the back-off
// grows and the restart is tried again. Deploys, activations, rollbacks, resets and manual
// restarts are serialised with it by RestartTask's r.deploy; whichever restarts the task first
// cancels the pending restart (restart).

// The back-off of automatic restarts.
const (
	restartFirstDelay = time.Second     // after a first halt
	restartMaxDelay   = time.Minute     // it doubles with each halt in a row up to this
	restartResetAfter = 5 * time.Minute // a run this long without a halt resets it
)

// restartBackoff is the back-off of one task's automatic restarts. It holds no clock: the
// times it is given drive it.
type restartBackoff struct {
	inRow   int       // halts in a row, failed restarts included
	started time.Time // when the task last started; zero while it is halted
}

// halted counts a halt at now (of the task, or of a restart that failed) and returns the delay
// before the next restart: restartFirstDelay, doubled for each earlier halt in a row, at most
// restartMaxDelay. A task that ran restartResetAfter since it last started begins a new row.
func (b *restartBackoff) halted(now time.Time) time.Duration {
	if !b.started.IsZero() && now.Sub(b.started) >= restartResetAfter {
		b.inRow = 0
	}
	b.started = time.Time{}
	b.inRow++
	d := restartFirstDelay
	for i := 1; i < b.inRow && d < restartMaxDelay; i++ {
		d *= 2
	}
	return min(d, restartMaxDelay)
}

// ran records that the task started (or was restarted) at now.
func (b *restartBackoff) ran(now time.Time) { b.started = now }

// pendingRestart is a task's automatic restart waiting for its time (running.pending).
type pendingRestart struct {
	at       time.Time     // when it restarts the task
	lastErr  string        // why the last automatic restart failed; "" if none failed yet
	canceled chan struct{} // closed when the task was restarted otherwise
}

// scheduleRestart starts the automatic restart of task r, halted with cause (on_task_failure
// "restart"), unless one is pending already or the host is stopping. h.mu is held.
func (h *Host) scheduleRestart(lv *live, r *running, cause error) {
	if r.pending != nil || lv.ctx.Err() != nil {
		h.cfg.Logger.Error("task halted", "task", r.cfg.Name, "err", haltCause(cause))
		return
	}
	delay := h.nextRestartDelay(r)
	p := &pendingRestart{at: time.Now().Add(delay), canceled: make(chan struct{})}
	r.pending = p
	h.taskRuns++ // the pending restart's hold on Run
	h.cfg.Logger.Error("task halted; restarting it (on_task_failure: restart)", "task", r.cfg.Name, "in", delay,
		"halts_in_row", r.backoff.inRow, "restart_at", p.at, "err", haltCause(cause))
	go h.autoRestart(lv, r, p, delay)
}

// nextRestartDelay counts a halt of task r now and returns the delay before its restart.
// h.mu is held.
func (h *Host) nextRestartDelay(r *running) time.Duration {
	return max(r.backoff.halted(time.Now()), h.cfg.minRestartDelay)
}

// autoRestart waits delay, then restarts task r (RestartTask), again with a longer delay for as
// long as that fails, until the task runs, the restart is canceled (the task was restarted
// otherwise) or the host stops. It gives its hold on Run back as it returns.
func (h *Host) autoRestart(lv *live, r *running, p *pendingRestart, delay time.Duration) {
	name := r.cfg.Name
	defer func() {
		h.mu.Lock()
		if r.pending == p {
			r.pending = nil
		}
		h.taskEnded()
		h.mu.Unlock()
	}()
	for {
		t := time.NewTimer(delay)
		select {
		case <-lv.ctx.Done():
			t.Stop()
			return
		case <-p.canceled:
			t.Stop()
			return
		case <-t.C:
		}
		_, err := h.RestartTask(lv.ctx, name)
		if err == nil {
			h.mu.Lock()
			h.restarts[name]++
			n := h.restarts[name]
			h.mu.Unlock()
			h.cfg.Logger.Info("task restarted automatically (on_task_failure: restart)", "task", name, "restarts", n)
			return
		}
		if errors.Is(err, ErrRunning) || lv.ctx.Err() != nil {
			return // restarted by another call, or the host is stopping
		}
		h.mu.Lock()
		select {
		case <-p.canceled:
			h.mu.Unlock()
			return
		default:
		}
		delay = h.nextRestartDelay(r)
		p.at, p.lastErr = time.Now().Add(delay), err.Error()
		at, inRow := p.at, r.backoff.inRow
		h.mu.Unlock()
		h.cfg.Logger.Error("automatic restart failed; the task stays halted and is restarted again (on_task_failure: restart)",
			"task", name, "in", delay, "halts_in_row", inRow, "restart_at", at, "err", err)
	}
}

// restarted records that task r runs again (restart): its pending automatic restart, if any,
// is canceled, and the back-off counts its run from now. h.mu is held.
func (r *running) restarted(now time.Time) {
	if r.pending != nil {
		close(r.pending.canceled)
		r.pending = nil
	}
	r.backoff.ran(now)
}
