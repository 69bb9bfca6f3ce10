// Package admin is the host's admin HTTP API: deploy a module version, list versions, activate
// or roll back a version, pause and resume a task, and show the tasks' status. It uses only
// net/http; the host implements Backend and owns the server's goroutine (Serve).
//
// Every response is JSON. Errors are {"error": "...", "problems": [...]} with the status that
// fits: 400 a malformed request, 401 a missing or wrong bearer token, 404 an unknown task,
// version, path or key, 403 the read-only token on an endpoint that changes something, 405 a
// wrong method, 409 a task that is not running or has no earlier
// version or a reset refused or a restart of a task that has not halted, 413 an upload over the size limit, 422 a refused module, 503 (with Retry-After)
// a deploy that gave up waiting for one of the Limits.MaxUploads slots or a state query that
// could not be answered yet (a partition being restored or moving between hosts), 502 a state
// query whose owner answered something unexpected (forward.go), 500 anything else.
//
// What an unauthenticated client can cost the server is bounded: the token is checked before
// any of the body is read (the answer closes the connection), the request line and headers
// must arrive within Limits.ReadHeaderTimeout and a whole request within Limits.ReadTimeout,
// at most Limits.MaxConns connections are open (at the limit a new one replaces the oldest
// that is not running an authenticated request), and a shutdown drops the clients still
// sending rather than wait for them. An upload is spooled to a file in Config.UploadDir, not
// to memory, and at most Limits.MaxUploads are received and deployed at once; the others
// wait, unread.
//
//	GET  /v1/status                                  {"tasks": [stats.Task…]}
//	GET  /v1/tasks/{task}/versions                   {"task": …, "versions": [Version…]}
//	POST /v1/tasks/{task}/versions                   body: the .wasm bytes → 201 Deployment
//	                                                 (200 when the bytes are the active version)
//	POST /v1/tasks/{task}/versions/{version}/activate                    → 200 Deployment
//	POST /v1/tasks/{task}/rollback[?to=N]            the version before the active one, or N
//	POST /v1/tasks/{task}/pause, /v1/tasks/{task}/resume                 → 200 {"task", "paused"}
//	POST /v1/tasks/{task}/reset[?dry_run=1]          body {"to": "earliest"|"latest"|TIME|"P:O,..."}
//	                                                 → 200 the reset's report; from another host of
//	                                                 the group (ForwardedHeader) also "group": a step
//	                                                 of its reset (ResetRequest.Group, ForwardReset)
//	POST /v1/tasks/{task}/restart                    a halted task, on its active version
//	                                                 → 200 Deployment (restarted, halted: why)
//	GET  /v1/tasks/{task}/state/{key}                a running task's state of a key (state.go)
//	GET  /v1/tasks/{task}/state?prefix=&after=&limit= a page of keys and their state
//	GET  /metrics                                    Config.Metrics, when set (Prometheus)
//
// Config.ReadToken, if set, is accepted beside Config.Token for GET requests only: it reads
// status and state and changes nothing.
//
// The dashboard, GET / and GET /dashboard, is one page (HTML, CSS and JS inline, no external
// assets) that asks for no token itself and holds no figures: its script reads the token from
// the URL fragment (#token=…, never sent to a server) or a login field, keeps it in the tab's
// sessionStorage, and polls GET /v1/status with it.
//
// Two endpoints need no token, for probes (they tell nothing but up or not):
//
//	GET  /healthz    200 {"status": "ok"} while the server answers
//	GET  /readyz     200 {"status": "ready"} when Backend.Ready, else 503 {"status": "not ready"}
package admin

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/stats"
)

// Version is one module version on the wire.
type Version struct {
	Version      int64     `json:"version"`
	SHA256       string    `json:"sha256"`
	Size         int64     `json:"size"`
	Created      time.Time `json:"created"`
	ABIVersion   string    `json:"abi_version"`
	Origin       string    `json:"origin"`
	Active       bool      `json:"active"`
	ActiveOrigin string    `json:"active_origin,omitempty"`
	Status       string    `json:"status,omitempty"` // "good", "bad" or none yet
	Reason       string    `json:"reason,omitempty"` // why a version is bad
	Exports      []string  `json:"exports"`
	Imports      []string  `json:"imports"`
}

// Deployment is the answer to a deploy, an activation or a rollback.
type Deployment struct {
	Task      string  `json:"task"`
	Version   Version `json:"version"`
	Previous  int64   `json:"previous"`
	Unchanged bool    `json:"unchanged,omitempty"`
	// Restarted: the task had halted and was started anew on the version; Halted says why it
	// had halted.
	Restarted bool   `json:"restarted,omitempty"`
	Halted    string `json:"halted,omitempty"`
	// SwitchMillis is the time from the request to the switch (validation included).
	SwitchMillis float64 `json:"switch_ms"`
	// Warnings name capabilities the module imports but the task is not granted, and other
	// things the host warned about when it validated the version; they did not stop it.
	Warnings []string `json:"warnings,omitempty"`
}

