package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host"
)

const configHelp = `Configuration comes from a YAML file (--config, or ` + defaultConfigFile + ` in the current
directory; config.example.yaml documents every key), then environment variables, then flags,
each overriding the one before:

  data_dir             WASMSTREAM_DATA_DIR             --data-dir
  cache_dir            WASMSTREAM_CACHE_DIR            --cache-dir
  checkpoint_interval  WASMSTREAM_CHECKPOINT_INTERVAL  --checkpoint-interval
  sync_writes          WASMSTREAM_SYNC_WRITES          --sync-writes
  log.format           WASMSTREAM_LOG_FORMAT           --log-format
  log.level            WASMSTREAM_LOG_LEVEL            --log-level
  admin.addr           WASMSTREAM_ADMIN_ADDR           --admin-addr
  admin.token          WASMSTREAM_ADMIN_TOKEN          --admin-token
  admin.read_token     WASMSTREAM_ADMIN_READ_TOKEN
  metrics.addr         WASMSTREAM_METRICS_ADDR         --metrics-addr

Relative paths in the file are relative to the file's directory, and so is the default data
directory; relative paths in flags and environment variables are relative to the current
directory. Unknown keys and ill-typed values are errors, each reported with its key.

Instead of a file, --module and --input give a single task (and --config must not be set).`

func newRunCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var cf configFlags
	var watch, reset bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the configured tasks",
		Long: `Run runs every task until all its inputs are read and processed, then commits a last
checkpoint and exits 0. SIGINT or SIGTERM stops the reading: the batches in flight finish, a
last checkpoint is committed, and it exits 0; a second signal kills the process. A task that
fails halts alone: the others run on, and run exits 1 once they finished (on_task_failure:
halt_host stops every task at the first failure, and run exits 1 at once; restart restarts a
halted task by itself after a back-off, and run does not exit meanwhile). A run whose task
read records and failed every one of them exits 1 too. A configuration error exits 2.

Records a task emits to an output of type stdout are written to standard output; logs go to
standard error.

With admin.addr set (--admin-addr), the host serves the admin API that deploy, rollback,
versions, status, pause and resume talk to. A task runs its active module version: the one
last deployed or rolled back to if any (it overrides the module file, which is logged),
otherwise its module file, which is registered as a new version whenever it changed.

--watch reloads a task's module when its file changes (checked every 500ms): the new module is
validated and switched to without stopping, exactly as deploy does; a module that fails
validation is logged and the running version kept.

--reset-state moves the state store (<data-dir>/state) aside to
<data-dir>/state.damaged-<UTC time> before starting, so that the tasks start with empty state
and read their inputs from the start. It deletes nothing. Use it when run or state reports the
store damaged and there is no backup to restore.

The admin listener also serves Prometheus metrics at /metrics (with the token) and the probes
/healthz and /readyz (without it); metrics.addr (--metrics-addr) serves the three without a
token on a port of their own. docs/operating.md lists the metrics.

` + configHelp,
		Example: `  wasmstream run --config config.example.yaml
  wasmstream run --module wordcount.wasm --input in.ndjson --key-field user --value-field text \
    --timestamp-field ts --task-config '{"min_len": 2}'
  WASMSTREAM_LOG_LEVEL=debug wasmstream run -c prod.yaml --data-dir state`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := cf.load(cmd.Flags())
			if err != nil {
				return exitFor(err)
			}
			if reset {
				if err := resetState(s, stderr); err != nil {
					return err
				}
			}
			return runHost(cmd.Context(), s, watch, stdin, stdout, stderr)
		},
	}
	addConfigFlags(cmd.Flags(), &cf)
	cmd.Flags().BoolVar(&watch, "watch", false, "reload a task's module when its file changes, without restarting")
	cmd.Flags().BoolVar(&reset, "reset-state", false, "move the state store aside (deleting nothing) and start with empty state")
	return cmd
}

// resetState moves the data directory's state store aside and says where to.
func resetState(s settings, stderr io.Writer) error {
	dataDir := s.Host.DataDir
	if dataDir == "" {
		dataDir = defaultDataDir
	}
	aside, err := host.ResetState(dataDir)
	if err != nil {
		return failure(err)
	}
	if aside != "" {
		newLogger(stderr, s.Log).Warn("moved the state store aside: starting with empty state, reprocessing every input from the start", "moved_to", aside)
	}
	return nil
}

