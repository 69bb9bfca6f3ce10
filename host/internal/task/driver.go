package task

import (
	"context"
	"sync"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/source"
)

// The driver: Run starts the goroutines (input readers, the Kafka poll loop and standby, the
// workers), then the loop (drive) turns what arrives on their channels into calls into the core
// (core.go) and carries out the actions the core returns. Each start function returns the
// function that stops what it started; Run calls them in reverse order.

// Run processes the task's inputs until they are exhausted (nil), ctx is done (nil, after a
// last checkpoint of everything finished), or the task fails (the error). Every goroutine it
// starts has stopped when it returns.
func (t *Task) Run(ctx context.Context) error {
	loopDone := sync.OnceFunc(func() { close(t.stopped) })
	readCtx, stopReading := context.WithCancel(ctx)
	// Workers run guest calls on their own context: a batch in flight always finishes, so
	// that stopping never leaves half-applied work behind.
	workCtx := context.WithoutCancel(ctx)
	// Unbuffered: a paused reader overshoots its queue bound by at most the chunk that crossed
	// the mark and the one it was reading then (S4).
	chunks := make(chan source.Chunk)
	instErr := make(chan error, t.cfg.Workers)
	t.startChain()

	var stops []func() // in start order; called in reverse
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stopReading()
		loopDone()
	}
	stopInputs, err := t.startInputs(readCtx, stopReading, chunks)
	if err != nil {
		stop()
		return err
	}
	stops = append(stops, stopInputs)
	kafka, err := t.startKafkaInput(ctx, readCtx, stopReading)
	if err != nil {
		stop()
		if ctx.Err() != nil {
			// Stopped while starting (the changelog's topic lookups end with ctx): nothing
			// was read, so nothing is lost, and the stop is no failure.
			return nil
		}
		return err
	}
	stops = append(stops, kafka.stop)
	stopWorkers, err := t.startWorkers(workCtx, instErr)
	if err != nil {
		stop()
		return err
	}
	stops = append(stops, stopWorkers)
	stops = append(stops, t.startCheckpointer())

	err = t.drive(ctx, chunks, instErr)
	loopDone()
	stopReading()
	if ferr := t.finishRun(kafka.waitPoller); ferr != nil && err == nil {
		err = ferr
	}
	stop()
	if err == nil && ctx.Err() == nil {
		// The inputs ended (drive returns nil only then or when ctx is done), and the last
		// checkpoint committed: the chain logs' readers may end once they read it.
		t.endChain()
	}
	return err
}

// finishRun ends a run once the loop stopped: it applies what is in flight, so that the last
// checkpoint covers as much as possible, then checkpoints (exactly once: ends the last
// transaction, once the poller is gone).
func (t *Task) finishRun(waitPoller func()) error {
	var err error
	for len(t.inflight) > 0 {
		ferr := t.finish(<-t.results)
		t.carryOut()
		if ferr != nil && err == nil {
			err = ferr
		}
	}
	if t.eos() {
		// The last transaction ends here, on the loop's goroutine, once the poller is gone.
		waitPoller()
		if err == nil {
			err = t.finalTxn()
		}
		t.publish()
	} else if cerr := t.checkpointWait(); cerr != nil && err == nil {
		// A checkpoint in flight is waited for (or its failure) before the last one.
		err = cerr
	}
	t.carryOut()
	t.logProgress("stopped")
	return err
}

// startInputs opens the file and stdin inputs and starts their readers, which send to chunks
// until readCtx is done. Its stop closes the files and waits for the readers (stdin's
// excepted). On error, what it opened is closed.
func (t *Task) startInputs(readCtx context.Context, stopReading context.CancelFunc, chunks chan<- source.Chunk) (stop func(), err error) {
	var readers sync.WaitGroup
	stop = func() {
		for _, st := range t.order {
			if st.closer != nil {
				st.closer.Close()
			}
		}
		stopReading()
		readers.Wait()
	}
	for i := range t.cfg.Inputs {
		st, err := t.openStream(&t.cfg.Inputs[i])
		if err != nil {
			stop()
			return nil, err
		}
		if st.in.Stdin != nil {
			// A read from standard input cannot be interrupted: this reader is not waited for.
			// It ends at the next line or end of input, seeing readCtx done; nothing it reads
			// after Run returned is used.
			go st.reader.Run(readCtx, chunks)
			continue
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			st.reader.Run(readCtx, chunks)
		}()
	}
	return stop, nil
}