// Backend is what the API drives: the host.
type Backend interface {
	Deploy(ctx context.Context, task string, wasm []byte) (Deployment, error)
	Activate(ctx context.Context, task string, version int64) (Deployment, error)
	// Rollback activates version to, or the one before the active one when to is 0.
	Rollback(ctx context.Context, task string, to int64) (Deployment, error)
	Versions(task string) ([]Version, error)
	Pause(ctx context.Context, task string) error
	Resume(ctx context.Context, task string) error
	// Reset resets a task to req.To (earliest, latest, an RFC 3339 time or
	// partition:offset,...): it stops the task, resets it and starts it again, or with
	// req.DryRun says what would move. The report is served as it is, in JSON.
	Reset(ctx context.Context, task string, req ResetRequest) (any, error)
	// Restart starts a halted task again on its active version, from its last checkpoint.
	Restart(ctx context.Context, task string) (Deployment, error)
	// Status returns every task's figures, served as they are (their json tags name the fields).
	Status() []stats.Task
	// Ready reports whether every task processes everything assigned to it (/readyz).
	Ready() bool
}

// Error is a Backend error that carries its HTTP status and, for a refused module, its
// problems. Other errors are answered with 500.
type Error struct {
	Status   int
	Problems []string
	Err      error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Config configures a Server.
type Config struct {
	// Token, if set, must be presented by every request as "Authorization: Bearer <token>".
	Token string
	// ReadToken, if set, is a second token that reads and changes nothing: it is accepted for
	// GET requests (status, versions, state, metrics) and answered 403 on every other method.
	ReadToken string
	// MaxModuleBytes bounds an uploaded module (413 above). Required.
	MaxModuleBytes int64
	// UploadDir is where uploads are spooled while they arrive (removed once read). Default:
	// the system's temporary directory.
	UploadDir string
	Limits    Limits
	Backend   Backend
	Logger    *slog.Logger
	// Metrics, if set, answers GET /metrics, behind the token like every other endpoint.
	Metrics http.Handler
}

// Limits bound what clients can hold of the server. A zero field takes its default.
type Limits struct {
	// ReadHeaderTimeout bounds the time to send the request line and headers. Default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time to send a whole request, body included. Default 5m (a
	// 64 MiB module at about 220 KiB/s).
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the headers to the end of the answer (a
	// deploy's validation and compilation included): a client that does not read its answer
	// cannot hold the connection. Default 10m.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a kept-alive connection waits for its next request.
	// Default 60s.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers. Default 64 KiB.
	MaxHeaderBytes int
	// MaxConns bounds the open connections. Default 64.
	MaxConns int
	// MaxUploads bounds the deploys that receive or deploy a module at once (each holds the
	// module in memory while it compiles); more wait. Default 2.
	MaxUploads int
	// ShutdownGrace bounds how long a shutdown waits for requests that are past reading
	// their body (a deploy compiling, say). Default 10s.
	ShutdownGrace time.Duration
}

func (l Limits) withDefaults() Limits {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.ReadTimeout, 5*time.Minute)
	def(&l.WriteTimeout, 10*time.Minute)
	def(&l.IdleTimeout, 60*time.Second)
	def(&l.ShutdownGrace, 10*time.Second)
	if l.MaxConns <= 0 {
		l.MaxConns = 64
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxUploads <= 0 {
		l.MaxUploads = 2
	}
	return l
}

// Server is the admin API.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	uploads chan struct{} // a slot per deploy in progress
	waiting atomic.Int64  // deploys waiting for a slot
}

// New returns a Server; it starts nothing.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	s := &Server{cfg: cfg, mux: http.NewServeMux(), uploads: make(chan struct{}, cfg.Limits.MaxUploads)}
	s.mux.HandleFunc("GET /v1/status", s.status)
	s.mux.HandleFunc("GET /v1/tasks/{task}/versions", s.versions)
	s.mux.HandleFunc("POST /v1/tasks/{task}/versions", s.deploy)
	s.mux.HandleFunc("POST /v1/tasks/{task}/versions/{version}/activate", s.activate)
	s.mux.HandleFunc("POST /v1/tasks/{task}/rollback", s.rollback)
	s.mux.HandleFunc("POST /v1/tasks/{task}/pause", s.pause)
	s.mux.HandleFunc("POST /v1/tasks/{task}/resume", s.resume)
	s.mux.HandleFunc("POST /v1/tasks/{task}/reset", s.reset)
	s.mux.HandleFunc("POST /v1/tasks/{task}/restart", s.restart)
	s.mux.HandleFunc("GET /v1/tasks/{task}/state/{key}", s.state)
	s.mux.HandleFunc("GET /v1/tasks/{task}/state", s.scanState)
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Errorf("no such endpoint: %s %s", r.Method, r.URL.Path), nil)
	})
	return s
}

