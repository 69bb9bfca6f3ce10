package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/task"
	"github.com/wasmstream/wasmstream/store"
)

// Origins of module versions and of active versions (ModuleVersion.Origin, ActiveOrigin).
const (
	// OriginFile: the task's configured module file, registered when Run starts or reloaded by
	// ReloadModule. A task whose active version came from its file follows the file: when the
	// file changed while the host was down, the next Run registers and runs the new contents.
	OriginFile = "file"
	// OriginDeploy: uploaded with Deploy. It overrides the module file at the next Run.
	OriginDeploy = "deploy"
	// OriginActivate and OriginRollback: made active again with Activate or Rollback. Like a
	// deploy, they override the module file at the next Run.
	OriginActivate = "activate"
	OriginRollback = "rollback"
	// OriginAutoRollback: made active by Run because the active version could not start (its
	// init failed): the newest earlier version that could. It overrides the module file.
	OriginAutoRollback = "auto-rollback"
)

// ModuleVersion describes one version of a task's module in the data directory's registry.
type ModuleVersion struct {
	Task       string
	Version    int64 // 1, 2, 3, … per task, in the order versions were added; never reused
	SHA256     string
	Size       int64
	Created    time.Time
	ABIVersion string // "major.minor"
	Origin     string // OriginFile or OriginDeploy
	Exports    []string
	Imports    []string
	// Active is whether this is the version the task runs; ActiveOrigin says how it became
	// active (OriginFile, OriginDeploy, OriginActivate, OriginRollback).
	Active       bool
	ActiveOrigin string
	// Status is "good" once the version ran a batch successfully, "bad" when it could not
	// start (Reason says why; Run does not start it again by itself), "" when nothing is
	// known yet.
	Status string
	Reason string
}

// Deployment is the outcome of Deploy, ReloadModule, Activate or Rollback.
type Deployment struct {
	Task    string
	Version ModuleVersion // the version now active
	// Previous is the version that was active before (equal to Version.Version if Unchanged).
	Previous int64
	// Unchanged is set when the version was already active: nothing was switched.
	Unchanged bool
	// Restarted is set when the task had halted (Config.OnTaskFailure "halt_task") and was
	// started anew on the version, from its last checkpoint; Halted is then why it had halted.
	Restarted bool
	Halted    string
	// Requested is when the call started; Switched when the task's loop made the version
	// current (batches dispatched after it run on it). Switched is zero if Unchanged.
	Requested, Switched time.Time
	// Warnings are what the host logged at warn about the version when it validated it: a
	// capability the module imports but the task is not granted (it imports http_request
	// without grants.http, files without grants.dirs), or a TinyGo build with the default
	// scheduler. They do not stop the deployment. Empty when Unchanged.
	Warnings []string

	sw []task.Switched // one per loop of the task
}

// FirstBatch waits until a first batch ran successfully on the deployed version and returns
// when (wall clock). It fails if ctx ends first, if the deployment switched nothing, or if the
// version was replaced, or the task stopped, before a batch ran on it.
func (d *Deployment) FirstBatch(ctx context.Context) (time.Time, error) {
	if d.Unchanged {
		return time.Time{}, errors.New("wasmstream: the version was already active; nothing was switched")
	}
	if d.Restarted {
		return time.Time{}, errors.New("wasmstream: the halted task was restarted on the version; see its status")
	}
	return firstBatch(ctx, d.sw)
}

// running is what Deploy and its siblings need of a running task.
type running struct {
	cfg    TaskConfig
	idx    int           // in Config.Tasks
	tcfg   *task.Config  // the task's configuration without its module; nil if it was never made
	lanes  []task.Config // that of each of its loops (laneConfigs); the first is *tcfg
	task   *lanes        // nil when the task could not start; replaced by a restart (h.mu)
	halted error         // why the task could not start
	// sinks close the task's outputs and dead letters (its Kafka producer); a restart of a
	// task that uses Kafka replaces them (r.deploy), Run closes the last ones.
	sinks []io.Closer
	// stop ends the task's current run and done is closed once it returned (goTask; h.mu);
	// nil before the task first ran.
	stop   func()
	done   <-chan struct{}
	deploy sync.Mutex // serialises the deploys, activations and rollbacks of the task
	// backoff and pending are the task's automatic restarts (on_task_failure "restart",
	// autorestart.go): their back-off, and the one waiting, nil if none (h.mu).
	backoff restartBackoff
	pending *pendingRestart
}

// live is what Run shares with Deploy and its siblings while it runs.
type live struct {
	cfg    Config // Run's: the embedded broker's address filled in
	rt     *modrt.Runtime
	db     *store.DB
	tasks  map[string]*running
	ctx    context.Context // the tasks run on it; restarted ones too
	cancel func()          // stops every task (halt_host)

	modsMu sync.Mutex
	mods   []*modrt.Module // the modules tasks started with, closed when Run returns
}

func (lv *live) addModule(m *modrt.Module) {
	lv.modsMu.Lock()
	defer lv.modsMu.Unlock()
	lv.mods = append(lv.mods, m)
}

