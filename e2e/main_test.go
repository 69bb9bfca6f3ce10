package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// cacheEnv names the environment variable that sets a wasmstream process's compilation cache.
const cacheEnv = "WASMSTREAM_CACHE_DIR"

// TestMain points every wasmstream process the tests start at the compilation cache the host
// tests share (hosttest.CompileCache, beside the guest builds), unless the environment names
// one already: each module is then compiled once for the whole run instead of once per data
// directory. Most tests start the binary on a fresh data directory, and the Go wordcount (2 MB)
// takes seconds to compile on 2 cores. The cache's keys cover the module's bytes and wazero's
// version, and its entries are written aside and renamed into place, so tests running at once
// share it safely. A test that times a run from its start takes the variable out (noCacheEnv).
func TestMain(m *testing.M) {
	if os.Getenv(cacheEnv) == "" {
		dir := filepath.Join(guestbuild.Dir(), "compile-cache")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			os.Setenv(cacheEnv, dir)
		}
	}
	os.Exit(m.Run())
}

// noCacheEnv is the environment without the shared compilation cache of TestMain: a process
// started with it compiles into its data directory's cache, as outside the tests.
func noCacheEnv() []string {
	env := os.Environ()
	out := env[:0:0]
	for _, kv := range env {
		if len(kv) > len(cacheEnv) && kv[:len(cacheEnv)+1] == cacheEnv+"=" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
