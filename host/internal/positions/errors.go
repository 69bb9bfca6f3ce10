package positions

import "errors"

// ErrNotIncreasing is returned by Tracker.Add when the offset is not greater than the last added
// offset, or is below the position the tracker started from.
var ErrNotIncreasing = errors.New("positions: offset does not increase")

// ErrNotInFlight is returned by Tracker.Complete when the offset was never added, or has already
// been completed.
var ErrNotInFlight = errors.New("positions: offset not in flight")
