package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmstream/wasmstream/host"
)

// The admin client: deploy, rollback, versions, status, pause and resume talk to a running
// host's admin API (host.AdminConfig). The wire format is the host's internal/admin package's;
// the types below decode what the client shows.

const offlineHelp = `With --data-dir it works on the data directory of a stopped host instead (a running host
holds it locked): no admin API is needed. Without --data-dir it talks to the running host.`

const adminHelp = `The host's admin API address and token come from --admin-addr and --admin-token, else
WASMSTREAM_ADMIN_ADDR and WASMSTREAM_ADMIN_TOKEN, else admin.addr and admin.token of the
configuration file (--config, or ` + defaultConfigFile + ` if it exists). An address with no host
(":7070") or an unspecified one ("0.0.0.0:7070") is reached on the loopback interface.`

type wireVersion struct {
	Version      int64     `json:"version"`
	SHA256       string    `json:"sha256"`
	Size         int64     `json:"size"`
	Created      time.Time `json:"created"`
	ABIVersion   string    `json:"abi_version"`
	Origin       string    `json:"origin"`
	Active       bool      `json:"active"`
	ActiveOrigin string    `json:"active_origin"`
	Status       string    `json:"status,omitempty"`
	Reason       string    `json:"reason,omitempty"`
}

type wireDeployment struct {
	Task         string      `json:"task"`
	Version      wireVersion `json:"version"`
	Previous     int64       `json:"previous"`
	Unchanged    bool        `json:"unchanged"`
	Restarted    bool        `json:"restarted"`
	Halted       string      `json:"halted"`
	SwitchMillis float64     `json:"switch_ms"`
	Warnings     []string    `json:"warnings"`
}

// wireStatus is GET /v1/status: the host's own figures, decoded into the type it sends.
type wireStatus struct {
	Tasks []host.TaskStats `json:"tasks"`
}

// adminFlags are the flags of the client commands.
type adminFlags struct {
	config string
	task   string
	json   bool
}

func addAdminFlags(fs *pflag.FlagSet, af *adminFlags, needTask bool) {
	fs.StringVarP(&af.config, "config", "c", "", "configuration file to read admin.addr and admin.token from (default "+defaultConfigFile+" if it exists)")
	fs.String("admin-addr", "", "the host's admin API address (env WASMSTREAM_ADMIN_ADDR)")
	fs.String("admin-token", "", "the admin API's bearer token (env WASMSTREAM_ADMIN_TOKEN)")
	if needTask {
		fs.StringVar(&af.task, "task", "", "the task (required)")
	}
}

// adminClient calls one host's admin API.
type adminClient struct {
	base  string // http://host:port
	token string
	// tokenFrom says where token came from ("--admin-token", …), for the error of a refused
	// token; "" when none was given.
	tokenFrom string
	hc        *http.Client
}

