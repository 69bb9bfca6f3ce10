//go:build !wasip1

package wasmstream

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
)

// The timer handler sees the golden firings' values (abi/testdata/golden/README.md).
func TestGoldenFirings(t *testing.T) {
	install(t)
	var got []string
	HandleTimer(func(f *Firing) error {
		got = append(got, strconv.Quote(string(f.Key()))+" "+f.Name()+" "+strconv.FormatInt(f.Time(), 10)+" "+
			strconv.Quote(string(f.Payload()))+" "+strconv.FormatBool(f.EventTime())+" "+
			strconv.Itoa(int(f.Domain()))+" "+strconv.Itoa(int(f.Partition()))+" "+strconv.Quote(string(f.State().Key())))
		return nil
	})
	if rc := deliver(t, golden(t, "firings"), callOnTimer); rc != 0 {
		t.Fatalf("on_timer returned %d", rc)
	}
	want := []string{
		`"alice" flush 1700000000000 "" false 0 0 "alice"`,
		`"" window/60 1700000060000 "\x00\xff" true 1 3 ""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("firings:\n got %q\nwant %q", got, want)
	}
}

func TestOnTimerFailures(t *testing.T) {
	h := install(t)
	if rc := deliver(t, abi.AppendFiringsHeader(nil, 0), callOnTimer); rc != 0 {
		t.Fatalf("no firings, no handler: rc %d", rc)
	}
	if rc := deliver(t, golden(t, "firings"), callOnTimer); rc == 0 || !strings.Contains(h.failMsg, "no timer handler") {
		t.Fatalf("no handler: rc %d, fail message %q", rc, h.failMsg)
	}
	HandleTimer(func(*Firing) error { return errors.New("bad timer") })
	if rc := deliver(t, golden(t, "firings"), callOnTimer); rc == 0 || h.failMsg != `wasmstream: timer "flush" of key "alice": bad timer` {
		t.Fatalf("handler error: rc %d, fail message %q", rc, h.failMsg)
	}
	if rc := deliver(t, golden(t, "tick"), callOnTimer); rc == 0 || !strings.Contains(h.failMsg, "malformed") {
		t.Fatalf("a tick as firings: rc %d, fail message %q", rc, h.failMsg)
	}
}

func TestTimerCalls(t *testing.T) {
	h := install(t)
	h.watermark = 99
	if err := SetTimer([]byte("k"), "t1", EventTime, 1000, []byte("p")); err != nil {
		t.Fatal(err)
	}
	if err := SetTimer([]byte("k"), "t2", ProcessingTime, -5, nil); err != nil {
		t.Fatal(err)
	}
	if err := DeleteTimer([]byte("k"), "t1"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(h.timerOps, ","); got != "set k/t1 d1 @1000 p,set k/t2 d0 @-5 ,delete k/t1" || Watermark() != 99 {
		t.Fatalf("timer calls %q, watermark %d", got, Watermark())
	}
}

// The tick handler sees the golden tick; Keys reads the golden key page (more = 1), grows its
// buffer when the host says it is too small, and asks again after the last key.
func TestGoldenTickAndKeys(t *testing.T) {
	h := install(t)
	keysBuf = nil
	h.keyPages = [][]byte{golden(t, "key_page"), nil, abi.AppendKeyPage(nil, [][]byte{[]byte("carol")}, false)}
	var got, keys []string
	HandleTick(func(tk *Tick) error {
		got = append(got, strconv.Itoa(int(tk.Partition())), strconv.FormatInt(tk.Now(), 10),
			strconv.FormatInt(tk.Watermark(), 10), tk.Source())
		return tk.Keys(func(key []byte) bool { keys = append(keys, strconv.Quote(string(key))); return true })
	})
	if rc := deliver(t, golden(t, "tick"), callOnTick); rc != 0 {
		t.Fatalf("on_tick returned %d: %s", rc, h.failMsg)
	}
	if strings.Join(got, " ") != "3 1700000000000 -1 orders" {
		t.Fatalf("tick %q", got)
	}
	if strings.Join(keys, ",") != `"","alice","bob","carol"` || strings.Join(h.keysCalls, ",") != "-,bob,bob" {
		t.Fatalf("keys %s, state_keys calls after %q", keys, h.keysCalls)
	}
	if h.keysCaps[1] != keysBufInitial || h.keysCaps[2] != 2*keysBufInitial {
		t.Fatalf("buffer sizes %v", h.keysCaps)
	}
}

func TestOnTickFailures(t *testing.T) {
	h := install(t)
	if rc := deliver(t, golden(t, "tick"), callOnTick); rc != 0 {
		t.Fatalf("no handler: rc %d", rc)
	}
	HandleTick(func(*Tick) error { return errors.New("bad tick") })
	if rc := deliver(t, golden(t, "tick"), callOnTick); rc == 0 || h.failMsg != "wasmstream: tick of orders/3: bad tick" {
		t.Fatalf("handler error: rc %d, fail message %q", rc, h.failMsg)
	}
	h.keyPages = [][]byte{abi.AppendKeyPage(nil, nil, true)}
	HandleTick(func(tk *Tick) error { return tk.Keys(func([]byte) bool { return true }) })
	if rc := deliver(t, golden(t, "tick"), callOnTick); rc == 0 || !strings.Contains(h.failMsg, "empty page with more = 1") {
		t.Fatalf("empty page with more: rc %d, fail message %q", rc, h.failMsg)
	}
}

func TestGoldenMigrate(t *testing.T) {
	h := install(t)
	if rc := deliver(t, golden(t, "migrate"), callMigrate); rc != 0 {
		t.Fatalf("no handler: rc %d", rc)
	}
	SetStateVersion(2)
	if callStateVersion() != 2 || StateVersion() != 2 {
		t.Fatalf("state version export %d", callStateVersion())
	}
	var got string
	HandleMigrate(func(m *Migration) error {
		got = strconv.Itoa(int(m.From())) + ">" + strconv.Itoa(int(m.To())) + " " + strconv.Itoa(int(m.Partition())) +
			" " + string(m.Key()) + " " + string(m.State().Key())
		return errors.New("cannot")
	})
	if rc := deliver(t, golden(t, "migrate"), callMigrate); rc == 0 || got != "1>2 3 alice alice" ||
		h.failMsg != `wasmstream: migrating key "alice" from state version 1 to 2: cannot` {
		t.Fatalf("rc %d, handler saw %q, fail message %q", rc, got, h.failMsg)
	}
}

// HTTPDo encodes the golden request and decodes the golden response, through the reusable buffer
// and through http_response when the response does not fit.
func TestGoldenHTTP(t *testing.T) {
	h := install(t)
	h.httpResp = golden(t, "http_response")
	req := &HTTPRequest{Method: "POST", URL: "https://api.example.com/v1/score?id=1",
		Headers: []Header{{Name: []byte("content-type"), Value: []byte("application/json")}, {Name: []byte("x-empty"), Value: []byte{}}},
		Body:    []byte(`{"user":"alice"}`), Timeout: 2500 * time.Millisecond}
	for _, small := range []bool{false, true} {
		httpRespBuf = nil
		if small {
			httpRespBuf = make([]byte, 8)
		}
		resp, err := HTTPDo(req)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(h.httpReqs[len(h.httpReqs)-1], golden(t, "http_request")) || h.httpKept != small {
			t.Fatalf("request %x, kept %v", h.httpReqs[len(h.httpReqs)-1], h.httpKept)
		}
		ct, ok := resp.Header("Content-Type")
		if resp.Status != 404 || len(resp.Headers) != 1 || string(ct) != "text/plain" || !ok || string(resp.Body) != "not found" {
			t.Fatalf("response %+v", resp)
		}
		if _, ok := resp.Header("content-typ"); ok {
			t.Fatal("header prefix matched")
		}
	}
}

func TestHTTPRequestEncoding(t *testing.T) {
	h := install(t)
	h.httpResp = abi.AppendHTTPResponse(nil, &abi.HTTPResponse{Status: 200})
	for _, c := range []struct {
		timeout time.Duration
		ms      uint32
	}{{0, 0}, {time.Microsecond, 1}, {1500 * time.Microsecond, 2}, {time.Second, 1000}, {time.Duration(1) << 62, 1<<32 - 1}, {time.Duration(1<<63 - 1), 1<<32 - 1}} {
		if _, err := HTTPDo(&HTTPRequest{URL: "http://x/", Timeout: c.timeout}); err != nil {
			t.Fatal(err)
		}
		r, err := abi.DecodeHTTPRequest(h.httpReqs[len(h.httpReqs)-1])
		if err != nil || string(r.Method) != "GET" || r.TimeoutMs != c.ms {
			t.Fatalf("timeout %v: method %q, timeout_ms %d, %v", c.timeout, r.Method, r.TimeoutMs, err)
		}
	}
	if _, err := HTTPDo(&HTTPRequest{URL: "http://x/", Timeout: -1}); err == nil {
		t.Fatal("negative timeout accepted")
	}
	if _, err := HTTPDo(nil); err == nil {
		t.Fatal("nil request accepted")
	}
}

func TestHTTPErrors(t *testing.T) {
	h := install(t)
	for _, c := range []struct {
		code abi.Errno
		want error
	}{{abi.ErrNotAllowed, ErrNotAllowed}, {abi.ErrUnavailable, ErrUnavailable}, {abi.ErrTooLarge, ErrTooLarge}} {
		h.httpErr = int32(c.code)
		_, err := HTTPDo(&HTTPRequest{URL: "http://x/"})
		if !errors.Is(err, c.want) || err.Error() != "wasmstream: http_request: "+c.code.String() {
			t.Fatalf("host answered %v: error %v", c.code, err)
		}
	}
	h.httpErr = 0
	h.httpResp = []byte{1, 2, 3}
	if _, err := HTTPDo(&HTTPRequest{URL: "http://x/"}); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("malformed response: %v", err)
	}
}
