package host

import (
	"context"
	"errors"
)

// ModuleReport describes a task's module as the host validated it.
type ModuleReport struct {
	Task       string
	Path       string
	Size       int
	SHA256     string
	ABIVersion string   // "major.minor"
	Imports    []string // "module.name"
	Exports    []string
}

// Check validates cfg and compiles and validates every task's module without running
// anything. It returns a report per module; the error joins every problem found, each a
// *ConfigError or a *TaskError.
func Check(ctx context.Context, cfg Config) ([]ModuleReport, error) {
	return nil, errors.New("wasmstream: Check not implemented yet")
}

// StateEntry is one state value: state[Key][Name] of a task's stream.
type StateEntry struct {
	Stream string // the stream the state belongs to, e.g. "file:input0/0"
	Key    []byte
	Name   []byte
	Value  []byte
}

// StateReader reads the state of a stopped host's data directory.
type StateReader struct{}

// OpenState opens dataDir's store read-only. It fails with a clear error if a running host
// holds it, and with ErrNoState if there is no store.
func OpenState(dataDir string) (*StateReader, error) {
	return nil, errors.New("wasmstream: OpenState not implemented yet")
}

// Tasks lists the tasks that have state.
func (r *StateReader) Tasks() ([]string, error) { return nil, errors.New("not implemented") }

// Scan calls fn for every entry of task whose key starts with keyPrefix (all keys when empty),
// in store order, until fn returns false. With exact set, only the key equal to keyPrefix.
func (r *StateReader) Scan(task string, keyPrefix []byte, exact bool, fn func(StateEntry) bool) error {
	return errors.New("not implemented")
}

// Close releases the store.
func (r *StateReader) Close() error { return nil }