// client resolves the address and token from flags, environment and configuration file.
func (af *adminFlags) client(fs *pflag.FlagSet, needTask bool) (*adminClient, error) {
	if needTask && af.task == "" {
		return nil, usageError("--task is required")
	}
	path, err := configPath(af.config, false)
	if err != nil {
		return nil, err
	}
	s, err := loadFile(path, fs, false)
	if err != nil {
		return nil, exitFor(err)
	}
	addr := s.Host.Admin.Addr
	if addr == "" {
		return nil, &exitError{code: exitUsage, err: errors.New("no admin API address"),
			hint: "pass --admin-addr HOST:PORT, set WASMSTREAM_ADMIN_ADDR, or admin.addr in the configuration file"}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usageError("admin address %q is not host:port: %v", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	c := &adminClient{
		base:  "http://" + net.JoinHostPort(host, port),
		token: s.Host.Admin.Token,
		hc:    &http.Client{},
	}
	switch {
	case c.token == "":
	case fs.Changed("admin-token"):
		c.tokenFrom = "--admin-token"
	case os.Getenv(envName("admin.token")) != "":
		c.tokenFrom = envName("admin.token")
	default:
		c.tokenFrom = "admin.token in " + path
	}
	return c, nil
}

// tokenHint says, for an answer 401, where this client took its token from and where it can
// take the host's.
func (c *adminClient) tokenHint() string {
	const where = "pass the host's admin token with --admin-token, WASMSTREAM_ADMIN_TOKEN, or admin.token in the configuration file (-c)"
	if c.tokenFrom == "" {
		return "no token was given: " + where
	}
	return "the token sent came from " + c.tokenFrom + ": " + where
}

// unknownTaskHint lists the tasks the host runs, for an answer 404 about a task; "" when they
// cannot be had.
func (c *adminClient) unknownTaskHint(ctx context.Context) string {
	var st wireStatus
	if c.do(ctx, http.MethodGet, "/v1/status", nil, 0, &st) != nil {
		return ""
	}
	names := make([]string, len(st.Tasks))
	for i, t := range st.Tasks {
		names[i] = t.Task
	}
	if len(names) == 0 {
		return "the host runs no task"
	}
	return "the host's tasks: " + strings.Join(names, ", ")
}

// do sends a request and decodes a 2xx JSON answer into out; other answers become errors
// carrying the server's message and problems.
func (c *adminClient) do(ctx context.Context, method, path string, body io.Reader, size int64, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return failure(err)
	}
	if body != nil {
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/wasm")
		if _, ok := body.(jsonBody); ok {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &exitError{code: exitFailure, err: fmt.Errorf("admin API at %s: %w", c.base, err),
			hint: "is the host running with admin.addr set, and is the address right?"}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return failure(fmt.Errorf("admin API: reading the answer: %w", err))
	}
	if resp.StatusCode/100 != 2 {
		return c.answerError(ctx, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return failure(fmt.Errorf("admin API: unexpected answer: %w", err))
	}
	return nil
}

// answerError is the error of a non-2xx answer (status, body data): the server's message and
// problems, with a hint for a refused token or an unknown task.
func (c *adminClient) answerError(ctx context.Context, status int, data []byte) error {
	var e struct {
		Error    string   `json:"error"`
		Problems []string `json:"problems"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(data))
	}
	var errs []error
	if len(e.Problems) > 0 {
		errs = append(errs, fmt.Errorf("%s (HTTP %d):", e.Error, status))
		for _, p := range e.Problems {
			errs = append(errs, errors.New(p))
		}
		return failure(errors.Join(errs...))
	}
	ee := &exitError{code: exitFailure, err: fmt.Errorf("%s (HTTP %d)", e.Error, status)}
	switch {
	case status == http.StatusUnauthorized:
		ee.hint = c.tokenHint()
	case status == http.StatusNotFound && strings.Contains(e.Error, "no such task"):
		ee.hint = c.unknownTaskHint(ctx)
	}
	return ee
}

// jsonBody is a request body of JSON (do sends the others as a module).
type jsonBody struct{ io.Reader }

func taskPath(task string, rest string) string {
	return "/v1/tasks/" + url.PathEscape(task) + rest
}

func newDeployCommand(stdout, stderr io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "deploy --task NAME FILE.wasm",
		Short: "Deploy a new module version to a running task",
		Long: `Deploy uploads a module to a running host, which validates it (ABI version, exports,
imports, memory limit, and a trial instance whose init runs with the task's config) and, if
it passes, switches the task to it without stopping: batches started from then on run on
the new version, batches in flight finish on the old one, no record is lost or processed
twice, and the task's state is kept. A refused module changes nothing; the reasons are
printed and the exit status is 1. The new version stays active across restarts, overriding
the module file of the configuration, until another is deployed or rolled back to.

A progress line shows the upload and the validation of a large module.

` + adminHelp,
		Example: `  wasmstream deploy --task wordcount wordcount.wasm
  WASMSTREAM_ADMIN_TOKEN=s3cret wasmstream deploy --admin-addr 10.0.0.5:7070 --task wordcount wc.wasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.client(cmd.Flags(), true)
			if err != nil {
				return err
			}
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("module: %w", err)}
			}
			var d wireDeployment
			p := newProgress(stderr, args[0], int64(len(wasm)))
			err = c.do(cmd.Context(), http.MethodPost, taskPath(af.task, "/versions"), p.reader(bytes.NewReader(wasm)), int64(len(wasm)), &d)
			p.stop()
			if err != nil {
				return err
			}
			printDeployment(stdout, d, "deployed")
			printWarnings(stderr, d)
			return nil
		},
	}
	addAdminFlags(cmd.Flags(), &af, true)
	return cmd
}

func newRollbackCommand(stdout io.Writer) *cobra.Command {
	var af adminFlags
	var to int64
	cmd := &cobra.Command{
		Use:   "rollback --task NAME [--to VERSION] [--data-dir DIR]",
		Short: "Switch a task back to an earlier module version",
		Long: `Rollback switches a running task to the version before the active one (the highest-numbered
version below it; rolling back again goes further back), or to --to VERSION, the same way
deploy switches to a new one. The data directory keeps the last keep_module_versions
versions of each task (see versions).

` + offlineHelp + ` Offline, rollback only records the version as
active: the host runs it at its next start (and, should its init fail there, falls back to
an earlier version as usual).

` + adminHelp,
		Example: `  wasmstream rollback --task wordcount
  wasmstream rollback --task wordcount --to 3
  wasmstream rollback --task wordcount --data-dir /var/lib/wasmstream   # host stopped`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("to") && to <= 0 {
				return usageError("--to must be a version number (see wasmstream versions)")
			}
			if dir, ok := offlineDir(cmd.Flags()); ok {
				if af.task == "" {
					return usageError("--task is required")
				}
				d, err := host.OfflineRollback(dir, af.task, to)
				if err != nil {
					return offlineFailure(err)
				}
				printDeployment(stdout, wireDeployment{Task: d.Task, Version: offlineVersion(d.Version), Previous: d.Previous,
					Unchanged: d.Unchanged, SwitchMillis: -1}, "rolled back")
				return nil
			}
			c, err := af.client(cmd.Flags(), true)
			if err != nil {
				return err
			}
			path := taskPath(af.task, "/rollback")
			if cmd.Flags().Changed("to") {
				path += "?to=" + strconv.FormatInt(to, 10)
			}
			var d wireDeployment
			if err := c.do(cmd.Context(), http.MethodPost, path, nil, 0, &d); err != nil {
				return err
			}
			printDeployment(stdout, d, "rolled back")
			printWarnings(cmd.ErrOrStderr(), d)
			return nil
		},
	}
	addAdminFlags(cmd.Flags(), &af, true)
	addDataDirFlag(cmd.Flags())
	cmd.Flags().Int64Var(&to, "to", 0, "the version to roll back to (default: the one before the active one)")
	return cmd
}

