package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/stats"
)

// guard bounds how long a test waits for something that should happen at once; reaching it
// is a failure, never the expected path.
const guard = 20 * time.Second

// fakeBackend answers every call; Deploy blocks on gate when it is set.
type fakeBackend struct {
	gate              chan struct{}
	entered           chan struct{}
	inDeploy, maxSeen atomic.Int64
	ready             atomic.Bool
	lastReset         ResetRequest // the last reset's request (one request at a time)
}

func (b *fakeBackend) Deploy(ctx context.Context, task string, wasm []byte) (Deployment, error) {
	n := b.inDeploy.Add(1)
	defer b.inDeploy.Add(-1)
	for {
		m := b.maxSeen.Load()
		if n <= m || b.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if b.entered != nil {
		b.entered <- struct{}{}
	}
	if b.gate != nil {
		<-b.gate
	}
	return Deployment{Task: task, Version: Version{Version: 1, Size: int64(len(wasm))}}, nil
}
func (b *fakeBackend) Activate(context.Context, string, int64) (Deployment, error) {
	return Deployment{}, nil
}
func (b *fakeBackend) Rollback(context.Context, string, int64) (Deployment, error) {
	return Deployment{}, nil
}
func (b *fakeBackend) Versions(string) ([]Version, error)   { return nil, nil }
func (b *fakeBackend) Pause(context.Context, string) error  { return nil }
func (b *fakeBackend) Resume(context.Context, string) error { return nil }
func (b *fakeBackend) Reset(_ context.Context, task string, req ResetRequest) (any, error) {
	b.lastReset = req
	return map[string]any{"task": task, "to": req.To, "dry_run": req.DryRun}, nil
}
func (b *fakeBackend) Restart(_ context.Context, task string) (Deployment, error) {
	return Deployment{Task: task, Restarted: true}, nil
}
func (b *fakeBackend) Status() []stats.Task { return []stats.Task{} }
func (b *fakeBackend) Ready() bool          { return b.ready.Load() }

const token = "t0ken"

// serve runs a Server with lim on a loopback port. stop cancels it and returns Serve's
// error; it fails the test if Serve does not return within guard.
func serve(t *testing.T, b Backend, lim Limits) (addr string, s *Server, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = New(Config{Token: token, MaxModuleBytes: 1 << 20, UploadDir: t.TempDir(), Limits: lim, Backend: b})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-errc:
			case <-time.After(guard):
				t.Fatalf("Serve did not return %s after its context was cancelled", guard)
			}
		})
		return serveErr
	}
	t.Cleanup(func() { stop() })
	return ln.Addr().String(), s, stop
}

// dial opens a raw connection and writes what.
func dial(t *testing.T, addr, what string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, what); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByServer waits until the server closes c (having answered or not) and returns what it
// sent.
func closedByServer(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(guard))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s (received %q)", guard, b)
	}
	return string(b)
}

// status sends an authenticated GET /v1/status on a new connection.
func status(t *testing.T, addr string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: guard}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("a legitimate request failed: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// An unauthenticated request is refused before any of its body is read: the answer comes
// while the client has sent only the headers and a few bytes of a body it announced (or
// chunked), and the connection is closed rather than drained.
func TestUnauthenticatedBodyIsNotRead(t *testing.T) {
	addr, _, _ := serve(t, &fakeBackend{}, Limits{ReadTimeout: time.Hour, ReadHeaderTimeout: time.Hour})
	for name, head := range map[string]string{
		"content-length": "Content-Length: 100000\r\n",
		"chunked":        "Transfer-Encoding: chunked\r\n",
		"huge":           "Content-Length: 60000000\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			body := "0123456789"
			if strings.Contains(head, "chunked") {
				body = "a\r\n0123456789\r\n"
			}
			c := dial(t, addr, "POST /v1/tasks/t/versions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"+head+"\r\n"+body)
			got := closedByServer(t, c)
			if !strings.HasPrefix(got, "HTTP/1.1 401 ") {
				t.Fatalf("answer %q, want 401", got)
			}
		})
	}
}

