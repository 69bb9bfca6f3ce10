package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/host/internal/stats"
	"github.com/wasmstream/wasmstream/host/internal/task"
	"github.com/wasmstream/wasmstream/store"
)

// Host runs tasks. Create it with New, run it once with Run, release it with Close.
type Host struct {
	cfg Config

	mu      sync.Mutex
	closed  bool
	running bool
	tasks   []*lanes // nil where a task could not start (halted)
	names   []string

	halted    map[string]error // tasks that halted (on_task_failure: halt_task), with why
	restarts  map[string]int64 // automatic restarts of each task (on_task_failure: restart)
	taskRuns  int              // task goroutines running (goTask)
	tasksDone chan struct{}    // closed when taskRuns dropped to 0: Run returns

	ready     chan struct{}  // closed once Run started every task (Ready)
	stopping  atomic.Bool    // Run's context is done or a task failed: Processing is false
	live      *live          // while Run runs: what Deploy and its siblings use (deploy.go)
	calls     sync.WaitGroup // Deploy and siblings in progress; Run waits for them
	adminAddr string
	chains    *chains // the chain logs between tasks (chain.go), set by Run before the tasks start
	// resetHolds are the tasks held stopped for a reset of their group that another host
	// asked (reset_group.go).
	resetHolds map[string]*resetHold
}

// New validates cfg and returns a Host. It starts no goroutine and opens nothing yet.
func New(cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Host{cfg: cfg.WithDefaults(), ready: make(chan struct{}), restarts: map[string]int64{}}, nil
}

// Run runs every task until all their inputs are exhausted and fully processed (then it
// commits a last checkpoint and returns nil), or until ctx is cancelled (then it stops reading,
// finishes the batches in flight, commits a last checkpoint and returns nil). A guest call still
// running 1 s after ctx ends is interrupted at the end of its time slice: its batch fails like
// any failed batch and its records are processed again by the next run.
//
// A task that cannot start (its module does not compile or its init fails, with every
// fallback version too: startModule; its sinks cannot open) or fails while running halts:
// with Config.OnTaskFailure "halt_task" (the default) the other tasks go on, Stats reports it
// halted with its error, a Deploy, Activate or Rollback of it restarts it (see Deploy), and
// Run returns once the others finished, with a *TaskError for each task still halted
// (joined). With "halt_host" the first failure stops every task and Run returns
// it. With "restart" a halted task is restarted by the host after a back-off (autorestart.go):
// Run does not return while a restart is pending; once ctx ends, pending restarts are dropped
// and Run returns the halts of the tasks still halted. Every goroutine Run starts has stopped
// when it returns.
func (h *Host) Run(ctx context.Context) (err error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if h.running {
		h.mu.Unlock()
		return errors.New("wasmstream: Run called twice")
	}
	h.running = true
	h.mu.Unlock()

	cfg := h.cfg
	log := cfg.Logger
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("wasmstream: data dir: %w", err)
	}
	db, err := store.Open(filepath.Join(cfg.DataDir, "state"), store.Options{SyncWrites: cfg.SyncWrites, Logger: log,
		MinFreeBytes: cfg.MinFreeDiskBytes})
	if errors.Is(err, store.ErrLocked) {
		return fmt.Errorf("wasmstream: data directory %s is in use by another wasmstream process (a running host, or a state or reset command): each host needs a data directory of its own: %w", cfg.DataDir, err)
	}
	if err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	rt, err := modrt.NewRuntime(ctx, modrt.RuntimeConfig{CacheDir: cacheDir(cfg), Logger: log})
	if err != nil {
		return fmt.Errorf("wasmstream: %w", err)
	}
	defer rt.Close(context.WithoutCancel(ctx))
	defer startInterrupter(ctx, rt, log)()
	if h.chains, err = openChains(cfg, db); err != nil {
		return err
	}

	stopBroker, err := startEmbedded(&cfg)
	if err != nil {
		return err
	}
	defer stopBroker()
	runCtx, cancel := context.WithCancel(ctx)
	lv := &live{cfg: cfg, rt: rt, db: db, tasks: map[string]*running{}, ctx: runCtx, cancel: cancel}
	defer func() {
		// Each task's sinks, the last it opened (a restart of a halted task replaces them).
		for _, tc := range cfg.Tasks {
			r := lv.tasks[tc.Name]
			if r == nil {
				continue
			}
			for _, c := range r.sinks {
				if cerr := c.Close(); cerr != nil && err == nil {
					err = cerr
				}
			}
		}
	}()
	defer cancel()
	defer lv.closeModules(context.WithoutCancel(ctx))
	if err := h.setUpTasks(ctx, cfg, lv); err != nil {
		return err
	}
	// Deploy and its siblings stop being served before the store and the runtime close.
	defer func() {
		h.mu.Lock()
		h.live = nil
		h.mu.Unlock()
		h.calls.Wait()
	}()
	stopAdmin, err := h.startAdmin(ctx)
	if err != nil {
		return err
	}
	defer stopAdmin()
	close(h.ready)

	return h.runTasks(cfg, lv)
}