// Handler returns the API's handler, authentication included.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			switch r.URL.Path {
			case "/healthz":
				writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
				return
			case "/", "/dashboard":
				serveDashboard(w)
				return
			case "/readyz":
				if s.cfg.Backend.Ready() {
					writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
				} else {
					writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
				}
				return
			}
		}
		if s.cfg.Token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			full := ok && s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
			read := ok && s.cfg.ReadToken != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.ReadToken)) == 1
			if !full && !read {
				w.Header().Set("WWW-Authenticate", `Bearer realm="wasmstream"`)
				msg := "missing bearer token (Authorization: Bearer <token>)"
				if ok {
					msg = "wrong bearer token"
				}
				refuseBody(w)
				writeError(w, http.StatusUnauthorized, errors.New(msg), nil)
				return
			}
			if !full && r.Method != http.MethodGet && r.Method != http.MethodHead {
				refuseBody(w)
				writeError(w, http.StatusForbidden, errors.New("the read-only token (admin.read_token) can query state and status, not deploy, activate, roll back, pause, resume, reset or restart: use admin.token"), nil)
				return
			}
		}
		if c := connOf(r.Context()); c != nil {
			c.setBusy(true)
			defer c.setBusy(false)
		}
		s.mux.ServeHTTP(w, r)
	})
}

// Serve answers requests on ln until ctx is done, then stops accepting, drops the clients
// still sending a request, lets the requests past that finish (at most
// Limits.ShutdownGrace) and returns. It closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	lim := s.cfg.Limits
	cl := limitConns(ln, lim.MaxConns)
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*conn); ok {
				return context.WithValue(ctx, connKey{}, tc)
			}
			return ctx
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(cl) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	cl.shutdown()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lim.ShutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	<-errc // http.ErrServerClosed
	return err
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	tasks := s.cfg.Backend.Status()
	// The lists are [] rather than null when empty: clients iterate them without a check.
	if tasks == nil {
		tasks = []stats.Task{}
	}
	for i := range tasks {
		t := &tasks[i]
		if t.Inputs == nil {
			t.Inputs = []stats.Input{}
		}
		if t.Recent == nil {
			t.Recent = []stats.RecentError{}
		}
		if t.GuestMetrics == nil {
			t.GuestMetrics = []stats.GuestMetric{}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": tasks})
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) {
	task := r.PathValue("task")
	vs, err := s.cfg.Backend.Versions(task)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if vs == nil {
		vs = []Version{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"task": task, "versions": vs})
}

func (s *Server) deploy(w http.ResponseWriter, r *http.Request) {
	max := s.cfg.MaxModuleBytes
	if r.ContentLength > max {
		refuseBody(w)
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("module of %d bytes is over the limit of %d bytes (admin.max_module_bytes)", r.ContentLength, max), nil)
		return
	}
	// Each deploy holds its module in memory while it compiles: a bounded number run, the
	// others wait for a slot before a byte of their body is read. Until the body is read, a
	// shutdown drops the request rather than wait for it.
	c := connOf(r.Context())
	if c != nil {
		c.setReading(true)
	}
	s.waiting.Add(1)
	select {
	case s.uploads <- struct{}{}:
		s.waiting.Add(-1)
		defer func() { <-s.uploads }()
	case <-r.Context().Done(): // the client left, or the shutdown dropped it
		s.waiting.Add(-1)
		refuseBody(w)
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, errors.New("gave up waiting for another deploy to finish: retry later"), nil)
		return
	}
	wasm, code, err := s.receive(w, r, max)
	if c != nil {
		c.setReading(false)
	}
	if err != nil {
		writeError(w, code, err, nil)
		return
	}
	d, err := s.cfg.Backend.Deploy(r.Context(), r.PathValue("task"), wasm)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if d.Unchanged {
		status = http.StatusOK
	}
	writeJSON(w, status, d)
}

// receive reads an upload: spooled to a file while it arrives, so a slow client costs no
// memory, then read back into one slice of its exact size. On error it returns the status to
// answer.
func (s *Server) receive(w http.ResponseWriter, r *http.Request, max int64) ([]byte, int, error) {
	f, err := os.CreateTemp(s.cfg.UploadDir, "upload-*.wasm")
	if err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("spooling the module: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("module is over the limit of %d bytes (admin.max_module_bytes)", max)
		}
		var pathErr *os.PathError
		if errors.As(err, &pathErr) {
			return nil, http.StatusInternalServerError, fmt.Errorf("spooling the module: %w", err)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the module: %w", err)
	}
	if n == 0 {
		return nil, http.StatusBadRequest, errors.New("empty body: send the module's .wasm bytes")
	}
	wasm := make([]byte, n)
	if _, err := f.ReadAt(wasm, 0); err != nil {
		return nil, http.StatusInternalServerError, fmt.Errorf("reading the spooled module: %w", err)
	}
	return wasm, 0, nil
}