// addDataDirFlag adds --data-dir: the commands that have it work offline when it is given.
func addDataDirFlag(fs *pflag.FlagSet) {
	fs.String("data-dir", "", "work on this data directory of a stopped host instead of calling the admin API")
}

// offlineDir returns --data-dir and whether it was given.
func offlineDir(fs *pflag.FlagSet) (string, bool) {
	if !fs.Changed("data-dir") {
		return "", false
	}
	dir, _ := fs.GetString("data-dir")
	return dir, true
}

// offlineFailure gives an offline command's error its exit status and a hint.
func offlineFailure(err error) error {
	switch {
	case errors.Is(err, host.ErrHostRunning):
		return &exitError{code: exitFailure, err: err, hint: "a running host is reached through its admin API: drop --data-dir"}
	case errors.Is(err, host.ErrNoState):
		return &exitError{code: exitFailure, err: err, hint: "is --data-dir the data_dir of the host's configuration?"}
	}
	return failure(err)
}

func offlineVersion(v host.ModuleVersion) wireVersion {
	return wireVersion{Version: v.Version, SHA256: v.SHA256, Size: v.Size, Created: v.Created, ABIVersion: v.ABIVersion,
		Origin: v.Origin, Active: v.Active, ActiveOrigin: v.ActiveOrigin, Status: v.Status, Reason: v.Reason}
}

func printDeployment(w io.Writer, d wireDeployment, verb string) {
	v := d.Version
	if d.Unchanged {
		fmt.Fprintf(w, "task %s: version %d (sha256 %s) is already active; nothing changed\n", d.Task, v.Version, short(v.SHA256))
		return
	}
	if d.Restarted {
		fmt.Fprintf(w, "task %s: %s: version %d active (was %d), sha256 %s, %d bytes, abi %s; the halted task restarted on it\n",
			d.Task, verb, v.Version, d.Previous, short(v.SHA256), v.Size, v.ABIVersion)
		return
	}
	if d.SwitchMillis < 0 { // offline
		fmt.Fprintf(w, "task %s: %s: version %d active (was %d), sha256 %s, %d bytes, abi %s; the host runs it at its next start\n",
			d.Task, verb, v.Version, d.Previous, short(v.SHA256), v.Size, v.ABIVersion)
		return
	}
	fmt.Fprintf(w, "task %s: %s: version %d active (was %d), sha256 %s, %d bytes, abi %s; switched %.1f ms after the request\n",
		d.Task, verb, v.Version, d.Previous, short(v.SHA256), v.Size, v.ABIVersion, d.SwitchMillis)
}