// startInterrupter returns the function to call when Run returns. A stop lets the batches in
// flight finish, but a guest call may run for its whole CPU budget (seconds at the default
// fuel_per_record): the calls still running stopGrace after the stop are interrupted at the end
// of their time slice and fail like any failed batch (not applied; the next run processes their
// records again).
func startInterrupter(ctx context.Context, rt *modrt.Runtime, log *slog.Logger) (stop func()) {
	runDone := make(chan struct{})
	var interrupter sync.WaitGroup
	interrupter.Go(func() {
		select {
		case <-ctx.Done():
		case <-runDone:
			return
		}
		t := time.NewTimer(stopGrace)
		defer t.Stop()
		select {
		case <-t.C:
			log.Warn("stopping: interrupting the guest calls still running", "after", stopGrace)
			rt.Interrupt()
		case <-runDone:
		}
	})
	return func() {
		close(runDone)
		interrupter.Wait()
	}
}

// setUpTasks sets every task up and publishes them to h (h.tasks, h.live). A task that cannot
// start halts the host (on_task_failure: halt_host) or only itself (halt_task).
func (h *Host) setUpTasks(ctx context.Context, cfg Config, lv *live) error {
	log := cfg.Logger
	tasks := make([]*lanes, len(cfg.Tasks))
	// halted holds the error of every task that cannot start; with halt_task the others go on.
	halted := make([]error, len(cfg.Tasks))
	if err := checkModuleFiles(lv.db, cfg); err != nil {
		return err
	}
	for i, tc := range cfg.Tasks {
		if err := checkStdinRerun(lv.db, cfg, i); err != nil {
			return err
		}
		var sinks []io.Closer
		t, mod, tcfg, lcfgs, err := h.setUp(ctx, cfg, lv, tc, &sinks)
		if mod != nil {
			lv.addModule(mod)
		}
		r := &running{cfg: tc, idx: i, tcfg: tcfg, lanes: lcfgs, task: t, sinks: sinks}
		lv.tasks[tc.Name] = r
		if err != nil {
			terr := &TaskError{Task: tc.Name, Err: err}
			if cfg.OnTaskFailure == HaltHost {
				return terr
			}
			if cfg.OnTaskFailure != Restart { // else Run logs it as it schedules the restart
				log.Error("task halted: it cannot start; the other tasks go on (on_task_failure: halt_task)", "task", tc.Name, "err", err)
			}
			halted[i], r.halted = terr, terr
			continue
		}
		tasks[i] = t
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tasks = tasks
	for i, tc := range cfg.Tasks {
		h.names = append(h.names, tc.Name)
		if halted[i] != nil {
			h.halt(tc.Name, halted[i])
		}
	}
	h.live = lv
	return nil
}

// runTasks runs every task that started until all have ended, and returns their halts.
func (h *Host) runTasks(cfg Config, lv *live) error {
	context.AfterFunc(lv.ctx, func() { h.stopping.Store(true) })
	h.mu.Lock()
	h.tasksDone = make(chan struct{})
	for i, t := range h.tasks { // a halted task restarted since is among them
		r := lv.tasks[h.names[i]]
		if t != nil {
			r.backoff.ran(time.Now())
			h.goTask(lv, i, t)
		} else if err := h.halted[h.names[i]]; err != nil && h.cfg.OnTaskFailure == Restart {
			h.scheduleRestart(lv, r, err) // it could not start
		}
	}
	if h.taskRuns == 0 {
		close(h.tasksDone)
	}
	done := h.tasksDone
	h.mu.Unlock()
	<-done
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for _, tc := range cfg.Tasks {
		errs = append(errs, h.halted[tc.Name])
	}
	return errors.Join(errs...)
}

// checkModuleFiles refuses to start when a task's module file does not exist and the data
// directory holds no active version of the task to run instead (a fresh data directory, a typo
// in the path): a configuration error naming the file, for every such task at once, whatever
// on_task_failure says. With an active version, a missing file is left to startModule, which
// runs that version and says so.
func checkModuleFiles(db *store.DB, cfg Config) error {
	var errs []error
	for i, tc := range cfg.Tasks {
		if _, err := os.Stat(tc.Module); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		_, active, err := db.ActiveModule(tc.Name)
		if err != nil {
			return &TaskError{Task: tc.Name, Err: err}
		}
		if !active {
			errs = append(errs, &ConfigError{Key: fmt.Sprintf("tasks[%d].module", i), Problem: fmt.Sprintf(
				"%s: no such file (and data directory %s holds no version of task %s to run instead)", tc.Module, cfg.DataDir, tc.Name)})
		}
	}
	return errors.Join(errs...)
}

// checkStdinRerun refuses a stdin input of task i that an earlier run already read in this data
// directory, unless the input has Continue: standard input cannot be rewound, so this run's
// lines would be new records after the earlier ones, and the same data fed again would count
// twice.
func checkStdinRerun(db *store.DB, cfg Config, i int) error {
	tc := cfg.Tasks[i]
	var streams []store.StreamInfo
	for j, in := range tc.Inputs {
		if in.Type != "stdin" || in.Continue {
			continue
		}
		if streams == nil {
			var err error
			if streams, err = db.Streams(tc.Name); err != nil {
				return &TaskError{Task: tc.Name, Err: err}
			}
		}
		for _, s := range streams {
			if s.Name != task.StdinStream(in.Name) {
				continue
			}
			pos, ok, err := db.Position(tc.Name, s.ID)
			if err != nil {
				return &TaskError{Task: tc.Name, Err: err}
			}
			if read := max(pos.Next, pos.Horizon+1); ok && read > 0 {
				return &ConfigError{Key: fmt.Sprintf("tasks[%d].inputs[%d].continue", i, j), Problem: fmt.Sprintf(
					"task %s already read stdin up to line %d in data directory %s: stdin cannot be rewound, so this run's lines would count as new records after those, and the same data fed again would count twice. "+
						"Use a new data directory (--data-dir) to start over, or set continue: true on the input (--continue-stdin with --module) to feed it more lines",
					tc.Name, read, cfg.DataDir)}
			}
		}
	}
	return nil
}

// goTask runs task i, t, on its own goroutine until it returns; a failure halts it (h.halted)
// and, with halt_host, stops every task. Once no task runs any more, h.tasksDone is closed: Run
// returns, and no halted task can be restarted. h.mu is held.
func (h *Host) goTask(lv *live, i int, t *lanes) {
	h.taskRuns++
	name := h.cfg.Tasks[i].Name
	// Each task runs on a context of its own, so that a reset (ResetTask) can stop it alone.
	ctx, cancel := context.WithCancel(lv.ctx)
	done := make(chan struct{})
	var sinks []io.Closer
	if r := lv.tasks[name]; r != nil {
		r.stop, r.done, sinks = cancel, done, r.sinks
	}
	go func() {
		defer close(done)
		defer cancel()
		err := t.Run(ctx)
		if err != nil {
			// Nothing it produced since its last checkpoint may land after it halted: the
			// client would go on retrying it (until a missing topic is created, say).
			abandonUndelivered(sinks)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			h.halt(name, &TaskError{Task: name, Err: err})
			switch h.cfg.OnTaskFailure {
			case HaltHost:
				lv.cancel() // one failed task stops the host
			case Restart:
				if r := lv.tasks[name]; r != nil {
					h.scheduleRestart(lv, r, err)
				}
			default:
				h.cfg.Logger.Error("task halted; the other tasks go on (on_task_failure: halt_task)", "task", name, "err", err)
			}
		}
		h.taskEnded()
	}()
}

// taskEnded counts a task goroutine (or a reset's hold on Run, ResetTask) gone: once none is
// left, Run returns. h.mu is held.
func (h *Host) taskEnded() {
	h.taskRuns--
	if h.taskRuns == 0 {
		close(h.tasksDone)
	}
}

// halt records that task name halted with err. h.mu is held.
func (h *Host) halt(name string, err error) {
	if h.halted == nil {
		h.halted = map[string]error{}
	}
	h.halted[name] = err
}

// setUp opens task tc's sinks, picks and checks the module it starts with (startModule) and
// returns the task's loops, ready to run, its module (the caller closes it after the task ran;
// the loops' clones of it are lv's to close), and its configuration without the module, of its
// first loop and of each (nil if setUp failed before they were made).
func (h *Host) setUp(ctx context.Context, cfg Config, lv *live, tc TaskConfig, closers *[]io.Closer) (*lanes, *modrt.Module, *task.Config, []task.Config, error) {
	tcfg, lcfgs, err := h.openTask(ctx, cfg, lv.db, tc, closers)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	mod, version, err := startModule(ctx, cfg, lv.rt, lv.db, tc, func(m *modrt.Module) error {
		return task.TrialInit(ctx, tcfg, m)
	})
	if err != nil {
		return nil, nil, &tcfg, lcfgs, err
	}
	t, err := newLanes(lcfgs, mod, version, lv.addModule)
	if err != nil {
		return nil, mod, &tcfg, lcfgs, err
	}
	cfg.Logger.Info("task ready", "task", tc.Name, "module", tc.Module, "version", version, "abi", abi.VersionString(mod.Info().ABIVersion), "workers", tc.Workers, "loops", len(lcfgs))
	return t, mod, &tcfg, lcfgs, nil
}

// openTask opens task tc's sinks (appending what closes them to closers, even when it fails),
// checks that the cluster it produces to accepts the host, and returns the task's
// configuration without its module, and that of each of its loops (laneConfigs; the first is
// the task's). A restart of a halted task calls it again: a Kafka producer's delivery failure is
// sticky, so a task that halted on one needs new clients.
func (h *Host) openTask(ctx context.Context, cfg Config, db *store.DB, tc TaskConfig, closers *[]io.Closer) (task.Config, []task.Config, error) {
	tcfg, err := h.openTaskConfig(ctx, cfg, db, tc, closers)
	if err != nil {
		return tcfg, nil, err
	}
	lcfgs, err := laneConfigs(cfg, tc, tcfg, closers)
	if err != nil {
		return tcfg, nil, err
	}
	return lcfgs[0], lcfgs, nil
}

// openTaskConfig is openTask for the task's first loop.
func (h *Host) openTaskConfig(ctx context.Context, cfg Config, db *store.DB, tc TaskConfig, closers *[]io.Closer) (task.Config, error) {
	out, dlq, sinkClosers, err := openSinks(cfg, tc)
	*closers = append(*closers, sinkClosers...)
	if err != nil {
		return task.Config{}, err
	}
	if err := pingKafka(ctx, cfg, tc, out, dlq); err != nil {
		return task.Config{}, err
	}
	tcfg, err := taskConfig(cfg, tc, nil, out, dlq, db, h.chains)
	if err != nil {
		return task.Config{}, err
	}
	if tcfg.Kafka != nil && cfg.Admin.Addr != "" {
		tcfg.Kafka.Advertise = h.advertiseAddr // route.go
	}
	tcfg.ProvenGood = func(v int64) {
		if err := db.SetModuleStatus(tc.Name, uint64(v), store.ModuleStatus{State: store.ModuleGood, At: time.Now().UnixMilli()}); err != nil {
			cfg.Logger.Warn("recording the module version as good", "task", tc.Name, "version", v, "err", err)
		}
	}
	return tcfg, nil
}

func cacheDir(cfg Config) string {
	if cfg.CacheDir == "-" {
		return ""
	}
	return cfg.CacheDir
}

func compile(ctx context.Context, rt *modrt.Runtime, tc TaskConfig) (*modrt.Module, error) {
	wasm, err := os.ReadFile(tc.Module)
	if err != nil {
		return nil, fmt.Errorf("module: %w", err)
	}
	mod, err := rt.Compile(ctx, wasm, limits(tc))
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", tc.Module, err)
	}
	return mod, nil
}

