// Package stats defines the running figures of a task, once: the task fills them, the host
// returns them (host.TaskStats and the types beside it are aliases of these), the admin API
// serves them as JSON (GET /v1/status, whose field names the json tags fix) and the CLI decodes
// that JSON back into them for status and top, and exports them to Prometheus.
//
// A figure is as of the task's last checkpoint unless its comment says "up to date".
package stats

import "time"

// Task are the running figures of one task.
type Task struct {
	// Task is the task's name (set by the host; "" in the task's own copy).
	Task    string `json:"task"`
	Version int64  `json:"version"` // the module version running; up to date
	Deploys int64  `json:"deploys"` // versions switched to this run: deploys, activations, rollbacks; up to date
	Paused  bool   `json:"paused"`  // paused with Pause; up to date
	// Halted is set when the task halted (on_task_failure "halt_task" or "restart"): it could
	// not start or failed while running; Error says why. The other figures are as of its end.
	// Set by the host.
	Halted bool   `json:"halted,omitempty"`
	Error  string `json:"error,omitempty"`
	// With on_task_failure "restart": RestartAt is when a halted task is restarted next, and
	// RestartError why the last automatic restart failed ("" if none did); Restarts counts the
	// automatic restarts that started the task again since the host started. Set by the host.
	RestartAt    time.Time `json:"restart_at,omitzero"`
	RestartError string    `json:"restart_error,omitempty"`
	Restarts     int64     `json:"restarts"`

	Records     int64   `json:"records"`      // records read this run
	Processed   int64   `json:"processed"`    // records whose processing completed: applied, dead-lettered or skipped
	Pending     int     `json:"pending"`      // records read and not yet complete (queued or in flight)
	InFlight    int     `json:"in_flight"`    // records in batches being processed
	Queued      int     `json:"queued"`       // records and timer firings read ahead, waiting in their keys' queues
	PeakQueued  int     `json:"peak_queued"`  // most records and firings waiting in the key queues at once
	Outputs     int64   `json:"outputs"`      // records the guest emitted to the task's output
	Skipped     int64   `json:"skipped"`      // records replayed after a restart and skipped as already applied
	DeadLetters int64   `json:"dead_letters"` // records sent to the dead letters (malformed, or failing on every attempt)
	Retries     int64   `json:"retries"`      // retries of failed records and timer firings
	Skips       int64   `json:"skips"`        // records and timer firings skipped after failing on every attempt (on_exhausted: skip)
	Failures    int64   `json:"failures"`     // guest calls that failed (a trap, an error code, fuel or time exhausted)
	Checkpoints int64   `json:"checkpoints"`  // checkpoints committed
	Pauses      int64   `json:"pauses"`       // times an input was paused because its key queues were full
	Late        int64   `json:"late"`         // records read with a timestamp below their partition's watermark
	Inputs      []Input `json:"inputs"`
	// RetentionLost counts the offsets of Kafka input records removed (retention, a
	// DeleteRecords) below a partition's position before the task read them: the partition
	// went on from its log start. An upper bound on the records: removed offsets of a topic
	// written by transactional producers also held markers and aborted records, uncounted by
	// Kafka.
	RetentionLost int64 `json:"retention_lost"`

	TimersSet     int64 `json:"timers_set"`     // timer_set calls that took effect, by firings too
	TimersDeleted int64 `json:"timers_deleted"` // timers deleted, fired ones included
	TimersQueued  int64 `json:"timers_queued"`  // timer firings queued
	TimersFired   int64 `json:"timers_fired"`   // timer firings completed
	TimersDropped int64 `json:"timers_dropped"` // timer firings dropped: the module has no timer callback
	// TimersRefused counts timer_set calls of a new timer refused with ERR_LIMIT at
	// time.max_pending_timers (as of now).
	TimersRefused int64 `json:"timers_refused"`
	// TimerSplits counts batches run again one item per call because a timer one of their calls
	// set fell due before a later item of its key in the same call.
	TimerSplits int64 `json:"timer_splits"`
	// PendingTimers is the number of timers set and neither deleted nor fired, over all the
	// task's inputs, as of the last checkpoint: the store counts them as it commits, so reading
	// it costs nothing.
	PendingTimers int64 `json:"timers_pending"`
	Ticks         int64 `json:"ticks"` // partition ticks started

	Restores         int64 `json:"restores"`           // Kafka partitions restored from the changelog
	FullRestores     int64 `json:"full_restores"`      // restores that replayed a partition's whole changelog
	RestoredRecords  int64 `json:"restored_records"`   // changelog records the restores read
	RestoredBytes    int64 `json:"restored_bytes"`     // and their bytes
	ChangelogRecords int64 `json:"changelog_records"`  // key snapshots produced to the changelog
	StandbyRecords   int64 `json:"standby_records"`    // changelog records a standby applied for partitions not owned
	StandbyBytes     int64 `json:"standby_bytes"`      // and their bytes
	Dropped          int64 `json:"partitions_dropped"` // lost partitions whose local state was deleted (drop_revoked)
	TxnCommits       int64 `json:"txn_commits"`        // delivery exactly_once: transactions committed
	TxnAborts        int64 `json:"txn_aborts"`         // delivery exactly_once: transactions aborted (their records are processed again)
	// ChainEntries are the records appended to chain logs (outputs that other tasks of the
	// host read as an input); ChainHolds the times the task held because a reading task's
	// checkpoints left its input's max_backlog of them uncovered (back-pressure).
	ChainEntries int64 `json:"chain_entries"`
	ChainHolds   int64 `json:"chain_holds"`

	// LogDropped are the guest log lines the running module version dropped
	// (max_log_lines_per_second).
	LogDropped int64 `json:"guest_log_dropped"`

	StateKeys   int   `json:"state_keys"`   // keys whose state the task's cache holds
	StateBytes  int64 `json:"state_bytes"`  // the cache's estimate of their size in bytes
	CacheHits   int64 `json:"cache_hits"`   // keys a batch found in the cache
	CacheMisses int64 `json:"cache_misses"` // keys a batch did not find in the cache: their state was read from the store

	// The following are up to date.
	FuelUsed  int64 `json:"fuel_used"` // fuel the guest calls spent (0 unless the module is metered)
	Traps     int64 `json:"traps"`     // guest instances discarded after a trap; each is replaced at the next batch
	Restoring int   `json:"restoring"` // Kafka partitions assigned and being restored from the changelog, not yet read
	// BatchSize counts the records and timer firings of each batch; CallSeconds the duration
	// of each guest call (a unit of records or firings, or a tick); CheckpointSeconds the
	// duration of each checkpoint.
	BatchSize         Histogram `json:"batch_size"`
	CallSeconds       Histogram `json:"call_seconds"`
	CheckpointSeconds Histogram `json:"checkpoint_seconds"`
	// GuestMetrics are the counters, gauges and histograms the running module version declared
	// with metric_declare and metric_declare_histogram (ABI 0.3), in declaration order. They
	// start at zero when a version becomes current (a deploy, activation or rollback) and when
	// the host starts.
	GuestMetrics []GuestMetric `json:"guest_metrics"`
	// Recent are the task's last errors (at most 20), oldest first.
	Recent []RecentError `json:"recent_errors"`
}

