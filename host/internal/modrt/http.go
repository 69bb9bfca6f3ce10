package modrt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmstream/wasmstream/abi"
)

// Outbound HTTP (ABI.md §4.14, §4.15). A Module with an HTTPGrant owns one httpClient, shared by
// all its instances: one keep-alive http.Client and the semaphore that bounds the requests of the
// task in flight (HTTPGrant.MaxConcurrent). Each Instance holds an httpCall: the client and the
// response its current call kept for http_response.
//
// A request blocks the calling instance (and so its worker) until it completes; other instances
// of the task keep running, which is why the bound is per module and not per instance.

// httpClient is the outbound HTTP of one Module. It is safe for concurrent use.
type httpClient struct {
	grant  HTTPGrant // defaults applied
	allow  []allowEntry
	client *http.Client
	slots  chan struct{} // a token per request in flight

	waiting  atomic.Int64 // requests waiting for a slot (tests observe it)
	requests atomic.Int64 // requests sent (past the checks and the concurrency bound)
	failures atomic.Int64 // requests that got no response: ERR_UNAVAILABLE, ERR_TOO_LARGE, a refused redirect
}

// errRedirectRefused is returned by CheckRedirect for a redirect to a host not on the allowlist.
var errRedirectRefused = errors.New("redirect to a host not on the allowlist")

// newHTTPClient returns the client of a module granted g (defaults applied), or nil when g is nil.
// g was validated by Limits.Validate.
func newHTTPClient(g *HTTPGrant) *httpClient {
	if g == nil {
		return nil
	}
	c := &httpClient{grant: *g, slots: make(chan struct{}, g.MaxConcurrent)}
	for _, a := range g.Allow {
		if e, err := parseAllow(a); err == nil {
			c.allow = append(c.allow, e)
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = g.MaxConcurrent
	// The transport's own bound on a response's header bytes (10 MB by default): the headers
	// count toward MaxResponseBytes (do), this only keeps the transport from reading far more.
	tr.MaxResponseHeaderBytes = int64(g.MaxResponseBytes) + 64<<10
	c.client = &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > maxHTTPRedirects {
				return fmt.Errorf("stopped after %d redirects", maxHTTPRedirects)
			}
			if !c.allowed(req.URL) {
				return fmt.Errorf("%w: %s", errRedirectRefused, req.URL.Host)
			}
			return nil
		},
	}
	return c
}

// close drops the idle connections. Requests in flight are not interrupted (their calls' contexts
// bound them). c may be nil.
func (c *httpClient) close() {
	if c != nil {
		c.client.CloseIdleConnections()
	}
}

// allowed reports whether u's host and port are on the allowlist.
func (c *httpClient) allowed(u *url.URL) bool {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return slices.ContainsFunc(c.allow, func(e allowEntry) bool { return e.match(host, port) })
}

// HTTPStats counts a module's outbound requests (http_request): Requests sent, and Failures,
// those of them that ended without a response for the guest (connection failure, timeout, a
// response over the limit, a refused redirect).
type HTTPStats struct {
	Requests, Failures int64
}

// HTTPStats returns the module's outbound request counts; zero without an HTTP grant.
func (m *Module) HTTPStats() HTTPStats {
	if m.http == nil {
		return HTTPStats{}
	}
	return HTTPStats{Requests: m.http.requests.Load(), Failures: m.http.failures.Load()}
}

// httpCall is an Instance's outbound HTTP state.
type httpCall struct {
	client *httpClient // the module's; nil without a grant
	// kept is the encoded HttpResponse the last http_request of the current guest call could
	// not write to the guest's buffer, for http_response; nil when none. Dropped when the guest
	// call returns (Instance.call calls endCall), so a response is neither seen by the next call
	// of a unit nor held between calls.
	kept []byte
}

// endCall forgets the call's kept response.
func (h *httpCall) endCall() { h.kept = nil }

// scoped reports whether the current call has a scope (ABI §4): everything but start-up and init.
func (i *Instance) scoped() bool {
	return i.phase != phaseIdle && i.phase != phaseStart && i.phase != phaseInit
}