func (s *Server) activate(w http.ResponseWriter, r *http.Request) {
	v, err := strconv.ParseInt(r.PathValue("version"), 10, 64)
	if err != nil || v <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Errorf("version %q is not a positive integer", r.PathValue("version")), nil)
		return
	}
	d, err := s.cfg.Backend.Activate(r.Context(), r.PathValue("task"), v)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	var to int64
	if q := r.URL.Query().Get("to"); q != "" {
		v, err := strconv.ParseInt(q, 10, 64)
		if err != nil || v <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("to=%q is not a positive integer", q), nil)
			return
		}
		to = v
	}
	d, err := s.cfg.Backend.Rollback(r.Context(), r.PathValue("task"), to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) restart(w http.ResponseWriter, r *http.Request) {
	d, err := s.cfg.Backend.Restart(r.Context(), r.PathValue("task"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request)  { s.pauseResume(w, r, true) }
func (s *Server) resume(w http.ResponseWriter, r *http.Request) { s.pauseResume(w, r, false) }

func (s *Server) pauseResume(w http.ResponseWriter, r *http.Request, pause bool) {
	task := r.PathValue("task")
	fn := s.cfg.Backend.Resume
	if pause {
		fn = s.cfg.Backend.Pause
	}
	if err := fn(r.Context(), task); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"task": task, "paused": pause})
}

// maxResetBody bounds the body of a reset: {"to": ...} with a list of partition offsets, or a
// step of a group's reset with the list of its streams.
const maxResetBody = 4 << 20

// ResetRequest is a reset as the API received it.
type ResetRequest struct {
	To     string
	DryRun bool
	// Group is, in a reset another host of the task's group forwarded (Forwarded is then its
	// address), the step it asks of this host (the backend reads it; see ForwardReset).
	Group json.RawMessage
	// Auth is the request's Authorization header, Forwarded its ForwardedHeader.
	Auth, Forwarded string
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	var body struct {
		To    string          `json:"to"`
		Group json.RawMessage `json:"group"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxResetBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf(`body: want {"to": "earliest"|"latest"|"<RFC 3339 time>"|"partition:offset,..."}: %v`, err), nil)
		return
	}
	if body.To == "" {
		writeError(w, http.StatusBadRequest, errors.New(`body: "to" is required: earliest, latest, an RFC 3339 time or partition:offset,...`), nil)
		return
	}
	var dry bool
	if q := r.URL.Query().Get("dry_run"); q != "" {
		v, err := strconv.ParseBool(q)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("dry_run=%q: want 1 or 0", q), nil)
			return
		}
		dry = v
	}
	fwd := r.Header.Get(ForwardedHeader)
	if body.Group != nil && fwd == "" {
		writeError(w, http.StatusBadRequest, errors.New(`body: "group" is a step of a group's reset that one host asks of another, not for clients`), nil)
		return
	}
	rep, err := s.cfg.Backend.Reset(r.Context(), r.PathValue("task"), ResetRequest{To: body.To, DryRun: dry, Group: body.Group,
		Auth: r.Header.Get("Authorization"), Forwarded: fwd})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// fail answers a Backend error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var problems []string
	var ae *Error
	if errors.As(err, &ae) {
		status, problems = ae.Status, ae.Problems
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if status == http.StatusInternalServerError {
		s.cfg.Logger.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, err, problems)
}

// refuseBody makes sure that not a byte more of the request's body is read: net/http would
// otherwise drain up to 256 KiB of it, at the client's pace, before answering or closing. The
// connection is closed after the answer.
func refuseBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

func writeError(w http.ResponseWriter, status int, err error, problems []string) {
	body := map[string]any{"error": strings.TrimPrefix(err.Error(), "wasmstream: ")}
	if len(problems) > 0 {
		body["problems"] = problems
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	_, _ = w.Write(escapeC1(b.Bytes()))
}

// escapeC1 rewrites the C1 control characters U+0080–U+009F of encoded JSON as \u escapes:
// encoding/json leaves them raw, and U+009B is a terminal's CSI (like ESC [), so a record key or
// an error in the status would reach a terminal that prints `wasmstream status --json` as a
// control sequence. In JSON they can only stand inside strings, where the escape means the same.
func escapeC1(b []byte) []byte {
	if !bytes.Contains(b, []byte{0xc2}) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); i++ {
		if b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f {
			out = append(out, fmt.Sprintf(`\u%04x`, b[i+1])...)
			i++
			continue
		}
		out = append(out, b[i])
	}
	return out
}
