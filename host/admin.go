package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/wasmstream/wasmstream/host/internal/admin"
)

// validateAdmin checks the admin section.
func validateAdmin(a AdminConfig, bad func(string, string, ...any)) {
	if a.MaxModuleBytes < 0 {
		bad("admin.max_module_bytes", "must be positive, got %d", a.MaxModuleBytes)
	}
	if a.Addr == "" {
		if a.AdvertiseAddr != "" {
			bad("admin.advertise_addr", "needs admin.addr: a host without an admin API has nothing to advertise")
		}
		return
	}
	if a.AdvertiseAddr != "" {
		host, port, err := net.SplitHostPort(a.AdvertiseAddr)
		switch {
		case err != nil:
			bad("admin.advertise_addr", "%q is not host:port: %v", a.AdvertiseAddr, err)
		case host == "" || port == "" || port == "0":
			bad("admin.advertise_addr", "%q: name the host and the port the other hosts reach this one at", a.AdvertiseAddr)
		case net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified():
			bad("admin.advertise_addr", "%q is a wildcard: name an address the other hosts can reach", a.AdvertiseAddr)
		}
	}
	addr, err := adminListenAddr(a.Addr)
	if err != nil {
		bad("admin.addr", "%v", err)
		return
	}
	if a.ReadToken != "" && a.Token == "" {
		bad("admin.read_token", "needs admin.token: without a token every client may do everything")
	}
	if a.ReadToken != "" && a.ReadToken == a.Token {
		bad("admin.read_token", "must differ from admin.token")
	}
	if a.Token == "" && !loopback(addr) {
		bad("admin.token", "is required when admin.addr (%s) is not a loopback address: anyone who can reach it could deploy code", a.Addr)
	}
}

// adminListenAddr returns the address to listen on: a port alone means the loopback interface.
func adminListenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		// Before, ":99999" passed check and run failed listening, after starting the tasks.
		return "", fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// loopback reports whether the host of addr is a loopback address or "localhost".
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AdminAddr returns the address the admin API listens on while Run runs ("" otherwise, or
// when the API is disabled). With admin.addr's port 0 it tells the port chosen.
func (h *Host) AdminAddr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.adminAddr
}

