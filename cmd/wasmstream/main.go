package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/wasmstream/wasmstream/host"
)

// version is the wasmstream version, set at build time with
// -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	applyCgroupMemoryLimit()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the process exit status: 0 on success, 1 on a
// runtime failure, 2 on a usage or configuration error. It is the only place that turns
// SIGINT and SIGTERM into a cancelled context: the host then finishes its in-flight work,
// commits a last checkpoint and returns. A second signal kills the process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Once the first signal cancelled ctx, restore the default handling so that a second
	// one ends the process at once.
	defer context.AfterFunc(ctx, stop)()
	return execute(ctx, args, stdin, stdout, stderr)
}

// execute is run without the signal handling, for tests.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors cobra found itself: an unknown command or flag, a missing argument.
		ee = &exitError{code: exitUsage, err: err}
		ee.hint = unknownCommandHint(root, err)
	}
	printError(stderr, ee)
	return ee.code
}

// unknownCommand is cobra's error for a word that is no command: the word, and the command it
// followed ("wasmstream" for a misspelt command, "wasmstream version" for an extra argument).
var unknownCommand = regexp.MustCompile(`^unknown command "(.*)" for "(.*)"`)

// unknownCommandHint returns what to do about cobra's error err: for a misspelt command, the
// commands it may be a misspelling of and where the list is; "" for other errors.
func unknownCommandHint(root *cobra.Command, err error) string {
	m := unknownCommand.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	if m[2] != root.Name() {
		return fmt.Sprintf("run '%s --help' for usage", m[2])
	}
	hint := "run 'wasmstream --help' for the commands"
	if s := root.SuggestionsFor(m[1]); len(s) > 0 {
		hint = fmt.Sprintf("did you mean %s? %s", strings.Join(s, " or "), hint)
	}
	return hint
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // a runtime failure: a task failed, a module was refused, no state
	exitUsage   = 2 // a usage or configuration error
)

// exitError is a command's failure and the exit status it maps to.
type exitError struct {
	code int
	err  error
	// hint, when set, is printed on a line of its own after the error.
	hint string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a mistake in the command line.
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...), hint: "run 'wasmstream help' for usage"}
}

// failure is a runtime failure. A damaged state store or a full disk gets a hint on what to do.
func failure(err error) error {
	ee := &exitError{code: exitFailure, err: err}
	switch {
	case errors.Is(err, host.ErrStoreDamaged):
		ee.hint = damagedHint
	case errors.Is(err, host.ErrDiskFull):
		ee.hint = "free space on that file system, then run again: the last checkpoint is intact"
	}
	return ee
}

// damagedHint is what to do about a damaged state store.
const damagedHint = `the state store is damaged and was not used. Keep a copy of the data directory, then restore
it from a backup, or run 'wasmstream run --reset-state' to move the store aside (nothing is
deleted) and start with empty state: file inputs are read again from the start, and tasks with
a changelog restore their state from it (docs/storage-and-crashes.md, "Storage faults")`

// printError writes ee to w, one problem a line when it joins several.
func printError(w io.Writer, ee *exitError) {
	var ce *configErrors
	switch list := unjoin(ee.err); {
	case errors.As(ee.err, &ce):
		fmt.Fprintf(w, "wasmstream: %s:\n", ce.title())
		for _, e := range ce.errs {
			fmt.Fprintf(w, "  %s\n", message(e))
		}
	case len(list) > 1:
		fmt.Fprintln(w, "wasmstream:")
		for _, e := range list {
			fmt.Fprintf(w, "  %s\n", message(e))
		}
	default:
		fmt.Fprintf(w, "wasmstream: %s\n", message(ee.err))
	}
	if ee.hint != "" {
		fmt.Fprintf(w, "%s\n", ee.hint)
	}
}

// message is err's text without the "wasmstream: " prefix the host's errors carry, which
// printError adds once.
func message(err error) string {
	return strings.TrimPrefix(err.Error(), "wasmstream: ")
}

// unjoin flattens errors.Join trees into their leaves.
func unjoin(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, unjoin(e)...)
	}
	return out
}

// newRootCommand builds the command tree. Each call builds a fresh one: no command, flag or
// viper instance is shared between calls.
func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "wasmstream",
		Short: "Run stateful stream tasks written as WebAssembly modules",
		Long: `wasmstream runs stateful stream tasks written as WebAssembly modules.

Each task reads records from its inputs, hands them in batches to its module, keeps the
module's state in a local store and writes what the module emits to its output. Progress is
checkpointed, so a stopped or killed run resumes where its last checkpoint left off.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(stderr)
			_ = cmd.Help()
			return &exitError{code: exitUsage, err: errors.New("no command given")}
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err, hint: fmt.Sprintf("run '%s --help' for usage", cmd.CommandPath())}
	})
	root.AddCommand(
		newRunCommand(stdin, stdout, stderr),
		newDevCommand(stdin, stdout, stderr),
		newCheckCommand(stdout, stderr),
		newInitCommand(stdout, stderr),
		newStateCommand(stdout),
		newResetCommand(stdout),
		newVersionCommand(stdout),
		newDeployCommand(stdout, stderr),
		newRollbackCommand(stdout),
		newVersionsCommand(stdout),
		newStatusCommand(stdout),
		newTopCommand(stdout),
		newPauseCommand(stdout, true),
		newRestartCommand(stdout),
		newPauseCommand(stdout, false),
	)
	return root
}