// printWarnings writes what the host warned about the deployed version, a line each.
func printWarnings(w io.Writer, d wireDeployment) {
	for _, n := range d.Warnings {
		fmt.Fprintf(w, "wasmstream: warning: task %s version %d: %s\n", d.Task, d.Version.Version, n)
	}
}

func short(sum string) string { return sum[:min(12, len(sum))] }

func newVersionsCommand(stdout io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "versions --task NAME [--data-dir DIR]",
		Short: "List the module versions of a task",
		Long: `Versions lists the module versions a host keeps for a task, oldest first, marking the
active one. Origin "file" is the module file of the configuration, "deploy" an upload; an
active version's "active by" says how it became active (file, deploy, activate, rollback,
auto-rollback: the host fell back to it at start because the active version could not
start). Status is "good" once a batch ran on the version, "bad" when it could not start,
with the reason; the host does not start a bad version again by itself.

` + offlineHelp + `

` + adminHelp,
		Example: `  wasmstream versions --task wordcount
  wasmstream versions --task wordcount --json
  wasmstream versions --task wordcount --data-dir /var/lib/wasmstream   # host stopped`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runVersions(cmd, stdout, &af) },
	}
	addAdminFlags(cmd.Flags(), &af, true)
	addDataDirFlag(cmd.Flags())
	cmd.Flags().BoolVar(&af.json, "json", false, "print the API's JSON answer")
	return cmd
}

func printVersions(w io.Writer, versions []wireVersion) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tACTIVE\tORIGIN\tSTATUS\tCREATED\tSIZE\tABI\tSHA256")
	var bad []wireVersion
	for _, v := range versions {
		active := ""
		if v.Active {
			active = "* (" + v.ActiveOrigin + ")"
		}
		if v.Status == "bad" {
			bad = append(bad, v)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.Version, active, v.Origin, cmp.Or(v.Status, "-"),
			v.Created.Local().Format(time.DateTime), v.Size, v.ABIVersion, short(v.SHA256))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range bad {
		fmt.Fprintf(w, "version %d is bad: %s\n", v.Version, v.Reason)
	}
	return nil
}

// runVersions lists a task's module versions, from a stopped host's data directory (--data-dir)
// or a running host.
func runVersions(cmd *cobra.Command, stdout io.Writer, af *adminFlags) error {
	if dir, ok := offlineDir(cmd.Flags()); ok {
		return offlineVersions(stdout, dir, af)
	}
	c, err := af.client(cmd.Flags(), true)
	if err != nil {
		return err
	}
	if af.json {
		var raw json.RawMessage
		if err := c.do(cmd.Context(), http.MethodGet, taskPath(af.task, "/versions"), nil, 0, &raw); err != nil {
			return err
		}
		_, err := stdout.Write(raw)
		return err
	}
	var out struct {
		Versions []wireVersion `json:"versions"`
	}
	if err := c.do(cmd.Context(), http.MethodGet, taskPath(af.task, "/versions"), nil, 0, &out); err != nil {
		return err
	}
	return printVersions(stdout, out.Versions)
}

// offlineVersions lists a task's module versions from the data directory dir of a stopped host.
func offlineVersions(stdout io.Writer, dir string, af *adminFlags) error {
	if af.task == "" {
		return usageError("--task is required")
	}
	vs, err := host.OfflineVersions(dir, af.task)
	if err != nil {
		return offlineFailure(err)
	}
	var versions []wireVersion
	for _, v := range vs {
		versions = append(versions, offlineVersion(v))
	}
	if af.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"task": af.task, "versions": versions})
	}
	return printVersions(stdout, versions)
}

