package host_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

type apiClient struct {
	t     *testing.T
	base  string
	token string
}

// call sends a request and returns the status and the decoded JSON body.
func (c apiClient) call(method, path string, body io.Reader) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		c.t.Fatalf("%s %s: status %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		c.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, out
}

// The admin API: authentication, upload limits, every endpoint's answers, and concurrent
// deploys to one task serialised.
func TestAdminAPI(t *testing.T) {
	base := versionedModule(t)
	dir := t.TempDir()
	tc := versionedTask(t, dir, guestbuild.Retag(t, base, 0))
	feed, stdin := newFeedLines()
	const limit = 3 << 20
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: stdin, Logger: testLogger(t),
		Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "s3cret", MaxModuleBytes: limit}, Tasks: []host.TaskConfig{tc}})
	api := apiClient{t: t, base: "http://" + h.AdminAddr(), token: "s3cret"}

	t.Run("authentication", func(t *testing.T) {
		for _, token := range []string{"", "wrong", "S3CRET", "s3cret2"} {
			c := api
			c.t, c.token = t, token
			if status, body := c.call("GET", "/v1/status", nil); status != http.StatusUnauthorized || body["error"] == nil {
				t.Errorf("token %q: status %d %v, want 401 with an error", token, status, body)
			}
			if status, _ := c.call("POST", "/v1/tasks/versioned/versions", bytes.NewReader(base)); status != http.StatusUnauthorized {
				t.Errorf("deploy with token %q: status %d, want 401", token, status)
			}
		}
		if status, body := api.call("GET", "/v1/status", nil); status != http.StatusOK || len(body["tasks"].([]any)) != 1 {
			t.Errorf("status with the token: %d %v", status, body)
		}
	})

	t.Run("unauthenticated bodies are not read", func(t *testing.T) {
		// The body is announced (or chunked) but not sent: the 401 comes at once and the
		// connection is closed, not held open to drain the body at the client's pace.
		for _, head := range []string{"Content-Length: 100000", "Transfer-Encoding: chunked"} {
			c, err := net.Dial("tcp", h.AdminAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/tasks/versioned/versions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n%s\r\n\r\n", head)
			c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a failure bound, never reached when it works
			got, err := io.ReadAll(c)
			if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 401 ") {
				t.Errorf("%s: answer %q, %v; want a 401 and the connection closed", head, got, err)
			}
		}
	})

	t.Run("oversized uploads", func(t *testing.T) {
		big := make([]byte, limit+1)
		status, body := api.call("POST", "/v1/tasks/versioned/versions", bytes.NewReader(big))
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(body["error"].(string), "over the limit") {
			t.Errorf("upload of limit+1 bytes: %d %v, want 413", status, body)
		}
		// Without a Content-Length (chunked), the limit applies while reading.
		status, _ = api.call("POST", "/v1/tasks/versioned/versions", io.MultiReader(bytes.NewReader(big)))
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("chunked upload of limit+1 bytes: %d, want 413", status)
		}
		if v := h.Stats()[0].Version; v != 1 {
			t.Errorf("version %d after refused uploads, want 1", v)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct {
			method, path string
			body         []byte
			status       int
		}{
			{"POST", "/v1/tasks/nosuch/versions", base, http.StatusNotFound},
			{"GET", "/v1/tasks/nosuch/versions", nil, http.StatusNotFound},
			{"POST", "/v1/tasks/versioned/versions", []byte("garbage"), http.StatusUnprocessableEntity},
			{"POST", "/v1/tasks/versioned/versions", nil, http.StatusBadRequest},
			{"POST", "/v1/tasks/versioned/rollback", nil, http.StatusConflict}, // version 1 is the oldest
			{"POST", "/v1/tasks/versioned/rollback?to=99", nil, http.StatusNotFound},
			{"POST", "/v1/tasks/versioned/rollback?to=x", nil, http.StatusBadRequest},
			{"POST", "/v1/tasks/versioned/versions/0/activate", nil, http.StatusBadRequest},
			{"GET", "/v1/nothing", nil, http.StatusNotFound},
		} {
			status, body := api.call(c.method, c.path, bytes.NewReader(c.body))
			if status != c.status || body["error"] == "" {
				t.Errorf("%s %s: %d %v, want %d with an error", c.method, c.path, status, body, c.status)
			}
		}
		_, body := api.call("POST", "/v1/tasks/versioned/versions", strings.NewReader("garbage"))
		if problems, _ := body["problems"].([]any); len(problems) == 0 {
			t.Errorf("a refused module's answer lists no problems: %v", body)
		}
	})

	t.Run("concurrent deploys are serialised", func(t *testing.T) {
		const n = 4
		var wg sync.WaitGroup
		type result struct {
			status            int
			version, previous int64
		}
		results := make([]result, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, body := api.call("POST", "/v1/tasks/versioned/versions", bytes.NewReader(guestbuild.Retag(t, base, 10+i)))
				r := result{status: status}
				if status == http.StatusCreated {
					r.version = int64(body["version"].(map[string]any)["version"].(float64))
					r.previous = int64(body["previous"].(float64))
				}
				results[i] = r
			}()
		}
		wg.Wait()
		slices.SortFunc(results, func(a, b result) int { return int(a.version - b.version) })
		prev := int64(1)
		for i, r := range results {
			if r.status != http.StatusCreated || r.version != int64(2+i) || r.previous != prev {
				t.Fatalf("concurrent deploys: %+v; want versions 2..%d each replacing the one before", results, n+1)
			}
			prev = r.version
		}
	})

	t.Run("versions, rollback, activate, pause, status", func(t *testing.T) {
		status, body := api.call("GET", "/v1/tasks/versioned/versions", nil)
		vs := body["versions"].([]any)
		if status != http.StatusOK || len(vs) != 5 || vs[4].(map[string]any)["active"] != true {
			t.Fatalf("versions: %d %v", status, body)
		}
		status, body = api.call("POST", "/v1/tasks/versioned/rollback", nil)
		if status != http.StatusOK || body["version"].(map[string]any)["version"].(float64) != 4 {
			t.Fatalf("rollback: %d %v", status, body)
		}
		status, body = api.call("POST", "/v1/tasks/versioned/versions/2/activate", nil)
		if status != http.StatusOK || body["version"].(map[string]any)["version"].(float64) != 2 {
			t.Fatalf("activate 2: %d %v", status, body)
		}
		if status, _ := api.call("POST", "/v1/tasks/versioned/pause", nil); status != http.StatusOK {
			t.Fatalf("pause: %d", status)
		}
		_, body = api.call("GET", "/v1/status", nil)
		st := body["tasks"].([]any)[0].(map[string]any)
		if st["paused"] != true || st["version"].(float64) != 2 || st["task"] != "versioned" {
			t.Errorf("status after pause: %v", st)
		}
		if status, _ := api.call("POST", "/v1/tasks/versioned/resume", nil); status != http.StatusOK {
			t.Fatalf("resume: %d", status)
		}
	})

	feed.pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if addr := h.AdminAddr(); addr != "" {
		t.Errorf("AdminAddr() = %q after Run returned", addr)
	}
	if _, err := http.Get(api.base + "/v1/status"); err == nil {
		t.Error("the admin API still answers after Run returned")
	}
}