// startAdmin starts the admin API if configured; the returned stop shuts it down and waits.
func (h *Host) startAdmin(ctx context.Context) (stop func(), err error) {
	ac := h.cfg.Admin
	if ac.Addr == "" {
		return func() {}, nil
	}
	addr, err := adminListenAddr(ac.Addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: admin API: %w", err)
	}
	log := h.cfg.Logger.With("component", "admin")
	uploads, err := uploadDir(h.cfg.DataDir)
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := admin.New(admin.Config{Token: ac.Token, ReadToken: ac.ReadToken, MaxModuleBytes: ac.MaxModuleBytes, UploadDir: uploads,
		Backend: adminBackend{h}, Logger: log, Metrics: ac.Metrics})
	h.mu.Lock()
	h.adminAddr = ln.Addr().String()
	h.mu.Unlock()
	if h.advertiseAddr() == "" && slices.ContainsFunc(h.cfg.Tasks, TaskConfig.usesKafka) {
		log.Warn("the admin API listens on every interface and admin.advertise_addr is not set: the other hosts of a group cannot forward state queries here (503)", "addr", ln.Addr().String())
	}
	if ac.Token == "" {
		log.Warn("admin API without a token: any local user can deploy modules", "addr", ln.Addr().String())
	} else {
		log.Info("admin API listening", "addr", ln.Addr().String())
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(actx, ln); err != nil {
			log.Error("admin API stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
		h.mu.Lock()
		h.adminAddr = ""
		h.mu.Unlock()
	}, nil
}

// uploadDir returns the directory the admin API spools uploads to, DataDir/uploads, created,
// and emptied of what an earlier run left there when it was killed mid-upload.
func uploadDir(dataDir string) (string, error) {
	dir := filepath.Join(dataDir, "uploads")
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("wasmstream: admin API: emptying the upload directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("wasmstream: admin API: %w", err)
	}
	return dir, nil
}

// adminBackend adapts the Host to the admin API.
type adminBackend struct{ h *Host }

func (b adminBackend) Deploy(ctx context.Context, task string, wasm []byte) (admin.Deployment, error) {
	d, err := b.h.Deploy(ctx, task, wasm)
	return wireDeployment(d), wireError(err)
}

func (b adminBackend) Activate(ctx context.Context, task string, v int64) (admin.Deployment, error) {
	d, err := b.h.Activate(ctx, task, v)
	return wireDeployment(d), wireError(err)
}

func (b adminBackend) Rollback(ctx context.Context, task string, to int64) (admin.Deployment, error) {
	d, err := b.h.Rollback(ctx, task, to)
	return wireDeployment(d), wireError(err)
}

func (b adminBackend) Versions(task string) ([]admin.Version, error) {
	vs, err := b.h.Versions(task)
	if err != nil {
		return nil, wireError(err)
	}
	out := make([]admin.Version, len(vs))
	for i, v := range vs {
		out[i] = wireVersion(v)
	}
	return out, nil
}

func (b adminBackend) Pause(ctx context.Context, task string) error {
	return wireError(b.h.Pause(ctx, task))
}

func (b adminBackend) Resume(ctx context.Context, task string) error {
	return wireError(b.h.Resume(ctx, task))
}

func (b adminBackend) Reset(ctx context.Context, task string, req admin.ResetRequest) (any, error) {
	if req.Group != nil {
		ans, err := b.h.groupResetStep(ctx, task, req.To, req.Group, req.Forwarded)
		return ans, wireError(err)
	}
	target, err := ParseResetTo(req.To)
	if err != nil {
		return nil, &admin.Error{Status: http.StatusBadRequest, Err: fmt.Errorf("to: %w", err)}
	}
	rep, err := b.h.resetTask(ctx, task, target, req.DryRun, req.Auth)
	if err != nil {
		return nil, wireError(err)
	}
	return rep, nil
}

func (b adminBackend) Restart(ctx context.Context, task string) (admin.Deployment, error) {
	d, err := b.h.RestartTask(ctx, task)
	return wireDeployment(d), wireError(err)
}

func (b adminBackend) Ready() bool { return b.h.Processing() }

func (b adminBackend) Status() []TaskStats { return b.h.Stats() }

func wireVersion(v ModuleVersion) admin.Version {
	return admin.Version{Version: v.Version, SHA256: v.SHA256, Size: v.Size, Created: v.Created,
		ABIVersion: v.ABIVersion, Origin: v.Origin, Active: v.Active, ActiveOrigin: v.ActiveOrigin,
		Status: v.Status, Reason: v.Reason, Exports: v.Exports, Imports: v.Imports}
}

func wireDeployment(d *Deployment) admin.Deployment {
	if d == nil {
		return admin.Deployment{}
	}
	out := admin.Deployment{Task: d.Task, Version: wireVersion(d.Version), Previous: d.Previous, Unchanged: d.Unchanged, Restarted: d.Restarted, Halted: d.Halted, Warnings: d.Warnings}
	if !d.Switched.IsZero() {
		out.SwitchMillis = float64(d.Switched.Sub(d.Requested).Microseconds()) / 1000
	}
	return out
}

// wireError gives a host error its HTTP status.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	var refused *ModuleRefusedError
	switch {
	case errors.As(err, &refused):
		return &admin.Error{Status: http.StatusUnprocessableEntity, Problems: refused.Problems, Err: err}
	case errors.Is(err, ErrUnknownTask), errors.Is(err, ErrUnknownVersion):
		return &admin.Error{Status: http.StatusNotFound, Err: err}
	case errors.Is(err, ErrNotRunning), errors.Is(err, ErrRunning), errors.Is(err, ErrNoEarlierVersion), errors.Is(err, ErrResetRefused):
		return &admin.Error{Status: http.StatusConflict, Err: err}
	case errors.Is(err, ErrQueryTimeout), errors.Is(err, ErrStateUnavailable):
		return &admin.Error{Status: http.StatusServiceUnavailable, Err: err}
	}
	return err
}
