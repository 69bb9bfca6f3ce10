package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
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
// A task with a Kafka input leaves its group as it stops, and the other members of its group
// (other hosts running the task) are asked through their admin API, with admin.token, to stop
// it too, to follow the reset (their own state and timers moved aside, their positions those of
// the reset) and to run it again (reset_group.go); ResetReport.Hosts says what each did. The
// reset needs the group empty as OfflineReset does: a member that advertises no admin address,
// cannot be reached or refuses, or that remains in the group after a few seconds, has the
// task started again as it was on every host and the reset refused with ErrResetRefused,
// naming it. A task reading stdin, which cannot be read again, and a task chained to another
// (an input or an output of type task) are refused with ErrResetRefused too, and a reset while
// the host is starting or stopping with ErrNotRunning.
//
// A halted task is reset too, and started again (resetHalted): the case that needs a reset most,
// an input topic deleted and recreated, halts the task again at each restart until its positions
// move. ResetReport.Halted says why it had halted.
//
// ResetTask is serialised with the deploys, activations and rollbacks of the task. If the reset
// fails after the task stopped, the task stays stopped (Stats shows it halted with the cause):
// run the reset again. Safe from any goroutine while Run runs.
func (h *Host) ResetTask(ctx context.Context, name string, to ResetTo, dryRun bool) (*ResetReport, error) {
	auth := ""
	if h.cfg.Admin.Token != "" {
		auth = "Bearer " + h.cfg.Admin.Token
	}
	return h.resetTask(ctx, name, to, dryRun, auth)
}

