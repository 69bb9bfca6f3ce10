package modrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

var ctx = context.Background()

func TestEmit(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	hdr := abi.AppendHeaders(nil, []abi.Header{{Name: []byte("h"), Value: []byte("v")}})
	recs := []abi.Record{
		rec("k1", new(prog).emit("out", "k1", "v1", hdr, -1).bytes()),
		rec("k2", new(prog).emit("other", "", "", nil, 99).emit("out", "x", "v3", nil, 0).bytes()),
	}
	eff, err := i.Process(ctx, recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []Output{
		{Name: "out", Key: []byte("k1"), Value: []byte("v1"), Timestamp: 1234,
			Headers: []abi.Header{{Name: []byte("h"), Value: []byte("v")}}},
		{Name: "other", Key: []byte{}, Value: []byte{}, Timestamp: 99},
		{Name: "out", Key: []byte("x"), Value: []byte("v3"), Timestamp: 0},
	}
	if got, wantS := fmtOutputs(eff.Outputs), fmtOutputs(want); got != wantS {
		t.Errorf("outputs\n got %s\nwant %s", got, wantS)
	}
	if len(eff.Writes) != 0 {
		t.Errorf("writes %v", eff.Writes)
	}
	// The outputs are copies: the next call, which overwrites the payload buffer, leaves them alone.
	if _, err := i.Process(ctx, []abi.Record{rec("zz", []byte("ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"))}, nil); err != nil {
		t.Fatal(err)
	}
	if got := fmtOutputs(eff.Outputs); got != fmtOutputs(want) {
		t.Errorf("outputs changed by the next call: %s", got)
	}
}

func TestOverlay(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	rs := observe(i)
	env := newEnv(map[string]map[string]string{
		"k":     {"": "empty", "a": "1", "c": "3", "d": "4", "x1": "X"},
		"other": {"a": "no"},
	})
	p := new(prog).
		put("k", "b", "2").                          // new name
		get("k", "b", scratch, 64).                  // sees the overlay: 1
		emitAbs("got", "k", scratch, 1).             // "2"
		del("k", "c").                               // hide a committed name
		get("k", "c", scratch, 64).                  // NOT_FOUND
		get("k", "a", scratch, 64).                  // committed: 1
		put("k", "a", "xx").                         // replace a committed name
		get("k", "a", scratch+100, 1).               // too small: length 2, nothing copied
		get("k", "a", scratch+100, 2).               // 2
		emitAbs("got", "k", scratch+100, 2).         // "xx"
		del("k", "nope").                            // deleting a missing name is fine
		scan("k", "", nil, scratch, 1024).           // "", a=xx, b=2, d=4, x1=X
		scan("k", "", new(""), scratch+1024, 1024).  // skips only the empty name
		scan("k", "", new("a"), scratch+2048, 1024). // b, d, x1
		scan("k", "x", nil, scratch+3072, 1024).     // x1
		put("k", "c", "again").                      // a deleted name comes back
		scan("k", "c", nil, scratch+4096, 1024)      // c=again
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, env)
	if err != nil {
		t.Fatal(err)
	}
	if got := results(*rs, hfStateGet); !slices.Equal(got, []int64{1, -1, 1, 2, 2}) {
		t.Errorf("state_get results %v", got)
	}
	if len(eff.Outputs) != 2 {
		t.Fatalf("outputs %s", fmtOutputs(eff.Outputs))
	}
	eqBytes(t, "get after put", eff.Outputs[0].Value, "2")
	eqBytes(t, "get after replace", eff.Outputs[1].Value, "xx")

	scans := results(*rs, hfStateScan)
	pages := []struct {
		at      int32
		entries []string
	}{
		{scratch, []string{"=empty", "a=xx", "b=2", "d=4", "x1=X"}},
		{scratch + 1024, []string{"a=xx", "b=2", "d=4", "x1=X"}},
		{scratch + 2048, []string{"b=2", "d=4", "x1=X"}},
		{scratch + 3072, []string{"x1=X"}},
		{scratch + 4096, []string{"c=again"}},
	}
	for k, pg := range pages {
		got, more := readPage(t, i, pg.at, scans[k])
		if !slices.Equal(got, pg.entries) || more {
			t.Errorf("scan %d: %q more=%v, want %q", k, got, more, pg.entries)
		}
	}

	want := []string{"put k/b=2", "del k/c", "put k/a=xx", "del k/nope", "put k/c=again"}
	var got []string
	for _, w := range eff.Writes {
		if w.Delete {
			got = append(got, fmt.Sprintf("del %s/%s", w.Key, w.Name))
		} else {
			got = append(got, fmt.Sprintf("put %s/%s=%s", w.Key, w.Name, w.Value))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}

	// The overlay does not outlive the call.
	*rs = nil
	if _, err := i.Process(ctx, []abi.Record{rec("k", new(prog).get("k", "b", scratch, 64).bytes())}, env); err != nil {
		t.Fatal(err)
	}
	if got := results(*rs, hfStateGet); !slices.Equal(got, []int64{int64(abi.ErrNotFound)}) {
		t.Errorf("state_get in the next call: %v", got)
	}
}

func readPage(t *testing.T, i *Instance, at int32, n int64) ([]string, bool) {
	t.Helper()
	if n < 0 {
		t.Fatalf("scan returned %v", abi.Errno(n))
	}
	b, ok := i.mem.Read(uint32(at), uint32(n))
	if !ok {
		t.Fatal("page outside memory")
	}
	entries, more, err := abi.DecodeScanPage(b, nil)
	if err != nil {
		t.Fatalf("page %x: %v", b, err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, string(e.Name)+"="+string(e.Value))
	}
	return out, more
}

func TestScanPaging(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	rs := observe(i)
	env := newEnv(map[string]map[string]string{"k": {"a": "1", "c": "3"}})
	// Each entry takes 8+1+1 = 10 bytes; the header 8.
	p := new(prog).
		put("k", "b", "2").
		scan("k", "", nil, scratch, 8+10+10+9).   // a, b; more
		scan("k", "", new("b"), scratch+100, 18). // c; exactly fits, no more
		scan("k", "", nil, scratch+200, 17).      // not even one entry
		scan("k", "", nil, scratch+300, 7).       // not even the header
		scan("k", "zzz", nil, scratch+400, 8)     // nothing: an empty page
	if _, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, env); err != nil {
		t.Fatal(err)
	}
	scans := results(*rs, hfStateScan)
	if got, more := readPage(t, i, scratch, scans[0]); !slices.Equal(got, []string{"a=1", "b=2"}) || !more {
		t.Errorf("page 1: %q more=%v", got, more)
	}
	if got, more := readPage(t, i, scratch+100, scans[1]); !slices.Equal(got, []string{"c=3"}) || more {
		t.Errorf("page 2: %q more=%v", got, more)
	}
	if scans[2] != int64(abi.ErrBufferTooSmall) || scans[3] != int64(abi.ErrBufferTooSmall) {
		t.Errorf("small buffers: %v", scans[2:4])
	}
	if got, more := readPage(t, i, scratch+400, scans[4]); len(got) != 0 || more {
		t.Errorf("empty page: %q more=%v", got, more)
	}
}

