package host

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by Run when the Host was already closed.
var ErrClosed = errors.New("wasmstream: host closed")

// ErrNoState is returned by OpenState when the data directory holds no state store.
var ErrNoState = errors.New("wasmstream: no state store in the data directory")

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

// RecordError names the record a failure is about.
type RecordError struct {
	Task      string
	Input     string
	Partition int32
	Offset    int64
	Key       []byte
	Attempts  int
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("task %s: input %s partition %d offset %d key %q: attempt %d: %v",
		e.Task, e.Input, e.Partition, e.Offset, e.Key, e.Attempts, e.Err)
}
func (e *RecordError) Unwrap() error { return e.Err }