// runHost runs s until its tasks are done, ctx is cancelled or a task fails.
func runHost(ctx context.Context, s settings, watch bool, stdin io.Reader, stdout, stderr io.Writer) (err error) {
	if err := checkFiles(s, false); err != nil {
		return err
	}
	logger := newLogger(stderr, s.Log)
	warnUnknownEnv(logger)
	logMemoryLimit(logger)
	cfg := s.Host
	cfg.Logger = logger
	cfg.Stdin = stdin
	cfg.Stdout = stdout
	// The host exists only after New; the handler reads it at scrape time.
	var h *host.Host
	metrics := newMetricsHandler(statsCollector{stats: func() []host.TaskStats { return h.Stats() },
		guestMemory: func() int64 { return h.GuestMemory() }}, logger)
	cfg.Admin.Metrics = metrics
	h, err = host.New(cfg)
	if err != nil {
		return exitFor(err)
	}
	defer func() {
		if cerr := h.Close(); cerr != nil && err == nil {
			err = failure(fmt.Errorf("close: %w", cerr))
		}
	}()
	stopNotice := context.AfterFunc(ctx, func() {
		logger.Info("stopping: finishing the batches in flight, then checkpointing")
	})
	defer stopNotice()

	logger.Info("starting", "tasks", taskNames(cfg.Tasks), "data_dir", cfg.DataDir, "abi", abi.VersionString(abi.Version))
	if s.Metrics.Addr != "" {
		_, stopMetrics, err := serveMetrics(s.Metrics.Addr, metrics, h.Processing, logger.With("component", "metrics"))
		if err != nil {
			return failure(err)
		}
		defer stopMetrics()
	}
	if watch {
		wctx, stopWatch := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-h.Ready():
				tick := time.NewTicker(watchEvery)
				defer tick.Stop()
				watchModules(wctx, h, cfg.Tasks, logger, tick.C, nil)
			case <-wctx.Done():
			}
		}()
		defer wg.Wait()
		defer stopWatch() // Run returned: stop watching before h closes
	}
	if err := h.Run(ctx); err != nil {
		// A *host.ConfigError (stdin already read, a missing module file) exits 2.
		return exitFor(hostConfigErrors(err, s))
	}
	logger.Info("stopped")
	return failedRecords(h.Stats(), cfg.WithDefaults().Tasks, logger)
}

// failedRecords reports the records of a finished run that failed on every attempt, so that
// they do not pass unnoticed in the log's retries: a warning per task that dead-lettered or
// skipped some, and a failure (exit 1) when a task read records and every one of them failed.
func failedRecords(stats []host.TaskStats, tasks []host.TaskConfig, logger *slog.Logger) error {
	where := map[string]string{}
	for _, t := range tasks {
		where[t.Name] = t.DeadLetter.Path
		if t.DeadLetter.Topic != "" {
			where[t.Name] = "topic " + t.DeadLetter.Topic
		}
	}
	var errs []error
	for _, st := range stats {
		failed := st.DeadLetters + st.Skips
		if failed == 0 {
			continue
		}
		logger.Warn("records failed on every attempt", "task", st.Task, "dead_letters", st.DeadLetters,
			"skipped", st.Skips, "records", st.Records, "dead_letter", where[st.Task])
		if failed >= st.Records {
			errs = append(errs, fmt.Errorf("task %s: every record failed: %d of %d went to the dead letters (%s), %d were skipped; the first dead letter's error says why",
				st.Task, st.DeadLetters, st.Records, where[st.Task], st.Skips))
		}
	}
	if len(errs) > 0 {
		return failure(errors.Join(errs...))
	}
	return nil
}

// watchEvery is how often --watch looks at the module files.
const watchEvery = 500 * time.Millisecond

// watchModules reloads a task's module through the host's deploy path whenever its file's
// modification time or size changed at a tick, until ctx is done. reloaded, if set, is called
// after each reload (tests).
func watchModules(ctx context.Context, h *host.Host, tasks []host.TaskConfig, log *slog.Logger, tick <-chan time.Time,
	reloaded func(task string, d *host.Deployment, err error)) {
	type stamp struct {
		mod  time.Time
		size int64
	}
	look := func(path string) stamp {
		fi, err := os.Stat(path)
		if err != nil {
			return stamp{}
		}
		return stamp{fi.ModTime(), fi.Size()}
	}
	seen := make([]stamp, len(tasks))
	for i, tc := range tasks {
		seen[i] = look(tc.Module)
		log.Info("watching the module file", "task", tc.Name, "module", tc.Module)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		for i, tc := range tasks {
			now := look(tc.Module)
			if now == seen[i] || now == (stamp{}) {
				continue
			}
			seen[i] = now
			d, err := h.ReloadModule(ctx, tc.Name)
			var refused *host.ModuleRefusedError
			switch {
			case errors.As(err, &refused):
				log.Warn("module file changed but was refused; the running version stays", "task", tc.Name,
					"module", tc.Module, "problems", strings.Join(refused.Problems, "; "))
			case err != nil:
				log.Warn("module file changed but could not be reloaded", "task", tc.Name, "err", err)
			case d.Unchanged:
				log.Info("module file changed but holds the active version", "task", tc.Name, "version", d.Version.Version)
			default:
				log.Info("module file reloaded", "task", tc.Name, "version", d.Version.Version, "previous", d.Previous,
					"switch", d.Switched.Sub(d.Requested).Round(time.Millisecond))
			}
			if reloaded != nil {
				reloaded(tc.Name, d, err)
			}
		}
	}
}