func TestScope(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	for _, n := range []int{2, 20} { // the linear and the indexed scope
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rs := observe(i)
			p := new(prog)
			for k := 0; k < n; k++ {
				p.put(fmt.Sprint("key", k), "n", "v")
			}
			p.put("stranger", "n", "v").get("stranger", "n", scratch, 8).
				del("stranger", "n").scan("stranger", "", nil, scratch, 64).
				put("", "n", "v")
			recs := []abi.Record{rec("key0", p.bytes())}
			for k := 1; k < n; k++ {
				recs = append(recs, rec(fmt.Sprint("key", k), nil))
			}
			recs = append(recs, rec("key0", nil)) // a key twice
			eff, err := i.Process(ctx, recs, newEnv(nil))
			if err != nil {
				t.Fatal(err)
			}
			var want []int64
			for k := 0; k < n; k++ {
				want = append(want, 0)
			}
			nib := int64(abi.ErrKeyNotInBatch)
			want = append(want, nib, nib, nib, nib, nib)
			var got []int64
			for _, r := range *rs {
				got = append(got, r.r)
			}
			if !slices.Equal(got, want) {
				t.Errorf("results %v, want %v", got, want)
			}
			if len(eff.Writes) != n {
				t.Errorf("%d writes", len(eff.Writes))
			}
		})
	}
}

