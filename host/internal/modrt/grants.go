package modrt

import (
	"crypto/rand"
	"fmt"
	"io"
	mathrand "math/rand"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental/sysfs"
)

// Grants are the WASI capabilities the instances of a module get beyond the default. The zero
// value grants nothing: no preopened directory (every file call fails with EBADF or ENOENT), an
// empty environment, no arguments, wazero's fake clocks (the wall clock reads a constant that
// moves 1 ms per reading, the monotonic clock likewise, sleep returns at once) and a
// deterministic random source (the same bytes in every instance), and no outbound HTTP. Sockets
// are never available: sock_accept and the other socket calls fail with EBADF, as no listener is
// ever preopened; network access, when granted, goes through http_request only (HTTPGrant).
//
// The host's processing time reaches a guest through the ABI (now_ms), not through the clock.
type Grants struct {
	// Dirs are host directories the guest sees mounted at a guest path. Read-only unless
	// Writable. Every path the guest names resolves beneath its directory (rootFS): symlinks
	// that lead out are not followed and cannot be made.
	Dirs []DirGrant
	// Env lists environment variable names whose host values the guest can read. A listed
	// variable unset on the host is unset in the guest; nothing else is visible.
	Env []string
	// RealClock gives the guest the host's wall and monotonic clocks and a real sleep, charged a
	// fuel unit per nanosecond and ended by a stop (poll.go).
	RealClock bool
	// Random gives the guest a cryptographic random source instead of the deterministic one.
	Random bool
	// HTTP, when not nil, lets the guest make outbound HTTP requests (http_request, ABI §4.14)
	// to the hosts it allows. nil: every http_request returns ERR_NOT_ALLOWED.
	HTTP *HTTPGrant
}

// Defaults applied by HTTPGrant for zero fields.
const (
	DefaultHTTPTimeout          = 10 * time.Second
	DefaultHTTPMaxTimeout       = 60 * time.Second
	DefaultHTTPMaxConcurrent    = 4
	DefaultHTTPMaxRequestBytes  = 1 << 20
	DefaultHTTPMaxResponseBytes = 4 << 20

	// maxHTTPRedirects is the most redirects one http_request follows, each to an allowed host.
	maxHTTPRedirects = 5
)

// HTTPGrant lets a module's instances make outbound HTTP requests (http_request, ABI §4.14).
// The zero value of each field but Allow means its default; negative values are invalid. Both
// http:// and https:// URLs are allowed; the host's HTTP_PROXY, HTTPS_PROXY and NO_PROXY
// environment variables apply.
//
// Requests are not part of a call's atomic effects: a call that fails and is retried sends its
// requests again (at-least-once).
type HTTPGrant struct {
	// Allow lists the hosts a request (and every redirect it follows, at most 5) may go to.
	// An entry is a host name or IP address ("api.example.com", "10.0.0.7", "[::1]"),
	// optionally with a port ("api.example.com:8443"; without one, any port), or a suffix
	// wildcard "*.example.com" that matches every name ending in ".example.com" (not
	// example.com itself). Matching is exact and case-insensitive; a name is never resolved
	// to compare it. At least one entry.
	Allow []string
	// Timeout bounds a request whose guest passes timeout_ms 0: from the call to the end of
	// the response body, waiting for a concurrency slot included. Default 10s.
	Timeout time.Duration
	// MaxTimeout caps the guest's timeout_ms. Default 60s; at least Timeout.
	MaxTimeout time.Duration
	// MaxConcurrent bounds the requests of the module's instances (the task) in flight at
	// once; a request waits for a slot within its timeout. Default 4.
	MaxConcurrent int
	// MaxRequestBytes caps a request's body: ERR_TOO_LARGE. Default 1 MiB.
	MaxRequestBytes int
	// MaxResponseBytes caps a response's body and header names and values together:
	// ERR_TOO_LARGE. Default 4 MiB.
	MaxResponseBytes int
}

// withDefaults returns a copy of g with every zero field but Allow set to its default.
func (g HTTPGrant) withDefaults() HTTPGrant {
	g.Allow = append([]string(nil), g.Allow...)
	if g.Timeout == 0 {
		g.Timeout = DefaultHTTPTimeout
	}
	if g.MaxTimeout == 0 {
		g.MaxTimeout = max(DefaultHTTPMaxTimeout, g.Timeout)
	}
	if g.MaxConcurrent == 0 {
		g.MaxConcurrent = DefaultHTTPMaxConcurrent
	}
	if g.MaxRequestBytes == 0 {
		g.MaxRequestBytes = DefaultHTTPMaxRequestBytes
	}
	if g.MaxResponseBytes == 0 {
		g.MaxResponseBytes = DefaultHTTPMaxResponseBytes
	}
	return g
}

