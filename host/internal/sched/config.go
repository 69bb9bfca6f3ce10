package sched

import (
	"errors"
	"fmt"
)

// Config bounds the scheduler. The zero value of every field selects its default; Validate
// reports every problem at once. New copies the Config.
type Config struct {
	// MaxBatchItems is the most items one batch holds. Default 256.
	MaxBatchItems int
	// MaxKeyItems is the most items one key contributes to one batch, so that a hot key cannot
	// fill batches on its own. Default 64.
	MaxKeyItems int
	// MaxBatches is the most batches in flight in total: the size of the worker pool. Default 4.
	MaxBatches int
	// MaxStreamInFlight is the most items of one stream in flight at once (S3). 1 means strict
	// stream order: one item at a time, in push order, across all keys of the stream. Default 1024.
	MaxStreamInFlight int
	// HighItems pauses a stream when its queued (not yet dispatched) items reach it. Default 8192.
	HighItems int
	// LowItems resumes a paused stream when its queued items fall to it (and the other marks
	// allow). Must be below HighItems. Default HighItems/2.
	LowItems int
	// HighBytes pauses a stream when the Size of its queued items adds up to it. Default 32 MiB.
	HighBytes int
	// LowBytes resumes a paused stream when its queued bytes fall to it (and the other marks
	// allow). Must be below HighBytes. Default HighBytes/2.
	LowBytes int
	// MaxKeyDepth pauses a stream when one of its keys has this many items queued; that key stops
	// holding the stream paused once it drains below half of it. Default 4096.
	MaxKeyDepth int
}

// Defaults of the Config fields.
const (
	DefaultMaxBatchItems     = 256
	DefaultMaxKeyItems       = 64
	DefaultMaxBatches        = 4
	DefaultMaxStreamInFlight = 1024
	DefaultHighItems         = 8192
	DefaultHighBytes         = 32 << 20
	DefaultMaxKeyDepth       = 4096
)

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxBatchItems, DefaultMaxBatchItems)
	def(&c.MaxKeyItems, DefaultMaxKeyItems)
	def(&c.MaxBatches, DefaultMaxBatches)
	def(&c.MaxStreamInFlight, DefaultMaxStreamInFlight)
	def(&c.HighItems, DefaultHighItems)
	def(&c.LowItems, c.HighItems/2)
	def(&c.HighBytes, DefaultHighBytes)
	def(&c.LowBytes, c.HighBytes/2)
	def(&c.MaxKeyDepth, DefaultMaxKeyDepth)
	return c
}

// Validate reports every problem of c, each wrapping ErrInvalidConfig, joined with errors.Join;
// nil means New accepts c.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxBatchItems", c.MaxBatchItems},
		{"MaxKeyItems", c.MaxKeyItems},
		{"MaxBatches", c.MaxBatches},
		{"MaxStreamInFlight", c.MaxStreamInFlight},
		{"HighItems", c.HighItems},
		{"LowItems", c.LowItems},
		{"HighBytes", c.HighBytes},
		{"LowBytes", c.LowBytes},
		{"MaxKeyDepth", c.MaxKeyDepth},
	} {
		if f.v < 0 {
			bad("%s is %d, must not be negative (0 selects the default)", f.name, f.v)
		}
	}
	d := c.withDefaults()
	if c.HighItems >= 0 && c.LowItems >= 0 && d.LowItems >= d.HighItems {
		bad("LowItems (%d) must be below HighItems (%d)", d.LowItems, d.HighItems)
	}
	if c.HighBytes >= 0 && c.LowBytes >= 0 && d.LowBytes >= d.HighBytes {
		bad("LowBytes (%d) must be below HighBytes (%d)", d.LowBytes, d.HighBytes)
	}
	return errors.Join(errs...)
}
