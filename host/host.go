package host

import (
	"context"
	"errors"
	"sync"
)

// Host runs tasks. Create it with New, run it with Run, release it with Close.
type Host struct {
	cfg Config

	mu     sync.Mutex
	closed bool
}

// New validates cfg and returns a Host. It starts no goroutine and opens nothing yet.
func New(cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Host{cfg: cfg.withDefaults()}, nil
}

// Run runs every task until all their inputs are exhausted and fully processed (then it
// commits a last checkpoint and returns nil), until ctx is cancelled (then it stops reading,
// finishes the batches in flight, commits a last checkpoint and returns nil), or until a task
// fails (then it stops the other tasks and returns a *TaskError). Every goroutine it starts has
// stopped when it returns.
func (h *Host) Run(ctx context.Context) error {
	return errors.New("wasmstream: Run not implemented yet")
}

// Close releases the Host. It is idempotent and safe to call after Run returned.
func (h *Host) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return nil
}