func limits(tc TaskConfig) modrt.Limits {
	var maxRecord int
	if tc.Output.Type == "kafka" {
		maxRecord = kafka.MaxRecordBatchBytes // else the flush fails and halts the task
	}
	return modrt.Limits{MaxMemoryPages: tc.MaxMemoryPages, MaxTableElements: tc.MaxTableElements,
		MaxFunctions: tc.MaxFunctions, MaxLocals: tc.MaxLocals, MaxNestingDepth: tc.MaxNestingDepth,
		MaxLoopDepth: tc.MaxLoopDepth, MaxCallDepth: tc.MaxCallDepth, MaxNestingWork: tc.MaxNestingWork, MaxBlockWork: tc.MaxBlockWork, MaxFunctionBytes: tc.MaxFunctionBytes, MaxValueBytes: tc.MaxValueBytes, MaxRecordBytes: maxRecord,
		MaxOutputsPerCall: tc.MaxOutputsPerCall, FuelPerRecord: tc.FuelPerRecord, InitFuel: tc.InitFuel,
		MaxEmitBytesPerCall: tc.MaxEmitBytesPerCall, MaxStateBytesPerCall: tc.MaxStateBytesPerCall,
		MaxLogLinesPerSecond: tc.MaxLogLinesPerSecond, LogBurstLines: tc.LogBurstLines,
		// KeyTxnEntries and KeyTxnBytes: the defaults are those of the store, which the host opens
		// with its default transaction limits (TestKeyTxnLimitsAreTheStores).
		Grants: grants(tc.Grants)}
}