func (lv *live) closeModules(ctx context.Context) {
	lv.modsMu.Lock()
	defer lv.modsMu.Unlock()
	for _, m := range lv.mods {
		m.Close(ctx)
	}
}

// Ready is closed once Run has opened the store, compiled every task's module, started the
// admin API (if configured) and is about to start the tasks: from then until Run returns,
// Deploy, Versions, Pause and their siblings work. It is never closed if Run fails before.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// enter returns the running task name and registers a call that Run waits for before closing
// the store and the runtime; leave must follow.
func (h *Host) enter(name string) (*live, *running, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == nil {
		if !h.knows(name) {
			return nil, nil, fmt.Errorf("%w: %q", ErrUnknownTask, name)
		}
		return nil, nil, fmt.Errorf("%w: task %q", ErrNotRunning, name)
	}
	r := h.live.tasks[name]
	if r == nil {
		return nil, nil, fmt.Errorf("%w: %q", ErrUnknownTask, name)
	}
	h.calls.Add(1)
	return h.live, r, nil
}

// enterRunning is enter for the calls that need the task running: a halted task is refused
// with what to do instead. It returns the task.
func (h *Host) enterRunning(name string) (*live, *running, *lanes, error) {
	lv, r, halted, err := h.enterDeploy(name)
	if err != nil {
		return nil, nil, nil, err
	}
	if halted != nil {
		h.leave()
		return nil, nil, nil, fmt.Errorf("%w: task %q halted (%v); restart it (wasmstream restart), or deploy or roll back to a version that works", ErrNotRunning, name, halted)
	}
	h.mu.Lock()
	t := r.task
	h.mu.Unlock()
	return lv, r, t, nil
}

// enterDeploy is enter for the deploy family, which restarts a halted task: it returns why the
// task halted (nil if it runs), and refuses a halted task that cannot be restarted.
func (h *Host) enterDeploy(name string) (*live, *running, error, error) {
	lv, r, err := h.enter(name)
	if err != nil {
		return nil, nil, nil, err
	}
	h.mu.Lock()
	halted := h.halted[name]
	h.mu.Unlock()
	return lv, r, halted, nil
}

// haltedWith returns why task name halted, nil if it runs.
func (h *Host) haltedWith(name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.halted[name]
}

func (h *Host) leave() { h.calls.Done() }

func (h *Host) knows(name string) bool {
	for _, tc := range h.cfg.Tasks {
		if tc.Name == name {
			return true
		}
	}
	return false
}

// Deploy validates wasm as a new version of task name's module and, if it passes, switches
// the running task to it without stopping it (DESIGN S19): batches dispatched from then on run
// on the new version, batches in flight finish on the old one, no record is lost or processed
// twice, and state is kept. The version is stored in the data directory's registry and stays
// active across restarts, overriding the configured module file, until another is deployed or
// activated.
//
// Validation is that of Check (well-formed, ABI version, exports, imports, memory within the
// task's limits) plus a trial instance whose init runs with the task's config. A refused
// module changes nothing and the error is a *ModuleRefusedError naming every problem.
// Deploying the bytes of the active version again changes nothing (Deployment.Unchanged).
// Other errors wrap ErrUnknownTask or ErrNotRunning. Deploys, activations and rollbacks of one
// task are serialised. Safe from any goroutine while Run runs.
//
// For a task that halted (Config.OnTaskFailure "halt_task"), Deploy, Activate and Rollback
// validate the version the same way, make it active and start the task anew on it from its
// last checkpoint (Deployment.Restarted), even when it is the active version already, as
// RestartTask does: a task that uses Kafka gets new clients and resumes as a restarted host
// would.
func (h *Host) Deploy(ctx context.Context, name string, wasm []byte) (*Deployment, error) {
	return h.deployBytes(ctx, name, wasm, OriginDeploy)
}

// ReloadModule reads task name's configured module file and deploys it like Deploy, as a
// version that follows the file (OriginFile); it returns a Deployment with Unchanged set when
// the file holds the active version already. It is what `wasmstream run --watch` calls when
// the file changes.
func (h *Host) ReloadModule(ctx context.Context, name string) (*Deployment, error) {
	_, r, err := h.enter(name)
	if err != nil {
		return nil, err
	}
	path := r.cfg.Module
	h.leave()
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: task %s: module: %w", name, err)
	}
	return h.deployBytes(ctx, name, wasm, OriginFile)
}

