package modrt

import (
	"crypto/rand"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/tetratelabs/wazero"
)

// Grants are the WASI capabilities the instances of a module get beyond the default. The zero
// value grants nothing: no preopened directory (every file call fails with EBADF or ENOENT), an
// empty environment, no arguments, wazero's fake clocks (the wall clock reads a constant that
// moves 1 ms per reading, the monotonic clock likewise, sleep returns at once) and a
// deterministic random source (the same bytes in every instance). Sockets are never available:
// sock_accept and the other socket calls fail with EBADF, as no listener is ever preopened.
//
// The host's processing time reaches a guest through the ABI (now_ms), not through the clock.
type Grants struct {
	// Dirs are host directories the guest sees mounted at a guest path. Read-only unless
	// Writable.
	Dirs []DirGrant
	// Env lists environment variable names whose host values the guest can read. A listed
	// variable unset on the host is unset in the guest; nothing else is visible.
	Env []string
	// RealClock gives the guest the host's wall and monotonic clocks and a real sleep.
	RealClock bool
	// Random gives the guest a cryptographic random source instead of the deterministic one.
	Random bool
}

// DirGrant mounts the host directory Host at the absolute guest path Guest.
type DirGrant struct {
	Host     string
	Guest    string
	Writable bool
}

// validate reports every invalid grant.
func (g Grants) validate() []error {
	var errs []error
	for j, d := range g.Dirs {
		if d.Host == "" {
			errs = append(errs, fmt.Errorf("modrt: grants: Dirs[%d].Host is empty", j))
		} else if fi, err := os.Stat(d.Host); err != nil {
			errs = append(errs, fmt.Errorf("modrt: grants: Dirs[%d].Host: %w", j, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("modrt: grants: Dirs[%d].Host %s is not a directory", j, d.Host))
		}
		if !path.IsAbs(d.Guest) {
			errs = append(errs, fmt.Errorf("modrt: grants: Dirs[%d].Guest %q is not an absolute path", j, d.Guest))
		}
	}
	for j, name := range g.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			errs = append(errs, fmt.Errorf("modrt: grants: Env[%d] %q is not a variable name", j, name))
		}
	}
	return errs
}

// None reports whether g grants nothing.
func (g Grants) None() bool {
	return len(g.Dirs) == 0 && len(g.Env) == 0 && !g.RealClock && !g.Random
}

// Describe lists the capabilities g grants, one line each ("dir <host> -> <guest> (read-only)",
// "env NAME", "real clock", "random"); nil when none.
func (g Grants) Describe() []string {
	var out []string
	for _, d := range g.Dirs {
		mode := "read-only"
		if d.Writable {
			mode = "read-write"
		}
		out = append(out, fmt.Sprintf("dir %s -> %s (%s)", d.Host, d.Guest, mode))
	}
	for _, name := range g.Env {
		out = append(out, "env "+name)
	}
	if g.RealClock {
		out = append(out, "real clock")
	}
	if g.Random {
		out = append(out, "random")
	}
	return out
}

// clone returns a deep copy of g, so a caller's later changes do not reach the Module.
func (g Grants) clone() Grants {
	g.Dirs = append([]DirGrant(nil), g.Dirs...)
	g.Env = append([]string(nil), g.Env...)
	return g
}

// apply adds the grants to an instance's module configuration. Environment values are read
// from the host when the instance is made.
func (g Grants) apply(mc wazero.ModuleConfig) wazero.ModuleConfig {
	if len(g.Dirs) > 0 {
		fc := wazero.NewFSConfig()
		for _, d := range g.Dirs {
			if d.Writable {
				fc = fc.WithDirMount(d.Host, d.Guest)
			} else {
				fc = fc.WithReadOnlyDirMount(d.Host, d.Guest)
			}
		}
		mc = mc.WithFSConfig(fc)
	}
	for _, name := range g.Env {
		if v, ok := os.LookupEnv(name); ok {
			mc = mc.WithEnv(name, v)
		}
	}
	if g.RealClock {
		mc = mc.WithSysWalltime().WithSysNanotime().WithSysNanosleep()
	}
	if g.Random {
		mc = mc.WithRandSource(rand.Reader)
	}
	return mc
}
