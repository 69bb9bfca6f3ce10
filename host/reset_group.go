package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/admin"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/task"
	"github.com/wasmstream/wasmstream/store"
)

// A reset on a running host of a group of several (ResetTask, POST /v1/tasks/{task}/reset): the
// host asked (the initiator) finds the other members of the task's consumer group and their
// admin addresses in the coordinator's description of the group (as state queries do), and
// probes each (GET /healthz: one that does not answer is refused before anything stops), then
// asks each, over its admin API with the client's token, to take three steps
// (POST /v1/tasks/{task}/reset with {"to": ..., "group": groupStep} and the forwarded header):
//
//   - stop: stop the task (its last checkpoint commits, it leaves the group) and hold it
//     stopped. The initiator stops its own task at the same time. If a member cannot be reached
//     or refuses, those that stopped are told to resume and the reset is refused, naming it.
//   - apply: once the group is empty and the initiator reset the group's offsets and the
//     changelog (and its own store), each member moves its own state and timers of the task aside
//     (under its own <task>.reset-<time>) and sets its local positions to the reset's, so that
//     none restores old state or old positions; then it starts the task again.
//   - resume: the reset was refused or failed before the group's offsets moved: start the task
//     again as it was.
//
// A member holds the task stopped for at most groupResetHold. Past that (the initiator died or
// cannot reach it any more), it follows on its own whatever the group's offsets say: each
// partition whose committed offset a reset set (kafka.ResetMetadata) and differs from its local
// position is reset there, its state moved aside (followReset); then the task starts again.
// So a reset interrupted anywhere leaves no held host running on old positions once the
// group's offsets moved, and running it again (on any host) finishes it. A member that died
// while it held the task is not told: once restarted, with a changelog it replays the reset's
// tombstones and position before it processes a partition (as after an offline reset); without
// one, it follows the group's offsets as it is assigned each partition with
// kafka.external_offset_reset follow, and reports them (run the reset again) with report.

// groupStep is what the initiator of a group's reset asks of another member.
type groupStep struct {
	Phase   string        `json:"phase"` // stop, apply, resume
	ID      string        `json:"id"`    // the reset's: its backup name and the initiator's address
	Streams []ResetStream `json:"streams,omitempty"`
}

// groupStableWait bounds how long a reset waits for its group to be stable before it starts.
const groupStableWait = 30 * time.Second

// groupResetHold bounds how long a member holds its task stopped for a group's reset.
var groupResetHold = 5 * time.Minute

// resetClient sends a group's reset steps: a stop waits for the member's last checkpoint, an
// apply for its state to move aside.
var resetClient = &http.Client{Timeout: 3 * time.Minute}

// groupOthers returns the other members of the task's group, refusing (before anything
// stops) when one advertises no admin address. halted is the Kafka configuration of a task that
// halted here, and group its group (it has no consumer in the group: every member is another
// host's); nil for a running task, whose consumer describes its group.
func (h *Host) groupOthers(ctx context.Context, r *running, name string, halted *kafka.Config, group string) ([]kafka.Member, error) {
	h.mu.Lock()
	t := r.task
	h.mu.Unlock()
	describe := func() (kafka.GroupView, error) {
		if halted != nil {
			return kafka.DescribeGroup(ctx, *halted, group)
		}
		return t.Group(ctx)
	}
	if t == nil && halted == nil {
		return nil, nil
	}
	// While the group rebalances, the coordinator may not have every member's metadata (its
	// address): the members are read from a stable group (or one with no member).
	deadline := time.Now().Add(groupStableWait)
	var view kafka.GroupView
	for {
		var err error
		view, err = describe()
		if errors.Is(err, task.ErrNoGroup) {
			return nil, nil // a bounded run reads every partition alone
		}
		if err != nil {
			return nil, fmt.Errorf("%w: task %s: the group's members could not be listed (%v): retry", ErrResetRefused, name, err)
		}
		if view.Stable() || len(view.Members) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: task %s: its group is still rebalancing (%s) after %s: retry once it settled", ErrResetRefused, name, view.State, groupStableWait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	var others []kafka.Member
	seen := map[string]bool{} // a host with several loops (tasks[].loops) is a member per loop
	for _, m := range view.Members {
		if m.ID == view.Self || m.Addr != "" && seen[m.Addr] {
			continue
		}
		seen[m.Addr] = true
		if m.Addr == "" {
			return nil, fmt.Errorf("%w: task %s: group member %s (%s) advertises no admin address, so it cannot be asked to reset with this host: "+
				"give every host admin.addr (and admin.advertise_addr where it listens on every interface), or stop it and reset again",
				ErrResetRefused, name, m.Client, m.ID)
		}
		others = append(others, m)
	}
	// Each must be reachable, before anything stops here (its token is checked as it stops).
	var bad []string
	for _, m := range others {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		err := admin.Probe(pctx, resetClient, m.Addr)
		cancel()
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s (%s): %v", m.Addr, m.Client, err))
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: task %s: another host of its group cannot be reached: %s; nothing was reset: "+
			"make that host's admin API reachable from this one (admin.advertise_addr) or stop it, then reset again",
			ErrResetRefused, name, strings.Join(bad, "; "))
	}
	return others, nil
}