// validate reports every invalid field of g, each prefixed with "grants: HTTP.".
func (g HTTPGrant) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("grants: HTTP."+format, args...))
	}
	if len(g.Allow) == 0 {
		bad("Allow is empty: name at least one host")
	}
	for j, a := range g.Allow {
		if err := CheckHTTPAllow(a); err != nil {
			bad("Allow[%d]: %v", j, err)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"Timeout", int64(g.Timeout)},
		{"MaxTimeout", int64(g.MaxTimeout)},
		{"MaxConcurrent", int64(g.MaxConcurrent)},
		{"MaxRequestBytes", int64(g.MaxRequestBytes)},
		{"MaxResponseBytes", int64(g.MaxResponseBytes)},
	} {
		if f.v < 0 {
			bad("%s is negative (%d)", f.name, f.v)
		}
	}
	if d := g.withDefaults(); g.Timeout >= 0 && g.MaxTimeout >= 0 && d.Timeout > d.MaxTimeout {
		bad("Timeout %s is over MaxTimeout %s", d.Timeout, d.MaxTimeout)
	}
	return errs
}

// describe is g's line for Grants.Describe; g has its defaults applied.
func (g HTTPGrant) describe() string {
	return fmt.Sprintf("http %s (timeout %s, max timeout %s, %d at once, request body up to %d bytes, response body up to %d bytes)",
		strings.Join(g.Allow, ", "), g.Timeout, g.MaxTimeout, g.MaxConcurrent, g.MaxRequestBytes, g.MaxResponseBytes)
}

// CheckHTTPAllow reports why entry is not a valid HTTPGrant.Allow entry, or nil.
func CheckHTTPAllow(entry string) error {
	_, err := parseAllow(entry)
	return err
}

// allowEntry is a parsed HTTPGrant.Allow entry.
type allowEntry struct {
	host     string // lower case; without "*." when wildcard; an IPv6 address without brackets
	port     string // "" for any port
	wildcard bool   // host is a suffix: matches names ending in "." + host
}

func parseAllow(entry string) (allowEntry, error) {
	var e allowEntry
	if entry == "" {
		return e, fmt.Errorf("empty host")
	}
	if strings.Contains(entry, "@") {
		// Never repeated: what comes before the @ may be a password.
		return e, fmt.Errorf("a URL with user information (user:password@) is not a host name (write api.example.com, not a URL)")
	}
	if strings.Contains(entry, "://") || strings.ContainsAny(entry, "/?#@ \t") {
		return e, fmt.Errorf("%q is not a host name (write api.example.com, not a URL)", entry)
	}
	s := strings.ToLower(entry)
	host := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return e, fmt.Errorf("%q: unclosed [", entry)
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return e, fmt.Errorf("%q: unexpected %q after ]", entry, rest)
			}
			e.port = rest[1:]
		}
		if ip := net.ParseIP(host); ip == nil || ip.To4() != nil {
			return e, fmt.Errorf("%q: %q is not an IPv6 address", entry, host)
		}
		e.host = host
	default:
		if k := strings.LastIndexByte(s, ':'); k >= 0 {
			host, e.port = s[:k], s[k+1:]
			if strings.Contains(host, ":") {
				return e, fmt.Errorf("%q: write an IPv6 address in brackets ([::1] or [::1]:8080)", entry)
			}
		}
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			e.wildcard, host = true, rest
		}
		if !validHostName(host) {
			return e, fmt.Errorf("%q is not a host name, IP address or *.suffix wildcard", entry)
		}
		e.host = host
	}
	if e.port != "" || strings.HasSuffix(s, ":") {
		if n, err := strconv.Atoi(e.port); err != nil || n < 1 || n > 65535 || e.port[0] == '0' {
			return e, fmt.Errorf("%q: port %q is not a number from 1 to 65535", entry, e.port)
		}
	}
	return e, nil
}