func grants(g GrantsConfig) modrt.Grants {
	out := modrt.Grants{Env: g.Env, RealClock: g.RealClock, Random: g.Random}
	for _, d := range g.Dirs {
		out.Dirs = append(out.Dirs, modrt.DirGrant{Host: d.Host, Guest: d.Guest, Writable: d.Writable})
	}
	if h := g.HTTP; len(h.Allow) > 0 {
		out.HTTP = &modrt.HTTPGrant{Allow: h.Allow, Timeout: h.Timeout, MaxTimeout: h.MaxTimeout,
			MaxConcurrent: h.MaxConcurrent, MaxRequestBytes: h.MaxRequestBytes, MaxResponseBytes: h.MaxResponseBytes}
	}
	return out
}

func taskConfig(cfg Config, tc TaskConfig, mod *modrt.Module, out task.OutputSink, dlq task.DeadLetterSink, db *store.DB, ch *chains) (task.Config, error) {
	guest := []byte("{}")
	if len(tc.Config) > 0 {
		b, err := json.Marshal(tc.Config)
		if err != nil {
			return task.Config{}, &ConfigError{Key: "config", Problem: err.Error()}
		}
		guest = b
	}
	tcfg := task.Config{
		AppliedSpan: cfg.appliedSpan,
		Name:        tc.Name,
		Module:      mod,
		GuestConfig: guest,
		OutputNames: withChained(outputNames(tc.Output), ch.outputs(tc.Name)),
		Output:      out,
		DeadLetter:  dlq,
		Store:       db,
		Policy:      string(tc.Sequencing.Policy),
		Field:       tc.Sequencing.Field,
		Header:      tc.Sequencing.Header,
		Sched: sched.Config{
			MaxBatchItems:     tc.MaxBatchRecords,
			MaxKeyItems:       tc.MaxKeyRecords,
			MaxStreamInFlight: tc.MaxInFlight,
			HighItems:         tc.MaxQueued,
			LowItems:          max(tc.MaxQueued/2, 1),
			HighBytes:         tc.MaxQueuedBytes,
			LowBytes:          max(tc.MaxQueuedBytes/2, 1),
		},
		Workers:         tc.Workers,
		StateCacheBytes: tc.StateCacheBytes,
		// -1 (off) is 0 to the task.
		MaxStateBytesPerKey: max(tc.MaxStateBytesPerKey, 0),
		MaxAttempts:         tc.Retry.MaxAttempts,
		Backoff:             tc.Retry.Backoff,
		MaxBackoff:          tc.Retry.MaxBackoff,
		OnExhausted:         string(tc.Retry.OnExhausted),
		// -1 (off) is 0 to the task.
		MaxConsecutiveFailures: max(tc.Retry.MaxConsecutiveFailures, 0),
		Checkpoint:             cfg.CheckpointInterval,
		Lateness:               tc.Time.AllowedLateness,
		IdleTimeout:            tc.Time.IdleTimeout,
		TickEvery:              tc.Time.TickInterval,
		MaxFiringsPerTurn:      tc.Time.MaxFiringsPerTurn,
		MaxPendingTimers:       int64(tc.Time.MaxPendingTimers),
		MaxFuture:              tc.Time.MaxFuture,
		MigrateAtActivation:    tc.StateMigration == "activation",
		ChainOutputs:           ch.outputs(tc.Name),
		Now:                    cfg.Now,
		Logger:                 cfg.Logger,
	}
	for j, in := range tc.Inputs {
		if in.Type == InputTask {
			tcfg.Inputs = append(tcfg.Inputs, ch.input(tc, j))
			continue
		}
		if in.Type == "kafka" {
			tcfg.Kafka = kafkaInput(cfg, tc, in)
			if tcfg.Kafka.ExactlyOnce {
				if k, ok := out.(task.KafkaOutput); ok {
					tcfg.Kafka.TxnProducers = append(tcfg.Kafka.TxnProducers, k.P)
				}
				if k, ok := dlq.(task.KafkaDeadLetters); ok && !slices.Contains(tcfg.Kafka.TxnProducers, k.P) {
					tcfg.Kafka.TxnProducers = append(tcfg.Kafka.TxnProducers, k.P)
				}
			}
			if tc.Changelog.Enabled {
				tcfg.Changelog = &task.ChangelogConfig{Topic: tc.Changelog.Topic, Replication: int16(tc.Changelog.ReplicationFactor),
					Standby: tc.Changelog.Standby, DropRevoked: tc.Changelog.DropRevoked}
			}
			continue
		}
		ti := task.Input{
			Name: in.Name,
			Path: in.Path,
			Format: source.Format{
				JSON:           in.Format == "json",
				KeyField:       in.KeyField,
				KeyRequired:    in.KeyRequired,
				ValueField:     in.ValueField,
				TimestampField: in.TimestampField,
				KeySeparator:   in.KeySeparator,
				MaxLineBytes:   in.MaxLineBytes,
			},
			HaltOnError: in.OnMalformed == "halt",
		}
		if in.Type == "stdin" {
			ti.Stdin = cfg.Stdin
		}
		tcfg.Inputs = append(tcfg.Inputs, ti)
	}
	return tcfg, nil
}