// probeTimeout bounds how long a reset waits for another member's /healthz.
const probeTimeout = 5 * time.Second

// groupReset is the initiator's side of a group's reset.
type groupReset struct {
	h      *Host
	name   string
	to     string
	auth   string
	id     string
	others []kafka.Member
	held   []bool // the members that stopped
}

func (h *Host) newGroupReset(name string, to ResetTo, auth, backup string, others []kafka.Member) *groupReset {
	return &groupReset{h: h, name: name, to: to.String(), auth: auth, id: backup + "@" + h.advertiseAddr(),
		others: others, held: make([]bool, len(others))}
}

// send asks member i to take step, decoding its answer into out.
func (g *groupReset) send(ctx context.Context, i int, step groupStep, out any) error {
	step.ID = g.id
	from := g.h.advertiseAddr()
	if from == "" {
		from = g.h.AdminAddr() // listening on every interface: the port at least
	}
	return admin.ForwardReset(ctx, resetClient, g.others[i].Addr, g.auth, from, g.name, g.to, step, out)
}

// stopOthers asks every other member to stop the task, all at once. If one cannot, those that
// did resume, and the reset is refused naming it.
func (g *groupReset) stopOthers(ctx context.Context) error {
	errs := make([]error, len(g.others))
	var wg sync.WaitGroup
	for i := range g.others {
		wg.Go(func() {
			errs[i] = g.send(ctx, i, groupStep{Phase: "stop"}, nil)
			g.held[i] = errs[i] == nil
		})
	}
	wg.Wait()
	var bad []string
	for i, err := range errs {
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s (%s): %v", g.others[i].Addr, g.others[i].Client, err))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	g.resume(ctx)
	return fmt.Errorf("%w: task %s: another host of its group could not stop it for the reset: %s; nothing was reset: "+
		"make that host's admin API reachable from this one (admin.advertise_addr, the same admin token) or stop it, then reset again",
		ErrResetRefused, g.name, strings.Join(bad, "; "))
}

// resume tells the members that stopped to start the task again as it was. g may be nil.
func (g *groupReset) resume(ctx context.Context) {
	if g == nil {
		return
	}
	ctx = context.WithoutCancel(ctx) // the client going away leaves none stopped
	for i, held := range g.held {
		if !held {
			continue
		}
		g.held[i] = false
		if err := g.send(ctx, i, groupStep{Phase: "resume"}, nil); err != nil {
			g.h.cfg.Logger.Warn("reset: another host of the group did not resume the task; it does on its own once its hold ends",
				"task", g.name, "host", g.others[i].Addr, "hold", groupResetHold, "err", err)
		}
	}
}

// apply tells the members that stopped to follow the reset rep describes, and records what each
// did in rep. A member that is not told follows on its own once its hold ends (a warning says
// so). g may be nil.
func (g *groupReset) apply(ctx context.Context, rep *ResetReport) {
	if g == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for i, held := range g.held {
		if !held {
			continue
		}
		g.held[i] = false
		m := g.others[i]
		hr := HostReset{Addr: m.Addr, Member: m.Client}
		var theirs ResetReport
		if err := g.send(ctx, i, groupStep{Phase: "apply", Streams: rep.Streams}, &theirs); err != nil {
			hr.Error = err.Error()
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("host %s was not told the reset (%v): it follows the group's offsets on its own within %s, its state moved aside; or run the reset again",
				m.Addr, err, groupResetHold))
		} else {
			hr.Backup = theirs.Backup
			for _, s := range theirs.Streams {
				hr.Keys += s.Keys
				hr.Timers += s.Timers
			}
		}
		rep.Hosts = append(rep.Hosts, hr)
	}
}

// resetHold is a member's hold of its task for another host's group reset.
type resetHold struct {
	id      string
	from    string
	stopped chan error    // the stop's outcome
	cmds    chan holdCmd  // apply or resume
	expire  chan struct{} // closed to end the hold now, as groupResetHold would (tests)
	done    chan struct{} // closed once the hold ended
}

type holdCmd struct {
	step  groupStep
	reply chan holdReply
}

type holdReply struct {
	rep *ResetReport
	err error
}

