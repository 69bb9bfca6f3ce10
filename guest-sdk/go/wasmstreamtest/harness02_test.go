//go:build !wasip1

package wasmstreamtest_test

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// timerCommands is a record handler driven by the record value: "p NAME AT PAYLOAD" sets a
// processing-time timer, "e NAME AT PAYLOAD" an event-time one, "d NAME" deletes one.
func timerCommands(r *wasmstream.Record) error {
	f := strings.Fields(string(r.Value()))
	switch f[0] {
	case "d":
		return wasmstream.DeleteTimer(r.Key(), f[1])
	case "p", "e":
		at, _ := strconv.ParseInt(f[2], 10, 64)
		d := wasmstream.ProcessingTime
		if f[0] == "e" {
			d = wasmstream.EventTime
		}
		var payload []byte
		if len(f) > 3 {
			payload = []byte(f[3])
		}
		return wasmstream.SetTimer(r.Key(), f[1], d, at, payload)
	}
	return errors.New("unknown command " + f[0])
}

// emitFirings is a timer handler that emits "NAME@TIME:PAYLOAD" under the firing's key and
// counts firings in the key's state.
func emitFirings(f *wasmstream.Firing) error {
	st := f.State()
	v, _, err := st.Get("fired")
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(string(v))
	if err := st.Put("fired", []byte(strconv.Itoa(n+1))); err != nil {
		return err
	}
	d := "p"
	if f.EventTime() {
		d = "e"
	}
	return wasmstream.Emit("fired", f.Key(), []byte(d+" "+f.Name()+"@"+strconv.FormatInt(f.Time(), 10)+":"+string(f.Payload())))
}

func outputs(res wasmstreamtest.Result) string {
	var s []string
	for _, o := range res.Outputs {
		s = append(s, string(o.Key)+"/"+string(o.Value))
	}
	return strings.Join(s, ",")
}

func timers(ts []wasmstreamtest.Timer) string {
	var s []string
	for _, t := range ts {
		s = append(s, strconv.Itoa(int(t.Partition))+"/"+string(t.Key)+"/"+t.Name+"@"+strconv.FormatInt(t.Time, 10)+":"+string(t.Payload))
	}
	return strings.Join(s, ",")
}

func cmd(key, value string) wasmstreamtest.Input {
	return wasmstreamtest.Input{Source: "in", Key: []byte(key), Value: []byte(value)}
}

// Timers are set, replaced and deleted by records; they fire when the test advances processing
// time or the watermark, in order of time, then key, then name, and are gone once fired.
func TestTimersSetReplaceDeleteFire(t *testing.T) {
	wasmstream.Handle(timerCommands)
	wasmstream.HandleTimer(emitFirings)
	defer wasmstream.HandleTimer(nil)
	h := wasmstreamtest.New(wasmstreamtest.Options{NowMs: 1000})
	_, err := h.Process(cmd("b", "p t 1200 x"), cmd("a", "p t 1500 old"), cmd("a", "p t 1200 new"),
		cmd("a", "p s 1200"), cmd("a", "p gone 1100"), cmd("a", "d gone"), cmd("c", "e w 50 ev"),
		cmd("a", "p later 5000"))
	if err != nil {
		t.Fatal(err)
	}
	if got := timers(h.Timers()); got != "0/a/later@5000:,0/a/s@1200:,0/a/t@1200:new,0/b/t@1200:x,0/c/w@50:ev" {
		t.Fatalf("timers %s", got)
	}
	res, err := h.AdvanceTime(1199)
	if err != nil || len(res.Fired) != 0 || len(res.Outputs) != 0 {
		t.Fatalf("nothing is due at 1199: %v, %+v", err, res)
	}
	res, err = h.AdvanceTime(1200)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputs(res); got != "a/p s@1200:,a/p t@1200:new,b/p t@1200:x" {
		t.Fatalf("fired at 1200: %s", got)
	}
	if got := timers(res.Fired); got != "0/a/s@1200:,0/a/t@1200:new,0/b/t@1200:x" {
		t.Fatalf("Result.Fired %s", got)
	}
	if got := stateString(res.State); got != "a/fired=2,b/fired=1" {
		t.Fatalf("state %s", got)
	}
	if res, err := h.AdvanceWatermark(0, 49); err != nil || len(res.Fired) != 0 {
		t.Fatalf("nothing is due at watermark 49: %v, %+v", err, res)
	}
	if _, err := h.AdvanceWatermark(1, 100); err != nil || h.Watermark(0) != 49 {
		t.Fatalf("another partition's watermark: %v, watermark of 0 is %d", err, h.Watermark(0))
	}
	res, err = h.AdvanceWatermark(0, 50)
	if err != nil || outputs(res) != "c/e w@50:ev" {
		t.Fatalf("watermark 50: %v, %s", err, outputs(res))
	}
	if got := timers(h.Timers()); got != "0/a/later@5000:" {
		t.Fatalf("timers left %s", got)
	}
	if _, err := h.AdvanceTime(10); err == nil {
		t.Fatal("processing time went back")
	}
	if _, err := h.AdvanceWatermark(0, 10); err == nil {
		t.Fatal("the watermark went back")
	}
}

