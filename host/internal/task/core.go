package task

import (
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
)

// The core of the task loop: synchronous decisions, driven one event at a time by the driver
// (driver.go), which owns every goroutine and channel. The core is not safe for concurrent use:
// one goroutine (the loop) calls it.
//
// Events in (each a method; an error means the task must stop):
//
//	ingest(chunk)           a chunk of records read from a file or stdin input
//	ingestKafka(fetch)      a fetch of one Kafka partition
//	finish(job)             a worker returned a job (a batch or a tick)
//	checkpointDue()         the checkpoint interval elapsed (checkpoint, also called by the core itself)
//	checkpointed(work)      the checkpoint goroutine committed the checkpoint in flight (or failed)
//	serve(request)          Switch (a deploy), Pause or Resume
//	onAssign/onRevoke/onLost  a Kafka rebalance
//	onRestored              exactly-once: an assignment's partitions were restored beside the loop
//	t.barrier = &req        exactly-once: the consumer asks to end the transaction
//	afterEvent()            after each event: an early checkpoint when the sinks or a chain log hold too much
//	step()                  once per turn, before waiting for the next event: due timers and
//	                        ticks, activation migrations, dispatch, finished revokes and
//	                        barriers; it says whether the task is done and when to wake
//
// Actions out, in t.out, which the driver carries out after every call into the core
// (carryOut): jobs to hand to the workers, consumer pauses, resumes and offset commits, and
// replies to the goroutines that asked something of the loop. State, marks and positions are
// collected by checkpoint and committed by the driver's checkpoint goroutine (checkpoint.go);
// outputs and dead letters go to the sinks as they are applied, a synchronous call the core
// makes.

// actions is what the core asks the driver to do; the driver does it in this order: consumer
// calls, jobs, replies (a reply may tell a rebalance callback that the consumer may go on, so it
// comes after the pauses and commits that precede it).
type actions struct {
	flow    []flowOp                                     // consumer Pause/Resume, in order
	commits []map[kafka.TopicPartition]kafka.EpochOffset // group offsets to commit (asynchronously)
	jobs    []*job                                       // to the workers; never more than the free workers
	replies []func()                                     // answers to requests, sent last
}

// flowOp pauses or resumes fetching a Kafka partition.
type flowOp struct {
	tp    kafka.TopicPartition
	pause bool
}

// turn is what step tells the driver besides t.out.
type turn struct {
	done bool      // every input is exhausted and all work is done: Run returns
	wake time.Time // look at the clock again then, even without an event
	// hasWake says wake is set.
	hasWake bool
}

// step does the work of one loop turn that no event triggers: revokes whose partitions drained
// finish, due timers and ticks start, activation migrations advance, ready batches are
// dispatched and a drained barrier ends its transaction.
func (t *Task) step() (turn, error) {
	if err := t.finishRevokes(); err != nil {
		return turn{}, err
	}
	if t.barrier == nil {
		// During a barrier nothing new starts: the queues run dry.
		if err := t.fireDue(); err != nil {
			return turn{}, err
		}
		if err := t.tickDue(); err != nil {
			return turn{}, err
		}
		if err := t.feedMigrations(); err != nil {
			return turn{}, err
		}
	}
	t.answerQueries() // before dispatch pins their keys again
	if !t.chainBlocked() {
		t.dispatch()
	}
	if err := t.serveBarrier(); err != nil {
		return turn{}, err
	}
	if t.finished() {
		return turn{done: true}, nil
	}
	var tn turn
	tn.wake, tn.hasWake = t.nextWake()
	return tn, nil
}

// afterEvent checkpoints early when the sinks hold too much (maxHeldOutputs) or the entries
// emitted to a chain log reach its readers' bound, and takes a checkpoint that fell due while
// another was in flight once that one was reported.
func (t *Task) afterEvent() error {
	if (!t.eos() && t.sinksFull()) || t.chainPendingFull() || t.cpDue {
		return t.checkpointDue()
	}
	return nil
}

// finished reports whether every input is exhausted and all work is done.
func (t *Task) finished() bool {
	if t.pending > 0 || len(t.inflight) > 0 || !t.timersIdle() || len(t.passes) > 0 {
		return false
	}
	if t.kafka != nil && !t.boundedDone() {
		return false
	}
	for _, st := range t.order {
		if !st.done {
			return false
		}
	}
	return true
}

// startJob hands a job to the workers (through the driver) and counts it in flight.
func (t *Task) startJob(j *job) {
	j.ver = t.cur
	t.cur.jobs++
	t.inflight[j.id] = j
	t.out.jobs = append(t.out.jobs, j)
}

// reply queues an answer to a request; the driver sends it after the other actions.
func (t *Task) reply(fn func()) { t.out.replies = append(t.out.replies, fn) }

// pausePartition queues a consumer Pause (pause) or Resume of tp.
func (t *Task) pausePartition(tp kafka.TopicPartition, pause bool) {
	t.out.flow = append(t.out.flow, flowOp{tp, pause})
}
