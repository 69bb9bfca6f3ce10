// Package task runs one task: it reads the task's inputs, hands batches of records to workers
// that run the module's guest calls, applies their effects (state, timers, outputs) and
// checkpoints state and positions to the store (DESIGN S1–S22).
//
// # Core and driver
//
// The task loop is split in two, in the manner of etcd raft's RawNode and its node goroutine:
//
//   - The core (core.go, and the methods it calls in the files of each step below: ingest.go,
//     dispatch.go, finish.go, apply.go, checkpoint.go, and job.go, timers.go, deploy.go,
//     kafka.go, changelog.go and eos.go) is synchronous: one event in (a chunk of records, a
//     Kafka fetch, a finished job, a checkpoint due, a deploy switch, a pause, a rebalance), its
//     state updated, and actions out in Task.out: jobs for the workers, consumer pauses, resumes
//     and offset commits, and replies to the goroutines waiting on the loop. Task.step does the
//     work of a turn that no event triggers (due timers and ticks, migrations, dispatch, drained
//     revokes and barriers) and says when to wake. The core calls the store, the sinks and, in
//     exactly-once mode, the consumer's EndTxn directly; it starts no goroutine. A checkpoint it
//     collects goes to the driver's checkpoint goroutine (cpPipe.send) and comes back as an
//     event (checkpointed); where the core must have it committed before it goes on, it waits
//     through the driver (cpPipe.wait), the one wait it makes. Without a driver (pipe nil) a
//     checkpoint commits inline. TestCore drives it step by step with the golden scripts of
//     testdata.
//   - The driver (driver.go) owns the goroutines and channels. Run calls start functions —
//     startInputs, startKafkaInput, startWorkers, startCheckpointer — each returning the
//     function that stops what it started, runs the loop (drive: one select over every event source, then carryOut to do
//     what the core asked), finishes the jobs in flight, takes the last checkpoint and calls the
//     stop functions in reverse order.
//
// # Files
//
//	task.go       Config, Input, Task, New, Stats, opening streams and instances
//	fileprint.go  a file input's fingerprint in its positions, checked before it resumes; a file changed while read
//	ingest.go     records in: ingest, admit, sequence, enqueue
//	dispatch.go   back-pressure to the readers (applyFlow) and batches to free workers (dispatch)
//	finish.go     jobs back: finish, succeeded, itemFailed (split, retry, backoff), exhausted
//	apply.go      a successful job's writes, timers and outputs into the cache and the sink
//	checkpoint.go checkpoint (collected on the loop, committed off it: cpWork, commitWork,
//	              checkpointed), checkpointWait, publish, logProgress
//	core.go       the core's events and actions, step
//	driver.go     Run and its start/stop functions, the checkpoint goroutine (cpPipe), drive, carryOut
//	job.go        jobs and groups; the worker (work, runUnit, runTick) and its state environment
//	timers.go     watermarks, timers (fireDue, collectDue, applyTimer) and partition ticks
//	timerlimit.go the pending-timer limit: the task's count of pending timers and the room calls
//	              take for new ones (time.max_pending_timers, modrt.TimerGate)
//	deploy.go     versions, Switch/Pause/Resume (serve), activation migration passes
//	kafka.go      the Kafka input: rebalance requests (onAssign, onRevoke, onLost), fetches
//	changelog.go  changelog writes per checkpoint, restores on assignment, standbys, owner epochs
//	eos.go        exactly-once mode: barriers and one Kafka transaction per interval
//	eosassign.go  exactly-once assignments: restores beside the loop (assignAside, onRestored)
//	sinks.go      output and dead-letter sinks, dead letters of records
//	recent.go     the ring of recent errors (Stats.Recent)
//	query.go      state queries on a running task (Query, QueryScan), answered by the loop
//	alloc.go      admitted records' items and sequencing keys, carved from shared blocks
//	chain.go      task chaining: outputs to chain logs (committed with the checkpoint), chained
//	              inputs read from their committed position, back-pressure (chainBlocked)
//
// # The life of a record
//
// A reader goroutine sends a chunk (driver) → ingest/admit: malformed records, keys too large and
// timestamps further ahead of the clock than Config.MaxFuture go to the dead letters, replays of applied records are skipped, the rest are pushed to the
// scheduler under their sequencing key (S7), stamped with the watermark they were read at, and
// event-time timers the watermark passed are queued, each before its key's items stamped at or
// above its time (placeFiring, sched.Insert) → step/dispatch: while a worker is free, sched.Next forms a batch (a key is in at most
// one batch at a time), newJob pins its keys' cache entries (each once, in a list) → carryOut sends the job → a worker
// indexes the keys and runs each stream's unit (runUnit) and returns the job → finish: on success apply writes state
// and timers to the cache, sets the keys' marks, writes the outputs to the sink and completes
// the offsets in the stream's tracker (a batch that set a timer due before a later item of its
// key runs again one item per call: dueWithinCall); on failure a batch is split, an item retried after a
// backoff (not when the guest failed it permanently), then dead-lettered, skipped or the task
// halted, as also after MaxConsecutiveFailures failures in a row → checkpoint commits it.
//
// # Checkpoints
//
// checkpoint (checkpoint.go) flushes the sinks and collects the dirty cache entries with their
// marks and each stream's committable position in one store.Checkpoint; the checkpoint goroutine
// writes the changelog, then commits it to the store; reported back (checkpointed), the loop has
// the driver commit the Kafka offsets. One checkpoint is in flight at most: the loop goes on
// meanwhile, and collects the next only once it was reported. It runs every Config.Checkpoint
// (the driver's ticker), when the sinks hold too much (afterEvent), before a job whose writes
// would overflow a key's store transaction (finish), when a revoke has drained, before a tick and
// before an activation migration pass (these three wait for the commit: checkpointWait), and
// once more when Run ends. In exactly-once mode state commits with each Kafka transaction
// instead (commitTxn, at a barrier), on the loop.
//
// # Goroutines and locks
//
// The loop goroutine (drive) alone calls the core, so the core's state — streams, scheduler,
// trackers, the cache's map, the sinks, t.stats — has no lock. The checkpoint goroutine
// (startCheckpointer) owns the checkpoint in flight between send and report, and reads only it,
// the store and the changelog writer. Workers own a job between its
// send and its return on t.results; the cache entries it pins are theirs meanwhile. Other
// goroutines reach the loop only through channels: readers (chunks), the Kafka poller (fetches),
// the group's rebalance callbacks and the exactly-once barrier (requests answered by a reply in
// Task.out), Switch/Pause/Resume and state queries (t.ctl; a query whose key a batch holds
// waits in t.queries until step finds it released, before the next dispatch). Stats reads t.published under statsMu and the atomic
// meters; the standby goroutine shares standby.owned under standby.mu (with the task's other
// loops on the host too, when they share one standby: ChangelogConfig.Shared).
package task