func TestNotAllowed(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver", Limits{})

	// During init (the driver runs a config that does not start with "{" as a program).
	init := new(prog).put("k", "n", "v").get("k", "n", scratch, 8).del("k", "n").
		scan("k", "", nil, scratch, 64).emit("out", "k", "v", nil, -1).
		log(1, "hi").op(opNowMs).op(opConfigGet, abs(scratch), abs(4096)).fail("f")
	var rs []hostResult
	m.observer = func(fn int, r int64) { rs = append(rs, hostResult{fn, r}) }
	instantiate(t, m, InstanceConfig{Config: init.bytes(), Now: func() int64 { return 42 }})
	na := int64(abi.ErrNotAllowed)
	want := []int64{na, na, na, na, na, 0, 42, int64(len(init.bytes())), 0}
	var got []int64
	for _, r := range rs {
		got = append(got, r.r)
	}
	if !slices.Equal(got, want) {
		t.Errorf("init results %v, want %v", got, want)
	}

	// StatelessOnly.
	m.observer = nil
	s := instantiate(t, m, InstanceConfig{StatelessOnly: true})
	srs := observe(s)
	p := new(prog).put("k", "n", "v").get("k", "n", scratch, 8).del("k", "n").
		scan("k", "", nil, scratch, 64).emit("out", "k", "v", nil, -1)
	eff, err := s.Process(ctx, []abi.Record{rec("k", p.bytes())}, newEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, r := range *srs {
		got = append(got, r.r)
	}
	if !slices.Equal(got, []int64{na, na, na, na, 0}) || len(eff.Outputs) != 1 {
		t.Errorf("stateless results %v, outputs %d", got, len(eff.Outputs))
	}
}

func TestLimits(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	lim := Limits{MaxKeyBytes: 3, MaxNameBytes: 4, MaxValueBytes: 8, MaxWritesPerCall: 2,
		MaxOutputsPerCall: 2, MaxLogBytes: 5}
	logger, logs := newLogger()
	i := instantiate(t, compile(t, r, "driver", lim), InstanceConfig{Logger: logger})
	rs := observe(i)
	tooBigHdr := abi.AppendHeaders(nil, []abi.Header{{Name: []byte("h"), Value: []byte("v")}}) // 14 bytes
	p := new(prog).
		put("k", "name5", "v").            // name too large
		put("k", "n", "123456789").        // value too large
		put("k", "n", "12345678").         // ok
		del("k", "n").                     // ok
		put("k", "m", "v").                // third write
		del("k", "m").                     // third write
		emit("out", "kkkk", "v", nil, -1). // key too large
		emit("out", "k", "123456789", nil, -1).
		emit("out5x", "k", "v", nil, -1).
		emit("out", "k", "v", tooBigHdr, -1).
		emit("out", "k", "v", nil, -1).
		emit("out", "k", "v", nil, -1).
		emit("out", "k", "v", nil, -1). // third output
		log(1, "hello world").
		fail("truncated message").
		ret(0)
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tl, lm := int64(abi.ErrTooLarge), int64(abi.ErrLimit)
	want := []int64{tl, tl, 0, 0, lm, lm, tl, tl, tl, tl, 0, 0, lm, 0, 0}
	var got []int64
	for _, r := range *rs {
		got = append(got, r.r)
	}
	if !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if len(eff.Writes) != 2 || len(eff.Outputs) != 2 {
		t.Errorf("%d writes, %d outputs", len(eff.Writes), len(eff.Outputs))
	}
	if l := logs(); len(l) != 1 || l[0].msg != "hello" {
		t.Errorf("logs %+v", l)
	}
	// The fail message is truncated too; it shows when the call fails.
	_, err = i.Process(ctx, []abi.Record{rec("k", new(prog).fail("truncated message").ret(1).bytes())}, nil)
	if ce := asCallError(t, err); ce.GuestMessage != "trunc" {
		t.Errorf("guest message %q", ce.GuestMessage)
	}
}

func TestFailedCallHasNoEffects(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{Task: "orders"})
	p := new(prog).put("k", "n", "v").emit("out", "k", "v", nil, -1).fail("nope").ret(3)
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	ce := asCallError(t, err)
	if ce.Trap || ce.Code != 3 || ce.GuestMessage != "nope" || !errors.Is(err, ErrGuestFailed) || ce.Task != "orders" {
		t.Errorf("call error %+v", ce)
	}
	if want := `task "orders": wasmstream_process returned 3; guest says "nope"`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	if len(eff.Writes) != 0 || len(eff.Outputs) != 0 {
		t.Errorf("effects of a failed call: %+v", eff)
	}
	if i.Broken() {
		t.Error("a non-zero status broke the instance")
	}
	// The next call starts clean: no leftover writes, outputs or message.
	eff, err = i.Process(ctx, []abi.Record{rec("k", new(prog).put("k", "m", "w").bytes())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Writes) != 1 || string(eff.Writes[0].Name) != "m" || len(eff.Outputs) != 0 {
		t.Errorf("effects %+v", eff)
	}
}

func TestTrapBreaksInstance(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	t.Run("unreachable", func(t *testing.T) {
		i := instantiate(t, compile(t, r, "trap", Limits{}), InstanceConfig{Task: "tt"})
		_, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil)
		ce := asCallError(t, err)
		if !ce.Trap || ce.Func != abi.ExportProcess || !strings.Contains(ce.Err.Error(), "wasm error: unreachable") {
			t.Errorf("call error %+v", ce)
		}
		if !strings.HasPrefix(err.Error(), `task "tt": wasmstream_process trapped: wasm error: unreachable`) {
			t.Errorf("message %q", err)
		}
		if !i.Broken() {
			t.Error("not broken after a trap")
		}
		if _, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil); !errors.Is(err, ErrBroken) {
			t.Errorf("process on a broken instance: %v", err)
		}
	})
	t.Run("after effects", func(t *testing.T) {
		i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
		p := new(prog).put("k", "n", "v").emit("out", "k", "v", nil, -1).fail("dying").op(opTrap)
		eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
		ce := asCallError(t, err)
		if !ce.Trap || ce.GuestMessage != "dying" || len(eff.Writes)+len(eff.Outputs) != 0 || !i.Broken() {
			t.Errorf("call error %+v, effects %+v, broken %v", ce, eff, i.Broken())
		}
	})
}

