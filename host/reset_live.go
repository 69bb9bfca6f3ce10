package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/task"
	"github.com/wasmstream/wasmstream/store"
)

// ResetTask is OfflineReset on a running host (POST /v1/tasks/{task}/reset): it stops task name
// alone (its batches in flight finish and a last checkpoint commits, as when the host stops),
// resets it as OfflineReset does (its state and timers move aside under ResetReport.Backup,
// nothing is deleted; its positions move to where; the replay's progress is recorded), and
// starts it again in this process on its active module version: it processes its inputs again
// from there and shows the replay's progress. The host's other tasks keep running throughout. A
// task whose inputs had ended (a file read to its end) is started again too. With dryRun
// nothing stops and nothing is written: the report says what would move.
//
// A task with a Kafka input leaves its group as it stops; the reset then needs the group empty
// as OfflineReset does: if other members remain after a few seconds (other hosts running the
// task), the task is started again as it was and the reset is refused with ErrResetRefused,
// naming them. A task reading stdin, which cannot be read again, and a task chained to another
// (an input or an output of type task) are refused with ErrResetRefused too. A halted task is refused with ErrNotRunning (restart it first: RestartTask, or a
// deploy of a version that works), and so is a reset while the host is starting or stopping.
//
// ResetTask is serialised with the deploys, activations and rollbacks of the task. If the reset
// fails after the task stopped, the task stays stopped (Stats shows it halted with the cause):
// run the reset again. Safe from any goroutine while Run runs.
func (h *Host) ResetTask(ctx context.Context, name string, to ResetTo, dryRun bool) (*ResetReport, error) {
	lv, r, err := h.enter(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	r.deploy.Lock()
	defer r.deploy.Unlock()

	rep := &ResetReport{Task: name, To: to.String(), DataDir: h.cfg.DataDir, DryRun: dryRun,
		Backup: name + ".reset-" + time.Now().UTC().Format("20060102T150405Z")}
	if len(rep.Backup) > store.MaxTaskLen {
		return nil, fmt.Errorf("%w: task name %q too long for a backup name (%s)", ErrResetRefused, name, rep.Backup)
	}
	items, kin, err := liveResetItems(r.cfg, to)
	if err != nil {
		return nil, err
	}
	if len(h.chains.outputs(name)) > 0 {
		return nil, fmt.Errorf("%w: task %s feeds other tasks (inputs of type task): a reset on a running host does not reset them with it; "+
			"stop the host and use wasmstream reset on each task of the chain", ErrResetRefused, name)
	}
	h.mu.Lock()
	halted := h.halted[name]
	h.mu.Unlock()
	if halted != nil || r.tcfg == nil {
		return nil, fmt.Errorf("%w: task %q halted (%v): restart it (wasmstream restart, or a deploy or rollback of a version that works), then reset it", ErrNotRunning, name, halted)
	}
	var kc kafka.Config
	if kin != nil {
		kc, rep.Group = r.tcfg.Kafka.Client, r.tcfg.Kafka.Group
		if r.cfg.Changelog.Enabled {
			rep.Changelog = r.cfg.Changelog.Topic
		}
		// The targets are checked before anything stops (a partition the topic does not
		// have, an offset past the end), and listed again once the task left the group.
		ks, err := kafkaResetItems(ctx, kc, rep.Group, kin, to)
		if err != nil {
			return nil, err
		}
		if dryRun {
			items = append(items, ks...)
		}
	}
	if dryRun {
		if err := applyReset(ctx, lv.db, kc, rep, items); err != nil {
			return nil, err
		}
		return rep, nil
	}

	// The module the task starts again on, prepared before anything stops: a version that
	// cannot start any more leaves the task running as it was.
	_, mv, err := activeVersion(lv.db, name)
	if err != nil {
		return nil, err
	}
	wasm, err := lv.db.ModuleBytes(mv.SHA256)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: task %s version %d: %w", name, mv.Version, err)
	}
	mod, _, err := h.prepare(ctx, lv, r, *r.tcfg, wasm)
	if err != nil {
		return nil, err
	}
	tcfg := *r.tcfg
	tcfg.Module, tcfg.Version = mod, int64(mv.Version)
	closeMod := func() { mod.Close(context.WithoutCancel(ctx)) }

	// Run must not return while the task is stopped: the reset holds a task run of its own
	// until the task runs again (or the reset failed).
	h.mu.Lock()
	if h.tasksDone == nil || h.taskRuns == 0 || lv.ctx.Err() != nil {
		h.mu.Unlock()
		closeMod()
		return nil, fmt.Errorf("%w: task %q: the host is starting or stopping", ErrNotRunning, name)
	}
	h.taskRuns++
	stop, done := r.stop, r.done
	h.mu.Unlock()
	held := true
	defer func() {
		if held {
			h.mu.Lock()
			h.taskEnded()
			h.mu.Unlock()
		}
	}()
	log := h.cfg.Logger.With("task", name)
	log.Info("reset: stopping the task", "to", rep.To)
	if stop != nil {
		stop()
		<-done
	}
	failed := func(err error) (*ResetReport, error) {
		closeMod()
		h.mu.Lock()
		if h.halted[name] == nil {
			h.halt(name, &TaskError{Task: name, Err: fmt.Errorf("stopped for a reset that failed (run the reset again): %w", err)})
		}
		h.mu.Unlock()
		return nil, err
	}
	h.mu.Lock()
	halted = h.halted[name]
	h.mu.Unlock()
	if halted != nil {
		// Its last checkpoint failed: what the reset would move is not what it processed.
		return failed(fmt.Errorf("wasmstream: task %s: stopping it for the reset failed: %w", name, halted))
	}
	startFailed := func(err error) (*ResetReport, error) {
		if errors.Is(err, ErrNotRunning) { // the host is stopping
			closeMod()
			return nil, err
		}
		return failed(err)
	}
	// start starts the task again, on the prepared module, from what the store holds.
	start := func() error {
		t, err := task.New(tcfg)
		if err != nil {
			return fmt.Errorf("wasmstream: task %s: %w", name, err)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if lv.ctx.Err() != nil {
			return fmt.Errorf("%w: task %q: the host is stopping; it runs again at the next start", ErrNotRunning, name)
		}
		lv.addModule(mod)
		r.task = t
		h.tasks[r.idx] = t
		h.goTask(lv, r.idx, t)
		h.taskEnded() // the reset's hold: the task runs again
		held = false
		return nil
	}
	if kin != nil {
		// The task left its group when it stopped. Other members (hosts still running the
		// task) would take its partitions and checkpoint their old state again: refused, and
		// the task runs again as it was.
		if err := waitGroupEmpty(ctx, kc, rep.Group); err != nil {
			if serr := start(); serr != nil {
				return startFailed(serr)
			}
			return nil, fmt.Errorf("%w: %v: stop the other hosts running task %s (or reset with every host stopped: wasmstream reset)", ErrResetRefused, err, name)
		}
		ks, err := kafkaResetItems(ctx, kc, rep.Group, kin, to)
		if err != nil {
			return failed(err)
		}
		items = append(items, ks...)
	}
	if err := applyReset(ctx, lv.db, kc, rep, items); err != nil {
		return failed(err)
	}
	if err := start(); err != nil {
		return startFailed(err)
	}
	log.Info("reset: the task runs again", "to", rep.To, "backup", rep.Backup, "version", mv.Version)
	return rep, nil
}

// waitGroupEmpty waits, up to groupLeaveWait, for group to have no member (the task's own
// consumer left it as it stopped; the broker may show it for a moment), and returns
// CheckGroupEmpty's error, which names the members, if it still has some.
func waitGroupEmpty(ctx context.Context, kc kafka.Config, group string) error {
	deadline := time.Now().Add(groupLeaveWait)
	for {
		err := kafka.CheckGroupEmpty(ctx, kc, group)
		if err == nil || !errors.Is(err, kafka.ErrGroupActive) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// groupLeaveWait bounds how long ResetTask waits for a task's group to be empty once the task
// stopped.
const groupLeaveWait = 5 * time.Second

// liveResetItems is the plan of a reset on a running host: the items of its file inputs, and
// its kafka input if it has one (its items are listed by kafkaResetItems).
func liveResetItems(tc TaskConfig, to ResetTo) ([]resetItem, *InputConfig, error) {
	var items []resetItem
	var kin *InputConfig
	for i := range tc.Inputs {
		in := &tc.Inputs[i]
		switch in.Type {
		case "kafka":
			kin = in
			continue
		case "stdin":
			return nil, nil, fmt.Errorf("%w: task %s: input %s reads stdin, which cannot be read again; a reset applies to file and kafka inputs", ErrResetRefused, tc.Name, in.Name)
		case InputTask:
			return nil, nil, fmt.Errorf("%w: task %s: input %s reads task %s: a reset on a running host does not reset a chain; stop the host and use wasmstream reset", ErrResetRefused, tc.Name, in.Name, in.Task)
		}
		it, err := fileResetItem(in, to)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: task %s: %v", ErrResetRefused, tc.Name, err)
		}
		items = append(items, it)
	}
	return items, kin, nil
}
