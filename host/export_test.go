package host

import "time"

// ExpireResetHolds ends every hold of a task for another host's group reset now, as
// groupResetHold passing would: the task follows the group's offsets and runs again.
func (h *Host) ExpireResetHolds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, hold := range h.resetHolds {
		close(hold.expire)
	}
	return len(h.resetHolds)
}

// SetAppliedSpan lowers the most offsets a checkpoint's applied set spans past its stream's Next
// (store.MaxAppliedSpan, 262,144) to n, so that a test crosses it with few records.
func SetAppliedSpan(c *Config, n int64) { c.appliedSpan = n }

// SetMinRestartDelay makes every automatic restart (on_task_failure: restart) wait at least d,
// so that a test acts on a halted task before its restart can fire.
func SetMinRestartDelay(c *Config, d time.Duration) { c.minRestartDelay = d }