// kafkaRun is what startKafkaInput started.
type kafkaRun struct {
	stop       func() // after the last checkpoint: final positions, poller, consumer, standby, changelog
	waitPoller func() // waits for the poll loop (stopped by stopReading)
}

// startKafkaInput creates the consumer (and the changelog writer and standby, if any) and starts
// the poll loop, which sends to t.kafka.fetches until readCtx is done. Without a Kafka input it
// starts nothing. On error, what it made is closed.
func (t *Task) startKafkaInput(ctx, readCtx context.Context, stopReading context.CancelFunc) (kafkaRun, error) {
	none := kafkaRun{stop: func() {}, waitPoller: func() {}}
	if t.cfg.Kafka == nil {
		return none, nil
	}
	if err := t.startKafka(); err != nil {
		return none, err
	}
	closeChangelog, stopStandby := func() {}, func() {}
	if t.cfg.Changelog != nil {
		if err := t.startChangelog(ctx); err != nil {
			// The group may have assigned partitions meanwhile: with the loop never started,
			// its rebalance callbacks (leaving the group in Close included) are answered by
			// kafkaFinal's positions, none, instead of waiting for a loop forever.
			t.kafkaFinal()
			t.kafka.stopRestores()
			t.kafka.consumer.Close()
			return none, err
		}
		closeChangelog = func() { t.changelog.w.Close() }
		if sb := t.changelog.standby; sb != nil && t.changelog.tails {
			sbCtx, cancel := context.WithCancel(readCtx)
			var standbys sync.WaitGroup
			standbys.Add(1)
			go func() {
				defer standbys.Done()
				t.runStandby(sbCtx, sb)
			}()
			stopStandby = func() {
				cancel()
				standbys.Wait()
			}
		}
	}
	t.kafkaErr = make(chan error, 1)
	var poller sync.WaitGroup
	poller.Add(1)
	go func() {
		defer poller.Done()
		if err := t.kafka.consumer.Run(readCtx, t.kafka.fetches); err != nil {
			t.kafkaErr <- err
		}
	}()
	return kafkaRun{
		// Runs after the last checkpoint: rebalance callbacks from now on (leaving the group
		// included) commit the positions it made durable.
		stop: func() {
			t.kafka.stopRestores()
			t.kafka.restores.Wait()
			t.kafkaFinal()
			stopReading()
			poller.Wait()
			t.kafka.consumer.Close()
			stopStandby()
			closeChangelog()
		},
		waitPoller: poller.Wait,
	}, nil
}

// startWorkers makes one instance per worker and starts the workers, which run the jobs of
// t.jobs on workCtx until it is closed. Its stop closes t.jobs, waits for the workers and closes
// the task's module versions. On error, the workers started are stopped the same way.
func (t *Task) startWorkers(workCtx context.Context, instErr chan<- error) (stop func(), err error) {
	var workers sync.WaitGroup
	stop = func() {
		close(t.jobs)
		workers.Wait()
		t.closeVersions(workCtx)
	}
	for i := 0; i < t.cfg.Workers; i++ {
		ver := t.cur
		inst, err := t.instantiate(workCtx, ver)
		if err != nil {
			stop()
			return nil, err
		}
		workers.Add(1)
		go func() {
			defer workers.Done()
			t.work(workCtx, inst, ver, instErr)
		}()
	}
	return stop, nil
}

// cpPipe is the checkpoint goroutine (startCheckpointer) as the loop sees it: at most one
// checkpoint in flight (Task.flight), so neither channel ever holds more than one.
type cpPipe struct {
	in  chan *cpWork // to the goroutine
	out chan *cpWork // back, committed or failed
}

// send hands w to the checkpoint goroutine; it never blocks (nothing else is in flight).
func (p *cpPipe) send(w *cpWork) { p.in <- w }