// TestTrapCarriesStdout checks that a guest that prints its panic to stdout and traps, as
// TinyGo's runtime does, leaves the panic message in the call's error.
func TestTrapCarriesStdout(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "tinygopanic", Limits{}), InstanceConfig{Task: "tt"})
	_, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil)
	ce := asCallError(t, err)
	want := "processing record | panic: runtime error: index out of range [3] with length 2"
	if !ce.Trap || ce.GuestStdout != want || ce.GuestStderr != "" {
		t.Errorf("call error %+v, want a trap with stdout %q", ce, want)
	}
	if !strings.Contains(err.Error(), `; guest stdout: "`+want+`"`) {
		t.Errorf("message %q lacks the guest's stdout", err)
	}
}

func TestInitFailure(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver", Limits{})
	_, err := m.Instantiate(ctx, InstanceConfig{Task: "t1", Config: new(prog).fail("bad config").ret(7).bytes()})
	ce := asCallError(t, err)
	if ce.Func != abi.ExportInit || ce.Code != 7 || ce.GuestMessage != "bad config" || ce.Trap {
		t.Errorf("call error %+v", ce)
	}
	if want := `task "t1": wasmstream_init returned 7; guest says "bad config"`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
	_, err = m.Instantiate(ctx, InstanceConfig{Task: "t2", Config: new(prog).fail("boom").op(opTrap).bytes()})
	ce = asCallError(t, err)
	if !ce.Trap || ce.Func != abi.ExportInit || ce.GuestMessage != "boom" ||
		!strings.HasPrefix(err.Error(), `task "t2": wasmstream_init trapped: wasm error: unreachable`) {
		t.Errorf("call error %v", err)
	}
}