func taskNames(tasks []host.TaskConfig) []string {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
	}
	return names
}

// exitFor maps an error to its exit status: configuration problems (a *configErrors, or
// errors that are all *host.ConfigError) exit 2, everything else 1.
func exitFor(err error) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var ce *configErrors
	if errors.As(err, &ce) {
		return &exitError{code: exitUsage, err: err}
	}
	if cfgErrs := configProblems(err); cfgErrs != nil {
		return &exitError{code: exitUsage, err: &configErrors{errs: cfgErrs}}
	}
	return failure(err)
}

// hostConfigErrors is err, a host's Run error, with its configuration problems (if any) listed
// as those of s: of its file, or, for a task given by --module, under the flags' names
// (quickKey: --module, not tasks[0].module).
func hostConfigErrors(err error, s settings) error {
	leaves := configProblems(err)
	if leaves == nil {
		return err
	}
	for i, e := range leaves {
		if ce, ok := e.(*host.ConfigError); ok && s.File == "" {
			leaves[i] = &host.ConfigError{Key: quickKey(ce.Key), Problem: ce.Problem}
		}
	}
	return &configErrors{file: s.File, errs: leaves}
}

// configProblems returns err's leaves if any of them is a *host.ConfigError, else nil.
func configProblems(err error) []error {
	leaves := unjoin(err)
	for _, e := range leaves {
		var ce *host.ConfigError
		if errors.As(e, &ce) {
			return leaves
		}
	}
	return nil
}

func newCheckCommand(stdout, stderr io.Writer) *cobra.Command {
	var cf configFlags
	var dev bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the configuration and the tasks' modules without running anything",
		Long: `Check validates the configuration, then compiles and validates every task's module, and
prints for each what it imports and exports, the ABI version it declares and the
capabilities the configuration grants it (grants: directories, environment variables, real
clock, random, outbound HTTP with its allowed hosts, timeouts and concurrency; "none" by
default), with a note when the module imports http_request without an HTTP grant or is granted
HTTP it does not use. It exits 0 if everything is valid, 1 if a module is refused, 2 on a
configuration error.

` + configHelp,
		Example: `  wasmstream check --config config.example.yaml
  wasmstream check --module wordcount.wasm --input in.ndjson
  wasmstream check --dev --config kafka.yaml   # as 'wasmstream dev' runs it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf.embedded = dev
			s, err := cf.load(cmd.Flags())
			if err != nil {
				return brokersHint(exitFor(err), dev)
			}
			if err := checkFiles(s, true); err != nil {
				return err
			}
			cfg := s.Host
			cfg.Logger = newLogger(stderr, s.Log)
			warnUnknownEnv(cfg.Logger)
			reports, err := host.Check(cmd.Context(), cfg)
			for _, r := range reports {
				printReport(stdout, r)
			}
			if err != nil {
				if cfgErrs := configProblems(err); cfgErrs != nil {
					return &exitError{code: exitUsage, err: &configErrors{file: s.File, errs: cfgErrs}}
				}
				return failure(err)
			}
			fmt.Fprintf(stdout, "ok: %d task(s) valid\n", len(reports))
			return nil
		},
	}
	addConfigFlags(cmd.Flags(), &cf)
	cmd.Flags().BoolVar(&dev, "dev", false, "check the configuration as 'wasmstream dev' runs it: Kafka from the embedded broker, no kafka.brokers needed")
	return cmd
}

// brokersHint adds to a configuration error that asks for kafka.brokers how to check a
// configuration meant for `wasmstream dev`, which needs none.
func brokersHint(err error, dev bool) error {
	var ee *exitError
	if dev || !errors.As(err, &ee) || ee.hint != "" || !strings.Contains(err.Error(), "kafka.brokers: ") {
		return err
	}
	ee.hint = "a configuration for 'wasmstream dev' needs no kafka.brokers (dev runs an embedded broker): check it with 'wasmstream check --dev'"
	return ee
}

// printReport writes a module report as an indented block.
func printReport(w io.Writer, r host.ModuleReport) {
	fmt.Fprintf(w, "task %s\n", r.Task)
	fmt.Fprintf(w, "  module   %s (%d bytes, sha256 %s)\n", r.Path, r.Size, r.SHA256)
	fmt.Fprintf(w, "  abi      %s (this host speaks %s)\n", r.ABIVersion, abi.VersionString(abi.Version))
	list := func(title string, items []string) {
		if len(items) == 0 {
			fmt.Fprintf(w, "  %-8s (none)\n", title)
			return
		}
		fmt.Fprintf(w, "  %-8s %s\n", title, strings.Join(items, "\n           "))
	}
	list("imports", r.Imports)
	list("exports", r.Exports)
	if len(r.Grants) == 0 {
		fmt.Fprintf(w, "  %-8s none\n", "grants")
	} else {
		list("grants", r.Grants)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %-8s %s\n", "note", n)
	}
}