// wait returns the checkpoint in flight once the goroutine is done with it.
func (p *cpPipe) wait() *cpWork { return <-p.out }

// startCheckpointer starts the checkpoint goroutine, which writes each checkpoint the loop hands
// it to the changelog and commits it to the store (commitWork), off the loop. Its stop waits for
// it (the loop has waited for the last checkpoint by then: finishRun). Exactly-once tasks commit
// with their transactions, on the loop: none is started.
func (t *Task) startCheckpointer() (stop func()) {
	if t.eos() {
		return func() {}
	}
	p := &cpPipe{in: make(chan *cpWork, 1), out: make(chan *cpWork, 1)}
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		for w := range p.in {
			t.commitWork(w)
			p.out <- w
		}
	}()
	t.pipe = p
	return func() {
		close(p.in)
		done.Wait()
	}
}

// checkpointReports is the channel of the checkpoint goroutine's reports; nil (never ready)
// without one.
func (t *Task) checkpointReports() chan *cpWork {
	if t.pipe == nil {
		return nil
	}
	return t.pipe.out
}

// drive is the task's loop: the only goroutine that calls the core, so the only one that touches
// the scheduler, the trackers, the cache's map and the sinks. It returns nil when the task is
// done or ctx is, and the error that stops the task otherwise.
func (t *Task) drive(ctx context.Context, chunks <-chan source.Chunk, instErr <-chan error) error {
	tick := time.NewTicker(t.cfg.Checkpoint)
	defer tick.Stop()
	progress := time.NewTicker(t.cfg.ProgressEach)
	defer progress.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		tn, err := t.step()
		t.carryOut()
		if err != nil || tn.done {
			return err
		}
		if tn.hasWake {
			wake.Reset(max(tn.wake.Sub(t.cfg.Now()), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return nil
		case c := <-chunks:
			err = t.ingest(c)
		case j := <-t.results:
			err = t.finish(j)
		case err = <-instErr:
		case f := <-t.kafkaFetches():
			err = t.ingestKafka(f)
		case req := <-t.kafkaAssigns():
			err = t.onAssign(req)
		case res := <-t.kafkaRestored():
			err = t.onRestored(res)
		case req := <-t.kafkaRevokes():
			t.onRevoke(req)
		case req := <-t.kafkaLosses():
			err = t.onLost(req)
		case req := <-t.kafkaBarriers():
			t.barrier = &req
		case err = <-t.kafkaErr:
		case <-tick.C:
			err = t.checkpointDue()
		case w := <-t.checkpointReports():
			err = t.checkpointed(w) // then afterEvent takes the one that fell due meanwhile
		case r := <-t.ctl:
			t.serve(context.WithoutCancel(ctx), r)
		case <-progress.C:
			t.logProgress("progress")
		case <-wake.C:
		case <-t.wakeup:
		}
		if err == nil {
			err = t.afterEvent()
		}
		t.carryOut()
		if err != nil {
			return err
		}
	}
}

// carryOut does what the core asked for (t.out), in order: consumer pauses, resumes and
// commits, jobs to the workers (never blocking: the core starts no more jobs than there are
// workers, and t.jobs holds that many), then replies.
func (t *Task) carryOut() {
	o := &t.out
	for _, f := range o.flow {
		if f.pause {
			t.kafka.consumer.Pause(f.tp)
		} else {
			t.kafka.consumer.Resume(f.tp)
		}
	}
	for _, offs := range o.commits {
		t.kafka.consumer.Commit(offs, t.commitFailed)
	}
	for _, j := range o.jobs {
		t.jobs <- j
	}
	for _, r := range o.replies {
		r()
	}
	clear(o.commits)
	clear(o.jobs)
	clear(o.replies)
	o.flow, o.commits, o.jobs, o.replies = o.flow[:0], o.commits[:0], o.jobs[:0], o.replies[:0]
}

// commitFailed logs a failed offset commit; the next checkpoint commits every partition's
// durable position again (commitStarts). It runs on the Kafka client's goroutine.
func (t *Task) commitFailed(err error) {
	if err != nil {
		t.recommit.Store(true)
		t.log.Warn("committing group offsets failed; the next checkpoint commits again", "err", err)
	}
}
