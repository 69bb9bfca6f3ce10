package host

import (
	"errors"
	"fmt"
	"strings"

	"github.com/wasmstream/wasmstream/store"
)

// ErrClosed is returned by Run when the Host was already closed.
var ErrClosed = errors.New("wasmstream: host closed")

// ErrNoState is returned by OpenState when the data directory holds no state store.
var ErrNoState = errors.New("wasmstream: no state store in the data directory")

// ErrStoreDamaged is wrapped by the errors of Run and OpenState when a file of the state store
// is damaged or missing, or a store that had data opens empty; the error names the file or
// directory. Nothing was read from or written to the store. Restore the data directory from a
// backup, or move the store aside with ResetState and rebuild the state from the inputs.
var ErrStoreDamaged = store.ErrCorrupt

// ErrDiskFull is wrapped by the error of Run when the data directory's file system has less
// free space than the store needs to write safely; the error names the directory and the bytes
// free. The last checkpoint is intact: free space and run again.
var ErrDiskFull = store.ErrDiskFull

// ErrUnknownTask is returned by Deploy and its siblings for a task name the configuration does
// not have.
var ErrUnknownTask = errors.New("wasmstream: no such task")

// ErrNotRunning is returned by Deploy and its siblings when the task is not running: Run has
// not started it yet, or it finished or stopped.
var ErrNotRunning = errors.New("wasmstream: task not running")

// ErrRunning is returned by RestartTask for a task that has not halted: there is nothing to
// restart.
var ErrRunning = errors.New("wasmstream: task running")

// ErrUnknownVersion is returned by Activate and Rollback for a version the task's registry
// does not hold (never added, or pruned).
var ErrUnknownVersion = errors.New("wasmstream: no such module version")

// ErrNoEarlierVersion is returned by Rollback to 0 when the registry holds no version older than
// the active one.
var ErrNoEarlierVersion = errors.New("wasmstream: no earlier module version to roll back to")

// ModuleRefusedError is returned by Deploy, Activate and Rollback when the module failed
// validation; the running version was not touched.
type ModuleRefusedError struct {
	Task string
	// Problems lists everything found wrong, each a short sentence naming the export, import,
	// limit or call at fault, e.g. "module exports no wasmstream_process". Never empty.
	Problems []string
	Err      error
}

func (e *ModuleRefusedError) Error() string {
	return fmt.Sprintf("task %s: module refused: %s", e.Task, strings.Join(e.Problems, "; "))
}
func (e *ModuleRefusedError) Unwrap() error { return e.Err }

// ConfigError is one problem of a Config, naming the key as spelled in a configuration file.
type ConfigError struct {
	Key     string
	Problem string
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Problem }

// TaskError is a failure of one task: it halted, or its module was refused.
type TaskError struct {
	Task string
	Err  error
}

func (e *TaskError) Error() string { return fmt.Sprintf("task %s: %v", e.Task, e.Err) }
func (e *TaskError) Unwrap() error { return e.Err }