func TestBadPointers(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "badptr", Limits{}), InstanceConfig{})
	for round := 0; round < 2; round++ { // the host survives and the instance stays usable
		eff, err := i.Process(ctx, []abi.Record{rec("key", nil)}, newEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		// The valid emit, then the statuses.
		if len(eff.Outputs) != 2 || string(eff.Outputs[0].Value) != "name" {
			t.Fatalf("outputs %s", fmtOutputs(eff.Outputs))
		}
		codes := le32s(eff.Outputs[1].Value)
		if len(codes) != 160 {
			t.Fatalf("%d statuses, want 160", len(codes))
		}
		for k, c := range codes[:152] {
			if abi.Errno(c) != abi.ErrOutOfBounds {
				t.Errorf("bad call %d (slot group %d, pair %d) returned %v", k, k/8, k%8, abi.Errno(c))
			}
		}
		// get: not found; put, delete: ok; scan: an empty page; emit, log: ok; config_get: "{}"; fail: ok.
		if got, want := codes[152:], []int32{-1, 0, 0, 8, 0, 0, 2, 0}; !slices.Equal(got, want) {
			t.Errorf("valid calls returned %v, want %v", got, want)
		}
	}
}

func TestGrowBomb(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	for _, pages := range []uint32{0, 16} {
		i := instantiate(t, compile(t, r, "growbomb", Limits{MaxMemoryPages: pages}), InstanceConfig{})
		eff, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := le32s(eff.Outputs[0].Value); !slices.Equal(got, []int32{-1, 1}) {
			t.Errorf("limit %d: grow result and size %v, want [-1 1]", pages, got)
		}
	}
}

func TestWASI(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "wasi", Limits{})
	logger, logs := newLogger()
	i := instantiate(t, m, InstanceConfig{Task: "w", Logger: logger})
	if _, err := i.Process(ctx, []abi.Record{rec("k", []byte("w"))}, nil); err != nil {
		t.Fatal(err)
	}
	if err := i.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range logs() {
		if l.attrs["task"] != "w" {
			t.Errorf("log without task: %+v", l)
		}
		got = append(got, fmt.Sprintf("%s %s %s", l.level, l.attrs["stream"], l.msg))
	}
	want := []string{"INFO stdout hello", "INFO stdout world", "WARN stderr oops", "INFO stdout tail"}
	if !slices.Equal(got, want) {
		t.Errorf("logs %q, want %q", got, want)
	}

	// proc_exit ends the instance.
	i = instantiate(t, m, InstanceConfig{})
	_, err := i.Process(ctx, []abi.Record{rec("k", []byte("x"))}, nil)
	if ce := asCallError(t, err); !ce.Trap || !i.Broken() || !strings.Contains(err.Error(), "exit_code(3)") {
		t.Errorf("proc_exit: %v, broken %v", err, i.Broken())
	}
}

