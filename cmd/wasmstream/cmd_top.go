package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// top: a live terminal view of a running host, from the admin API's status.

func newTopCommand(stdout io.Writer) *cobra.Command {
	var af adminFlags
	var once bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show a live view of a running host's tasks",
		Long: `Top shows a running host's tasks and their inputs (Kafka partitions), refreshed every
--interval: state, module version, records read and processed with their rates per second
(from two successive status answers), pending, lag, outputs, dead letters, retries and
failures, and why a halted task halted. Ctrl-C ends it. With --once it prints one frame
without escape codes and exits, for scripts and tests: since the figures move at the tasks'
checkpoints, its rates are over one --interval or more, until a checkpoint passed (at most
10 intervals, or 3 s).

` + adminHelp,
		Example: `  wasmstream top
  wasmstream top --once --admin-addr 127.0.0.1:7070`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageError("--interval %v is not positive", interval)
			}
			c, err := af.client(cmd.Flags(), false)
			if err != nil {
				return err
			}
			return runTop(cmd.Context(), stdout, c, interval, once)
		},
	}
	addAdminFlags(cmd.Flags(), &af, false)
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "time between refreshes (and the rates' window)")
	return cmd
}

// runTop asks the host c for its status every interval and writes a frame of it to stdout, until
// ctx ends; once: a single frame without escape codes, then it returns.
func runTop(ctx context.Context, stdout io.Writer, c *adminClient, interval time.Duration, once bool) error {
	fetch := func() (topSnapshot, error) {
		var st wireStatus
		err := c.do(ctx, http.MethodGet, "/v1/status", nil, 0, &st)
		return topSnapshot{at: time.Now(), st: st}, err
	}
	prev, err := fetch()
	if err != nil {
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// A task's figures move at its checkpoints: --once waits past its interval until
	// one passed (or the bound), so that rates do not read 0 while records flow.
	onceBound := prev.at.Add(max(10*interval, 3*time.Second))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		cur, err := fetch()
		if ctx.Err() != nil {
			return nil
		}
		if once {
			if err != nil {
				return err
			}
			if !checkpointed(prev, cur) && cur.at.Before(onceBound) {
				continue
			}
			writeTopFrame(stdout, c.base, prev, cur, "")
			return nil
		}
		var b strings.Builder
		b.WriteString("\x1b[H\x1b[2J") // home, clear the screen
		if err != nil {
			// Keep the last figures on screen and say why they are not refreshed.
			writeTopFrame(&b, c.base, prev, prev, "not refreshed: "+err.Error())
		} else {
			writeTopFrame(&b, c.base, prev, cur, "")
			prev = cur
		}
		if _, err := io.WriteString(stdout, b.String()); err != nil {
			return failure(err)
		}
	}
}

type topSnapshot struct {
	at time.Time
	st wireStatus
}

// checkpointed reports whether a task of cur committed a checkpoint since prev (or is new).
func checkpointed(prev, cur topSnapshot) bool {
	before := map[string]int64{}
	for _, t := range prev.st.Tasks {
		before[t.Task] = t.Checkpoints
	}
	for _, t := range cur.st.Tasks {
		if n, ok := before[t.Task]; !ok || t.Checkpoints > n {
			return true
		}
	}
	return false
}

// writeTopFrame writes one frame: the figures of cur, with rates from prev to cur.
func writeTopFrame(w io.Writer, addr string, prev, cur topSnapshot, note string) {
	r := newTopRates(prev, cur)
	fmt.Fprintf(w, "wasmstream top: %s at %s, rates over %.1fs\n", addr, cur.at.Format("15:04:05"), r.secs)
	if note != "" {
		fmt.Fprintf(w, "%s\n", note)
	}
	fmt.Fprintln(w)
	halted := writeTopTasks(w, r, cur)
	fmt.Fprintln(w)
	writeTopInputs(w, r, cur)
	for _, h := range halted {
		fmt.Fprintf(w, "\n%s\n", h)
	}
	writeTopErrors(w, cur)
}

// topRates computes the rates of a frame from the figures of the snapshot before.
type topRates struct {
	prev      topSnapshot
	secs      float64
	prevTask  map[string]int        // a task's index in prev
	prevInput map[topInputKey]int64 // an input's records in prev
}

type topInputKey struct {
	task, input, topic string
	part               int32
}

