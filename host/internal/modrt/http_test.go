package modrt

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
)

// The outbound HTTP tests run testdata/httpguest.wat against a loopback server.

// testServer is a loopback HTTP server with the endpoints the tests call.
type testServer struct {
	*httptest.Server
	inflight, maxInflight atomic.Int64
	release               chan struct{} // /block waits for a token
	entered               chan struct{} // /block signals its entry
	onEnter               func()        // /cancel calls it on entry
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	s := &testServer{release: make(chan struct{}, 16), entered: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Test", "yes")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s %s x-req=%s body=%s", r.Method, r.URL.Path, r.Header.Get("X-Req"), body)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	mux.HandleFunc("/redirect-in", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/hello", http.StatusFound)
	})
	mux.HandleFunc("/redirect-out", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+portOf(s.URL)+"/hello", http.StatusFound)
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusFound)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		body := strings.Repeat("x", n)
		if h, _ := strconv.Atoi(r.URL.Query().Get("hdr")); h > 0 {
			w.Header().Set("X-Big", strings.Repeat("h", h))
		}
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
			io.WriteString(w, body)
			return
		}
		half := n / 2
		io.WriteString(w, body[:half])
		w.(http.Flusher).Flush()
		io.WriteString(w, body[half:])
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	mux.HandleFunc("/cancel", func(w http.ResponseWriter, r *http.Request) {
		s.onEnter()
		<-r.Context().Done()
	})
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		n := s.inflight.Add(1)
		for {
			m := s.maxInflight.Load()
			if n <= m || s.maxInflight.CompareAndSwap(m, n) {
				break
			}
		}
		s.entered <- struct{}{}
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
		s.inflight.Add(-1)
		io.WriteString(w, "released")
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func portOf(u string) string { return u[strings.LastIndexByte(u, ':')+1:] }

// httpModule compiles the HTTP guest with grant (nil: none).
func httpModule(t *testing.T, grant *HTTPGrant) *Module {
	t.Helper()
	return compile(t, newRuntime(t, RuntimeConfig{}), "httpguest", Limits{Grants: Grants{HTTP: grant}})
}

func localGrant() *HTTPGrant { return &HTTPGrant{Allow: []string{"127.0.0.1"}} }

// hval is a record value for the HTTP guest (see testdata/httpguest.wat).
type hval struct {
	onlyResponse                   bool   // call http_response only
	reqPtr, reqLen, bufPtr, bufCap uint32 // 0xffffffff: the guest's defaults (reqPtr, reqLen, bufPtr)
	req                            []byte
}

func (v hval) bytes() []byte {
	var b []byte
	flags := uint32(0)
	if v.onlyResponse {
		flags = 1
	}
	for _, x := range []uint32{flags, v.reqPtr, v.reqLen, v.bufPtr, v.bufCap} {
		b = binary.LittleEndian.AppendUint32(b, x)
	}
	return append(b, v.req...)
}

const dflt = 0xffffffff

// request is a value making req with a buffer of bufCap bytes.
func request(req abi.HTTPRequest, bufCap uint32) hval {
	return hval{reqPtr: dflt, reqLen: dflt, bufPtr: dflt, bufCap: bufCap, req: abi.AppendHTTPRequest(nil, &req)}
}

func reqBytes(r abi.HTTPRequest) []byte { return abi.AppendHTTPRequest(nil, &r) }

func get(url string) abi.HTTPRequest { return abi.HTTPRequest{Method: []byte("GET"), URL: []byte(url)} }

// result is what the guest emitted for one record: a decoded response or an error code.
type result struct {
	code abi.Errno // abi.OK when resp is set
	resp abi.HTTPResponse
}

// runHTTP runs one call with a record per value and returns the guest's results, in order.
func runHTTP(t *testing.T, ctx context.Context, i *Instance, vals ...hval) []result {
	t.Helper()
	recs := make([]abi.Record, len(vals))
	for k, v := range vals {
		recs[k] = rec(strconv.Itoa(k), v.bytes())
	}
	eff, err := i.Process(ctx, recs, nil)
	if err != nil {
		t.Fatalf("process: %v", err)
	}
	var out []result
	for _, o := range eff.Outputs {
		switch o.Name {
		case "err":
			out = append(out, result{code: abi.Errno(int32(binary.LittleEndian.Uint32(o.Value)))})
		case "resp":
			r, err := abi.DecodeHTTPResponse(o.Value)
			if err != nil {
				t.Fatalf("the guest got a malformed HttpResponse: %v (%d bytes)", err, len(o.Value))
			}
			out = append(out, result{resp: r})
		default:
			t.Fatalf("unexpected output %q", o.Name)
		}
	}
	if len(out) != len(vals) {
		t.Fatalf("%d results for %d records: %+v", len(out), len(vals), out)
	}
	return out
}

