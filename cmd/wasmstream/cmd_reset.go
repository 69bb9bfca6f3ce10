package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmstream/wasmstream/host"
)

// resetHelp is reset's long help.
const resetHelp = `Reset moves a task back (or forward) on its inputs, on a stopped host, and resets together what
must move together:

  - each input's position in the local checkpoint, and for a kafka input the consumer
    group's committed offsets;
  - the task's state and timers of those inputs, moved aside in the store under the task name
    <task>.reset-<UTC time> (nothing is deleted; 'wasmstream state --task <that name>' prints
    them);
  - with changelog.enabled, the changelog: a tombstone for every key it holds and a position
    at the new offset, so that no host restores the old state from it.

--to is earliest (each partition's first record, a file's first line), latest (the end: only
records that arrive later are processed), an RFC 3339 time (each partition's first record
stamped at or after it), or partition:offset,... for some partitions of a kafka input
(topic:partition:offset where it reads several topics; the partitions not named keep their
positions and state). A file input resets to earliest or latest only; a stdin input cannot be
reset.

Without --admin-addr, the host must be stopped: a running host holds the data directory and
the group has members, and reset refuses both. Stop every host of the task (the group's
members), reset on one of them, and start them again.

With --admin-addr (and --admin-token, else WASMSTREAM_ADMIN_TOKEN or admin.token of the
configuration file), the running host at that address resets the task itself
(POST /v1/tasks/{task}/reset): it stops that task alone (its batches finish, a last checkpoint
commits, a kafka task leaves its group), resets it as above and starts it again, while its
other tasks keep running. A kafka task run by several hosts is reset on all of them, running:
the host asked has the others (the members of the task's group, found at the admin address each
advertises) stop the task too, resets the group's offsets and the changelog, and has each move
its own state aside and take the new positions before they all run again. A member that cannot
be reached (or advertises no address) is named and nothing is reset; a member that is not a
wasmstream host of the group is refused likewise. A task that halted on that host (say on an
input topic deleted and recreated, which a restart halts on again) is reset too and started
again; the output says why it had halted.

--dry-run prints what would move and writes nothing. A reset that fails midway can be run
again. Until each input caught up with its end as it stood at the reset, status, /metrics
(wasmstream_replay_remaining_records), top and the dashboard show the replay's progress.

--drop-backup <task>.reset-<time> deletes such a backup once it is no longer wanted.

The data directory is --data-dir, else WASMSTREAM_DATA_DIR, else the data_dir of the
configuration file (--config, or ` + defaultConfigFile + ` if it exists).

A task that 'run --module M.wasm --input IN ...' ran, without a configuration file, is reset
with the same --module and --input flags (and --task and --data-dir where run had them): they
name the task and its streams as run named them.`

// resetOptions are reset's flags.
type resetOptions struct {
	file, task, to, drop string
	dryRun, asJSON       bool
	// module and inputs: a task run without a configuration file (run --module M --input IN),
	// given again the same way.
	module string
	inputs []string
}

func newResetCommand(stdout io.Writer) *cobra.Command {
	var o resetOptions
	cmd := &cobra.Command{
		Use:   "reset --task NAME --to earliest|latest|TIME|P:O,... [--dry-run]",
		Short: "Replay a task: reset its input positions, state, timers, group offsets and changelog together",
		Long:  resetHelp,
		Example: `  wasmstream reset -c kafka.yaml --task wordcount --to earliest --dry-run
  wasmstream reset -c kafka.yaml --task wordcount --to earliest
  wasmstream reset -c kafka.yaml --task wordcount --to 2026-11-27T09:00:00Z
  wasmstream reset -c kafka.yaml --task wordcount --to 0:1200,3:950
  wasmstream reset --admin-addr :7070 --admin-token s3cret --task clicks --to earliest
  wasmstream reset --module wordcount.wasm --input in.ndjson --to earliest`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, stdout) },
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *resetOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.file, "config", "c", "", "configuration file (default "+defaultConfigFile+" if it exists)")
	fs.String("data-dir", "", "the host's data directory (env WASMSTREAM_DATA_DIR)")
	fs.StringVar(&o.task, "task", "", "the task to reset (required)")
	fs.StringVar(&o.to, "to", "", "where to: earliest, latest, an RFC 3339 time, or partition:offset,... (required)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would move; write nothing")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	fs.String("admin-addr", "", "reset through the running host whose admin API listens here (env WASMSTREAM_ADMIN_ADDR does not switch to it)")
	fs.String("admin-token", "", "with --admin-addr: the admin API's bearer token (env WASMSTREAM_ADMIN_TOKEN)")
	fs.StringVar(&o.drop, "drop-backup", "", "delete this backup of an earlier reset (<task>.reset-<time>) instead")
	fs.StringVar(&o.module, "module", "", "reset the task that run --module ran (no configuration file): the same --module, --input and --task (if given) as run")
	fs.StringArrayVar(&o.inputs, "input", nil, "with --module: an input of the task, as run was given it (repeatable)")
}

