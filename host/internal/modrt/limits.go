package modrt

import (
	"errors"
	"fmt"
)

// Defaults applied by Limits for zero fields.
const (
	DefaultMaxMemoryPages    = 1024 // 64 MiB
	DefaultMaxKeyBytes       = 64 << 10
	DefaultMaxNameBytes      = 64 << 10
	DefaultMaxValueBytes     = 1 << 20
	DefaultMaxOutputsPerCall = 65536
	DefaultMaxWritesPerCall  = 65536
	DefaultMaxLogBytes       = 4 << 10

	// maxPages is the most pages a 32-bit wasm memory can have (4 GiB).
	maxPages = 65536
)

// Limits bound what one module's instances may use. The zero value of each field means its
// default; negative values are invalid. Limits are fixed at Compile and shared by every Instance
// of the Module.
//
// There is no CPU bound yet: see "CPU time" in the package documentation.
type Limits struct {
	// MaxMemoryPages caps each instance's linear memory, in 64 KiB pages (default 1024 = 64 MiB,
	// at most 65536). A module whose declared minimum is larger is refused; memory.grow past it
	// returns -1 to the guest.
	MaxMemoryPages uint32
	// MaxKeyBytes caps the key of an emitted record (default 64 KiB): ERR_TOO_LARGE.
	MaxKeyBytes int
	// MaxNameBytes caps a state name and an output name (default 64 KiB): ERR_TOO_LARGE.
	MaxNameBytes int
	// MaxValueBytes caps a state value, an emitted value and an emitted Headers layout
	// (default 1 MiB): ERR_TOO_LARGE.
	MaxValueBytes int
	// MaxOutputsPerCall caps emits per call (default 65536): ERR_LIMIT.
	MaxOutputsPerCall int
	// MaxWritesPerCall caps state_put plus state_delete calls per call (default 65536): ERR_LIMIT.
	MaxWritesPerCall int
	// MaxLogBytes truncates each log message, fail message and captured stdout/stderr line
	// (default 4 KiB). Truncation is not an error.
	MaxLogBytes int
}

// Validate reports every invalid field at once.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxMemoryPages > maxPages {
		errs = append(errs, fmt.Errorf("modrt: limits: MaxMemoryPages %d is over %d (4 GiB)", l.MaxMemoryPages, maxPages))
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxKeyBytes", l.MaxKeyBytes},
		{"MaxNameBytes", l.MaxNameBytes},
		{"MaxValueBytes", l.MaxValueBytes},
		{"MaxOutputsPerCall", l.MaxOutputsPerCall},
		{"MaxWritesPerCall", l.MaxWritesPerCall},
		{"MaxLogBytes", l.MaxLogBytes},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("modrt: limits: %s is negative (%d)", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns l with every zero field set to its default.
func (l Limits) withDefaults() Limits {
	if l.MaxMemoryPages == 0 {
		l.MaxMemoryPages = DefaultMaxMemoryPages
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&l.MaxKeyBytes, DefaultMaxKeyBytes)
	def(&l.MaxNameBytes, DefaultMaxNameBytes)
	def(&l.MaxValueBytes, DefaultMaxValueBytes)
	def(&l.MaxOutputsPerCall, DefaultMaxOutputsPerCall)
	def(&l.MaxWritesPerCall, DefaultMaxWritesPerCall)
	def(&l.MaxLogBytes, DefaultMaxLogBytes)
	return l
}