func header(r abi.HTTPResponse, name string) string {
	for _, h := range r.Headers {
		if string(h.Name) == name {
			return string(h.Value)
		}
	}
	return ""
}

func TestHTTPRequest(t *testing.T) {
	srv := newTestServer(t)
	m := httpModule(t, &HTTPGrant{Allow: []string{"127.0.0.1"}, MaxRequestBytes: 16, MaxResponseBytes: 1000})
	i := instantiate(t, m, InstanceConfig{})
	post := abi.HTTPRequest{Method: []byte("POST"), URL: []byte(srv.URL + "/hello"), Body: []byte("ping"),
		Headers: []abi.Header{{Name: []byte("X-Req"), Value: []byte("abc")}}}
	withHeader := func(name, value string) abi.HTTPRequest {
		r := get(srv.URL + "/hello")
		r.Headers = []abi.Header{{Name: []byte(name), Value: []byte(value)}}
		return r
	}
	tooBig := post
	tooBig.Body = []byte(strings.Repeat("b", 17))
	method := func(m string) abi.HTTPRequest { r := get(srv.URL + "/hello"); r.Method = []byte(m); return r }
	localhost := "http://localhost:" + portOf(srv.URL)

	for _, tc := range []struct {
		name   string
		val    hval
		code   abi.Errno
		status uint32
		body   string
	}{
		{name: "post", val: request(post, 4096), status: 201, body: "POST /hello x-req=abc body=ping"},
		{name: "404 is a response", val: request(get(srv.URL+"/missing"), 4096), status: 404},
		{name: "redirect to an allowed host", val: request(get(srv.URL+"/redirect-in"), 4096), status: 201, body: "GET /hello x-req= body="},
		{name: "host not allowed", val: request(get(localhost+"/hello"), 4096), code: abi.ErrNotAllowed},
		{name: "userinfo does not hide the host", val: request(get("http://127.0.0.1@localhost:"+portOf(srv.URL)+"/hello"), 4096), code: abi.ErrNotAllowed},
		{name: "redirect to a host not allowed", val: request(get(srv.URL+"/redirect-out"), 4096), code: abi.ErrNotAllowed},
		{name: "redirect loop", val: request(get(srv.URL+"/loop"), 4096), code: abi.ErrUnavailable},
		{name: "response within the limit, headers included", val: request(get(srv.URL+"/big?n=900"), 4096), status: 200, body: strings.Repeat("x", 900)},
		{name: "response over the limit", val: request(get(srv.URL+"/big?n=1001"), 4096), code: abi.ErrTooLarge},
		{name: "chunked response over the limit", val: request(get(srv.URL+"/big?n=3000&chunked=1"), 4096), code: abi.ErrTooLarge},
		// Issue 22 item 5: headers count too (Go's transport alone would take 10 MB of them).
		{name: "headers over the limit", val: request(get(srv.URL+"/big?n=10&hdr=1200"), 4096), code: abi.ErrTooLarge},
		{name: "request body over the limit", val: request(tooBig, 4096), code: abi.ErrTooLarge},
		{name: "connection refused", val: request(get("http://127.0.0.1:1/"), 4096), code: abi.ErrUnavailable},
		{name: "malformed layout", val: hval{reqPtr: dflt, reqLen: dflt, bufPtr: dflt, bufCap: 4096, req: []byte("garbage")}, code: abi.ErrInvalid},
		{name: "trailing bytes", val: hval{reqPtr: dflt, reqLen: dflt, bufPtr: dflt, bufCap: 4096,
			req: append(reqBytes(get(srv.URL)), 0)}, code: abi.ErrInvalid},
		{name: "lower-case method", val: request(method("get"), 4096), code: abi.ErrInvalid},
		{name: "empty method", val: request(method(""), 4096), code: abi.ErrInvalid},
		{name: "method with a space", val: request(method("GET "), 4096), code: abi.ErrInvalid},
		{name: "relative URL", val: request(get("/hello"), 4096), code: abi.ErrInvalid},
		{name: "ftp URL", val: request(get("ftp://127.0.0.1/x"), 4096), code: abi.ErrInvalid},
		{name: "URL without a host", val: request(get("http:///x"), 4096), code: abi.ErrInvalid},
		{name: "unparsable URL", val: request(get("http://127.0.0.1:port/"), 4096), code: abi.ErrInvalid},
		{name: "header value with a newline", val: request(withHeader("X-Req", "a\r\nX-Evil: 1"), 4096), code: abi.ErrInvalid},
		{name: "header name with a colon", val: request(withHeader("X-Req:", "a"), 4096), code: abi.ErrInvalid},
		{name: "request outside memory", val: hval{reqPtr: 0x1fff0, reqLen: 100, bufPtr: dflt, bufCap: 4096}, code: abi.ErrOutOfBounds},
		{name: "request length negative", val: hval{reqPtr: 0, reqLen: 0x80000000, bufPtr: dflt, bufCap: 4096}, code: abi.ErrOutOfBounds},
		{name: "request range wraps", val: hval{reqPtr: 0xfffffff0, reqLen: 0x20, bufPtr: dflt, bufCap: 4096}, code: abi.ErrOutOfBounds},
		{name: "buffer outside memory", val: hval{reqPtr: dflt, reqLen: dflt, bufPtr: 0x1ffff, bufCap: 2, req: reqBytes(get(srv.URL + "/hello"))}, code: abi.ErrOutOfBounds},
		{name: "http_response without a kept response", val: hval{onlyResponse: true}, code: abi.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runHTTP(t, context.Background(), i, tc.val)[0]
			if r.code != tc.code {
				t.Fatalf("result %v, want %v", r.code, tc.code)
			}
			if tc.code != abi.OK {
				return
			}
			if r.resp.Status != tc.status {
				t.Errorf("status %d, want %d", r.resp.Status, tc.status)
			}
			if tc.body != "" && string(r.resp.Body) != tc.body {
				t.Errorf("body %q, want %q", r.resp.Body, tc.body)
			}
			if tc.status == 201 && header(r.resp, "X-Test") != "yes" {
				t.Errorf("headers %v lack X-Test: yes", r.resp.Headers)
			}
		})
	}
	if st := m.HTTPStats(); st.Requests == 0 || st.Failures == 0 || st.Failures >= st.Requests {
		t.Errorf("stats %+v", st)
	}
}