// A failed firing leaves its timer and discards the call's effects; the next attempt fires it
// again. A handler that sets the firing timer again keeps it; one set to a due time fires again.
func TestTimerFailureAndReset(t *testing.T) {
	attempts := 0
	wasmstream.HandleTimer(func(f *wasmstream.Firing) error {
		attempts++
		if err := f.State().Put("n", []byte(strconv.Itoa(attempts))); err != nil {
			return err
		}
		switch {
		case f.Name() == "flaky" && attempts == 1:
			return errors.New("first attempt fails")
		case f.Name() == "repeat" && f.Time() < 30:
			return wasmstream.SetTimer(f.Key(), "repeat", f.Domain(), f.Time()+10, f.Payload())
		case f.Name() == "later":
			return wasmstream.SetTimer(f.Key(), "later", wasmstream.ProcessingTime, 1000, nil)
		}
		return nil
	})
	defer wasmstream.HandleTimer(nil)
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	h.SetTimer(wasmstreamtest.Timer{Key: []byte("k"), Name: "flaky", Time: 0})
	_, err := h.FireDue()
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Export != "wasmstream_on_timer" ||
		ce.Reason != `wasmstream: timer "flaky" of key "k": first attempt fails` {
		t.Fatalf("error %v", err)
	}
	if timers(h.Timers()) != "0/k/flaky@0:" || len(h.State()) != 0 {
		t.Fatalf("after a failed firing: timers %s, state %v", timers(h.Timers()), h.State())
	}
	if res, err := h.FireDue(); err != nil || len(res.Fired) != 1 || len(h.Timers()) != 0 {
		t.Fatalf("second attempt: %v, %+v, timers %s", err, res, timers(h.Timers()))
	}

	h.SetTimer(wasmstreamtest.Timer{Partition: 2, Key: []byte("k"), Name: "repeat", Domain: wasmstream.EventTime, Time: 10, Payload: []byte("p")})
	h.SetTimer(wasmstreamtest.Timer{Key: []byte("k"), Name: "later", Time: 0})
	res, err := h.AdvanceWatermark(2, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := timers(res.Fired); got != "0/k/later@0:,2/k/repeat@10:p,2/k/repeat@20:p,2/k/repeat@30:p" {
		t.Fatalf("fired %s", got)
	}
	if got := timers(h.Timers()); got != "0/k/later@1000:" {
		t.Fatalf("timers %s", got)
	}

	// A timer handler that keeps setting a due timer is stopped.
	wasmstream.HandleTimer(func(f *wasmstream.Firing) error {
		return wasmstream.SetTimer(f.Key(), f.Name(), f.Domain(), 0, nil)
	})
	if _, err := h.AdvanceTime(1000); err == nil || !strings.Contains(err.Error(), "rounds") {
		t.Fatalf("endless timer: %v", err)
	}
}

// A firing without a timer handler fails; timer calls respect the call's scope and phase.
func TestTimerScopeAndErrors(t *testing.T) {
	wasmstream.HandleTimer(nil)
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	h.SetTimer(wasmstreamtest.Timer{Key: []byte("k"), Name: "t"})
	if _, err := h.FireDue(); err == nil || !strings.Contains(err.Error(), "no timer handler") {
		t.Fatalf("no handler: %v", err)
	}
	var initErr error
	var initWatermark int64
	wasmstream.HandleInit(func([]byte) error {
		initErr = wasmstream.SetTimer(nil, "t", wasmstream.ProcessingTime, 0, nil)
		initWatermark = wasmstream.Watermark()
		return nil
	})
	defer wasmstream.HandleInit(nil)
	var errs []error
	var watermark int64
	wasmstream.Handle(func(r *wasmstream.Record) error {
		watermark = wasmstream.Watermark()
		errs = append(errs, wasmstream.SetTimer([]byte("other"), "t", wasmstream.ProcessingTime, 0, nil),
			wasmstream.DeleteTimer([]byte("other"), "t"),
			wasmstream.SetTimer(r.Key(), "t", wasmstream.Domain(7), 0, nil))
		return nil
	})
	h = wasmstreamtest.New(wasmstreamtest.Options{})
	if _, err := h.AdvanceWatermark(4, 77); err != nil {
		t.Fatal(err)
	}
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Process(wasmstreamtest.Input{Partition: 4, Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(initErr, wasmstream.ErrNotAllowed) || initWatermark != -1 || watermark != 77 {
		t.Fatalf("init: %v, watermark %d; process watermark %d", initErr, initWatermark, watermark)
	}
	if !errors.Is(errs[0], wasmstream.ErrKeyNotInBatch) || !errors.Is(errs[1], wasmstream.ErrKeyNotInBatch) ||
		!errors.Is(errs[2], wasmstream.ErrInvalid) {
		t.Fatalf("errors %v", errs)
	}
}

// A tick sees the clock, the watermark and every key with state, page by page; it may write any
// key's state and timers; Keys outside a tick is not allowed.
func TestTick(t *testing.T) {
	var saved *wasmstream.Tick
	var info string
	var keys []string
	wasmstream.HandleTick(func(tk *wasmstream.Tick) error {
		saved = tk
		info = strconv.Itoa(int(tk.Partition())) + " " + strconv.FormatInt(tk.Now(), 10) + " " +
			strconv.FormatInt(tk.Watermark(), 10) + " " + tk.Source()
		keys = keys[:0]
		return tk.Keys(func(key []byte) bool {
			keys = append(keys, string(key))
			if len(keys) == 1 {
				return wasmstream.StateOf(key).Put("first", []byte("1")) == nil &&
					wasmstream.SetTimer(key, "tick", wasmstream.ProcessingTime, tk.Now()+1, nil) == nil
			}
			return true
		})
	})
	defer wasmstream.HandleTick(nil)
	var keysErr error
	wasmstream.Handle(func(*wasmstream.Record) error {
		keysErr = saved.Keys(func([]byte) bool { return true })
		return nil
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{NowMs: 500})
	var want []string
	for i := 0; i < 600; i++ { // more than one page of the SDK's first buffer
		k := "key-" + strconv.Itoa(1000+i)
		h.SetState(k, "v", []byte("x"))
		want = append(want, k)
	}
	h.SetState("empty", "v", nil)
	if _, err := h.AdvanceWatermark(3, 400); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Tick(3, "orders"); err != nil {
		t.Fatal(err)
	}
	if info != "3 500 400 orders" {
		t.Fatalf("tick %q", info)
	}
	if strings.Join(keys, ",") != "empty,"+strings.Join(want, ",") {
		t.Fatalf("keys: %d, first %q", len(keys), keys[:3])
	}
	if got := timers(h.Timers()); got != "3/empty/tick@501:" {
		t.Fatalf("timers %s", got)
	}
	if _, err := h.Process(cmd("k", "")); err != nil || !errors.Is(keysErr, wasmstream.ErrNotAllowed) {
		t.Fatalf("Keys outside a tick: %v, %v", err, keysErr)
	}

	wasmstream.HandleTick(func(*wasmstream.Tick) error { return errors.New("tick failed") })
	_, err := h.Tick(0, "in")
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Export != "wasmstream_on_tick" || ce.Reason != "wasmstream: tick of in/0: tick failed" {
		t.Fatalf("failed tick: %v", err)
	}
}

// Keys whose state was written under another state version are migrated before a call involving
// them, in the same unit of work; MigrateAll migrates every stale key.
func TestMigrations(t *testing.T) {
	wasmstream.SetStateVersion(2)
	defer wasmstream.SetStateVersion(0)
	var migrated []string
	wasmstream.HandleMigrate(func(m *wasmstream.Migration) error {
		migrated = append(migrated, string(m.Key())+":"+strconv.Itoa(int(m.From()))+">"+strconv.Itoa(int(m.To()))+
			"@"+strconv.Itoa(int(m.Partition())))
		if m.From() > m.To() {
			return errors.New("cannot downgrade")
		}
		st := m.State()
		v, _, err := st.Get("old")
		if err != nil {
			return err
		}
		if err := st.Delete("old"); err != nil {
			return err
		}
		return st.Put("new", append([]byte("migrated "), v...))
	})
	defer wasmstream.HandleMigrate(nil)
	var seen []string
	wasmstream.Handle(func(r *wasmstream.Record) error {
		v, _, err := r.State().Get("new")
		seen = append(seen, string(r.Key())+"="+string(v))
		return err
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	h.SetState("a", "old", []byte("A"))
	h.SetStateVersion("a", 1)
	h.SetState("c", "old", []byte("C"))
	h.SetStateVersion("c", 0)
	h.SetState("current", "new", []byte("set at the module's version"))
	h.SetState("down", "old", []byte("D"))
	h.SetStateVersion("down", 3)

	res, err := h.Process(wasmstreamtest.Input{Partition: 5, Key: []byte("a")}, cmd("b", ""))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(migrated, ",") != "a:1>2@5" || strings.Join(seen, ",") != "a=migrated A,b=" {
		t.Fatalf("migrated %q, handler saw %q", migrated, seen)
	}
	if stateString(res.State) != "a/new=migrated A,c/old=C,current/new=set at the module's version,down/old=D" || h.StateVersion("a") != 2 || h.StateVersion("b") != 0 {
		t.Fatalf("state %s, versions a=%d b=%d", stateString(res.State), h.StateVersion("a"), h.StateVersion("b"))
	}
	if _, err := h.Process(cmd("a", "")); err != nil || len(migrated) != 1 {
		t.Fatalf("a key at the module's version is not migrated again: %v, %q", err, migrated)
	}

	// A failed migration fails the unit: nothing changes.
	_, err = h.Process(cmd("down", ""))
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Export != "wasmstream_migrate" ||
		ce.Reason != `wasmstream: migrating key "down" from state version 3 to 2: cannot downgrade` {
		t.Fatalf("downgrade: %v", err)
	}
	if h.StateVersion("down") != 3 {
		t.Fatalf("version after a failed migration %d", h.StateVersion("down"))
	}

	migrated = nil
	_, err = h.MigrateAll()
	if !errors.As(err, &ce) || strings.Join(migrated, ",") != "c:0>2@0,down:3>2@0" {
		t.Fatalf("MigrateAll: %v, migrated %q", err, migrated)
	}
	if got := stateString(h.State()); got != "a/new=migrated A,c/new=migrated C,current/new=set at the module's version,down/old=D" ||
		h.StateVersion("c") != 2 || h.StateVersion("current") != 2 {
		t.Fatalf("after MigrateAll: %s, c at %d", got, h.StateVersion("c"))
	}
}

// HTTPDo reaches the test's stub; its errors map to ABI codes; a large response comes through
// http_response.
func TestHTTP(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 100<<10)
	var got []string
	stub := func(req *wasmstream.HTTPRequest) (*wasmstream.HTTPResponse, error) {
		got = append(got, req.Method+" "+req.URL+" "+string(req.Body)+" "+req.Timeout.String()+" "+
			strconv.Itoa(len(req.Headers)))
		switch req.URL {
		case "http://denied/":
			return nil, wasmstream.ErrNotAllowed
		case "http://down/":
			return nil, errors.New("connection refused")
		case "http://big/":
			return &wasmstream.HTTPResponse{Status: 200, Body: big}, nil
		case "http://empty/":
			return nil, nil
		}
		return &wasmstream.HTTPResponse{Status: 201, Headers: []wasmstream.Header{{Name: []byte("X-A"), Value: []byte("1")}},
			Body: []byte("ok")}, nil
	}
	type answer struct {
		status  int
		body, h string
		err     error
	}
	var answers []answer
	requests := []*wasmstream.HTTPRequest{
		{Method: "POST", URL: "https://api/", Body: []byte("q"), Timeout: 1500000000, Headers: []wasmstream.Header{{Name: []byte("a")}}},
		{URL: "http://big/"},
		{URL: "http://empty/"},
		{URL: "http://denied/"},
		{URL: "http://down/"},
		{Method: "get", URL: "http://x/"},
		{URL: "ftp://x/"},
	}
	var initErr error
	wasmstream.HandleInit(func([]byte) error {
		_, initErr = wasmstream.HTTPDo(&wasmstream.HTTPRequest{URL: "http://x/"})
		return nil
	})
	defer wasmstream.HandleInit(nil)
	wasmstream.Handle(func(*wasmstream.Record) error {
		answers = answers[:0]
		for _, req := range requests {
			resp, err := wasmstream.HTTPDo(req)
			a := answer{err: err}
			if resp != nil {
				v, _ := resp.Header("x-a")
				a.status, a.body, a.h = resp.Status, string(resp.Body), string(v)
			}
			answers = append(answers, a)
		}
		return nil
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{HTTP: stub})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Process(cmd("k", "")); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(initErr, wasmstream.ErrNotAllowed) {
		t.Fatalf("HTTPDo during init: %v", initErr)
	}
	want := []answer{{201, "ok", "1", nil}, {200, string(big), "", nil}, {200, "", "", nil},
		{err: wasmstream.ErrNotAllowed}, {err: wasmstream.ErrUnavailable}, {err: wasmstream.ErrInvalid}, {err: wasmstream.ErrInvalid}}
	for i, w := range want {
		a := answers[i]
		if a.status != w.status || a.body != w.body || a.h != w.h || !errors.Is(a.err, w.err) || (w.err == nil) != (a.err == nil) {
			t.Errorf("request %d: got %d %d bytes %q %v, want %d %d bytes %q %v", i, a.status, len(a.body), a.h, a.err,
				w.status, len(w.body), w.h, w.err)
		}
	}
	if len(got) != 5 || got[0] != "POST https://api/ q 1.5s 1" || got[1] != "GET http://big/  0s 0" {
		t.Fatalf("stub saw %q", got)
	}

	// Without Options.HTTP there is no grant.
	h = wasmstreamtest.New(wasmstreamtest.Options{})
	requests = requests[:1]
	if _, err := h.Process(cmd("k", "")); err != nil || !errors.Is(answers[0].err, wasmstream.ErrNotAllowed) {
		t.Fatalf("no grant: %v, %v", err, answers[0].err)
	}
}