// httpRequest serves http_request (ABI.md §4.14).
//
// The checks, in order: the pointer ranges (ERR_OUT_OF_BOUNDS); the phase and the grant
// (ERR_NOT_ALLOWED); the layout, method, URL and headers (ERR_INVALID); the request body's size
// (ERR_TOO_LARGE); the URL's host against the allowlist (ERR_NOT_ALLOWED). Then the request waits
// for a concurrency slot and runs under ctx (the caller's context: a host shutting down cancels
// it) and the request's timeout, which covers the wait, every redirect and reading the body.
// Failures to get a response are ERR_UNAVAILABLE and logged at warn with their cause.
func (i *Instance) httpRequest(ctx context.Context, reqPtr, reqLen, bufPtr, bufCap uint32) int64 {
	i.http.kept = nil
	raw, ok1 := i.view(reqPtr, reqLen)
	buf, ok2 := i.viewOut(bufPtr, bufCap)
	if !ok1 || !ok2 {
		return int64(abi.ErrOutOfBounds)
	}
	c := i.http.client
	if !i.scoped() {
		return int64(abi.ErrNotAllowed)
	}
	r, err := abi.DecodeHTTPRequest(raw)
	if c == nil {
		if err == nil {
			i.logRefused(ctx, r.URL, "the task has no grants.http: grant the host, or stop calling it")
		}
		return int64(abi.ErrNotAllowed)
	}
	if err != nil {
		return int64(abi.ErrInvalid)
	}
	req, e := c.newRequest(&r)
	if e == abi.ErrNotAllowed {
		i.logRefused(ctx, r.URL, "the host is not on the task's grants.http.allow list")
	}
	if e != abi.OK {
		return int64(e)
	}
	timeout := c.grant.Timeout
	if r.TimeoutMs > 0 {
		timeout = min(time.Duration(r.TimeoutMs)*time.Millisecond, c.grant.MaxTimeout)
	}
	// Derived from the caller's own context, not from the reused callCtx wrapper: a timer's
	// cancellation may still run on another goroutine after this call returned, when the
	// wrapper already holds the next call's context.
	parent := ctx
	if cc, ok := ctx.(*callCtx); ok {
		parent = cc.Context
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	resp, err := c.do(ctx, req)
	if err != nil {
		return int64(i.httpFailed(ctx, req, timeout, err))
	}
	return i.deliverHTTP(buf, resp)
}

// httpFailed counts and logs (at warn) a request that got no response, and returns its result:
// ERR_NOT_ALLOWED for a refused redirect, ERR_TOO_LARGE for a response over the limit, else
// ERR_UNAVAILABLE.
func (i *Instance) httpFailed(ctx context.Context, req *http.Request, timeout time.Duration, err error) abi.Errno {
	i.http.client.failures.Add(1)
	code := abi.ErrUnavailable
	switch {
	case errors.Is(err, errRedirectRefused):
		code = abi.ErrNotAllowed
	case errors.Is(err, errResponseTooLarge):
		code = abi.ErrTooLarge
	}
	if i.log.Enabled(ctx, slog.LevelWarn) {
		i.log.LogAttrs(ctx, slog.LevelWarn, "http_request failed",
			slog.String("method", req.Method), slog.String("host", req.URL.Host),
			slog.String("path", req.URL.Path), slog.Duration("timeout", timeout),
			slog.String("result", code.String()), slog.String("error", err.Error()))
	}
	return code
}

// deliverHTTP writes resp, encoded, into buf (guest memory) when it fits, or keeps it for
// http_response, and returns its size.
func (i *Instance) deliverHTTP(buf []byte, resp *abi.HTTPResponse) int64 {
	n := abi.HTTPResponseSize(resp)
	if n > math.MaxInt32 {
		i.http.client.failures.Add(1)
		return int64(abi.ErrTooLarge)
	}
	if n <= len(buf) {
		abi.AppendHTTPResponse(buf[:0:n], resp)
		i.moved += n
	} else {
		i.http.kept = abi.AppendHTTPResponse(make([]byte, 0, n), resp)
	}
	return int64(n)
}

// refusalLog rate-limits the warnings about refused requests of one Module: at most one per
// refusalEvery, the next one counting those left out. It is safe for concurrent use.
type refusalLog struct {
	mu      sync.Mutex
	last    time.Time
	skipped int64
	now     func() time.Time // time.Now when nil; tests set it
}

// refusalEvery is the least time between two warnings about refused requests of a module.
const refusalEvery = 10 * time.Second

// take reports whether a warning may be written now, and how many were left out since the last.
func (r *refusalLog) take() (ok bool, skipped int64) {
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	t := now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.last.IsZero() && t.Sub(r.last) < refusalEvery {
		r.skipped++
		return false, 0
	}
	r.last, skipped, r.skipped = t, r.skipped, 0
	return true, skipped
}

// logRefused warns, rate-limited, that an http_request to rawURL was refused (ERR_NOT_ALLOWED)
// and why, naming the host (the instance's logger names the task).
func (i *Instance) logRefused(ctx context.Context, rawURL []byte, why string) {
	if !i.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	ok, skipped := i.refused.take()
	if !ok {
		return
	}
	host := string(rawURL)
	if u, err := url.Parse(host); err == nil && u.Host != "" {
		host = u.Host
	}
	const maxHost = 256 // the guest chose it
	if len(host) > maxHost {
		host = host[:maxHost] + "…"
	}
	i.log.LogAttrs(ctx, slog.LevelWarn, "http_request refused: "+why,
		slog.String("host", host), slog.String("result", abi.ErrNotAllowed.String()),
		slog.Int64("refused_unlogged", skipped))
}

// httpResponse serves http_response (ABI.md §4.15): ERR_OUT_OF_BOUNDS, then ERR_NOT_ALLOWED
// outside a scoped call (start-up, init), then ERR_NOT_FOUND when the call kept no response.
func (i *Instance) httpResponse(bufPtr, bufCap uint32) int64 {
	buf, ok := i.viewOut(bufPtr, bufCap)
	if !ok {
		return int64(abi.ErrOutOfBounds)
	}
	if !i.scoped() {
		return int64(abi.ErrNotAllowed)
	}
	if i.http.kept == nil {
		return int64(abi.ErrNotFound)
	}
	return i.copyOut(buf, i.http.kept)
}

// newRequest checks a decoded HttpRequest and makes it an *http.Request (without a context).
// Every byte is copied out of guest memory: the transport may read the body after the host
// function returns.
func (c *httpClient) newRequest(r *abi.HTTPRequest) (*http.Request, abi.Errno) {
	if !validMethod(r.Method) {
		return nil, abi.ErrInvalid
	}
	u, err := url.Parse(string(r.URL))
	if err != nil || u.Host == "" || u.Hostname() == "" ||
		!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https") {
		return nil, abi.ErrInvalid
	}
	hdr := make(http.Header, len(r.Headers))
	for _, h := range r.Headers {
		if !validHeaderName(h.Name) || !validHeaderValue(h.Value) {
			return nil, abi.ErrInvalid
		}
		hdr.Add(string(h.Name), string(h.Value))
	}
	if len(r.Body) > c.grant.MaxRequestBytes {
		return nil, abi.ErrTooLarge
	}
	if !c.allowed(u) {
		return nil, abi.ErrNotAllowed
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr.Set("User-Agent", "wasmstream")
	}
	req := &http.Request{
		Method:     string(r.Method),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       u.Host,
	}
	if len(r.Body) > 0 {
		body := slices.Clone(r.Body)
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return req, abi.OK
}

// errResponseTooLarge is do's error for a response over HTTPGrant.MaxResponseBytes, body and
// header names and values together.
var errResponseTooLarge = errors.New("response body over the limit")

// do waits for a concurrency slot, sends req under ctx and reads the whole response.
func (c *httpClient) do(ctx context.Context, req *http.Request) (*abi.HTTPResponse, error) {
	select {
	case c.slots <- struct{}{}:
	default:
		c.waiting.Add(1)
		select {
		case c.slots <- struct{}{}:
			c.waiting.Add(-1)
		case <-ctx.Done():
			c.waiting.Add(-1)
			return nil, fmt.Errorf("waiting for one of the %d concurrent requests to finish: %w", cap(c.slots), context.Cause(ctx))
		}
	}
	defer func() { <-c.slots }()
	c.requests.Add(1)
	resp, err := c.client.Do(req.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	limit := c.grant.MaxResponseBytes
	for name, vs := range resp.Header {
		for _, v := range vs {
			limit -= len(name) + len(v)
		}
	}
	if limit < 0 {
		return nil, fmt.Errorf("%w: headers of more than %d bytes", errResponseTooLarge, c.grant.MaxResponseBytes)
	}
	if resp.ContentLength > int64(limit) {
		return nil, fmt.Errorf("%w: Content-Length %d, limit %d", errResponseTooLarge, resp.ContentLength, limit)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("reading the response body: %w", err)
	}
	if len(body) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errResponseTooLarge, limit)
	}
	out := &abi.HTTPResponse{Status: uint32(resp.StatusCode), Body: body}
	names := make([]string, 0, len(resp.Header))
	for name := range resp.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range resp.Header[name] {
			out.Headers = append(out.Headers, abi.Header{Name: []byte(name), Value: []byte(v)})
		}
	}
	return out, nil
}

// validMethod reports whether m is 1 to 32 upper-case ASCII letters (ABI §6.9).
func validMethod(m []byte) bool {
	if len(m) == 0 || len(m) > 32 {
		return false
	}
	for _, c := range m {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// validHeaderName reports whether n is an HTTP token (RFC 9110 §5.6.2).
func validHeaderName(n []byte) bool {
	if len(n) == 0 {
		return false
	}
	for _, c := range n {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v holds no control character but horizontal tab.
func validHeaderValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