// A response larger than the guest's buffer is kept for http_response, for the rest of the call
// only.
func TestHTTPResponseKept(t *testing.T) {
	srv := newTestServer(t)
	i := instantiate(t, httpModule(t, localGrant()), InstanceConfig{})
	rs := runHTTP(t, context.Background(), i,
		request(get(srv.URL+"/big?n=100000"), 16), // kept, fetched with http_response
		request(get(srv.URL+"/big?n=10"), 4096),   // fits: nothing kept
		hval{onlyResponse: true},                  // so nothing to fetch
		request(get(srv.URL+"/big?n=100000"), 16), // kept again…
		request(get("http://127.0.0.1:1/"), 4096), // …and dropped by the next request
		hval{onlyResponse: true},
		request(get(srv.URL+"/big?n=100000&chunked=1"), 0), // kept at the end of the call
	)
	if b := rs[0].resp.Body; rs[0].code != abi.OK || len(b) != 100000 || strings.Trim(string(b), "x") != "" {
		t.Errorf("kept response: %v, %d bytes", rs[0].code, len(b))
	}
	if rs[1].code != abi.OK || string(rs[1].resp.Body) != "xxxxxxxxxx" {
		t.Errorf("small response: %+v", rs[1])
	}
	if rs[2].code != abi.ErrNotFound {
		t.Errorf("http_response after a response that fit: %v, want ERR_NOT_FOUND", rs[2].code)
	}
	if rs[3].code != abi.OK || rs[4].code != abi.ErrUnavailable || rs[5].code != abi.ErrNotFound {
		t.Errorf("http_response after a failed request: %v, %v, %v; want OK, ERR_UNAVAILABLE, ERR_NOT_FOUND", rs[3].code, rs[4].code, rs[5].code)
	}
	if rs[6].code != abi.OK || len(rs[6].resp.Body) != 100000 {
		t.Errorf("chunked kept response: %v, %d bytes", rs[6].code, len(rs[6].resp.Body))
	}
	// The next call does not see the previous call's kept response.
	if r := runHTTP(t, context.Background(), i, hval{onlyResponse: true})[0]; r.code != abi.ErrNotFound {
		t.Errorf("http_response in the next call: %v, want ERR_NOT_FOUND", r.code)
	}
	if i.http.kept != nil {
		t.Errorf("%d bytes kept after the call", len(i.http.kept))
	}
}