func newStatusCommand(stdout io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the tasks of a running host",
		Long: `Status shows each task of a running host: its active module version, whether it is paused,
records read, processed, pending (read and not complete) and in flight, outputs, dead
letters, retries and failed calls, and for each input the records read and the committed
line a restart would resume after. Figures are as of the task's last checkpoint. A task that
could not start or failed shows HALTED with the reason (on_task_failure: halt_task); once the
cause is fixed, restart it with wasmstream restart --task NAME, or deploy or rollback a version
that works. With on_task_failure: restart it also shows when the host restarts it by itself.

` + adminHelp,
		Example: `  wasmstream status
  wasmstream status --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client(cmd.Flags(), false)
			if err != nil {
				return err
			}
			if af.json {
				var raw json.RawMessage
				if err := c.do(cmd.Context(), http.MethodGet, "/v1/status", nil, 0, &raw); err != nil {
					return err
				}
				_, err := stdout.Write(raw)
				return err
			}
			var st wireStatus
			if err := c.do(cmd.Context(), http.MethodGet, "/v1/status", nil, 0, &st); err != nil {
				return err
			}
			for _, t := range st.Tasks {
				printTaskStatus(stdout, t)
			}
			return nil
		},
	}
	addAdminFlags(cmd.Flags(), &af, false)
	cmd.Flags().BoolVar(&af.json, "json", false, "print the API's JSON answer")
	return cmd
}

// printTaskStatus writes a task's status line, a line per input, and lines for the timers, the
// changelog, the chain, exactly-once transactions and the guest log where they have figures.
func printTaskStatus(w io.Writer, t host.TaskStats) {
	state := "running"
	switch {
	case t.Halted && !t.RestartAt.IsZero():
		state = "HALTED (" + t.Error + "), restarting at " + t.RestartAt.UTC().Format(time.RFC3339)
		if t.RestartError != "" {
			state += " (the last restart failed: " + t.RestartError + ")"
		}
	case t.Halted:
		state = "HALTED (" + t.Error + ")"
	case t.Paused:
		state = "paused"
	}
	fmt.Fprintf(w, "task %s: %s, version %d; records %d, processed %d, pending %d, in flight %d, outputs %d, dead letters %d, retries %d, failures %d\n",
		t.Task, state, t.Version, t.Records, t.Processed, t.Pending, t.InFlight, t.Outputs, t.DeadLetters, t.Retries, t.Failures)
	if t.Restarts > 0 {
		fmt.Fprintf(w, "  restarted automatically %d times (on_task_failure: restart)\n", t.Restarts)
	}
	for _, in := range t.Inputs {
		fmt.Fprintln(w, statusInputLine(in))
	}
	if t.TimersSet+t.TimersFired+t.PendingTimers+t.Late+t.Ticks > 0 {
		fmt.Fprintf(w, "  time: timers set %d, fired %d, pending %d; late records %d; ticks %d\n",
			t.TimersSet, t.TimersFired, t.PendingTimers, t.Late, t.Ticks)
	}
	if t.RetentionLost > 0 {
		fmt.Fprintf(w, "  kafka: %d offsets of input records lost to retention (removed below a partition's position before they were read)\n", t.RetentionLost)
	}
	if t.Restores+t.ChangelogRecords+t.StandbyRecords > 0 {
		fmt.Fprintf(w, "  changelog: %d key snapshots written; %d partitions restored (%d records, %d bytes); standby applied %d records\n",
			t.ChangelogRecords, t.Restores, t.RestoredRecords, t.RestoredBytes, t.StandbyRecords)
	}
	if t.ChainEntries+t.ChainHolds > 0 {
		fmt.Fprintf(w, "  chain: %d records appended for other tasks; held %d times for their backlog\n", t.ChainEntries, t.ChainHolds)
	}
	if t.TxnCommits+t.TxnAborts > 0 {
		fmt.Fprintf(w, "  exactly once: %d transactions committed, %d aborted\n", t.TxnCommits, t.TxnAborts)
	}
	if t.LogDropped > 0 {
		fmt.Fprintf(w, "  guest log: %d lines dropped by the rate limit (max_log_lines_per_second)\n", t.LogDropped)
	}
}

func newRestartCommand(stdout io.Writer) *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "restart --task NAME",
		Short: "Start a halted task again on its active version, without restarting the host",
		Long: `Restart starts a task that halted (on_task_failure: halt_task, or restart before its time) again on the running host, on
its active module version, from its last checkpoint, as a restarted host would start it; the
host's other tasks run on throughout. A kafka task gets new clients: its consumer joins its
group again, its producer (or transactional producer) and changelog client are new, and it
resumes by the same rules as at a host start. Fix the cause first (create the missing topic,
bring the cluster back): a task that halts again shows the new cause in status.

It prints the version the task runs and why it had halted. A task that has not halted is
refused (HTTP 409), and so is one whose outputs cannot open yet (the cluster still
unreachable): it stays halted. POST /v1/tasks/{task}/restart is the same call.

` + adminHelp,
		Example: "  wasmstream restart --task wordcount\n  wasmstream restart --admin-addr :7070 --admin-token s3cret --task wordcount",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client(cmd.Flags(), true)
			if err != nil {
				return err
			}
			var d wireDeployment
			if err := c.do(cmd.Context(), http.MethodPost, taskPath(af.task, "/restart"), nil, 0, &d); err != nil {
				return err
			}
			if af.json {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(d)
			}
			fmt.Fprintf(stdout, "task %s: restarted on version %d (sha256 %s) from its last checkpoint; it had halted: %s\n",
				d.Task, d.Version.Version, short(d.Version.SHA256), d.Halted)
			printWarnings(cmd.ErrOrStderr(), d)
			return nil
		},
	}
	addAdminFlags(cmd.Flags(), &af, true)
	cmd.Flags().BoolVar(&af.json, "json", false, "print the host's answer as JSON")
	return cmd
}

func newPauseCommand(stdout io.Writer, pause bool) *cobra.Command {
	var af adminFlags
	name, short, long := "pause", "Stop a running task from starting batches", `Pause stops a running task from starting batches: the batches in flight finish, checkpoints
go on, and reading stops once its queues are full. resume undoes it. A paused task is not
paused any more after a restart.`
	if !pause {
		name, short, long = "resume", "Let a paused task start batches again", `Resume lets a task paused with pause start batches again.`
	}
	cmd := &cobra.Command{
		Use:     name + " --task NAME",
		Short:   short,
		Long:    long + "\n\n" + adminHelp,
		Example: "  wasmstream " + name + " --task wordcount",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := af.client(cmd.Flags(), true)
			if err != nil {
				return err
			}
			if err := c.do(cmd.Context(), http.MethodPost, taskPath(af.task, "/"+name), nil, 0, nil); err != nil {
				return err
			}
			verb := "paused"
			if !pause {
				verb = "resumed"
			}
			fmt.Fprintf(stdout, "task %s: %s\n", af.task, verb)
			return nil
		},
	}
	addAdminFlags(cmd.Flags(), &af, true)
	return cmd
}

// progress prints a progress line on w while a module uploads and the host validates it: the
// first after progressEvery, then every progressEvery, overwritten in place; nothing at all
// for a call that ends sooner.
type progress struct {
	w     io.Writer
	name  string
	total int64
	sent  atomic.Int64
	start time.Time
	done  chan struct{}
	wg    sync.WaitGroup
	shown bool
}

const progressEvery = 250 * time.Millisecond

func newProgress(w io.Writer, name string, total int64) *progress {
	p := &progress{w: w, name: name, total: total, start: time.Now(), done: make(chan struct{})}
	p.wg.Add(1)
	go p.run()
	return p
}

func (p *progress) reader(r io.Reader) io.Reader { return &countingReader{r: r, n: &p.sent} }

func (p *progress) run() {
	defer p.wg.Done()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
			p.shown = true
			sent := p.sent.Load()
			line := fmt.Sprintf("deploying %s: uploaded %s of %s (%d%%)", p.name, mib(sent), mib(p.total), sent*100/max(p.total, 1))
			if sent >= p.total {
				line = fmt.Sprintf("deploying %s: uploaded %s; the host is compiling and validating it (%s)", p.name, mib(p.total), time.Since(p.start).Round(100*time.Millisecond))
			}
			fmt.Fprintf(p.w, "\r%-100s", line)
		}
	}
}

// stop ends the progress line.
func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
	if p.shown {
		fmt.Fprintln(p.w)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// statusInputLine is an input's line in status: a chained input's upstream, committed entry and
// lag, a file or stdin input's committed line, a Kafka partition's topic, partition and
// committed offset.
func statusInputLine(in host.InputStats) string {
	if in.Chain != "" {
		return fmt.Sprintf("  input %s: chain %s: read %d, committed entry %d, lag %d", in.Name, in.Chain, in.Records, in.Committed, in.Lag)
	}
	line := fmt.Sprintf("  input %s: topic %s partition %d: read %d, committed offset %d", in.Name, in.Topic, in.Partition, in.Records, in.Committed)
	if in.Partition < 0 {
		line = fmt.Sprintf("  input %s: read %d, committed line %d", in.Name, in.Records, in.Committed)
	}
	if in.ReplayHead > in.ReplayFrom {
		line += fmt.Sprintf("; replaying from %d after a reset: %d of %d to the head at the reset to go", in.ReplayFrom, in.ReplayRemaining, in.ReplayHead-in.ReplayFrom)
	}
	return line
}