// validHostName reports whether s (lower case) is a DNS name or an IPv4 address: dot-separated
// labels of letters, digits, '-' and '_', none empty.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for k := 0; k < len(label); k++ {
			c := label[k]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// match reports whether e allows host (lower case, no brackets, no trailing dot) on port.
func (e allowEntry) match(host, port string) bool {
	if e.port != "" && e.port != port {
		return false
	}
	if e.wildcard {
		return len(host) > len(e.host) && strings.HasSuffix(host, e.host) && host[len(host)-len(e.host)-1] == '.'
	}
	return host == e.host
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
			errs = append(errs, fmt.Errorf("grants: Dirs[%d].Host is empty", j))
		} else if fi, err := os.Stat(d.Host); err != nil {
			errs = append(errs, fmt.Errorf("grants: Dirs[%d].Host: %w", j, err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("grants: Dirs[%d].Host %s is not a directory", j, d.Host))
		}
		if !path.IsAbs(d.Guest) {
			errs = append(errs, fmt.Errorf("grants: Dirs[%d].Guest %q is not an absolute path", j, d.Guest))
		}
	}
	for j, name := range g.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			errs = append(errs, fmt.Errorf("grants: Env[%d] %q is not a variable name", j, name))
		}
	}
	if g.HTTP != nil {
		errs = append(errs, g.HTTP.validate()...)
	}
	return errs
}

// None reports whether g grants nothing.
func (g Grants) None() bool {
	return len(g.Dirs) == 0 && len(g.Env) == 0 && !g.RealClock && !g.Random && g.HTTP == nil
}

// Describe lists the capabilities g grants, one line each ("dir <host> -> <guest> (read-only)",
// "env NAME", "real clock", "random", "http <allow list> (timeout …, … at once, …)"); nil
// when none. g is described as given: Module.Limits().Grants has the defaults applied.
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
	if g.HTTP != nil {
		out = append(out, g.HTTP.describe())
	}
	return out
}

// clone returns a deep copy of g, so a caller's later changes do not reach the Module, with the
// HTTP grant's defaults applied.
func (g Grants) clone() Grants {
	g.Dirs = append([]DirGrant(nil), g.Dirs...)
	g.Env = append([]string(nil), g.Env...)
	if g.HTTP != nil {
		h := g.HTTP.withDefaults()
		g.HTTP = &h
	}
	return g
}

// apply adds the grants to an instance's module configuration. Environment values are read
// from the host when the instance is made. Each granted directory is opened as an os.Root
// (rootFS), so that no path the guest names, symlinks included, resolves outside it; closeFS
// releases them once the instance is closed.
// Reads and writes of the granted files' bytes are charged with charge (nil: not charged); the
// instance may hold MaxOpenFiles open at once, and refused is called for each open beyond.
func (g Grants) apply(mc wazero.ModuleConfig, charge func(n int), refused func()) (_ wazero.ModuleConfig, closeFS func(), err error) {
	files := new(int)
	var roots []*rootFS
	closeFS = func() {
		for _, r := range roots {
			_ = r.close()
		}
		roots = nil
	}
	if len(g.Dirs) > 0 {
		fc := wazero.NewFSConfig()
		for _, d := range g.Dirs {
			r, err := openRootFS(d.Host, !d.Writable)
			if err != nil {
				closeFS()
				return mc, nil, fmt.Errorf("granted directory %s cannot be opened (check grants.dirs): %w", d.Host, err)
			}
			r.charge, r.files, r.refused = charge, files, refused
			roots = append(roots, r)
			fc = fc.(sysfs.FSConfig).WithSysFSMount(r, d.Guest)
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
	return mc, closeFS, nil
}

// randSource returns the random source of an instance: crypto/rand when g grants Random, else
// the deterministic source wazero gives by default (math/rand seeded with 42, so a guest reads
// the same bytes as before its reads were charged). charge is called with the size of every
// read before it is filled: random_get pays for the bytes it makes (slice.go).
func (g Grants) randSource(charge func(n int)) io.Reader {
	var r io.Reader = rand.Reader
	if !g.Random {
		r = mathrand.New(mathrand.NewSource(42))
	}
	return chargedReader{r: r, charge: charge}
}

// chargedReader is a random source whose reads are charged to the guest's call.
type chargedReader struct {
	r      io.Reader
	charge func(n int)
}

func (c chargedReader) Read(p []byte) (int, error) {
	c.charge(len(p))
	return c.r.Read(p)
}