func (h *Host) deployBytes(ctx context.Context, name string, wasm []byte, origin string) (d *Deployment, err error) {
	requested := time.Now()
	var notes []string
	defer func() { d.warn(notes) }()
	lv, r, halted, err := h.enterDeploy(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	r.deploy.Lock()
	defer r.deploy.Unlock()
	halted = h.haltedWith(name) // another call may have restarted it meanwhile

	active, cur, hasActive, err := activeVersionIfAny(lv.db, name, halted != nil)
	if err != nil {
		return nil, err
	}
	same := hasActive && sha256.Sum256(wasm) == cur.SHA256
	if same && halted == nil && (origin != OriginFile || active.Origin == OriginFile) {
		return &Deployment{Task: name, Version: publicVersion(name, cur, active), Previous: int64(cur.Version), Unchanged: true, Requested: requested}, nil
	}
	ro, err := h.reopen(ctx, lv, r, halted)
	if err != nil {
		return nil, err
	}
	defer ro.release()
	mod, notes, err := h.prepare(ctx, lv, r, ro.tcfg, wasm)
	if err != nil {
		return nil, err
	}
	if same {
		// A halted task restarted on its active version.
		return h.restart(ctx, lv, r, ro, mod, cur, int64(cur.Version), origin, requested)
	}
	info := mod.Info()
	mv, err := lv.db.AddModule(name, wasm, store.ModuleVersion{
		Created: time.Now().UnixMilli(), ABIVersion: info.ABIVersion, Origin: origin,
		Exports: info.Exports, Imports: info.Imports,
	}, h.cfg.KeepModuleVersions)
	if err != nil {
		mod.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("wasmstream: task %s: registering the module: %w", name, err)
	}
	if halted != nil {
		return h.restart(ctx, lv, r, ro, mod, mv, int64(cur.Version), origin, requested)
	}
	return h.switchTo(ctx, lv, r, mod, mv, int64(cur.Version), origin, requested)
}

// Activate makes version v of task name's module the active one again, like Deploy does for
// new bytes, whether it is older or newer than the active one. The version is validated anew
// (the task's limits may have changed since it ran). It fails with ErrUnknownVersion if the
// registry has no such version (never deployed, or pruned: Config.KeepModuleVersions).
func (h *Host) Activate(ctx context.Context, name string, v int64) (*Deployment, error) {
	if v <= 0 {
		return nil, fmt.Errorf("%w: version %d", ErrUnknownVersion, v)
	}
	return h.activate(ctx, name, v, OriginActivate)
}

// Rollback activates version to, like Activate, recording it as a rollback (OriginRollback).
// With to 0 it activates the version before the active one: the highest-numbered version below
// it, so repeated rollbacks walk back through the history; it fails with ErrNoEarlierVersion
// when there is none.
func (h *Host) Rollback(ctx context.Context, name string, to int64) (*Deployment, error) {
	if to < 0 {
		return nil, fmt.Errorf("%w: version %d", ErrUnknownVersion, to)
	}
	return h.activate(ctx, name, to, OriginRollback)
}

// activate activates version v (0: the one before the active one).
func (h *Host) activate(ctx context.Context, name string, v int64, origin string) (d *Deployment, err error) {
	requested := time.Now()
	var notes []string
	defer func() { d.warn(notes) }()
	lv, r, halted, err := h.enterDeploy(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	r.deploy.Lock()
	defer r.deploy.Unlock()
	halted = h.haltedWith(name) // another call may have restarted it meanwhile

	active, cur, _, err := activeVersionIfAny(lv.db, name, halted != nil)
	if err != nil {
		return nil, err
	}
	var target store.ModuleVersion
	if v == 0 {
		versions, err := lv.db.ModuleVersions(name)
		if err != nil {
			return nil, fmt.Errorf("wasmstream: %w", err)
		}
		found := false
		for _, mv := range versions {
			if mv.Version < cur.Version {
				target, found = mv, true
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: task %s runs version %d, the oldest it keeps", ErrNoEarlierVersion, name, cur.Version)
		}
	} else {
		mv, ok, err := lv.db.ModuleVersion(name, uint64(v))
		if err != nil {
			return nil, fmt.Errorf("wasmstream: %w", err)
		}
		if !ok || v < 0 {
			return nil, fmt.Errorf("%w: task %s has no version %d (see its versions)", ErrUnknownVersion, name, v)
		}
		target = mv
	}
	if target.Version == cur.Version && halted == nil {
		return &Deployment{Task: name, Version: publicVersion(name, cur, active), Previous: int64(cur.Version), Unchanged: true, Requested: requested}, nil
	}
	wasm, err := lv.db.ModuleBytes(target.SHA256)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: task %s version %d: %w", name, target.Version, err)
	}
	ro, err := h.reopen(ctx, lv, r, halted)
	if err != nil {
		return nil, err
	}
	defer ro.release()
	mod, notes, err := h.prepare(ctx, lv, r, ro.tcfg, wasm)
	if err != nil {
		return nil, err
	}
	if halted != nil {
		return h.restart(ctx, lv, r, ro, mod, target, int64(cur.Version), origin, requested)
	}
	return h.switchTo(ctx, lv, r, mod, target, int64(cur.Version), origin, requested)
}

// prepare compiles and validates wasm for r, including a trial instance with the task's config
// tcfg. It logs the notes of grantNotes and moduleNotes at warn and returns them: the deployment
// carries them back to its caller.
func (h *Host) prepare(ctx context.Context, lv *live, r *running, tcfg task.Config, wasm []byte) (*modrt.Module, []string, error) {
	mod, err := lv.rt.Compile(ctx, wasm, limits(r.cfg))
	if err != nil {
		return nil, nil, refused(r.cfg.Name, err)
	}
	if err := task.TrialInit(ctx, tcfg, mod); err != nil {
		mod.Close(context.WithoutCancel(ctx))
		return nil, nil, refused(r.cfg.Name, fmt.Errorf("trial instance with the task's config: %w", err))
	}
	return mod, warnNotes(h.cfg.Logger, r.cfg, mod, "task", r.cfg.Name), nil
}

// warn sets d's Warnings; d may be nil (a failed deployment).
func (d *Deployment) warn(notes []string) {
	if d != nil {
		d.Warnings = notes
	}
}

// switchTo switches r's loop to mod (version mv) and records mv as active.
func (h *Host) switchTo(ctx context.Context, lv *live, r *running, mod *modrt.Module, mv store.ModuleVersion, prev int64, origin string, requested time.Time) (*Deployment, error) {
	name := r.cfg.Name
	h.mu.Lock()
	l := r.task
	h.mu.Unlock()
	sw, err := l.Switch(ctx, mod, int64(mv.Version))
	if err != nil && len(sw) > 0 {
		// Some loops run the version: it is the active one, which a restart runs in all.
		active := store.ActiveModule{Version: mv.Version, Since: time.Now().UnixMilli(), Origin: origin}
		if aerr := lv.db.SetActiveModule(name, active); aerr != nil {
			err = errors.Join(err, aerr)
		}
		return nil, fmt.Errorf("wasmstream: task %s halts: %w; version %d is active, restart the task (wasmstream restart) to run it", name, err, mv.Version)
	}
	if err != nil {
		mod.Close(context.WithoutCancel(ctx))
		if errors.Is(err, task.ErrStopped) {
			return nil, fmt.Errorf("%w: task %q (version %d is stored but not active)", ErrNotRunning, name, mv.Version)
		}
		return nil, fmt.Errorf("wasmstream: task %s: %w", name, err)
	}
	active := store.ActiveModule{Version: mv.Version, Since: time.Now().UnixMilli(), Origin: origin}
	if err := lv.db.SetActiveModule(name, active); err != nil {
		return nil, fmt.Errorf("wasmstream: task %s runs version %d but recording it as active failed (a restart would run version %d): %w", name, mv.Version, prev, err)
	}
	h.cfg.Logger.Info("module version active", "task", name, "version", mv.Version, "previous", prev,
		"origin", origin, "sha256", hex.EncodeToString(mv.SHA256[:]), "switch", time.Since(requested).Round(time.Microsecond))
	return &Deployment{Task: name, Version: publicVersion(name, mv, active), Previous: prev,
		Requested: requested, Switched: sw[0].At, sw: sw}, nil
}

// reopened is the configuration a task runs with (reopen): its own while it runs, a new one for
// a halted task that uses Kafka or whose sinks could not open, with the sinks opened for it.
type reopened struct {
	tcfg   task.Config
	lanes  []task.Config // of each loop; the first is tcfg
	halted error         // why the task halted; nil if it runs
	sinks  []io.Closer   // the new sinks; nil when the task keeps its own
	fresh  bool          // tcfg and sinks are new: restart installs them
	used   bool          // restart took the sinks over
}

// reopen returns what r runs with: for a running task its configuration; for a halted one that
// uses Kafka (a producer's delivery failure is sticky, and a client that gave up on the
// cluster stays given up) or whose sinks could not open, new sinks and a new configuration,
// as a host start makes them (openTask), so that the restarted task has new clients. A halted
// task that cannot open them stays halted: the error wraps ErrNotRunning and says why. The
// caller calls release once done.
func (h *Host) reopen(ctx context.Context, lv *live, r *running, halted error) (*reopened, error) {
	if halted == nil || r.tcfg != nil && !r.cfg.usesKafka() {
		return &reopened{tcfg: *r.tcfg, lanes: r.lanes, halted: halted}, nil
	}
	var sinks []io.Closer
	tcfg, lcfgs, err := h.openTask(ctx, lv.cfg, lv.db, r.cfg, &sinks)
	if err != nil {
		closeAll(sinks)
		return nil, fmt.Errorf("%w: task %q stays halted: opening its outputs: %v", ErrNotRunning, r.cfg.Name, err)
	}
	return &reopened{tcfg: tcfg, lanes: lcfgs, halted: halted, sinks: sinks, fresh: true}, nil
}

// release closes the new sinks unless restart took them over.
func (ro *reopened) release() {
	if !ro.used {
		closeAll(ro.sinks)
	}
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}

// restart starts halted task r anew on mod (version mv) with ro's configuration, records mv as
// active and clears the halt. The task resumes where its last checkpoint left it, like a
// restarted host: a Kafka task's new consumer joins its group again and takes the same start
// rules (local checkpoint against group offsets, topic ids, restore from the changelog).
func (h *Host) restart(ctx context.Context, lv *live, r *running, ro *reopened, mod *modrt.Module, mv store.ModuleVersion, prev int64, origin string, requested time.Time) (*Deployment, error) {
	name := r.cfg.Name
	t, err := newLanes(ro.lanes, mod, int64(mv.Version), lv.addModule)
	if err != nil {
		mod.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("wasmstream: task %s: %w", name, err)
	}
	active := store.ActiveModule{Version: mv.Version, Since: time.Now().UnixMilli(), Origin: origin}
	if err := lv.db.SetActiveModule(name, active); err != nil {
		mod.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("wasmstream: task %s: recording version %d as active: %w", name, mv.Version, err)
	}
	h.mu.Lock()
	if h.tasksDone != nil && h.taskRuns == 0 {
		h.mu.Unlock()
		mod.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: task %q: the host is stopping (version %d is active: the next start runs it)", ErrNotRunning, name, mv.Version)
	}
	var old []io.Closer
	if ro.fresh {
		base := ro.tcfg
		old, r.sinks, r.tcfg, r.lanes = r.sinks, ro.sinks, &base, ro.lanes
		ro.used = true
	}
	lv.addModule(mod)
	r.task = t
	h.tasks[r.idx] = t
	delete(h.halted, name)
	r.restarted(time.Now())
	if h.tasksDone != nil {
		h.goTask(lv, r.idx, t)
	} // else Run starts it with the other tasks
	h.mu.Unlock()
	closeAll(old) // the halted run's clients
	halted := haltCause(ro.halted)
	h.cfg.Logger.Info("halted task restarted", "task", name, "version", mv.Version, "previous", prev,
		"origin", origin, "sha256", hex.EncodeToString(mv.SHA256[:]), "halted", halted)
	return &Deployment{Task: name, Version: publicVersion(name, mv, active), Previous: prev,
		Requested: requested, Switched: time.Now(), Restarted: true, Halted: halted}, nil
}

// haltCause is the text of a halt without the task's name (a *TaskError's cause).
func haltCause(err error) string {
	if err == nil {
		return ""
	}
	var te *TaskError
	if errors.As(err, &te) {
		err = te.Err
	}
	return err.Error()
}

// RestartTask starts halted task name again (POST /v1/tasks/{task}/restart), on its active
// module version, from its last checkpoint, as a restarted host would start it, while the
// host's other tasks run on: a task that uses Kafka gets new clients (a new consumer that
// joins the group again, a new producer or transactional producer, a new changelog client)
// and resumes by the same rules as at a host start (local checkpoint against group offsets,
// topic ids, restore). The version is validated anew (a *ModuleRefusedError if it no longer
// passes); a task halted before any version was registered starts as at a host start
// (startModule). Deployment.Halted says why the task had halted.
//
// A task that runs is refused with ErrRunning. A task whose sinks cannot open (the cluster
// still unreachable, or refusing the host) stays halted, with an error wrapping ErrNotRunning
// that says why; so does a restart while the host is stopping. Restarts are serialised with
// the deploys, activations, rollbacks and resets of the task. Safe from any goroutine while
// Run runs.
func (h *Host) RestartTask(ctx context.Context, name string) (d *Deployment, err error) {
	requested := time.Now()
	var notes []string
	defer func() { d.warn(notes) }()
	lv, r, err := h.enter(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	r.deploy.Lock()
	defer r.deploy.Unlock()
	halted := h.haltedWith(name)
	if halted == nil {
		return nil, fmt.Errorf("%w: task %q has not halted: there is nothing to restart (deploy, activate or rollback switch a running task's version)", ErrRunning, name)
	}
	ro, err := h.reopen(ctx, lv, r, halted)
	if err != nil {
		return nil, err
	}
	defer ro.release()
	active, mv, hasActive, err := activeVersionIfAny(lv.db, name, true)
	if err != nil {
		return nil, err
	}
	if !hasActive {
		// Halted before its first version was registered (its sinks could not open at
		// start): the module file, or a version that starts, as at a host start.
		mod, _, err := startModule(ctx, lv.cfg, lv.rt, lv.db, r.cfg, func(m *modrt.Module) error {
			return task.TrialInit(ctx, ro.tcfg, m)
		})
		if err != nil {
			return nil, fmt.Errorf("%w: task %q stays halted: %v", ErrNotRunning, name, err)
		}
		if active, mv, err = activeVersion(lv.db, name); err != nil {
			mod.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return h.restart(ctx, lv, r, ro, mod, mv, int64(mv.Version), active.Origin, requested)
	}
	wasm, err := lv.db.ModuleBytes(mv.SHA256)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: task %s version %d: %w", name, mv.Version, err)
	}
	mod, notes, err := h.prepare(ctx, lv, r, ro.tcfg, wasm)
	if err != nil {
		return nil, err
	}
	return h.restart(ctx, lv, r, ro, mod, mv, int64(mv.Version), active.Origin, requested)
}

// Versions lists task name's module versions, oldest first, while Run runs.
func (h *Host) Versions(name string) ([]ModuleVersion, error) {
	lv, _, err := h.enter(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	active, _, err := lv.db.ActiveModule(name)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	versions, err := lv.db.ModuleVersions(name)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	out := make([]ModuleVersion, len(versions))
	for i, mv := range versions {
		out[i] = publicVersion(name, mv, active)
	}
	return out, nil
}

// Pause stops task name from starting batches: batches in flight finish, checkpoints go on,
// and reading stops once its queues are full. Resume undoes it. Pausing is not persisted: a
// restarted task runs. Safe from any goroutine while Run runs.
func (h *Host) Pause(ctx context.Context, name string) error {
	return h.pauseResume(ctx, name, (*lanes).Pause)
}

// Resume lets a paused task start batches again.
func (h *Host) Resume(ctx context.Context, name string) error {
	return h.pauseResume(ctx, name, (*lanes).Resume)
}

func (h *Host) pauseResume(ctx context.Context, name string, fn func(*lanes, context.Context) error) error {
	_, _, t, err := h.enterRunning(name)
	if err != nil {
		return err
	}
	defer h.leave()
	if err := fn(t, ctx); err != nil {
		if errors.Is(err, task.ErrStopped) {
			return fmt.Errorf("%w: task %q", ErrNotRunning, name)
		}
		return fmt.Errorf("wasmstream: task %s: %w", name, err)
	}
	return nil
}

// activeVersionIfAny is activeVersion, except that with optional set a task with no active
// version (one halted before its first version was registered) is no error.
func activeVersionIfAny(db *store.DB, name string, optional bool) (store.ActiveModule, store.ModuleVersion, bool, error) {
	if optional {
		if _, ok, err := db.ActiveModule(name); err != nil {
			return store.ActiveModule{}, store.ModuleVersion{}, false, fmt.Errorf("wasmstream: %w", err)
		} else if !ok {
			return store.ActiveModule{}, store.ModuleVersion{}, false, nil
		}
	}
	active, mv, err := activeVersion(db, name)
	return active, mv, err == nil, err
}

// activeVersion returns task name's active version and its record.
func activeVersion(db *store.DB, name string) (store.ActiveModule, store.ModuleVersion, error) {
	active, ok, err := db.ActiveModule(name)
	if err != nil {
		return active, store.ModuleVersion{}, fmt.Errorf("wasmstream: %w", err)
	}
	if !ok {
		return active, store.ModuleVersion{}, fmt.Errorf("wasmstream: task %s has no active module version", name)
	}
	mv, ok, err := db.ModuleVersion(name, active.Version)
	if err == nil && !ok {
		err = fmt.Errorf("%w: the active version %d has no record", store.ErrCorrupt, active.Version)
	}
	if err != nil {
		return active, mv, fmt.Errorf("wasmstream: task %s: %w", name, err)
	}
	return active, mv, nil
}

// startModule returns the compiled module task tc starts with, and its version. The first
// choice is
//
//   - the active version of the registry if it was deployed, activated or rolled back (it
//     overrides the module file, which is logged when the file differs);
//   - otherwise the module file, registered as a new version if it differs from the active
//     version (or there is none), unless its bytes are those of a version known bad. A file
//     that cannot be read falls back to the active version, if there is one.
//
// The choice must be readable, compile and pass trial (an instance whose init runs with the
// task's config). If it does not, the version is marked bad in the registry with the reason
// (not when ctx ended, nor for a read error other than damaged or missing bytes), and the versions
// below it that are not marked bad are tried, newest first, then the module file: the first
// that passes becomes the active version (origin OriginAutoRollback; OriginFile while the task
// follows its file, so a fixed file is picked up at the next start). Nothing is deleted. When
// nothing passes, the error names every failure.
func startModule(ctx context.Context, cfg Config, rt *modrt.Runtime, db *store.DB, tc TaskConfig, trial func(*modrt.Module) error) (*modrt.Module, int64, error) {
	log := cfg.Logger.With("task", tc.Name)
	mod, version, err := startModuleVersion(ctx, cfg, rt, db, tc, log, trial)
	if err == nil {
		warnNotes(log, tc, mod, "version", version)
	}
	return mod, version, err
}

// startModuleVersion is startModule without the warnings of grantNotes and moduleNotes.
func startModuleVersion(ctx context.Context, cfg Config, rt *modrt.Runtime, db *store.DB, tc TaskConfig, log *slog.Logger, trial func(*modrt.Module) error) (*modrt.Module, int64, error) {
	vs, err := newVersionStart(ctx, cfg, rt, db, tc, log, trial)
	if err != nil {
		return nil, 0, err
	}
	// first is the registry version to try first; useFile says to try the file first instead.
	first, useFile, err := vs.choose()
	if err != nil {
		return nil, 0, err
	}
	below := uint64(1<<63 - 1) // fallbacks are the versions below this one
	if useFile {
		vs.tried[vs.fileSum] = true
		if mod := vs.try(vs.file, 0, tc.Module); mod != nil {
			return vs.activateFile(mod)
		}
		vs.registerFailedFile()
		if vs.hasActive {
			below = vs.active.Version + 1 // the active version first, then the ones before it
		}
	} else {
		vs.tried[first.SHA256] = true
		if wasm := vs.load(first); wasm != nil {
			if mod := vs.try(wasm, first.Version, fmt.Sprintf("version %d", first.Version)); mod != nil {
				return vs.activate(mod, first, vs.active.Origin)
			}
		}
		below = first.Version
	}

	origin := OriginAutoRollback
	if vs.followsFile {
		origin = OriginFile
	}
	for i := len(vs.versions) - 1; i >= 0 && ctx.Err() == nil; i-- {
		mv := vs.versions[i]
		if mv.Version >= below || mv.Status.State == store.ModuleBad || vs.tried[mv.SHA256] {
			continue
		}
		vs.tried[mv.SHA256] = true
		wasm := vs.load(mv)
		if wasm == nil {
			continue
		}
		if mod := vs.try(wasm, mv.Version, fmt.Sprintf("version %d", mv.Version)); mod != nil {
			return vs.activate(mod, mv, origin)
		}
	}
	if _, bad := vs.badSum[vs.fileSum]; vs.ferr == nil && !vs.tried[vs.fileSum] && !bad && ctx.Err() == nil {
		if mod := vs.try(vs.file, 0, tc.Module); mod != nil {
			return vs.activateFile(mod)
		}
	}
	return nil, 0, fmt.Errorf("no module version can start (%s): deploy a version that works, or fix the module file "+
		"and restart the host", strings.Join(vs.failures, "; "))
}

// versionStart is one start of a task's module: the registry's versions, the module file, and
// what was tried and failed so far (startModuleVersion).
type versionStart struct {
	ctx   context.Context
	cfg   Config
	rt    *modrt.Runtime
	db    *store.DB
	tc    TaskConfig
	log   *slog.Logger
	trial func(*modrt.Module) error

	active      store.ActiveModule
	hasActive   bool
	versions    []store.ModuleVersion
	badSum      map[[32]byte]store.ModuleVersion // versions marked bad, by their bytes
	file        []byte
	fileSum     [32]byte
	ferr        error // reading the module file
	followsFile bool  // the active version came from the file (or there is none)

	failures []string
	tried    map[[32]byte]bool
}

func newVersionStart(ctx context.Context, cfg Config, rt *modrt.Runtime, db *store.DB, tc TaskConfig, log *slog.Logger, trial func(*modrt.Module) error) (*versionStart, error) {
	vs := &versionStart{ctx: ctx, cfg: cfg, rt: rt, db: db, tc: tc, log: log, trial: trial,
		badSum: map[[32]byte]store.ModuleVersion{}, tried: map[[32]byte]bool{}}
	var err error
	if vs.active, vs.hasActive, err = db.ActiveModule(tc.Name); err != nil {
		return nil, err
	}
	if vs.versions, err = db.ModuleVersions(tc.Name); err != nil {
		return nil, err
	}
	for _, mv := range vs.versions {
		if mv.Status.State == store.ModuleBad {
			vs.badSum[mv.SHA256] = mv
		}
	}
	vs.file, vs.ferr = os.ReadFile(tc.Module)
	vs.fileSum = sha256.Sum256(vs.file)
	vs.followsFile = !vs.hasActive || vs.active.Origin == OriginFile
	return vs, nil
}

// choose picks what to try first: the active version, or the module file when there is none or
// the file changed to bytes not known to fail (useFile).
func (vs *versionStart) choose() (first store.ModuleVersion, useFile bool, err error) {
	useFile = !vs.hasActive
	if vs.hasActive {
		_, mv, err := activeVersion(vs.db, vs.tc.Name)
		if err != nil {
			return first, false, err
		}
		first = mv
		fileMatches := vs.ferr == nil && vs.fileSum == mv.SHA256
		bad, fileBad := vs.badSum[vs.fileSum]
		switch {
		case vs.ferr != nil:
			vs.log.Warn("module file unreadable; running the active version from the registry",
				"module", vs.tc.Module, "version", mv.Version, "err", vs.ferr)
		case fileMatches:
		case vs.active.Origin != OriginFile:
			vs.log.Warn("the module file is overridden by a deployed version; deploy or activate another to change it",
				"module", vs.tc.Module, "version", mv.Version, "active_by", vs.active.Origin)
		case fileBad:
			vs.log.Error("the module file holds a version that failed to start before; running the active version until the file changes",
				"module", vs.tc.Module, "failed_version", bad.Version, "reason", bad.Status.Reason, "version", mv.Version)
		default:
			useFile = true
		}
	}
	if useFile && vs.ferr != nil {
		return first, false, fmt.Errorf("module: %w", vs.ferr)
	}
	return first, useFile, nil
}

// markBad records version v as unable to start.
func (vs *versionStart) markBad(v uint64, reason string) {
	st := store.ModuleStatus{State: store.ModuleBad, At: time.Now().UnixMilli(), Reason: reason}
	if err := vs.db.SetModuleStatus(vs.tc.Name, v, st); err != nil {
		vs.log.Error("recording the module version as bad", "version", v, "err", err)
	}
}

// try compiles and trials wasm; on failure it marks version v bad (when v > 0).
func (vs *versionStart) try(wasm []byte, v uint64, what string) *modrt.Module {
	ctx := vs.ctx
	mod, err := vs.rt.Compile(ctx, wasm, limits(vs.tc))
	if err == nil {
		if err = vs.trial(mod); err != nil {
			mod.Close(context.WithoutCancel(ctx))
			err = fmt.Errorf("init: %w", err)
		}
	}
	if err == nil {
		return mod
	}
	if ctx.Err() != nil {
		// Stopping while starting (an init waiting on an HTTP call fails then): the
		// version is not to blame.
		vs.failures = append(vs.failures, fmt.Sprintf("%s: %v", what, ctx.Err()))
		return nil
	}
	vs.failures = append(vs.failures, fmt.Sprintf("%s: %v", what, err))
	if v == 0 {
		vs.log.Error("module file cannot start", "module", what, "err", err)
		return nil
	}
	vs.log.Error("module version cannot start; marking it bad", "version", v, "err", err)
	vs.markBad(v, err.Error())
	return nil
}

// load reads mv's bytes; bytes damaged or missing in the data directory make it bad.
func (vs *versionStart) load(mv store.ModuleVersion) []byte {
	wasm, err := vs.db.ModuleBytes(mv.SHA256)
	if err == nil {
		return wasm
	}
	vs.failures = append(vs.failures, fmt.Sprintf("version %d: %v", mv.Version, err))
	vs.log.Error("module version cannot be read from the data directory", "version", mv.Version, "err", err)
	if errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrNoSuchModule) {
		vs.markBad(mv.Version, err.Error())
	}
	return nil
}

// activate makes v active (when it is not) and logs how the task starts.
func (vs *versionStart) activate(mod *modrt.Module, mv store.ModuleVersion, origin string) (*modrt.Module, int64, error) {
	if !vs.hasActive || vs.active.Version != mv.Version || vs.active.Origin != origin {
		if err := vs.db.SetActiveModule(vs.tc.Name, store.ActiveModule{Version: mv.Version, Since: time.Now().UnixMilli(), Origin: origin}); err != nil {
			mod.Close(context.WithoutCancel(vs.ctx))
			return nil, 0, err
		}
	}
	if len(vs.failures) > 0 {
		vs.log.Error("module rolled back automatically: the task runs an earlier version", "version", mv.Version,
			"sha256", hex.EncodeToString(mv.SHA256[:]), "failed", strings.Join(vs.failures, "; "))
	} else {
		vs.log.Info("running the active module version", "version", mv.Version, "sha256", hex.EncodeToString(mv.SHA256[:]), "active_by", origin)
	}
	return mod, int64(mv.Version), nil
}

// activateFile registers the file's module (which started) and makes it active.
func (vs *versionStart) activateFile(mod *modrt.Module) (*modrt.Module, int64, error) {
	mv, err := vs.registerFile(mod)
	if err != nil {
		mod.Close(context.WithoutCancel(vs.ctx))
		return nil, 0, err
	}
	return vs.activate(mod, mv, OriginFile)
}

// registerFile adds the file as a new version, or finds the version that holds its bytes.
func (vs *versionStart) registerFile(mod *modrt.Module) (store.ModuleVersion, error) {
	for _, mv := range vs.versions {
		if mv.SHA256 == vs.fileSum {
			return mv, nil
		}
	}
	info := mod.Info()
	mv, err := vs.db.AddModule(vs.tc.Name, vs.file, store.ModuleVersion{
		Created: time.Now().UnixMilli(), ABIVersion: info.ABIVersion, Origin: OriginFile,
		Exports: info.Exports, Imports: info.Imports,
	}, vs.cfg.KeepModuleVersions)
	if err == nil {
		vs.log.Info("module file registered as a new version", "module", vs.tc.Module, "version", mv.Version, "sha256", info.SHA256)
		vs.versions = append(vs.versions, mv)
	}
	return mv, err
}

// registerFailedFile registers a module file that failed to start too, so that it is known bad
// and not tried again until it changes: it compiles it without the trial.
func (vs *versionStart) registerFailedFile() {
	mod, err := vs.rt.Compile(vs.ctx, vs.file, limits(vs.tc))
	if err != nil {
		return
	}
	var mv store.ModuleVersion
	if err = vs.ctx.Err(); err == nil {
		mv, err = vs.registerFile(mod)
	}
	mod.Close(context.WithoutCancel(vs.ctx))
	if err == nil {
		vs.markBad(mv.Version, strings.TrimPrefix(vs.failures[0], vs.tc.Module+": "))
	}
}

func publicVersion(task string, mv store.ModuleVersion, active store.ActiveModule) ModuleVersion {
	v := ModuleVersion{
		Task: task, Version: int64(mv.Version), SHA256: hex.EncodeToString(mv.SHA256[:]), Size: mv.Size,
		Created: time.UnixMilli(mv.Created), ABIVersion: abi.VersionString(mv.ABIVersion), Origin: mv.Origin,
		Exports: mv.Exports, Imports: mv.Imports, Status: mv.Status.State, Reason: mv.Status.Reason,
	}
	if mv.Version == active.Version {
		v.Active, v.ActiveOrigin = true, active.Origin
	}
	return v
}

// refused turns a validation failure into a *ModuleRefusedError.
func refused(task string, err error) error {
	var me *modrt.ModuleError
	if errors.As(err, &me) {
		return &ModuleRefusedError{Task: task, Problems: append([]string(nil), me.Problems...), Err: err}
	}
	return &ModuleRefusedError{Task: task, Problems: []string{err.Error()}, Err: err}
}
