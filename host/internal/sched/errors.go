package sched

import "errors"

// ErrInvalidConfig is wrapped by every problem Config.Validate reports.
var ErrInvalidConfig = errors.New("sched: invalid config")

// ErrUnknownStream is returned by Push and Delay when the stream was never added with AddStream
// or has been removed.
var ErrUnknownStream = errors.New("sched: unknown stream")

// ErrUnknownKey is returned by Delay when the key has nothing queued and nothing in flight: there
// is nothing to hold back.
var ErrUnknownKey = errors.New("sched: unknown key")

// ErrUnknownBatch is returned by Complete and Retry when the batch ID was never handed out by
// Next or has already been completed or retried.
var ErrUnknownBatch = errors.New("sched: unknown batch")

// ErrNegativeSize is returned by Push when an item's Size is negative.
var ErrNegativeSize = errors.New("sched: negative item size")