// TaskStats are the running figures of one task: most as of its last checkpoint, those whose
// comment says so up to date. The admin API serves them as JSON (GET /v1/status) with the
// names of their json tags. TaskStats and the types below are defined once, in the host's
// internal stats package, and shared by every layer: the task that fills them, the admin API,
// the CLI's status, top and Prometheus export.
type TaskStats = stats.Task

// InputStats are the figures of one input of a task, as of the task's last checkpoint: a file
// or stdin input, or one Kafka partition of a Kafka input.
type InputStats = stats.Input

// RecentError is one of a task's last errors: a record or timer firing that failed and was
// retried, sent to the dead letters or skipped, or a partition tick that failed.
type RecentError = stats.RecentError

// GuestMetric is the value of one metric a guest declared.
type GuestMetric = stats.GuestMetric

// GuestLabel is one label of a GuestMetric.
type GuestLabel = stats.GuestLabel

// Histogram is a copy of a histogram: Counts[i] observations were at most Bounds[i] and above
// Bounds[i-1]; Counts[len(Bounds)] were above every bound. Counts are not cumulative.
type Histogram = stats.Histogram

// Stats returns every task's figures. Safe from any goroutine while Run runs.
func (h *Host) Stats() []TaskStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]TaskStats, len(h.tasks))
	for i, t := range h.tasks {
		var s TaskStats
		if t != nil {
			s = t.Stats()
		}
		out[i] = s
		out[i].Task = h.names[i]
		if err := h.halted[h.names[i]]; err != nil {
			var te *TaskError
			if errors.As(err, &te) {
				err = te.Err
			}
			out[i].Halted, out[i].Error = true, err.Error()
			if h.live != nil {
				if p := h.live.tasks[h.names[i]].pending; p != nil {
					out[i].RestartAt, out[i].RestartError = p.at, p.lastErr
				}
			}
		}
		out[i].Restarts = h.restarts[h.names[i]]
	}
	return out
}

// GuestMemory returns the bytes of guest linear memory the host's instances hold (all tasks),
// while Run runs; 0 otherwise. Safe from any goroutine.
func (h *Host) GuestMemory() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == nil {
		return 0
	}
	return h.live.rt.Memory()
}

// Processing reports whether the host is processing everything it was given: Run started every
// task (Ready is closed) and no task is restoring a Kafka partition it was assigned from the
// changelog, and no task halted (Config.OnTaskFailure). It is false before Run and once Run is
// returning. It backs the /readyz endpoint. Safe from any goroutine.
func (h *Host) Processing() bool {
	select {
	case <-h.ready:
	default:
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live == nil || h.stopping.Load() || len(h.halted) > 0 {
		return false // a halted task processes nothing
	}
	for _, t := range h.tasks {
		if t == nil || !t.Ready() {
			return false
		}
	}
	return true
}

// Close releases the Host. It is idempotent and safe to call after Run returned.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return nil
}