func TestLineWriterTruncates(t *testing.T) {
	logger, logs := newLogger()
	w := &lineWriter{log: logger, level: slog.LevelInfo, stream: "stdout", max: 4}
	w.Write([]byte("abcdefgh\nxy"))
	w.Write([]byte("z\n\n123456"))
	w.flush()
	var got []string
	for _, l := range logs() {
		got = append(got, l.msg)
	}
	if want := []string{"abcd", "xyz", "", "1234"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}

func TestEnvError(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	rs := observe(i)
	env := newEnv(nil)
	env.getErr = errors.New("disk on fire")
	p := new(prog).get("k", "n", scratch, 8).emit("out", "k", "v", nil, -1) // ignores the error
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, env)
	ce := asCallError(t, err)
	if !errors.Is(err, env.getErr) || ce.Trap || i.Broken() || len(eff.Outputs) != 0 {
		t.Errorf("error %v, broken %v, effects %+v", err, i.Broken(), eff)
	}
	if got := results(*rs, hfStateGet); !slices.Equal(got, []int64{int64(abi.ErrInternal)}) {
		t.Errorf("state_get %v", got)
	}
	if want := `task "t": wasmstream_process failed: disk on fire`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestInvalidArguments(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{Outputs: []string{"out", "dlq"}})
	rs := observe(i)
	p := new(prog).
		emit("out", "k", "v", []byte{1, 0, 0, 0}, -1).          // count 1, no header
		emit("out", "k", "v", []byte{0, 0, 0, 0, 9}, -1).       // trailing byte
		emit("nowhere", "k", "v", nil, -1).                     // undeclared output
		emit("dlq", "k", "v", abi.AppendHeaders(nil, nil), -1). // ok, empty headers
		log(4, "x").log(-1, "x").log(0, "debug").log(3, "error")
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inv := int64(abi.ErrInvalid)
	var got []int64
	for _, r := range *rs {
		got = append(got, r.r)
	}
	if want := []int64{inv, inv, inv, 0, inv, inv, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if len(eff.Outputs) != 1 || eff.Outputs[0].Name != "dlq" || len(eff.Outputs[0].Headers) != 0 {
		t.Errorf("outputs %+v", eff.Outputs)
	}
}

func TestGuestLogAndConfig(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	logger, logs := newLogger()
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{
		Task: "cfg", Logger: logger, Config: []byte(`{"a":1}`), Now: func() int64 { return 77 }})
	rs := observe(i)
	p := new(prog).
		log(2, "careful").
		op(opConfigGet, abs(scratch), abs(3)).   // too small: length only
		op(opConfigGet, abs(scratch), abs(100)). // copied
		emitAbs("cfg", "k", scratch, 7).
		op(opNowMs)
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := results(*rs, hfConfigGet); !slices.Equal(got, []int64{7, 7}) {
		t.Errorf("config_get %v", got)
	}
	eqBytes(t, "config", eff.Outputs[0].Value, `{"a":1}`)
	if got := results(*rs, hfNowMs); !slices.Equal(got, []int64{77}) {
		t.Errorf("now_ms %v", got)
	}
	l := logs()
	if len(l) != 1 || l[0].level != slog.LevelWarn || l[0].msg != "careful" || l[0].attrs["task"] != "cfg" {
		t.Errorf("logs %+v", l)
	}
}

func TestBatchTooLarge(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{MaxMemoryPages: 3}), InstanceConfig{})
	big := make([]byte, 3*65536)
	if _, err := i.Process(ctx, []abi.Record{rec("k", big)}, nil); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("got %v, want ErrBatchTooLarge", err)
	}
	if i.Broken() {
		t.Fatal("a refused batch broke the instance")
	}
	// Fits the limit, but not the guest's allocator (its buffer starts at 64 KiB).
	_, err := i.Process(ctx, []abi.Record{rec("k", big[:2*65536])}, nil)
	ce := asCallError(t, err)
	if !errors.Is(err, ErrAllocFailed) || ce.Trap || !i.Broken() {
		t.Errorf("got %v, broken %v", err, i.Broken())
	}
	if want := `task "t": wasmstream_process failed: wasmstream_alloc failed: returned 0 for 131123 bytes (memory is 131072 bytes)`; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