// resetTask is ResetTask; auth is the Authorization the other hosts of a group are asked with.
func (h *Host) resetTask(ctx context.Context, name string, to ResetTo, dryRun bool, auth string) (*ResetReport, error) {
	lv, r, err := h.enter(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	h.mu.Lock()
	hold := h.resetHolds[name]
	h.mu.Unlock()
	if hold != nil {
		return nil, fmt.Errorf("%w: task %s is held stopped here for a reset of its group that %s asked: retry once it ended", ErrResetRefused, name, hold.from)
	}
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
	if halted := h.haltedWith(name); halted != nil {
		return h.resetHalted(ctx, lv, r, rep, items, kin, to, dryRun, auth, halted)
	}
	if r.tcfg == nil {
		return nil, fmt.Errorf("%w: task %q has not started yet: retry", ErrNotRunning, name)
	}
	var kc kafka.Config
	if kin != nil {
		kc = r.tcfg.Kafka.Client
		if err := checkKafkaReset(ctx, kc, r.tcfg.Kafka.Group, r.cfg, kin, to, rep, &items, dryRun); err != nil {
			return nil, err
		}
	}
	if dryRun {
		if kin != nil {
			// The other hosts the reset would ask (refused as it would be when one cannot be).
			others, err := h.groupOthers(ctx, r, name, nil, "")
			if err != nil {
				return nil, err
			}
			for _, m := range others {
				rep.Hosts = append(rep.Hosts, HostReset{Addr: m.Addr, Member: m.Client})
			}
		}
		if err := applyReset(ctx, lv.db, kc, rep, items, false); err != nil {
			return nil, err
		}
		return rep, nil
	}

	// The other members of the task's group (hosts running it too) are asked to stop it with
	// this one and to follow the reset (reset_group.go); refused before anything stops when one
	// advertises no address.
	var others []kafka.Member
	if kin != nil {
		if others, err = h.groupOthers(ctx, r, name, nil, ""); err != nil {
			return nil, err
		}
	}
	// The others stop at the same time as this host: their partitions do not move to this one
	// (nor its to them) only to stop again.
	var g *groupReset
	othersStopped := make(chan error, 1)
	if len(others) > 0 {
		g = h.newGroupReset(name, to, auth, rep.Backup, others)
		go func() { othersStopped <- g.stopOthers(ctx) }()
	} else {
		othersStopped <- nil
	}
	st, err := h.stopTask(ctx, lv, r, name, rep.To)
	if err != nil {
		if <-othersStopped == nil {
			g.resume(ctx)
		}
		return nil, err
	}
	defer st.release()
	if err := <-othersStopped; err != nil {
		if serr := st.start(); serr != nil {
			return nil, st.startFailed(serr)
		}
		return nil, err
	}
	if err := st.stopped(); err != nil {
		g.resume(ctx)
		return nil, err
	}
	if kin != nil {
		// The task left its group when it stopped, and so did the other members'. One that
		// remains (a host this one does not know of, or one that joined meanwhile) would take
		// the partitions and checkpoint their old state again: refused, and the task runs again
		// as it was.
		if err := waitGroupEmpty(ctx, kc, rep.Group); err != nil {
			g.resume(ctx)
			if serr := st.start(); serr != nil {
				return nil, st.startFailed(serr)
			}
			return nil, fmt.Errorf("%w: %v: a member that is not a host of this group's reset remains; stop it, or make it advertise its admin API (admin.advertise_addr), then reset again", ErrResetRefused, err)
		}
		ks, err := kafkaResetItems(ctx, kc, rep.Group, kin, to)
		if err != nil {
			g.resume(ctx)
			return nil, st.failed(err)
		}
		items = append(items, ks...)
	}
	if err := applyReset(ctx, lv.db, kc, rep, items, false); err != nil {
		g.resume(ctx)
		return nil, st.failed(err)
	}
	g.apply(ctx, rep)
	if err := st.start(); err != nil {
		return nil, st.startFailed(err)
	}
	h.cfg.Logger.Info("reset: the task runs again", "task", name, "to", rep.To, "backup", rep.Backup, "version", st.version, "hosts", 1+len(others))
	return rep, nil
}

// stoppedTask is a task stopped by a reset (ResetTask, or a group's reset asked by another
// host): it holds a task run of its own, so that Run does not return, until the task runs
// again (start) or the hold is released.
type stoppedTask struct {
	h       *Host
	lv      *live
	r       *running
	name    string
	mod     *modrt.Module
	lanes   []task.Config // the task's loops' configurations, without the module
	version int
	held    bool
	closed  bool
}

// stopTask prepares the module the task starts again on (its active version: a version that
// cannot start any more leaves the task running as it was), takes a task run and stops the
// task (its batches in flight finish, its last checkpoint commits). r.deploy is held. Check
// stopped before resetting anything.
func (h *Host) stopTask(ctx context.Context, lv *live, r *running, name, to string) (*stoppedTask, error) {
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
	st := &stoppedTask{h: h, lv: lv, r: r, name: name, mod: mod, lanes: r.lanes, version: int(mv.Version)}

	// Run must not return while the task is stopped: the reset holds a task run of its own
	// until the task runs again (or the reset failed).
	h.mu.Lock()
	if h.tasksDone == nil || h.taskRuns == 0 || lv.ctx.Err() != nil {
		h.mu.Unlock()
		st.closeMod()
		return nil, fmt.Errorf("%w: task %q: the host is starting or stopping", ErrNotRunning, name)
	}
	h.taskRuns++
	st.held = true
	stop, done := r.stop, r.done
	h.mu.Unlock()
	h.cfg.Logger.Info("reset: stopping the task", "task", name, "to", to)
	if stop != nil {
		stop()
		<-done
	}
	return st, nil
}

// stopped fails, the task halted, when its last checkpoint failed: what the reset would move is
// not what it processed.
func (st *stoppedTask) stopped() error {
	st.h.mu.Lock()
	halted := st.h.halted[st.name]
	st.h.mu.Unlock()
	if halted != nil {
		return st.failed(fmt.Errorf("wasmstream: task %s: stopping it for the reset failed: %w", st.name, halted))
	}
	return nil
}

func (st *stoppedTask) closeMod() {
	if !st.closed {
		st.closed = true
		st.mod.Close(context.Background())
	}
}

// release gives the hold on Run back without starting the task (a no-op once it started).
func (st *stoppedTask) release() {
	if !st.held {
		return
	}
	st.closeMod()
	st.h.mu.Lock()
	st.held = false
	st.h.taskEnded()
	st.h.mu.Unlock()
}

// failed leaves the task stopped, shown halted with err, and returns err.
func (st *stoppedTask) failed(err error) error {
	st.closeMod()
	st.h.mu.Lock()
	if st.h.halted[st.name] == nil {
		st.h.halt(st.name, &TaskError{Task: st.name, Err: fmt.Errorf("stopped for a reset that failed (run the reset again): %w", err)})
	}
	st.h.mu.Unlock()
	return err
}

// startFailed is failed for an error of start; a host stopping is no failure of the task.
func (st *stoppedTask) startFailed(err error) error {
	if errors.Is(err, ErrNotRunning) {
		st.closeMod()
		return err
	}
	return st.failed(err)
}

// start starts the task again, on the prepared module, from what the store holds.
func (st *stoppedTask) start() error {
	h, lv, r := st.h, st.lv, st.r
	t, err := newLanes(st.lanes, st.mod, int64(st.version), st.lv.addModule)
	if err != nil {
		return fmt.Errorf("wasmstream: task %s: %w", st.name, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if lv.ctx.Err() != nil {
		return fmt.Errorf("%w: task %q: the host is stopping; it runs again at the next start", ErrNotRunning, st.name)
	}
	lv.addModule(st.mod)
	st.closed = true // the host closes it now
	r.task = t
	h.tasks[r.idx] = t
	h.goTask(lv, r.idx, t)
	h.taskEnded() // the reset's hold: the task runs again
	st.held = false
	return nil
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

// resetHalted is resetTask for a task that halted here: nothing runs to stop. Its outputs open
// anew and its active version is prepared (as RestartTask does: a task whose outputs cannot open
// or whose version no longer passes stays halted, nothing reset), the other hosts of its group
// are asked to stop and follow as for a running task (its consumer left the group as it halted:
// every member is another host), the reset applies, and the task starts again on the reset's
// positions with its halt cleared. rep.Halted says why it had halted.
func (h *Host) resetHalted(ctx context.Context, lv *live, r *running, rep *ResetReport, items []resetItem, kin *InputConfig,
	to ResetTo, dryRun bool, auth string, halted error) (*ResetReport, error) {
	name := r.cfg.Name
	rep.Halted = haltCause(halted)
	if lv.ctx.Err() != nil {
		return nil, fmt.Errorf("%w: task %q: the host is stopping", ErrNotRunning, name)
	}
	ro, err := h.reopen(ctx, lv, r, halted)
	if err != nil {
		return nil, err
	}
	defer ro.release()
	var kc kafka.Config
	if kin != nil {
		if ro.tcfg.Kafka == nil {
			return nil, fmt.Errorf("%w: task %q halted before its kafka input was set up (%v): restart it (wasmstream restart), then reset it", ErrNotRunning, name, halted)
		}
		kc = ro.tcfg.Kafka.Client
		if err := checkKafkaReset(ctx, kc, ro.tcfg.Kafka.Group, r.cfg, kin, to, rep, &items, dryRun); err != nil {
			return nil, err
		}
	}
	var others []kafka.Member
	if kin != nil {
		if others, err = h.groupOthers(ctx, r, name, &kc, rep.Group); err != nil {
			return nil, err
		}
	}
	if dryRun {
		for _, m := range others {
			rep.Hosts = append(rep.Hosts, HostReset{Addr: m.Addr, Member: m.Client})
		}
		if err := applyReset(ctx, lv.db, kc, rep, items, false); err != nil {
			return nil, err
		}
		return rep, nil
	}

	active, mv, hasActive, err := activeVersionIfAny(lv.db, name, true)
	if err != nil {
		return nil, err
	}
	if !hasActive {
		return nil, fmt.Errorf("%w: task %q halted before its first version was registered (%v): restart it (wasmstream restart), then reset it", ErrNotRunning, name, halted)
	}
	wasm, err := lv.db.ModuleBytes(mv.SHA256)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: task %s version %d: %w", name, mv.Version, err)
	}
	mod, _, err := h.prepare(ctx, lv, r, ro.tcfg, wasm)
	if err != nil {
		return nil, err
	}
	closeMod := func() { mod.Close(context.WithoutCancel(ctx)) }

	var g *groupReset
	if len(others) > 0 {
		g = h.newGroupReset(name, to, auth, rep.Backup, others)
		if err := g.stopOthers(ctx); err != nil {
			closeMod()
			return nil, err
		}
	}
	if kin != nil {
		// A member that is not a host of this reset would take the partitions and checkpoint
		// their old state again: refused, the others run again as they were.
		if err := waitGroupEmpty(ctx, kc, rep.Group); err != nil {
			g.resume(ctx)
			closeMod()
			return nil, fmt.Errorf("%w: %v: a member that is not a host of this group's reset remains; stop it, or make it advertise its admin API (admin.advertise_addr), then reset again", ErrResetRefused, err)
		}
		ks, err := kafkaResetItems(ctx, kc, rep.Group, kin, to)
		if err != nil {
			g.resume(ctx)
			closeMod()
			return nil, err
		}
		items = append(items, ks...)
	}
	if err := applyReset(ctx, lv.db, kc, rep, items, false); err != nil {
		g.resume(ctx)
		closeMod()
		return nil, err
	}
	g.apply(ctx, rep)
	if _, err := h.restart(ctx, lv, r, ro, mod, mv, int64(mv.Version), active.Origin, time.Now()); err != nil {
		return nil, fmt.Errorf("the reset was applied, but the task stays halted (start it with wasmstream restart): %w", err)
	}
	h.cfg.Logger.Info("reset: the halted task was reset and runs again", "task", name, "to", rep.To, "backup", rep.Backup,
		"version", mv.Version, "hosts", 1+len(others), "halted", rep.Halted)
	return rep, nil
}

// checkKafkaReset names the group and changelog of task tc's kafka input kin in rep and checks
// the reset's targets before anything stops (a partition the topic does not have, an offset past
// the end); they are listed again once the task left the group. With dryRun the targets are
// added to items.
func checkKafkaReset(ctx context.Context, kc kafka.Config, group string, tc TaskConfig, kin *InputConfig, to ResetTo, rep *ResetReport, items *[]resetItem, dryRun bool) error {
	rep.Group = group
	if tc.Changelog.Enabled {
		rep.Changelog = tc.Changelog.Topic
	}
	ks, err := kafkaResetItems(ctx, kc, group, kin, to)
	if err != nil {
		return err
	}
	if dryRun {
		*items = append(*items, ks...)
	}
	return nil
}