// Without a grant, and during init (no scope), every request is refused.
func TestHTTPNotAllowed(t *testing.T) {
	srv := newTestServer(t)
	i := instantiate(t, httpModule(t, nil), InstanceConfig{})
	if r := runHTTP(t, context.Background(), i, request(get(srv.URL+"/hello"), 4096))[0]; r.code != abi.ErrNotAllowed {
		t.Errorf("without a grant: %v, want ERR_NOT_ALLOWED", r.code)
	}

	m := httpModule(t, localGrant())
	var mu sync.Mutex
	var got []int64
	m.observer = func(fn int, r int64) {
		if fn == hfHTTPRequest || fn == hfHTTPResponse {
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
		}
	}
	instantiate(t, m, InstanceConfig{Config: request(get(srv.URL+"/hello"), 4096).bytes()})
	instantiate(t, m, InstanceConfig{Config: hval{onlyResponse: true}.bytes()})
	if len(got) != 2 || got[0] != int64(abi.ErrNotAllowed) || got[1] != int64(abi.ErrNotAllowed) {
		t.Errorf("http_request, http_response during init: %v, want [ERR_NOT_ALLOWED ERR_NOT_ALLOWED]", got)
	}
}

// A request that outlives its timeout, or whose call's context is cancelled (the host is
// stopping), fails with ERR_UNAVAILABLE, and the cause is logged with the task.
func TestHTTPUnavailable(t *testing.T) {
	srv := newTestServer(t)
	log, logs := newLogger()
	m := httpModule(t, &HTTPGrant{Allow: []string{"127.0.0.1"}, Timeout: 200 * time.Millisecond, MaxTimeout: time.Second})
	i := instantiate(t, m, InstanceConfig{Task: "fetcher", Logger: log})

	if r := runHTTP(t, context.Background(), i, request(get(srv.URL+"/slow"), 4096))[0]; r.code != abi.ErrUnavailable {
		t.Errorf("grant timeout: %v, want ERR_UNAVAILABLE", r.code)
	}
	short := get(srv.URL + "/slow")
	short.TimeoutMs = 50
	if r := runHTTP(t, context.Background(), i, request(short, 4096))[0]; r.code != abi.ErrUnavailable {
		t.Errorf("guest timeout: %v, want ERR_UNAVAILABLE", r.code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv.onEnter = cancel
	if r := runHTTP(t, ctx, i, request(get(srv.URL+"/cancel"), 4096))[0]; r.code != abi.ErrUnavailable {
		t.Errorf("cancelled: %v, want ERR_UNAVAILABLE", r.code)
	}

	var warned int
	for _, l := range logs() {
		if l.level == slog.LevelWarn && l.msg == "http_request failed" {
			warned++
			if l.attrs["task"] != "fetcher" || l.attrs["error"] == "" || l.attrs["host"] != strings.TrimPrefix(srv.URL, "http://") {
				t.Errorf("log record %+v", l)
			}
		}
	}
	if warned != 3 {
		t.Errorf("%d warnings, want 3: %+v", warned, logs())
	}
}

// The requests of all a module's instances share MaxConcurrent slots.
func TestHTTPConcurrencyBound(t *testing.T) {
	srv := newTestServer(t)
	m := httpModule(t, &HTTPGrant{Allow: []string{"127.0.0.1"}, MaxConcurrent: 1})
	insts := []*Instance{instantiate(t, m, InstanceConfig{}), instantiate(t, m, InstanceConfig{})}
	var wg sync.WaitGroup
	for k, i := range insts {
		wg.Go(func() {
			eff, err := i.Process(context.Background(), []abi.Record{rec("k", request(get(srv.URL+"/block"), 4096).bytes())}, nil)
			if err != nil || len(eff.Outputs) != 1 || eff.Outputs[0].Name != "resp" {
				t.Errorf("instance %d: %v %s", k, err, fmtOutputs(eff.Outputs))
			}
		})
	}
	// One request enters the server; the other waits for its slot, not at the server.
	<-srv.entered
	deadline := time.Now().Add(60 * time.Second)
	for m.http.waiting.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never waited for a slot")
		}
		time.Sleep(time.Millisecond)
	}
	srv.release <- struct{}{}
	<-srv.entered
	srv.release <- struct{}{}
	wg.Wait()
	if got := srv.maxInflight.Load(); got != 1 {
		t.Errorf("the server saw %d requests at once, want 1", got)
	}
	if st := m.HTTPStats(); st.Requests != 2 || st.Failures != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestHTTPAllowMatch(t *testing.T) {
	for _, tc := range []struct {
		allow string
		url   string
		want  bool
	}{
		{"api.example.com", "https://api.example.com/x", true},
		{"api.example.com", "https://API.Example.COM./x", true},
		{"API.example.com", "http://api.example.com:8080/x", true},
		{"api.example.com", "https://example.com/", false},
		{"api.example.com", "https://api.example.com.evil.org/", false},
		{"api.example.com:8443", "https://api.example.com:8443/", true},
		{"api.example.com:8443", "https://api.example.com/", false},
		{"api.example.com:443", "https://api.example.com/", true},
		{"api.example.com:80", "http://api.example.com/", true},
		{"api.example.com:80", "https://api.example.com/", false},
		{"*.example.com", "https://a.example.com/", true},
		{"*.example.com", "https://a.b.example.com/", true},
		{"*.example.com", "https://example.com/", false},
		{"*.example.com", "https://aexample.com/", false},
		{"*.example.com:9000", "http://a.example.com:9000/", true},
		{"*.example.com:9000", "http://a.example.com:9001/", false},
		{"10.0.0.7", "http://10.0.0.7:81/", true},
		{"[::1]", "http://[::1]:8080/", true},
		{"[::1]:8080", "http://[::1]:8080/", true},
		{"[::1]:8080", "http://[::1]/", false},
	} {
		e, err := parseAllow(tc.allow)
		if err != nil {
			t.Errorf("%q: %v", tc.allow, err)
			continue
		}
		c := &httpClient{allow: []allowEntry{e}}
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.allowed(u); got != tc.want {
			t.Errorf("allow %q, %s: %v, want %v", tc.allow, tc.url, got, tc.want)
		}
	}
}

func TestHTTPGrantValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    HTTPGrant
		want []string // substrings of the error, one per problem; none: valid
	}{
		{name: "defaults", g: HTTPGrant{Allow: []string{"a.example.com", "*.b.example.com", "10.0.0.1:8080", "[::1]:9"}}},
		{name: "empty", g: HTTPGrant{}, want: []string{"Allow is empty"}},
		{name: "bad entries", g: HTTPGrant{Allow: []string{"https://a.example.com", "a.example.com/x", "", "*", "a..b", "a:0", "a:99999", "a:", "::1", "[1.2.3.4]", "a b"}},
			want: []string{"Allow[0]: \"https://a.example.com\" is not a host name (write", "Allow[1]", "Allow[2]: empty host", "Allow[3]", "Allow[4]",
				"Allow[5]: \"a:0\": port", "Allow[6]", "Allow[7]", "Allow[8]: \"::1\": write an IPv6 address in brackets", "Allow[9]", "Allow[10]"}},
		// A URL with user information may hold a password: the error does not repeat it.
		{name: "credentials", g: HTTPGrant{Allow: []string{"https://user:hunter2@a.example.com", "user:hunter2@a.example.com"}},
			want: []string{"Allow[0]: a URL with user information (user:password@) is not a host name (write", "Allow[1]: a URL with"}},
		{name: "negative", g: HTTPGrant{Allow: []string{"a"}, Timeout: -1, MaxTimeout: -1, MaxConcurrent: -1, MaxRequestBytes: -1, MaxResponseBytes: -1},
			want: []string{"Timeout is negative", "MaxTimeout is negative", "MaxConcurrent is negative", "MaxRequestBytes is negative", "MaxResponseBytes is negative"}},
		{name: "timeout over max", g: HTTPGrant{Allow: []string{"a"}, Timeout: 2 * time.Second, MaxTimeout: time.Second},
			want: []string{"Timeout 2s is over MaxTimeout 1s"}},
		{name: "timeout over the default max", g: HTTPGrant{Allow: []string{"a"}, Timeout: 2 * time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.g.validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d", errs, len(tc.want))
			}
			for k, w := range tc.want {
				if !strings.Contains(errs[k].Error(), w) || !strings.HasPrefix(errs[k].Error(), "grants: HTTP.") {
					t.Errorf("error %d %q lacks %q", k, errs[k], w)
				}
				if strings.Contains(errs[k].Error(), "hunter2") {
					t.Errorf("error %d %q repeats a password", k, errs[k])
				}
			}
			err := Limits{Grants: Grants{HTTP: &tc.g}}.Validate()
			if (err == nil) != (len(tc.want) == 0) {
				t.Errorf("Limits.Validate: %v", err)
			}
		})
	}

	g := Grants{HTTP: &HTTPGrant{Allow: []string{"a.example.com", "*.b.example.com"}}}.clone()
	want := "http a.example.com, *.b.example.com (timeout 10s, max timeout 1m0s, 4 at once, request body up to 1048576 bytes, response body up to 4194304 bytes)"
	if d := g.Describe(); len(d) != 1 || d[0] != want {
		t.Errorf("Describe = %q, want [%q]", d, want)
	}
	if g.None() {
		t.Error("None with an HTTP grant")
	}
}