// Clients that stall (headers never finished, an authenticated body sent too slowly) are cut
// off by the timeouts, and a legitimate request is answered meanwhile.
func TestSlowClientsAreCutOff(t *testing.T) {
	addr, _, _ := serve(t, &fakeBackend{}, Limits{ReadHeaderTimeout: 50 * time.Millisecond, ReadTimeout: 100 * time.Millisecond})
	headers := dial(t, addr, "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	body := dial(t, addr, "POST /v1/tasks/t/versions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\nContent-Length: 1000\r\n\r\n0123")
	if s := status(t, addr); s != http.StatusOK {
		t.Errorf("status %d", s)
	}
	if got := closedByServer(t, headers); got != "" && !strings.HasPrefix(got, "HTTP/1.1 408") {
		t.Errorf("headers never finished: answer %q", got)
	}
	if got := closedByServer(t, body); got != "" && !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Errorf("body never finished: answer %q", got)
	}
}

// Headers over MaxHeaderBytes are refused (431), even with the right token.
func TestHeadersAreBounded(t *testing.T) {
	addr, _, _ := serve(t, &fakeBackend{}, Limits{MaxHeaderBytes: 4 << 10})
	c := dial(t, addr, "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	if got := closedByServer(t, c); !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Errorf("answer %q, want 431", got)
	}
}

// More stalled connections than the limit: the server closes the oldest of them to make room,
// so a legitimate client is still answered, and never holds more than the limit.
func TestConnectionLimit(t *testing.T) {
	const limit, stalled = 4, 10
	addr, _, _ := serve(t, &fakeBackend{}, Limits{MaxConns: limit, ReadHeaderTimeout: time.Hour, ReadTimeout: time.Hour})
	var cs []net.Conn
	for range stalled {
		cs = append(cs, dial(t, addr, "GET /v1/status HTTP/1.1\r\nHost: x\r\n"))
	}
	if s := status(t, addr); s != http.StatusOK {
		t.Errorf("status %d", s)
	}
	// Accepting the last limit-1 stalled and the legitimate one closed the oldest others.
	for i, c := range cs[:stalled-limit+1] {
		if got := closedByServer(t, c); got != "" {
			t.Errorf("stalled connection %d: answer %q", i, got)
		}
	}
}

// A shutdown does not wait for clients still sending (headers, an upload's body, an upload
// waiting for a slot): Serve returns with them still connected.
func TestShutdownDropsSlowClients(t *testing.T) {
	b := &fakeBackend{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	addr, s, stop := serve(t, b, Limits{ReadHeaderTimeout: time.Hour, ReadTimeout: time.Hour, IdleTimeout: time.Hour,
		ShutdownGrace: time.Hour, MaxUploads: 1})
	upload := func(n int, partial string) net.Conn {
		return dial(t, addr, fmt.Sprintf("POST /v1/tasks/t/versions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", token, n, partial))
	}
	// One upload fills the slot and is let through once the others wait.
	full := upload(4, "wasm")
	<-b.entered
	slow := upload(1000, "0123")
	waiting := upload(1000, "0123")
	waitFor(t, "two uploads waiting", func() bool { return s.waiting.Load() == 2 })
	close(b.gate)
	if got := closedByServer(t, full); !strings.HasPrefix(got, "HTTP/1.1 201 ") {
		t.Fatalf("full upload: %q", got)
	}
	waitFor(t, "the slow upload reading", func() bool { return s.waiting.Load() == 1 })
	headers := dial(t, addr, "GET /v1/status HTTP/1.1\r\nHost: x\r\n")
	if err := stop(); err != nil {
		t.Errorf("Serve: %v", err)
	}
	for _, c := range []net.Conn{headers, slow, waiting} {
		closedByServer(t, c)
	}
}

// At most MaxUploads deploys receive and deploy at once; the others wait, then succeed.
func TestUploadsAreBounded(t *testing.T) {
	b := &fakeBackend{gate: make(chan struct{}), entered: make(chan struct{}, 8)}
	addr, s, _ := serve(t, b, Limits{MaxUploads: 2})
	const n = 5
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/tasks/t/versions", strings.NewReader(strings.Repeat("w", 1000)))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := (&http.Client{Timeout: guard}).Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		})
	}
	<-b.entered
	<-b.entered
	waitFor(t, "three uploads waiting", func() bool { return s.waiting.Load() == n-2 })
	if got := b.inDeploy.Load(); got != 2 {
		t.Errorf("%d deploys at once, want 2", got)
	}
	close(b.gate)
	wg.Wait()
	if m := b.maxSeen.Load(); m != 2 {
		t.Errorf("at most %d deploys at once, want 2", m)
	}
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Errorf("upload %d: status %d", i, c)
		}
	}
	left, _ := os.ReadDir(s.cfg.UploadDir)
	if len(left) != 0 {
		t.Errorf("spooled uploads left behind: %v", left)
	}
}