func TestAdminConfigValidation(t *testing.T) {
	task := host.TaskConfig{Name: "t", Module: "m.wasm", Inputs: []host.InputConfig{{Path: "in"}}}
	for _, c := range []struct {
		admin host.AdminConfig
		bad   string // the key the error names; "" valid
	}{
		{host.AdminConfig{Addr: "127.0.0.1:7070"}, ""},
		{host.AdminConfig{Addr: ":7070"}, ""},
		{host.AdminConfig{Addr: "localhost:7070"}, ""},
		{host.AdminConfig{Addr: "[::1]:7070"}, ""},
		{host.AdminConfig{Addr: "0.0.0.0:7070"}, "admin.token"},
		{host.AdminConfig{Addr: "10.1.2.3:7070"}, "admin.token"},
		{host.AdminConfig{Addr: "0.0.0.0:7070", Token: "t"}, ""},
		{host.AdminConfig{Addr: "7070"}, "admin.addr"},
		{host.AdminConfig{MaxModuleBytes: -1}, "admin.max_module_bytes"},
		{host.AdminConfig{Addr: "0.0.0.0:7070", Token: "t", AdvertiseAddr: "h1.example:7070"}, ""},
		{host.AdminConfig{Addr: ":7070", AdvertiseAddr: "10.1.2.3:7070"}, ""},
		{host.AdminConfig{Addr: ":7070", AdvertiseAddr: "h1.example"}, "admin.advertise_addr"},
		{host.AdminConfig{Addr: ":7070", AdvertiseAddr: ":7070"}, "admin.advertise_addr"},
		{host.AdminConfig{Addr: ":7070", AdvertiseAddr: "h1:0"}, "admin.advertise_addr"},
		{host.AdminConfig{Addr: ":7070", AdvertiseAddr: "0.0.0.0:7070"}, "admin.advertise_addr"},
		{host.AdminConfig{AdvertiseAddr: "h1:7070"}, "admin.advertise_addr"},
	} {
		err := host.Config{Admin: c.admin, Tasks: []host.TaskConfig{task}}.Validate()
		var ce *host.ConfigError
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.admin, err)
		case c.bad != "" && (!errors.As(err, &ce) || ce.Key != c.bad):
			t.Errorf("%+v: %v, want an error naming %s", c.admin, err, c.bad)
		}
	}
}
