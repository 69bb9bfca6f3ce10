package host

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// A task with a Kafka input is refused with ErrResetRefused: its consumer would have to leave
// the group for the reset and join it again, which a running host does not do yet; stop the
// hosts of the task and use `wasmstream reset` (OfflineReset). So are a task reading stdin,
// which cannot be read again, and a task chained to another (an input or an output of type
// task). A halted task is refused with ErrNotRunning (deploy a version that works to restart it
// first), and so is a reset while the host is starting or stopping.
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
	items, err := liveResetItems(r.cfg, to)
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
		return nil, fmt.Errorf("%w: task %q halted (%v): deploy or roll back to a version that works to restart it, then reset it", ErrNotRunning, name, halted)
	}
	if dryRun {
		if err := applyReset(ctx, lv.db, h.cfg.Kafka.client(), rep, items); err != nil {
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
	mod, _, err := h.prepare(ctx, lv, r, wasm)
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
	if err := applyReset(ctx, lv.db, h.cfg.Kafka.client(), rep, items); err != nil {
		return failed(err)
	}
	t, err := task.New(tcfg)
	if err != nil {
		return failed(fmt.Errorf("wasmstream: task %s: %w", name, err))
	}
	h.mu.Lock()
	if lv.ctx.Err() != nil {
		h.mu.Unlock()
		closeMod()
		return nil, fmt.Errorf("%w: task %q: the host is stopping; the reset was made and the next start runs from it", ErrNotRunning, name)
	}
	lv.addModule(mod)
	r.task = t
	h.tasks[r.idx] = t
	h.goTask(lv, r.idx, t)
	h.taskEnded() // the reset's hold: the task runs again
	held = false
	h.mu.Unlock()
	log.Info("reset: the task runs again", "to", rep.To, "backup", rep.Backup, "version", mv.Version)
	return rep, nil
}

// liveResetItems is the plan of a reset on a running host: file inputs only.
func liveResetItems(tc TaskConfig, to ResetTo) ([]resetItem, error) {
	var items []resetItem
	for i := range tc.Inputs {
		in := &tc.Inputs[i]
		switch in.Type {
		case "kafka":
			return nil, fmt.Errorf("%w: task %s reads Kafka (input %s): a running host cannot reset it yet (its consumer would have to leave the group and join again); "+
				"stop every host of the task and run the offline command: wasmstream reset -c CONFIG --task %s --to %s", ErrResetRefused, tc.Name, in.Name, tc.Name, to)
		case "stdin":
			return nil, fmt.Errorf("%w: task %s: input %s reads stdin, which cannot be read again; a reset applies to file and kafka inputs", ErrResetRefused, tc.Name, in.Name)
		case InputTask:
			return nil, fmt.Errorf("%w: task %s: input %s reads task %s: a reset on a running host does not reset a chain; stop the host and use wasmstream reset", ErrResetRefused, tc.Name, in.Name, in.Task)
		}
		it, err := fileResetItem(in, to)
		if err != nil {
			return nil, fmt.Errorf("%w: task %s: %v", ErrResetRefused, tc.Name, err)
		}
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil, errors.New("wasmstream: nothing to reset")
	}
	return items, nil
}