// run drops a backup (--drop-backup), resets through a running host (--admin-addr), or resets
// a stopped host's task.
func (o *resetOptions) run(cmd *cobra.Command, stdout io.Writer) error {
	if o.drop != "" {
		return dropBackup(cmd, stdout, o.file, o.drop)
	}
	if o.module == "" && len(o.inputs) > 0 {
		return usageError("--input needs --module: it names an input of a task run with --module (a task of a configuration file is found by --task)")
	}
	if o.module != "" && o.task == "" {
		o.task = taskName(o.module) // as run names it
	}
	if o.task == "" {
		return usageError("--task is required")
	}
	if o.to == "" {
		return usageError("--to is required: earliest, latest, an RFC 3339 time or partition:offset,...")
	}
	target, err := host.ParseResetTo(o.to)
	if err != nil {
		return usageError("--to %v", err)
	}
	if cmd.Flags().Changed("admin-addr") {
		if cmd.Flags().Changed("data-dir") {
			return usageError("--admin-addr resets through a running host, --data-dir a stopped host's data directory: pass one")
		}
		return onlineReset(cmd, stdout, o.file, o.task, o.to, o.dryRun, o.asJSON)
	}
	s, err := o.settings(cmd.Flags())
	if err != nil {
		return err
	}
	rep, err := host.OfflineReset(cmd.Context(), s.Host, o.task, target, o.dryRun)
	if err != nil {
		return resetFailure(err)
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printReset(stdout, rep, false)
	return nil
}

// settings loads the configuration of an offline reset: the configuration file, or the task
// given by --module and --input as run --module gives it.
func (o *resetOptions) settings(fs *pflag.FlagSet) (settings, error) {
	if o.module == "" {
		path, err := configPath(o.file, true)
		var ee *exitError
		if errors.As(err, &ee) && o.file == "" {
			ee.hint = "pass --config FILE; for a task run without one (run --module M.wasm --input IN ...), pass the same --module and --input flags (and --task and --data-dir where run had them): " +
				"wasmstream reset --module M.wasm --input IN --to earliest"
		}
		if err != nil {
			return settings{}, err
		}
		s, err := loadFile(path, fs, false)
		if err != nil {
			return s, exitFor(err)
		}
		return s, nil
	}
	if o.file != "" {
		return settings{}, usageError("--module and --config do not go together: give the task in one or the other, as run had it")
	}
	if len(o.inputs) == 0 {
		return settings{}, usageError("--module needs the task's --input flags, as run was given them (they name its streams): wasmstream reset --module %s --input IN --to %s", o.module, o.to)
	}
	q := quickTask{module: o.module, inputs: o.inputs, name: o.task}
	t, err := q.task()
	if err != nil {
		return settings{}, err
	}
	s, err := loadConfig(nil, "", fs)
	if err != nil {
		return s, exitFor(err)
	}
	s.Host.Tasks = []host.TaskConfig{t}
	return s, nil
}

// onlineReset is reset --admin-addr: the running host resets the task (POST
// /v1/tasks/{task}/reset) and prints its report as the offline reset does.
func onlineReset(cmd *cobra.Command, stdout io.Writer, file, task, to string, dryRun, asJSON bool) error {
	af := adminFlags{config: file, task: task}
	c, err := af.client(cmd.Flags(), true)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]string{"to": to})
	if err != nil {
		return failure(err)
	}
	path := taskPath(task, "/reset")
	if dryRun {
		path += "?dry_run=1"
	}
	var raw json.RawMessage
	if err := c.do(cmd.Context(), http.MethodPost, path, jsonBody{bytes.NewReader(body)}, int64(len(body)), &raw); err != nil {
		return err
	}
	if asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	var rep host.ResetReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return failure(fmt.Errorf("admin API: unexpected answer: %w", err))
	}
	printReset(stdout, &rep, true)
	return nil
}