// groupResetStep takes step of a group's reset that the host at from asked of this one.
func (h *Host) groupResetStep(ctx context.Context, name, to string, raw json.RawMessage, from string) (any, error) {
	var step groupStep
	if err := json.Unmarshal(raw, &step); err != nil || step.ID == "" {
		return nil, &admin.Error{Status: http.StatusBadRequest, Err: fmt.Errorf("group: want {\"phase\": \"stop\"|\"apply\"|\"resume\", \"id\": ...}: %v", err)}
	}
	target, err := ParseResetTo(to)
	if err != nil {
		return nil, &admin.Error{Status: http.StatusBadRequest, Err: fmt.Errorf("to: %w", err)}
	}
	h.mu.Lock()
	hold := h.resetHolds[name]
	h.mu.Unlock()
	switch step.Phase {
	case "stop":
		if hold != nil {
			if hold.id == step.ID {
				return map[string]any{"task": name, "held": true}, nil
			}
			return nil, fmt.Errorf("%w: task %s is held stopped for another reset of its group (%s, asked by %s): retry once it ended", ErrResetRefused, name, hold.id, hold.from)
		}
		return h.holdForReset(ctx, name, target, step.ID, from)
	case "apply", "resume":
		if hold == nil || hold.id != step.ID {
			return nil, fmt.Errorf("%w: task %s is not held for reset %s here (its hold ended: it followed the group's offsets on its own, or this host restarted)", ErrResetRefused, name, step.ID)
		}
		reply := make(chan holdReply, 1)
		select {
		case hold.cmds <- holdCmd{step: step, reply: reply}:
		case <-hold.done:
			return nil, fmt.Errorf("%w: task %s: the hold for reset %s ended meanwhile", ErrResetRefused, name, step.ID)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		r := <-reply
		if r.err != nil {
			return nil, r.err
		}
		if r.rep != nil {
			return r.rep, nil
		}
		return map[string]any{"task": name, "resumed": true}, nil
	}
	return nil, &admin.Error{Status: http.StatusBadRequest, Err: fmt.Errorf("group: unknown phase %q: want stop, apply or resume", step.Phase)}
}

// holdForReset stops task name and holds it stopped on a goroutine of its own (runHold) until
// the initiator says apply or resume, or groupResetHold passed. It returns once the task stopped.
func (h *Host) holdForReset(ctx context.Context, name string, to ResetTo, id, from string) (any, error) {
	hold := &resetHold{id: id, from: from, stopped: make(chan error, 1), cmds: make(chan holdCmd), expire: make(chan struct{}), done: make(chan struct{})}
	h.mu.Lock()
	if h.resetHolds[name] != nil {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: task %s is held stopped for another reset of its group: retry once it ended", ErrResetRefused, name)
	}
	if h.resetHolds == nil {
		h.resetHolds = map[string]*resetHold{}
	}
	h.resetHolds[name] = hold
	h.mu.Unlock()
	go h.runHold(hold, name, to)
	select {
	case err := <-hold.stopped:
		if err != nil {
			return nil, err
		}
		return map[string]any{"task": name, "held": true}, nil
	case <-ctx.Done():
		return nil, ctx.Err() // the hold goes on: the initiator resumes it, or it ends on its own
	}
}

// runHold is a member's side of a group's reset (see the top of this file).
func (h *Host) runHold(hold *resetHold, name string, to ResetTo) {
	defer func() {
		h.mu.Lock()
		delete(h.resetHolds, name)
		h.mu.Unlock()
		close(hold.done)
	}()
	lv, r, err := h.enter(name)
	if err != nil {
		hold.stopped <- err
		return
	}
	defer h.leave()
	// Not Lock: two hosts resetting each other at once would each wait for the other.
	if !r.deploy.TryLock() {
		hold.stopped <- fmt.Errorf("%w: task %s is being deployed or reset here: retry once that ended", ErrResetRefused, name)
		return
	}
	defer r.deploy.Unlock()
	if _, kin, err := liveResetItems(r.cfg, to); err != nil {
		hold.stopped <- err
		return
	} else if kin == nil || r.tcfg == nil || r.tcfg.Kafka == nil {
		hold.stopped <- fmt.Errorf("%w: task %s reads no kafka input here: a group's reset concerns kafka tasks", ErrResetRefused, name)
		return
	}
	h.mu.Lock()
	halted := h.halted[name]
	h.mu.Unlock()
	if halted != nil {
		hold.stopped <- fmt.Errorf("%w: task %q halted here (%v): reset through this host instead (a reset through the host of a halted task resets it and starts it again), or restart it here first", ErrNotRunning, name, halted)
		return
	}
	ctx := lv.ctx
	st, err := h.stopTask(ctx, lv, r, name, "the group's reset asked by "+hold.from)
	if err != nil {
		hold.stopped <- err
		return
	}
	defer st.release()
	if err := st.stopped(); err != nil {
		hold.stopped <- err
		return
	}
	hold.stopped <- nil
	log := h.cfg.Logger.With("task", name, "reset", hold.id)
	log.Info("reset: the task is stopped for a reset of its group", "by", hold.from, "hold", groupResetHold)
	timer := time.NewTimer(groupResetHold)
	defer timer.Stop()
	kc, group := r.tcfg.Kafka.Client, r.tcfg.Kafka.Group
	select {
	case cmd := <-hold.cmds:
		if cmd.step.Phase == "resume" {
			cmd.reply <- holdReply{err: st.start()}
			log.Info("reset: the task runs again as it was (the group's reset did not go ahead)")
			return
		}
		rep := &ResetReport{Task: name, To: to.String(), DataDir: h.cfg.DataDir, Group: group,
			Backup: name + ".reset-" + time.Now().UTC().Format("20060102T150405Z")}
		items := make([]resetItem, 0, len(cmd.step.Streams))
		for _, s := range cmd.step.Streams {
			s.Keys, s.Timers, s.Tombstones, s.From = 0, 0, 0, -1
			items = append(items, resetItem{ResetStream: s, kafka: strings.HasPrefix(s.Stream, "kafka:")})
		}
		if err := applyReset(ctx, lv.db, kc, rep, items, true); err != nil {
			cmd.reply <- holdReply{err: st.failed(err)}
			return
		}
		err := st.start()
		if err != nil {
			err = st.startFailed(err)
		}
		cmd.reply <- holdReply{rep: rep, err: err}
		log.Info("reset: followed the group's reset; the task runs again", "backup", rep.Backup)
	case <-timer.C:
		h.followAndStart(ctx, lv, r, st, hold, name)
	case <-hold.expire:
		h.followAndStart(ctx, lv, r, st, hold, name)
	case <-ctx.Done():
		// The host stops: the task starts at the next start.
	}
}

// followAndStart ends a hold whose initiator did not say how the reset ended: the task follows
// whatever the group's offsets say (followReset) and starts again.
func (h *Host) followAndStart(ctx context.Context, lv *live, r *running, st *stoppedTask, hold *resetHold, name string) {
	log := h.cfg.Logger.With("task", name, "reset", hold.id)
	kc, group := r.tcfg.Kafka.Client, r.tcfg.Kafka.Group
	log.Warn("reset: the host that asked for the group's reset did not say how it ended; following the group's offsets", "by", hold.from, "hold", groupResetHold)
	if err := h.followReset(ctx, lv.db, kc, group, r.tcfg.Kafka.Topics, name); err != nil {
		st.failed(fmt.Errorf("following the group's reset: %w", err))
		return
	}
	if err := st.start(); err != nil {
		st.startFailed(err)
	}
}

// followReset resets, in db, each partition of the task whose group offset a reset set
// (kafka.ResetMetadata) and differs from the local position: its state and timers moved
// aside, its position set to the group's, the changelog read from its start on restore.
func (h *Host) followReset(ctx context.Context, db *store.DB, kc kafka.Config, group string, topics []string, name string) error {
	commits, err := kafka.ResetCommits(ctx, kc, group, topics)
	if err != nil {
		return err
	}
	infos, err := db.Streams(name)
	if err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	var items []resetItem
	for _, s := range infos {
		rest, ok := strings.CutPrefix(s.Name, "kafka:")
		i := strings.LastIndexByte(rest, '/')
		if !ok || i <= 0 {
			continue
		}
		p, err := strconv.ParseInt(rest[i+1:], 10, 32)
		if err != nil {
			continue
		}
		o, ok := commits[kafka.TopicPartition{Topic: rest[:i], Partition: int32(p)}]
		if !ok {
			continue
		}
		if pos, has, err := db.Position(name, s.ID); err != nil {
			return fmt.Errorf("wasmstream: %w", err)
		} else if has && pos.Next == o {
			continue
		}
		items = append(items, resetItem{ResetStream: ResetStream{Stream: s.Name, From: -1, Committed: o, To: o}, kafka: true})
	}
	if len(items) == 0 {
		return nil
	}
	rep := &ResetReport{Task: name, Group: group, Backup: name + ".reset-" + time.Now().UTC().Format("20060102T150405Z")}
	if err := applyReset(ctx, db, kc, rep, items, true); err != nil {
		return err
	}
	h.cfg.Logger.Warn("reset: followed a reset of the group's offsets; state and timers moved aside", "task", name, "streams", len(items), "backup", rep.Backup)
	return nil
}
