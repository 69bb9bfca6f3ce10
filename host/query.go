package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/admin"
	"github.com/wasmstream/wasmstream/host/internal/task"
)

// KeyState is a key's state in one stream of a task (a file input, a Kafka partition), as
// QueryState and ScanState return it: Stream names the stream as status does, Values are the
// key's state names and values in name order.
type KeyState = task.KeyState

// StateValue is one state name of a key and its value.
type StateValue = task.NameValue

// ErrQueryTimeout is returned by QueryState and ScanState when the task did not answer in time:
// it is restoring a partition, or its loop is busy. Retry.
var ErrQueryTimeout = errors.New("wasmstream: the task did not answer the state query in time (restoring a partition?): retry")

// queryTimeout bounds how long a state query waits for the task.
const queryTimeout = 10 * time.Second

// QueryState returns the state of key in every stream of task name that has some, while the
// host runs: read between two guest calls on the key, with the effects of every completed call
// (not only of the last checkpoint). It answers from this host's streams only (the partitions it
// owns now); the admin API's state endpoints route a query across a group (route.go). Safe from
// any goroutine while Run runs.
func (h *Host) QueryState(ctx context.Context, name string, key []byte) ([]KeyState, error) {
	return h.queryState(ctx, name, func(ctx context.Context, t *lanes) ([]KeyState, error) {
		return t.Query(ctx, key)
	})
}

// ScanState returns up to limit keys of task name (at most 1000) that start with prefix and
// come after `after` (nil: from the first), with their state, in the store's key order (shorter
// keys first, then bytewise); the next page starts after the last key returned.
func (h *Host) ScanState(ctx context.Context, name string, prefix, after []byte, limit int) ([]KeyState, error) {
	return h.queryState(ctx, name, func(ctx context.Context, t *lanes) ([]KeyState, error) {
		return t.QueryScan(ctx, prefix, after, limit)
	})
}

func (h *Host) queryState(ctx context.Context, name string, q func(context.Context, *lanes) ([]KeyState, error)) ([]KeyState, error) {
	_, _, t, err := h.enterRunning(name)
	if err != nil {
		return nil, err
	}
	defer h.leave()
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	ks, err := q(ctx, t)
	if err != nil {
		return nil, queryError(name, err)
	}
	return ks, nil
}

// queryError is the error a state query of task name answers for err.
func queryError(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, task.ErrStopped):
		return fmt.Errorf("%w: task %q", ErrNotRunning, name)
	case errors.Is(err, context.DeadlineExceeded):
		return ErrQueryTimeout
	case errors.Is(err, task.ErrNotOwned):
		return fmt.Errorf("%w: task %s: %v", ErrStateUnavailable, name, err)
	}
	return fmt.Errorf("wasmstream: task %s: %w", name, err)
}

func (b adminBackend) State(r *http.Request, name string, key []byte) ([]admin.KeyState, error) {
	ks, err := b.h.routedState(r, name, key)
	return ks, wireError(err)
}

func (b adminBackend) ScanState(r *http.Request, name string, prefix, after []byte, limit int) ([]admin.KeyState, []string, error) {
	ks, streams, err := b.h.routedScan(r, name, prefix, after, limit)
	return ks, streams, wireError(err)
}

func wireKeyStates(ks []KeyState) []admin.KeyState {
	out := make([]admin.KeyState, len(ks))
	for i, k := range ks {
		out[i] = admin.KeyState{Stream: k.Stream, Key: k.Key}
		for _, v := range k.Values {
			out[i].Values = append(out[i].Values, admin.NameValue{Name: v.Name, Value: v.Value})
		}
	}
	return out
}