// printReset prints a reset's report: a line per stream, then where the old state went. online:
// the report of a running host (its data directory is locked until it stops).
func printReset(w io.Writer, r *host.ResetReport, online bool) {
	verb := "reset"
	if r.DryRun {
		verb = "would reset (dry run: nothing written)"
	}
	fmt.Fprintf(w, "task %s %s to %s\n", r.Task, verb, r.To)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tLOCAL\tGROUP\tTO\tKEYS\tTIMERS\tTOMBSTONES")
	for _, s := range r.Streams {
		group := "-"
		if s.Stream[:6] == "kafka:" {
			group = offsetText(s.Committed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", s.Stream, offsetText(s.From), group, s.To, s.Keys, s.Timers, s.Tombstones)
	}
	_ = tw.Flush()
	if r.Group != "" {
		fmt.Fprintf(w, "consumer group %s: committed offsets set to TO\n", r.Group)
	}
	if r.Changelog != "" {
		fmt.Fprintf(w, "changelog %s: a tombstone per key and a position at TO, so that no host restores the old state\n", r.Changelog)
	}
	if r.Halted != "" && r.DryRun {
		fmt.Fprintf(w, "the task has halted (%s): the reset would start it again\n", r.Halted)
	} else if r.Halted != "" {
		fmt.Fprintf(w, "the task had halted (%s): reset, it was started again\n", r.Halted)
	}
	if r.DryRun {
		if len(r.Hosts) > 0 {
			fmt.Fprintf(w, "the other hosts of the group would reset with it (each moving its own state aside):\n")
			for _, h := range r.Hosts {
				fmt.Fprintf(w, "  %s  %s\n", h.Addr, h.Member)
			}
		}
		return
	}
	if online {
		fmt.Fprintf(w, "the task runs again, replaying; state and timers moved aside in the host's %s under task %s (once the host is stopped):\n", r.DataDir, r.Backup)
	} else {
		fmt.Fprintf(w, "state and timers moved aside in %s under task %s:\n", r.DataDir, r.Backup)
	}
	fmt.Fprintf(w, "  see them:  wasmstream state --data-dir %s --task %s\n", r.DataDir, r.Backup)
	fmt.Fprintf(w, "  drop them: wasmstream reset --data-dir %s --drop-backup %s\n", r.DataDir, r.Backup)
	if len(r.Hosts) > 0 {
		fmt.Fprintf(w, "the other hosts of the group, reset with it (each moved its own state aside in its own data directory):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "HOST\tMEMBER\tKEYS\tTIMERS\tBACKUP")
		for _, h := range r.Hosts {
			backup := h.Backup
			if h.Error != "" {
				backup = "not told: " + h.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", h.Addr, h.Member, h.Keys, h.Timers, backup)
		}
		_ = tw.Flush()
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

func offsetText(o int64) string {
	if o < 0 {
		return "-"
	}
	return fmt.Sprint(o)
}

// dropBackup is reset --drop-backup: the data directory as for a reset.
func dropBackup(cmd *cobra.Command, stdout io.Writer, file, backup string) error {
	dir, err := offlineDataDir(cmd, file)
	if err != nil {
		return err
	}
	if err := host.OfflineDropBackup(dir, backup); err != nil {
		return resetFailure(err)
	}
	fmt.Fprintf(stdout, "backup %s dropped from %s\n", backup, dir)
	return nil
}

// resetFailure gives reset's errors their exit status and a hint.
func resetFailure(err error) error {
	switch {
	case errors.Is(err, host.ErrHostRunning):
		return &exitError{code: exitFailure, err: err, hint: "stop the host first: reset works on a stopped host's data directory"}
	case errors.Is(err, host.ErrUnknownTask) || errors.Is(err, host.ErrResetRefused):
		return &exitError{code: exitFailure, err: err}
	}
	return offlineFailure(err)
}