// Input are the figures of one input of a task: a file or stdin input, or one Kafka partition
// of a Kafka input.
type Input struct {
	Name      string `json:"name"`
	Topic     string `json:"topic,omitempty"` // Kafka: the partition's topic; "" for other inputs
	Partition int32  `json:"partition"`       // Kafka: the partition; -1 for other inputs
	Records   int64  `json:"records"`         // records read this run
	// Committed is where a restart resumes: the lines of a file or stdin input behind the
	// committed position (a restart reads line Committed+1 next), a Kafka partition's next
	// offset.
	Committed int64 `json:"committed"`
	// Lag is a Kafka partition's records beyond the committed position as of its last fetch,
	// or a chained input's entries of its log beyond the committed position (the lag between
	// the two tasks); -1 when unknown or a file or stdin input.
	Lag int64 `json:"lag"`
	// Chain names the task and output a chained input reads ("wordcount/counts"); "" for
	// other inputs.
	Chain     string `json:"chain,omitempty"`
	Watermark int64  `json:"watermark"` // the event-time watermark in Unix milliseconds; -1 before there is one
	InFlight  int    `json:"in_flight"` // records in batches being processed
	// PendingTimers is the input's timers set and neither deleted nor fired, as of the last
	// checkpoint (see Task.PendingTimers).
	PendingTimers int64 `json:"timers_pending"`
	// A replay that `wasmstream reset` started (or a followed external offset reset), until
	// the input's committed position reaches the head captured at the reset: where it
	// restarted, that head, and the records still to go (head minus committed). ReplayHead and
	// ReplayRemaining are -1 when the input is not replaying; a replay has ReplayHead >
	// ReplayFrom.
	ReplayFrom      int64 `json:"replay_from"`
	ReplayHead      int64 `json:"replay_head"`
	ReplayRemaining int64 `json:"replay_remaining"`
}

// Histogram is a copy of a histogram: Counts[i] observations were at most Bounds[i] and above
// Bounds[i-1]; Counts[len(Bounds)] were above every bound. Counts are not cumulative.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum"`
}

// GuestMetric is the value of one metric a guest declared: a counter or a gauge, its name (without
// the "wasmstream_guest_" prefix the Prometheus export adds) and its fixed labels.
type GuestMetric struct {
	Counter bool         `json:"counter,omitempty"`
	Name    string       `json:"name"`
	Labels  []GuestLabel `json:"labels,omitempty"`
	Value   int64        `json:"value"`
	// Histogram is set for a histogram (metric_declare_histogram): its buckets, count and sum
	// (Value is then 0).
	Histogram *Histogram `json:"histogram,omitempty"`
}

// GuestLabel is one label of a GuestMetric.
type GuestLabel struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// RecentError is one of a task's last errors: a record or timer firing that failed and was
// retried ("retry"), sent to the dead letters ("dead letter") or skipped ("skipped"), or a
// partition tick that failed ("tick failed"). It holds what the task's log says of it; its key
// is cut to 64 bytes and its error to 512.
type RecentError struct {
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Where string    `json:"where"` // e.g. "input x line 42", "topic t partition 3 offset 41"
	Key   string    `json:"key,omitempty"`
	// KeyNull: the record's key is null (a Kafka record without a key), not empty.
	KeyNull bool   `json:"key_null,omitempty"`
	Err     string `json:"error"`
}