// waitFor polls cond until it holds (or guard passes: a failure).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, guard)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestProbesWithoutTokenMetricsWith: /healthz and /readyz answer without the token (probes
// carry none), /readyz follows Backend.Ready, and /metrics needs the token like the API.
func TestProbesWithoutTokenMetricsWith(t *testing.T) {
	b := &fakeBackend{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "m_total 1\n") })
	s := New(Config{Token: token, MaxModuleBytes: 1 << 20, UploadDir: t.TempDir(), Backend: b, Metrics: metrics})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx, ln) }()
	defer func() { cancel(); <-errc }()
	base := "http://" + ln.Addr().String()
	get := func(path, tok string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		name, path, tok string
		ready           bool
		want            int
	}{
		{"healthz", "/healthz", "", false, 200},
		{"readyz not ready", "/readyz", "", false, 503},
		{"readyz ready", "/readyz", "", true, 200},
		{"metrics without token", "/metrics", "", true, 401},
		{"metrics with wrong token", "/metrics", "nope", true, 401},
		{"metrics with token", "/metrics", token, true, 200},
		{"status without token", "/v1/status", "", true, 401},
	} {
		b.ready.Store(c.ready)
		if got := get(c.path, c.tok); got != c.want {
			t.Errorf("%s: GET %s = %d, want %d", c.name, c.path, got, c.want)
		}
	}
}

// The dashboard page is served without a token (it holds no figures: its script fetches them
// with the token), with a policy that lets it load nothing from elsewhere; the figures still
// need the token.
func TestDashboardPage(t *testing.T) {
	addr, _, stop := serve(t, &fakeBackend{}, Limits{})
	defer stop()
	for _, path := range []string{"/", "/dashboard"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") ||
			!strings.Contains(csp, "script-src 'sha256-") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: policy %q", path, csp)
		}
		if !strings.Contains(string(body), `fetch(path`) || strings.Contains(string(body), "src=\"http") {
			t.Errorf("GET %s: not the self-contained dashboard:\n%.300s", path, body)
		}
	}
	resp, err := http.Get("http://" + addr + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("status without token: %d", resp.StatusCode)
	}
}

// The API's JSON carries C1 control characters escaped (encoding/json leaves them raw), so that
// `wasmstream status --json` printed to a terminal runs no control sequence from a record.
func TestWriteJSONEscapesC1(t *testing.T) {
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]string{"key": "k\u009b2J", "nbsp": "a\u00a0b"})
	body := rec.Body.String()
	if strings.Contains(body, "\u009b") || !strings.Contains(body, `k\u009b2J`) || !strings.Contains(body, "a\u00a0b") {
		t.Errorf("body %q: want U+009B escaped and other characters as they are", body)
	}
	var back map[string]string
	if err := json.Unmarshal(rec.Body.Bytes(), &back); err != nil || back["key"] != "k\u009b2J" {
		t.Errorf("decoded %q, %v", back, err)
	}
}