func newTopRates(prev, cur topSnapshot) *topRates {
	r := &topRates{prev: prev, secs: cur.at.Sub(prev.at).Seconds(), prevTask: map[string]int{}, prevInput: map[topInputKey]int64{}}
	for i, t := range prev.st.Tasks {
		r.prevTask[t.Task] = i
		for _, in := range t.Inputs {
			r.prevInput[topInputKey{t.Task, in.Name, in.Topic, in.Partition}] = in.Records
		}
	}
	return r
}

// perSec is the rate from before to now, or "-" when there was no before (ok false), no time
// passed or the count went down.
func (r *topRates) perSec(now, before int64, ok bool) string {
	if !ok || r.secs <= 0 || now < before {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(now-before)/r.secs)
}

// writeTopTasks writes the table of tasks and returns a line for each halted task.
func writeTopTasks(w io.Writer, r *topRates, cur topSnapshot) (halted []string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "TASK\tSTATE\tVERSION\tRECORDS\tREAD/S\tPROCESSED\tPROC/S\tPENDING\tLAG\tOUTPUTS\tDEAD\tRETRIES\tFAILURES\t\n")
	for _, t := range cur.st.Tasks {
		state := "running"
		switch {
		case t.Halted:
			state = "HALTED"
			line := fmt.Sprintf("task %s halted: %s", t.Task, escape([]byte(t.Error)))
			if !t.RestartAt.IsZero() {
				line += "; restarting at " + t.RestartAt.UTC().Format(time.RFC3339)
			}
			halted = append(halted, line)
		case t.Paused:
			state = "paused"
		}
		var lag int64
		lagKnown := false
		for _, in := range t.Inputs {
			if in.Lag >= 0 {
				lag += in.Lag
				lagKnown = true
			}
		}
		lagText := "-"
		if lagKnown {
			lagText = fmt.Sprint(lag)
		}
		pi, ok := r.prevTask[t.Task]
		var pRec, pProc int64
		if ok {
			pRec, pProc = r.prev.st.Tasks[pi].Records, r.prev.st.Tasks[pi].Processed
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t\n", t.Task, state, t.Version,
			t.Records, r.perSec(t.Records, pRec, ok), t.Processed, r.perSec(t.Processed, pProc, ok),
			t.Pending, lagText, t.Outputs, t.DeadLetters, t.Retries, t.Failures)
	}
	tw.Flush()
	return halted
}

// writeTopInputs writes the table of the tasks' inputs.
func writeTopInputs(w io.Writer, r *topRates, cur topSnapshot) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "TASK\tINPUT\tPARTITION\tRECORDS\tREAD/S\tCOMMITTED\tLAG\tREPLAY\t\n")
	for _, t := range cur.st.Tasks {
		for _, in := range t.Inputs {
			part, lag := "-", "-"
			if in.Topic != "" {
				part = fmt.Sprintf("%s/%d", in.Topic, in.Partition)
			}
			if in.Lag >= 0 {
				lag = fmt.Sprint(in.Lag)
			}
			// REPLAY: after a reset, the records still to go to the head captured at the reset,
			// of all the replay covers.
			replay := "-"
			if in.ReplayHead > in.ReplayFrom {
				replay = fmt.Sprintf("%d/%d", in.ReplayRemaining, in.ReplayHead-in.ReplayFrom)
			}
			before, ok := r.prevInput[topInputKey{t.Task, in.Name, in.Topic, in.Partition}]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t\n", t.Task, in.Name, part, in.Records,
				r.perSec(in.Records, before, ok), in.Committed, lag, replay)
		}
	}
	tw.Flush()
}

// writeTopErrors writes the last errors of each task, newest first. Guest errors and keys are
// escaped: they could hold terminal escape codes.
func writeTopErrors(w io.Writer, cur topSnapshot) {
	first := true
	for _, t := range cur.st.Tasks {
		errs := t.Recent
		for i := len(errs) - 1; i >= 0 && i >= len(errs)-topRecentErrors; i-- {
			e := errs[i]
			if first {
				fmt.Fprintf(w, "\nRECENT ERRORS\n")
				first = false
			}
			key := ""
			switch {
			case e.KeyNull:
				key = " key " + nullKeyText
			case e.Key != "":
				key = " key " + escape([]byte(e.Key))
			}
			fmt.Fprintf(w, "%s %s %s: %s%s: %s\n", e.Time.Local().Format("15:04:05"), t.Task, e.Kind,
				escape([]byte(e.Where)), key, escape([]byte(e.Err)))
		}
	}
}

// topRecentErrors is how many of each task's recent errors top shows.
const topRecentErrors = 5