// FuzzParseAllow: no allowlist entry panics the parser, and an entry it accepts allows its own
// host (any port when it names none).
func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{"api.example.com", "*.example.com:8443", "[::1]:80", "10.0.0.1", "a:", "[", "*.", "https://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := parseAllow(s)
		if err != nil {
			return
		}
		host := e.host
		if e.wildcard {
			host = "x." + host
		}
		port := e.port
		if port == "" {
			port = "1"
		}
		if !e.match(host, port) {
			t.Errorf("%q (%+v) does not allow %s:%s", s, e, host, port)
		}
	})
}

// A request the allowlist refuses, or any request without a grant, is logged at warn naming the
// refused host and the task, at most once per refusalEvery per module; the next warning counts
// those left out.
func TestHTTPRefusedHostLogged(t *testing.T) {
	srv := newTestServer(t)
	other := "http://localhost:" + portOf(srv.URL) + "/hello"
	for _, tc := range []struct {
		name  string
		grant *HTTPGrant
		url   string
		host  string
		why   string
	}{
		{"not on the allowlist", localGrant(), other, "localhost:" + portOf(srv.URL), "grants.http.allow"},
		{"no grant", nil, srv.URL + "/hello", strings.TrimPrefix(srv.URL, "http://"), "no grants.http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := newLogger()
			m := httpModule(t, tc.grant)
			now := time.Unix(1000, 0)
			m.refused.now = func() time.Time { return now }
			i := instantiate(t, m, InstanceConfig{Task: "fetcher", Logger: log})
			refused := func() []logRec {
				var out []logRec
				for _, l := range logs() {
					if strings.HasPrefix(l.msg, "http_request refused") {
						out = append(out, l)
					}
				}
				return out
			}
			vals := []hval{request(get(tc.url), 4096), request(get(tc.url), 4096), request(get(tc.url), 4096)}
			for _, r := range runHTTP(t, context.Background(), i, vals...) {
				if r.code != abi.ErrNotAllowed {
					t.Fatalf("result %v, want ERR_NOT_ALLOWED", r.code)
				}
			}
			got := refused()
			if len(got) != 1 {
				t.Fatalf("%d warnings for 3 refusals within %v, want 1: %+v", len(got), refusalEvery, got)
			}
			l := got[0]
			if l.level != slog.LevelWarn || l.attrs["task"] != "fetcher" || l.attrs["host"] != tc.host || !strings.Contains(l.msg, tc.why) {
				t.Errorf("warning %+v, want task fetcher, host %s, a message naming %q", l, tc.host, tc.why)
			}
			now = now.Add(refusalEvery)
			runHTTP(t, context.Background(), i, request(get(tc.url), 4096))
			if got := refused(); len(got) != 2 || got[1].attrs["refused_unlogged"] != "2" {
				t.Errorf("after %v: %+v, want a second warning counting the 2 left out", refusalEvery, got)
			}
		})
	}
}