func TestEmptyRangesAnyPointer(t *testing.T) {
	// ABI §4: a zero length is an empty byte string whatever its pointer.
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	rs := observe(i)
	wild := abs(-7)
	p := new(prog)
	kp, kl := p.blob("k")
	op, ol := p.blob("o")
	p.op(opStatePut, kp, kl, wild, abs(0), abs(0x7ffffff0), abs(0)).
		op(opStateGet, kp, kl, wild, abs(0), wild, abs(0)).
		op(opStateScan, kp, kl, wild, abs(0), wild, abs(0), abs(scratch), abs(64)).
		op(opEmit, op, ol, wild, abs(0), abs(0x10000000), abs(0), wild, abs(0)).
		op(opLog, abs(1), wild, abs(0)).
		op(opConfigGet, wild, abs(0)).
		op(opFail, wild, abs(0)).
		op(opStateDelete, kp, kl, wild, abs(0))
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, r := range *rs {
		got = append(got, r.r)
	}
	// get: the empty name's value "" (length 0); scan with after "": the empty name is skipped,
	// an empty page (8); config_get: the length of "{}".
	if want := []int64{0, 0, 8, 0, 0, 2, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if len(eff.Writes) != 2 || len(eff.Outputs) != 1 || len(eff.Outputs[0].Key) != 0 {
		t.Errorf("effects %+v", eff)
	}
}

func TestContextCanceled(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := i.Process(c, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}

func TestHostFunctionsOutsideACall(t *testing.T) {
	// A host function reached with a context that is not one of ours refuses politely.
	var stack [9]uint64
	hostFuncs[hfStatePut].goFunc(hfStatePut)(ctx, nil, stack[:])
	if abi.Errno(int32(stack[0])) != abi.ErrNotAllowed {
		t.Errorf("got %v", abi.Errno(int32(stack[0])))
	}
}

// TestConcurrentInstances compiles and runs instances from several goroutines at once (run it with
// -race): Runtime and Module are shared, each Instance has one goroutine.
func TestConcurrentInstances(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	wasm := fixture(t, "driver")
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			errs <- func() error {
				m, err := r.Compile(ctx, wasm, Limits{MaxMemoryPages: uint32(4 + g%2)})
				if err != nil {
					return err
				}
				defer m.Close(ctx)
				i, err := m.Instantiate(ctx, InstanceConfig{Task: fmt.Sprint("t", g)})
				if err != nil {
					return err
				}
				defer i.Close(ctx)
				key := fmt.Sprint("k", g)
				env := newEnv(map[string]map[string]string{key: {"n": key}})
				p := new(prog).get(key, "n", scratch, 16).emitAbs("out", key, scratch, int32(len(key))).
					put(key, "m", key).bytes()
				for n := 0; n < 50; n++ {
					eff, err := i.Process(ctx, []abi.Record{rec(key, p)}, env)
					if err != nil {
						return err
					}
					if string(eff.Outputs[0].Value) != key || string(eff.Writes[0].Key) != key {
						return fmt.Errorf("goroutine %d: effects %s", g, fmtOutputs(eff.Outputs))
					}
				}
				return nil
			}()
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

type panicEnv struct{ constEnv }

func (panicEnv) StateGet(key, name []byte) ([]byte, bool, error) { panic("host bug") }

// TestEnvPanic: a panic in the host's Env surfaces as a trap of the call, never across the API.
func TestEnvPanic(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	_, err := i.Process(ctx, []abi.Record{rec("k", new(prog).get("k", "n", scratch, 8).bytes())}, panicEnv{})
	if ce := asCallError(t, err); !ce.Trap || !i.Broken() || !strings.Contains(err.Error(), "host bug") {
		t.Errorf("got %v, broken %v", err, i.Broken())
	}
}

// A trapped instance's memory is freed when it is closed, not when the garbage collector next
// runs of its own accord (the heap having doubled): a task whose every worker traps after
// growing to the limit would otherwise hold its memory budget several times over.
func TestTrappedInstanceMemoryIsFreed(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	const pages = 256 // 16 MiB
	m := compile(t, r, "growtrap", Limits{MaxMemoryPages: pages})
	for n := range 8 {
		i, err := m.Instantiate(ctx, InstanceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := i.Process(ctx, []abi.Record{rec("k", nil)}, nil); !i.Broken() {
			t.Fatalf("call %d: %v; want a trap", n, err)
		}
		if got := r.Memory(); got != pages*pageSize {
			t.Fatalf("call %d: %d bytes of memory in use, want %d", n, got, pages*pageSize)
		}
		if err := i.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := r.Memory(); got != 0 {
			t.Fatalf("after trap %d and Close, %d bytes of memory are not freed", n, got)
		}
	}
}

// TestOverlayManyWrites crosses scopeLinear writes to one key, where the key's names get an
// index: gets and scans see each name's latest write before and after.
func TestOverlayManyWrites(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	rs := observe(i)
	env := newEnv(map[string]map[string]string{"k": {"n0": "old", "z": "kept"}})
	p := new(prog)
	for n := range 6 {
		p.put("k", fmt.Sprintf("n%d", n), "a")
	}
	// 8 writes: still chained.
	p.put("k", "n0", "b").del("k", "n1")
	p.get("k", "n0", scratch, 64).get("k", "n1", scratch, 64).scan("k", "n", nil, scratch+1024, 1024)
	for n := 4; n < 12; n++ { // past scopeLinear: indexed
		p.put("k", fmt.Sprintf("n%d", n), "c")
	}
	p.put("k", "n1", "d").get("k", "n0", scratch, 64).get("k", "n5", scratch+64, 64).
		get("k", "n1", scratch+128, 64).scan("k", "", nil, scratch+2048, 1024)
	if _, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, env); err != nil {
		t.Fatal(err)
	}
	if got := results(*rs, hfStateGet); !slices.Equal(got, []int64{1, int64(abi.ErrNotFound), 1, 1, 1}) {
		t.Errorf("state_get results %v", got)
	}
	scans := results(*rs, hfStateScan)
	got, _ := readPage(t, i, scratch+1024, scans[0])
	if want := []string{"n0=b", "n2=a", "n3=a", "n4=a", "n5=a"}; !slices.Equal(got, want) {
		t.Errorf("chained scan %q, want %q", got, want)
	}
	got, _ = readPage(t, i, scratch+2048, scans[1])
	want := []string{"n0=b", "n1=d", "n10=c", "n11=c", "n2=a", "n3=a", "n4=c", "n5=c", "n6=c", "n7=c", "n8=c", "n9=c", "z=kept"}
	if !slices.Equal(got, want) {
		t.Errorf("indexed scan %q, want %q", got, want)
	}
	for at, v := range map[int32]string{scratch: "b", scratch + 64: "c", scratch + 128: "d"} {
		if b, _ := i.mem.Read(uint32(at), 1); string(b) != v {
			t.Errorf("value at %d = %q, want %q", at, b, v)
		}
	}
}

// TestEffectsOutliveCalls: the copies a call's effects hold share blocks with later calls'
// copies (Instance.carve) but are never overwritten by them, and an empty value stays an empty
// value, not a missing one.
func TestEffectsOutliveCalls(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{})
	var kept []Effects
	for n := range 50 {
		v := strings.Repeat(string(rune('a'+n%26)), n)
		p := new(prog).put("k", "name", v).emit("out", "k", v, nil, -1)
		eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, newEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, eff)
	}
	for n, eff := range kept {
		v := strings.Repeat(string(rune('a'+n%26)), n)
		if len(eff.Writes) != 1 || string(eff.Writes[0].Value) != v || string(eff.Writes[0].Key) != "k" ||
			len(eff.Outputs) != 1 || string(eff.Outputs[0].Value) != v || string(eff.Outputs[0].Key) != "k" {
			t.Fatalf("call %d: writes %v, outputs %s after later calls", n, eff.Writes, fmtOutputs(eff.Outputs))
		}
		if n == 0 && (eff.Writes[0].Value == nil || eff.Outputs[0].Value == nil) {
			t.Fatal("an empty value came back nil")
		}
	}
}
