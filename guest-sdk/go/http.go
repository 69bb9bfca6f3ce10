package wasmstream

import (
	"errors"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/guest-sdk/go/internal/host"
)

// HTTPRequest is an outbound HTTP request for HTTPDo.
type HTTPRequest struct {
	// Method is e.g. "GET" or "POST" (upper case); "" means "GET".
	Method string
	// URL is an absolute http:// or https:// URL whose host is on the task's allowlist.
	URL string
	// Headers are sent in order; the host copies them.
	Headers []Header
	// Body is the request body; nil or empty for none. The host copies it.
	Body []byte
	// Timeout bounds the request; 0 means the task's default, and the host caps it at the task's
	// maximum. It is rounded up to whole milliseconds.
	Timeout time.Duration
}

// HTTPResponse is the response to an HTTPRequest. Its byte slices belong to it: they stay valid
// after the handler returns.
type HTTPResponse struct {
	// Status is the HTTP status code, e.g. 200 or 404.
	Status int
	// Headers are the response headers in the order the host gave them.
	Headers []Header
	// Body is the whole response body.
	Body []byte
}

// Header returns the value of the first header named name, compared case-insensitively (ASCII),
// and whether there is one.
func (r *HTTPResponse) Header(name string) ([]byte, bool) {
	for _, h := range r.Headers {
		if equalFold(h.Name, name) {
			return h.Value, true
		}
	}
	return nil, false
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Reusable buffers of HTTPDo.
var (
	httpReqBuf  []byte
	httpRespBuf []byte
)

const httpRespBufSize = 16 << 10

// HTTPDo sends req and waits for the response, the request's timeout or the task's limits. A
// response of any status (404, 500…) is a success: check Status. The request is not part of the
// call's atomic effects: when a failed call is retried, its requests are sent again.
//
// HTTPDo needs a grant: it fails with ErrNotAllowed when the task has no HTTP grant, the URL's
// host is not on its allowlist, or during init; with ErrUnavailable when the connection failed,
// the request timed out or the host is stopping; with ErrInvalid for a malformed method or URL;
// with ErrTooLarge for a request or response body over the task's limit.
func HTTPDo(req *HTTPRequest) (*HTTPResponse, error) {
	if req == nil {
		return nil, errors.New("wasmstream: http: nil request")
	}
	if req.Timeout < 0 {
		return nil, errors.New("wasmstream: http: negative timeout")
	}
	method := req.Method
	if method == "" {
		method = "GET"
	}
	ms := req.Timeout / time.Millisecond
	if req.Timeout%time.Millisecond != 0 {
		ms++
	}
	if ms > 1<<32-1 {
		ms = 1<<32 - 1
	}
	httpReqBuf = abi.AppendHTTPRequest(httpReqBuf[:0], &abi.HTTPRequest{Method: strBytes(method),
		URL: strBytes(req.URL), Headers: req.Headers, Body: req.Body, TimeoutMs: uint32(ms)})
	if len(httpRespBuf) == 0 {
		httpRespBuf = make([]byte, httpRespBufSize)
	}
	n := host.HTTPRequest(httpReqBuf, httpRespBuf)
	if err := check(abi.FuncHTTPRequest, n); err != nil {
		return nil, err
	}
	var raw []byte
	if n <= int32(len(httpRespBuf)) {
		raw = append(make([]byte, 0, n), httpRespBuf[:n]...)
	} else {
		// Too big for the buffer: the host kept it for http_response.
		raw = make([]byte, n)
		m := host.HTTPResponse(raw)
		if err := check(abi.FuncHTTPResponse, m); err != nil {
			return nil, err
		}
		if m != n {
			return nil, errors.New("wasmstream: http_response: the kept response changed length")
		}
	}
	r, err := abi.DecodeHTTPResponse(raw)
	if err != nil {
		return nil, errors.New("wasmstream: http_request: response: " + err.Error())
	}
	return &HTTPResponse{Status: int(r.Status), Headers: r.Headers, Body: r.Body}, nil
}
