package modrt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// Tests of the ABI 0.2 host functions (timers.go) through the driver02 fixture.

func fmtTimers(ops []TimerOp) string {
	var b strings.Builder
	for _, op := range ops {
		if op.Delete {
			fmt.Fprintf(&b, "{del %q/%q}", op.Key, op.Name)
			continue
		}
		fmt.Fprintf(&b, "{set %q/%q d=%d due=%d %q}", op.Key, op.Name, op.Domain, op.Due, op.Payload)
	}
	return b.String()
}

func le64(v int64) string { return string(binary.LittleEndian.AppendUint64(nil, uint64(v))) }

func le32(vs ...uint32) string {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return string(b)
}

func TestTimerSetEffects(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	rs := observe(i)
	recs := []abi.Record{
		rec("k1", new(prog).
			timerSet("k1", "a", abi.DomainProcessing, 100, "p1").
			put("k1", "s", "v").
			timerDelete("k1", "b").
			bytes()),
		rec("k2", new(prog).
			timerSet("k2", "c", abi.DomainEvent, -5, "").
			timerSet("k1", "", abi.DomainEvent, 1<<40, "pay").
			timerDelete("k2", "").
			bytes()),
	}
	eff, err := i.Process(ctx, recs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []int{hfTimerSet, hfTimerDelete} {
		for _, got := range results(*rs, fn) {
			if got != 0 {
				t.Errorf("%s = %v, want OK", hostFuncs[fn].name, abi.Errno(got))
			}
		}
	}
	want := []TimerOp{
		{Key: []byte("k1"), Name: []byte("a"), Domain: abi.DomainProcessing, Due: 100, Payload: []byte("p1")},
		{Key: []byte("k1"), Name: []byte("b"), Delete: true},
		{Key: []byte("k2"), Name: []byte("c"), Domain: abi.DomainEvent, Due: -5},
		{Key: []byte("k1"), Name: []byte{}, Domain: abi.DomainEvent, Due: 1 << 40, Payload: []byte("pay")},
		{Key: []byte("k2"), Name: []byte{}, Delete: true},
	}
	if got, w := fmtTimers(eff.Timers), fmtTimers(want); got != w {
		t.Errorf("timers\n got %s\nwant %s", got, w)
	}
	for k, op := range eff.Timers {
		if op.Name == nil {
			t.Errorf("timer %d: nil Name, want an empty slice", k)
		}
		if op.Delete && (op.Payload != nil || op.Due != 0 || op.Domain != 0) {
			t.Errorf("timer %d: a delete carries %+v", k, op)
		}
	}
	if len(eff.Writes) != 1 || !bytes.Equal(eff.Writes[0].Key, []byte("k1")) {
		t.Fatalf("writes %+v", eff.Writes)
	}

	// Everything is a copy: neither the caller's record keys nor the guest memory the call used.
	snapshot := fmtTimers(eff.Timers)
	for k := range recs {
		recs[k].Key[0] = 'X'
		clear(recs[k].Value)
	}
	big := strings.Repeat("z", 200)
	if _, err := i.Process(ctx, []abi.Record{rec("k1", new(prog).timerSet("k1", big, 0, 7, big).bytes())}, nil); err != nil {
		t.Fatal(err)
	}
	if got := fmtTimers(eff.Timers); got != snapshot {
		t.Errorf("timers changed after the call\n got %s\nwant %s", got, snapshot)
	}
}

// timerCase is a driver02 program run over records k1 and k2, the statuses its timer (and state)
// calls must return, and how many timer ops the call must record.
type timerCase struct {
	name   string
	prog   *prog
	want   []abi.Errno // statuses of the timer_set / timer_delete / state_put calls, in order
	timers int
}

func TestTimerErrors(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	lim := Limits{MaxMemoryPages: 4, MaxNameBytes: 8, MaxValueBytes: 16, MaxWritesPerCall: 4}
	i := instantiate(t, compile(t, r, "driver02", lim), InstanceConfig{})

	set := func(p *prog, args ...parg) *prog { return p.wide(opTimerSet, 1, args...) }
	del := func(p *prog, args ...parg) *prog { return p.op(opTimerDelete, args...) }
	// k is a valid (pointer, length) for key "k1", in the program's data.
	withKey := func() (*prog, parg, parg) {
		p := new(prog)
		kp, kl := p.blob("k1")
		return p, kp, kl
	}
	if _, err := i.Process(ctx, []abi.Record{rec("k1", nil)}, nil); err != nil {
		t.Fatal(err)
	}
	end := int32(i.mem.Size()) // the batches below fit: the memory does not grow
	oob := abi.ErrOutOfBounds
	cases := []timerCase{
		{name: "domain-2", prog: new(prog).timerSet("k1", "t", 2, 0, ""), want: []abi.Errno{abi.ErrInvalid}},
		{name: "domain-neg", prog: new(prog).timerSet("k1", "t", -1, 0, ""), want: []abi.Errno{abi.ErrInvalid}},
		{name: "key-not-in-batch", prog: new(prog).timerSet("zz", "t", 0, 0, "").timerDelete("k", "t").
			timerSet("k1", "t", 0, 0, ""),
			want: []abi.Errno{abi.ErrKeyNotInBatch, abi.ErrKeyNotInBatch, abi.OK}, timers: 1},
		{name: "name-too-large", prog: new(prog).timerSet("k1", "123456789", 0, 0, "").
			timerDelete("k1", "123456789").timerSet("k1", "12345678", 0, 0, ""),
			want: []abi.Errno{abi.ErrTooLarge, abi.ErrTooLarge, abi.OK}, timers: 1},
		{name: "payload-too-large", prog: new(prog).timerSet("k1", "t", 0, 0, strings.Repeat("p", 17)).
			timerSet("k1", "t", 0, 0, strings.Repeat("p", 16)),
			want: []abi.Errno{abi.ErrTooLarge, abi.OK}, timers: 1},
		{name: "limit", prog: new(prog).put("k1", "a", "1").timerSet("k1", "t", 0, 0, "").
			del("k2", "b").timerDelete("k2", "t").timerSet("k1", "u", 0, 0, "").timerDelete("k1", "u"),
			want: []abi.Errno{abi.OK, abi.OK, abi.OK, abi.OK, abi.ErrLimit, abi.ErrLimit}, timers: 2},
	}
	// Out-of-bounds pointers and lengths, for each (pointer, length) argument of both functions.
	bad := []struct {
		name     string
		ptr, len int32
	}{
		{"past-end", end - 2, 4},
		{"negative-len", 0, -1},
		{"negative-len-2", 0x8000, -0x7fffffff},
		{"huge-len", 0, 0x7fffffff},
		{"wraps-32-bits", -16, 32}, // pointer 0xfffffff0: pointer+length overflows 32 bits
		{"ptr-past-end", end, 1},
		{"ptr-max", -1, 1},
	}
	for _, b := range bad {
		for arg := 0; arg < 3; arg++ {
			p, kp, kl := withKey()
			np, nl := p.blob("t")
			pp, pl := p.blob("pay")
			args := []parg{kp, kl, np, nl, abs(0), pp, pl}
			at := [...]int{0, 2, 5}[arg] // key, name, payload
			args[at], args[at+1] = abs(b.ptr), abs(b.len)
			cases = append(cases, timerCase{name: fmt.Sprintf("set-%s-arg%d", b.name, arg),
				prog: set(p, args...), want: []abi.Errno{oob}})
		}
		for arg := 0; arg < 2; arg++ {
			p, kp, kl := withKey()
			np, nl := p.blob("t")
			args := []parg{kp, kl, np, nl}
			args[2*arg], args[2*arg+1] = abs(b.ptr), abs(b.len)
			cases = append(cases, timerCase{name: fmt.Sprintf("delete-%s-arg%d", b.name, arg),
				prog: del(p, args...), want: []abi.Errno{oob}})
		}
	}
	// Out-of-bounds is checked before everything else, even with a bad domain and a key out of scope.
	{
		p := new(prog)
		np, nl := p.blob("t")
		cases = append(cases, timerCase{name: "oob-first", prog: set(p, abs(-16), abs(32), np, nl, abs(9), abs(0), abs(0)),
			want: []abi.Errno{oob}})
	}
	// A zero length reads nothing, whatever the pointer: an empty name and payload at any address.
	{
		p, kp, kl := withKey()
		set(p, kp, kl, abs(-1), abs(0), abs(1), abs(end+100), abs(0))
		del(p, kp, kl, abs(-16), abs(0))
		cases = append(cases, timerCase{name: "empty-anywhere", prog: p,
			want: []abi.Errno{abi.OK, abi.OK}, timers: 2})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if i.Broken() {
				t.Fatal("instance broken by an earlier case")
			}
			rs := observe(i)
			eff, err := i.Process(ctx, []abi.Record{rec("k1", tc.prog.bytes()), rec("k2", nil)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []abi.Errno
			for _, h := range *rs {
				if h.fn == hfTimerSet || h.fn == hfTimerDelete || h.fn == hfStatePut || h.fn == hfStateDelete {
					got = append(got, abi.Errno(h.r))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("results %v, want %v", got, tc.want)
			}
			if len(eff.Timers) != tc.timers {
				t.Errorf("%d timer ops recorded (%s), want %d", len(eff.Timers), fmtTimers(eff.Timers), tc.timers)
			}
		})
	}
}

func TestTimerNotAllowed(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver02", Limits{})
	na := int64(abi.ErrNotAllowed)
	timerResults := func(rs []hostResult) []int64 {
		var out []int64
		for _, h := range rs {
			if h.fn == hfTimerSet || h.fn == hfTimerDelete {
				out = append(out, h.r)
			}
		}
		return out
	}

	// During init (driver02 runs a config that does not start with "{").
	var rs []hostResult
	m.observer = func(fn int, r int64) { rs = append(rs, hostResult{fn, r}) }
	instantiate(t, m, InstanceConfig{Config: new(prog).timerSet("k", "t", 0, 0, "").timerDelete("k", "t").bytes()})
	m.observer = nil
	if got := timerResults(rs); !slices.Equal(got, []int64{na, na}) {
		t.Errorf("init: %v, want ERR_NOT_ALLOWED twice", got)
	}

	// A stateless instance.
	s := instantiate(t, m, InstanceConfig{StatelessOnly: true})
	srs := observe(s)
	eff, err := s.Process(ctx, []abi.Record{rec("k", new(prog).timerSet("k", "t", 0, 0, "").timerDelete("k", "t").bytes())}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := timerResults(*srs); !slices.Equal(got, []int64{na, na}) || len(eff.Timers) != 0 {
		t.Errorf("stateless: %v and %d timer ops, want ERR_NOT_ALLOWED twice and none", got, len(eff.Timers))
	}
}

// TestTimerWithoutOnTimer: a 0.2 guest that does not export wasmstream_on_timer may not set
// timers (ABI.md §3), and state_keys outside a tick is refused.
func TestTimerWithoutOnTimer(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "plain02", Limits{}), InstanceConfig{})
	rs := observe(i)
	eff, err := i.Process(ctx, []abi.Record{rec("k", nil)}, newKeyEnv(map[string]map[string]string{"k": {"a": "1"}}))
	if err != nil {
		t.Fatal(err)
	}
	na := abi.ErrNotAllowed
	want := []hostResult{{hfTimerSet, int64(na)}, {hfTimerDelete, int64(na)}, {hfStateKeys, int64(na)}}
	if !slices.Equal(*rs, want) {
		t.Errorf("results %v, want %v", *rs, want)
	}
	if len(eff.Timers) != 0 {
		t.Errorf("timer ops %s", fmtTimers(eff.Timers))
	}
}

func TestWatermark(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver02", Limits{})

	// -1 during init.
	var rs []hostResult
	m.observer = func(fn int, r int64) { rs = append(rs, hostResult{fn, r}) }
	instantiate(t, m, InstanceConfig{Config: new(prog).watermark(scratch).bytes()})
	m.observer = nil
	if got := results(rs, hfWatermarkMs); !slices.Equal(got, []int64{-1}) {
		t.Errorf("init: watermark_ms %v, want [-1]", got)
	}

	i := instantiate(t, m, InstanceConfig{})
	show := new(prog).watermark(scratch).emitAbs("wm", "", scratch, 8).bytes()
	// Process has no watermark.
	eff, err := i.Process(ctx, []abi.Record{rec("k", show)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(eff.Outputs) != 1 || string(eff.Outputs[0].Value) != le64(-1) {
		t.Errorf("Process: outputs %s, want the watermark -1", fmtOutputs(eff.Outputs))
	}
	// Every step of a unit sees the unit's watermark.
	for _, wm := range []int64{-1, 0, 1_700_000_000_000, 1 << 62} {
		u := Unit{Watermark: wm, Steps: []Step{
			{Kind: StepRecords, Records: []abi.Record{rec("k", show)}},
			{Kind: StepFirings, Firings: []abi.Firing{{Key: []byte("k"), Name: []byte("t"), Payload: show}}},
			{Kind: StepTick, Tick: abi.Tick{Watermark: wm + 1, Source: show}}, // the Unit's watermark wins
		}}
		eff, err := i.Run(ctx, &u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(eff.Outputs) != 3 {
			t.Fatalf("watermark %d: outputs %s", wm, fmtOutputs(eff.Outputs))
		}
		for k, o := range eff.Outputs {
			if string(o.Value) != le64(wm) {
				t.Errorf("watermark %d: step %d saw %d", wm, k, int64(binary.LittleEndian.Uint64(o.Value)))
			}
		}
	}
	// The next Process is back to -1.
	if eff, err = i.Process(ctx, []abi.Record{rec("k", show)}, nil); err != nil || string(eff.Outputs[0].Value) != le64(-1) {
		t.Errorf("Process after Run: %v %s", err, fmtOutputs(eff.Outputs))
	}
}

// keyEnv is a memEnv that lists its keys (KeyLister) in bytewise order and records its calls.
type keyEnv struct {
	*memEnv
	keysErr error
	calls   []string // "after=<after>" or "from-start"
}

func newKeyEnv(kv map[string]map[string]string) *keyEnv { return &keyEnv{memEnv: newEnv(kv)} }

func (e *keyEnv) StateKeys(after []byte, fromStart bool, fn func(key []byte) bool) error {
	if fromStart {
		e.calls = append(e.calls, "from-start")
	} else {
		e.calls = append(e.calls, fmt.Sprintf("after=%q", after))
	}
	if e.keysErr != nil {
		return e.keysErr
	}
	keys := make([]string, 0, len(e.state))
	for k := range e.state {
		if fromStart || k > string(after) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !fn([]byte(k)) {
			break
		}
	}
	return nil
}

// keyPage decodes a KeyPage emitted by the guest.
func keyPage(t *testing.T, b []byte) ([]string, bool) {
	t.Helper()
	keys, more, err := abi.DecodeKeyPage(b, nil)
	if err != nil {
		t.Fatalf("KeyPage %q: %v", b, err)
	}
	var out []string
	for _, k := range keys {
		out = append(out, string(k))
	}
	return out, more
}

func tick(program *prog) *Unit {
	return &Unit{Watermark: -1, Steps: []Step{{Kind: StepTick, Tick: abi.Tick{Partition: 3, Now: 99, Watermark: -1,
		Source: program.bytes()}}}}
}

func TestTickScope(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	env := newKeyEnv(map[string]map[string]string{"a": {"n": "A"}, "b": {"n": "B"}})
	rs := observe(i)
	// A tick may read, write, delete and scan any key, and set timers on any key.
	p := new(prog).get("a", "n", scratch, 8).emitAbs("got", "a", scratch, 1).
		put("new", "n", "v").del("b", "n").get("b", "n", scratch, 8).
		scan("new", "", nil, scratch, 64).
		timerSet("other", "t", abi.DomainProcessing, 5, "").
		put("a", "n", "A2").get("a", "n", scratch, 8).emitLast("got", scratch)
	eff, err := i.Run(ctx, tick(p), env)
	if err != nil {
		t.Fatal(err)
	}
	want := []hostResult{{hfStateGet, 1}, {hfEmit, 0}, {hfStatePut, 0}, {hfStateDelete, 0},
		{hfStateGet, int64(abi.ErrNotFound)}, {hfStateScan, 8 + 4 + 1 + 4 + 1}, {hfTimerSet, 0}, {hfStatePut, 0},
		{hfStateGet, 2}, {hfEmit, 0}}
	if !slices.Equal(*rs, want) {
		t.Errorf("results\n got %v\nwant %v", *rs, want)
	}
	if got := fmtOutputs(eff.Outputs); got != `{got "a"="A" ts=1234}{got ""="A2" ts=1234}` {
		t.Errorf("outputs %s", got)
	}
	var writes []string
	for _, w := range eff.Writes {
		writes = append(writes, fmt.Sprintf("%s/%s=%s del=%v", w.Key, w.Name, w.Value, w.Delete))
	}
	if want := []string{"new/n=v del=false", "b/n= del=true", "a/n=A2 del=false"}; !slices.Equal(writes, want) {
		t.Errorf("writes %q, want %q", writes, want)
	}
	if got := fmtTimers(eff.Timers); got != `{set "other"/"t" d=0 due=5 ""}` {
		t.Errorf("timers %s", got)
	}

	// The next records call is scoped to its keys again.
	rs = observe(i)
	if _, err := i.Process(ctx, []abi.Record{rec("k", new(prog).get("a", "n", scratch, 8).put("a", "n", "x").bytes())}, env); err != nil {
		t.Fatal(err)
	}
	nib := int64(abi.ErrKeyNotInBatch)
	if want := []hostResult{{hfStateGet, nib}, {hfStatePut, nib}}; !slices.Equal(*rs, want) {
		t.Errorf("after the tick: %v, want %v", *rs, want)
	}
}

func TestStateKeys(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver02", Limits{})
	i := instantiate(t, m, InstanceConfig{})
	kv := map[string]map[string]string{}
	for _, k := range []string{"a", "bb", "c", "dddd", ""} {
		kv[k] = map[string]string{"n": "v"}
	}
	env := newKeyEnv(kv)
	str := func(s string) *string { return &s }

	for _, tc := range []struct {
		name  string
		after *string
		cap   int32
		rc    int64 // the state_keys result
		keys  []string
		more  bool
		calls []string
	}{
		{name: "all", cap: 256, rc: 8 + 5*4 + 8, keys: []string{"", "a", "bb", "c", "dddd"}, calls: []string{"from-start"}},
		{name: "exact-fit", cap: 36, rc: 36, keys: []string{"", "a", "bb", "c", "dddd"}, calls: []string{"from-start"}},
		{name: "page", cap: 8 + 4 + 5 + 6, rc: 8 + 4 + 5 + 6, keys: []string{"", "a", "bb"}, more: true, calls: []string{"from-start"}},
		{name: "next-page", after: str("bb"), cap: 8 + 5 + 8 - 1, rc: 8 + 5, keys: []string{"c"}, more: true, calls: []string{`after="bb"`}},
		{name: "last-page", after: str("c"), cap: 8 + 8, rc: 16, keys: []string{"dddd"}, calls: []string{`after="c"`}},
		{name: "past-the-end", after: str("e"), cap: 8, rc: 8, calls: []string{`after="e"`}},
		// An empty after is "after the empty key", not "from the start".
		{name: "after-empty", after: str(""), cap: 13, rc: 13, keys: []string{"a"}, more: true, calls: []string{`after=""`}},
		{name: "one-key-too-big", after: str("c"), cap: 8 + 8 - 1, rc: int64(abi.ErrBufferTooSmall), calls: []string{`after="c"`}},
		{name: "under-header", cap: 7, rc: int64(abi.ErrBufferTooSmall)},
		{name: "zero-cap", cap: 0, rc: int64(abi.ErrBufferTooSmall)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env.calls = nil
			rs := observe(i)
			// Fill the buffer first so that a page that writes too much shows.
			fill := strings.Repeat("\xee", 64)
			p := new(prog).put("x", "fill", fill).get("x", "fill", scratch, 64).
				keys(tc.after, scratch, tc.cap).emitLast("keys", scratch).emitAbs("raw", "", scratch, 64)
			eff, err := i.Run(ctx, tick(p), env)
			if err != nil {
				t.Fatal(err)
			}
			if got := results(*rs, hfStateKeys); !slices.Equal(got, []int64{tc.rc}) {
				t.Fatalf("state_keys = %v, want %d", got, tc.rc)
			}
			if !slices.Equal(env.calls, tc.calls) {
				t.Errorf("StateKeys calls %q, want %q", env.calls, tc.calls)
			}
			raw := eff.Outputs[len(eff.Outputs)-1].Value
			if tc.rc < 0 {
				if string(raw) != fill {
					t.Errorf("the buffer was written on error: %q", raw)
				}
				return
			}
			if len(eff.Outputs) != 2 {
				t.Fatalf("outputs %s", fmtOutputs(eff.Outputs))
			}
			keys, more := keyPage(t, eff.Outputs[0].Value)
			if !slices.Equal(keys, tc.keys) || more != tc.more {
				t.Errorf("page %q more=%v, want %q more=%v", keys, more, tc.keys, tc.more)
			}
			if strings.Trim(string(raw[tc.rc:]), "\xee") != "" {
				t.Errorf("bytes written past the result %d: %q", tc.rc, raw)
			}
		})
	}

	// Paging through everything with the smallest buffers that hold one key.
	var all []string
	var after *string
	for n := 0; ; n++ {
		if n > 10 {
			t.Fatal("paging does not end")
		}
		p := new(prog).keys(after, scratch, 8+4+4).emitLast("keys", scratch)
		eff, err := i.Run(ctx, tick(p), env)
		if err != nil {
			t.Fatal(err)
		}
		keys, more := keyPage(t, eff.Outputs[0].Value)
		all = append(all, keys...)
		if !more {
			break
		}
		after = &keys[len(keys)-1]
	}
	if want := []string{"", "a", "bb", "c", "dddd"}; !slices.Equal(all, want) {
		t.Errorf("paged keys %q, want %q", all, want)
	}

	// An Env that cannot list keys: an empty page.
	rs := observe(i)
	eff, err := i.Run(ctx, tick(new(prog).keys(nil, scratch, 64).emitLast("keys", scratch)), newEnv(kv))
	if err != nil {
		t.Fatal(err)
	}
	if got := results(*rs, hfStateKeys); !slices.Equal(got, []int64{8}) || string(eff.Outputs[0].Value) != le32(0, 0) {
		t.Errorf("without KeyLister: %v %s", got, fmtOutputs(eff.Outputs))
	}
	// Out of bounds.
	for _, args := range [][4]int32{{0, 0, -16, 32}, {0, -2, scratch, 64}, {-1, 4, scratch, 64}, {0, -1, 4 * 65536, 8}} {
		rs := observe(i)
		p := new(prog).op(opStateKeys, abs(args[0]), abs(args[1]), abs(args[2]), abs(args[3]))
		if _, err := i.Run(ctx, tick(p), env); err != nil {
			t.Fatal(err)
		}
		if got := results(*rs, hfStateKeys); !slices.Equal(got, []int64{int64(abi.ErrOutOfBounds)}) {
			t.Errorf("state_keys%v = %v, want ERR_OUT_OF_BOUNDS", args, got)
		}
	}
	// A failing Env: ERR_INTERNAL and the call fails with its error.
	boom := errors.New("boom")
	env.keysErr = boom
	rs = observe(i)
	_, err = i.Run(ctx, tick(new(prog).keys(nil, scratch, 64)), env)
	if !errors.Is(err, boom) {
		t.Errorf("Run with a failing KeyLister: %v", err)
	}
	if got := results(*rs, hfStateKeys); !slices.Equal(got, []int64{int64(abi.ErrInternal)}) {
		t.Errorf("state_keys = %v, want ERR_INTERNAL", got)
	}
}

func TestStateKeysNotAllowed(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver02", Limits{})
	env := newKeyEnv(map[string]map[string]string{"k": {"n": "v"}})
	na := int64(abi.ErrNotAllowed)
	keys := new(prog).keys(nil, scratch, 64)

	var rs []hostResult
	m.observer = func(fn int, r int64) { rs = append(rs, hostResult{fn, r}) }
	instantiate(t, m, InstanceConfig{Config: keys.bytes()})
	m.observer = nil
	if got := results(rs, hfStateKeys); !slices.Equal(got, []int64{na}) {
		t.Errorf("init: %v", got)
	}

	i := instantiate(t, m, InstanceConfig{})
	for _, u := range []*Unit{
		{Steps: []Step{{Kind: StepRecords, Records: []abi.Record{rec("k", keys.bytes())}}}},
		{Steps: []Step{{Kind: StepFirings, Firings: []abi.Firing{{Key: []byte("k"), Payload: keys.bytes()}}}}},
		{Steps: []Step{{Kind: StepMigrate, Migrate: abi.Migrate{From: 1, To: 2, Key: []byte("k")}},
			{Kind: StepRecords, Records: []abi.Record{rec("k", keys.bytes())}}}},
	} {
		rs := observe(i)
		if _, err := i.Run(ctx, u, env); err != nil {
			t.Fatal(err)
		}
		if got := results(*rs, hfStateKeys); !slices.Equal(got, []int64{na}) {
			t.Errorf("step %d: state_keys %v, want ERR_NOT_ALLOWED", u.Steps[0].Kind, got)
		}
	}
	if len(env.calls) != 0 {
		t.Errorf("the Env was asked for keys: %q", env.calls)
	}

	// A stateless tick.
	s := instantiate(t, m, InstanceConfig{StatelessOnly: true})
	srs := observe(s)
	if _, err := s.Run(ctx, tick(keys), env); err != nil {
		t.Fatal(err)
	}
	if got := results(*srs, hfStateKeys); !slices.Equal(got, []int64{na}) {
		t.Errorf("stateless tick: %v", got)
	}
}

// fuzzOps are the driver02 ops fuzzProgram02 chooses from.
var fuzzOps = []byte{opTimerSet, opTimerDelete, opStateKeys, opWatermarkMs, opStatePut, opStateGet, opEmitLast}

// fuzzProgram02 turns arbitrary bytes into a driver02 program like fuzzProgram, over fuzzOps.
// watermark_ms always stores its result in the scratch area (the op itself would trap on a bad
// address, which is not what is being tested).
func fuzzProgram02(data []byte) []byte {
	var p []byte
	next := func(n int) []byte {
		b := make([]byte, n)
		copy(b, data)
		data = data[min(n, len(data)):]
		return b
	}
	for len(data) > 0 && len(p) < 4096 {
		h := next(2)
		id := fuzzOps[int(h[0])%len(fuzzOps)]
		if id == opWatermarkMs {
			p = append(append(p, id, 0), le32(scratch)...)
			continue
		}
		p = append(p, id, h[1])
		p = append(p, next(4*opArgs[id])...)
		if wideOp(id) {
			p = append(p, next(8)...)
		}
	}
	return p
}

// FuzzTimerHostFunctions drives timer_set, timer_delete, state_keys and watermark_ms (with
// state_put, state_get and emit) through a real instance with arbitrary pointers and lengths, in a
// records, firings or tick step: the host never panics, returns only documented codes, and records
// only valid timer ops.
func FuzzTimerHostFunctions(f *testing.F) {
	le := func(vs ...int32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	// data[0] picks the step kind; the rest is the program.
	f.Add(append([]byte{0, 0, 0x2b}, append(le(0, 1, 0, 1, 1, 0, 1), le(5, 0)...)...))
	f.Add(append([]byte{1, 1, 0}, le(-16, 32, 0, 0)...))
	f.Add(append([]byte{2, 2, 0}, le(0, -1, scratch, 8)...))
	f.Add(append([]byte{2, 2, 1}, le(0, 2, scratch, 0x7fffffff)...))
	f.Add(append([]byte{0, 0, 0}, append(le(0x7fff0000, 4, 0, -1, 3, 0, 0), le(-1, -1)...)...))
	f.Add(append([]byte{2}, new(prog).put("x", "n", "v").keys(nil, scratch, 64).emitLast("k", scratch).
		timerSet("x", "t", 1, 5, "p").bytes()...))

	r := newRuntime(f, RuntimeConfig{})
	m := compile(f, r, "driver02", Limits{MaxMemoryPages: 4, MaxValueBytes: 64, MaxNameBytes: 16,
		MaxKeyBytes: 16, MaxWritesPerCall: 8, MaxOutputsPerCall: 8, MaxLogBytes: 32})
	env := newKeyEnv(map[string]map[string]string{"k": {"a": "1"}, "": {"b": "2"}, "zzz": {"c": "3"}})
	const wm = 4242
	allowed := allowedErrors(f)
	var inst *Instance
	var bad []hostResult
	observer := func(fn int, r int64) {
		switch {
		case fn == hfWatermarkMs:
			if r != wm {
				bad = append(bad, hostResult{fn, r})
			}
			return
		case r >= 0 || fn == hfNowMs:
			return
		}
		for _, e := range allowed[fn] {
			if abi.Errno(r) == e {
				return
			}
		}
		bad = append(bad, hostResult{fn, r})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		if inst == nil || inst.Broken() {
			if inst != nil {
				_ = inst.Close(ctx)
			}
			var err error
			if inst, err = m.Instantiate(ctx, InstanceConfig{Task: "fuzz"}); err != nil {
				t.Fatal(err)
			}
			inst.observer = observer
		}
		bad = bad[:0]
		kind, prog := data[0]%3, fuzzProgram02(data[1:])
		u := &Unit{Watermark: wm}
		switch kind {
		case 0:
			u.Steps = []Step{records(rec("k", prog))}
		case 1:
			u.Steps = []Step{firings(abi.Firing{Key: []byte("k"), Name: []byte("t"), Payload: prog})}
		case 2:
			u.Steps = []Step{{Kind: StepTick, Tick: abi.Tick{Watermark: wm, Source: prog}}}
		}
		eff, err := inst.Run(ctx, u, env)
		if err != nil {
			// The program may overwrite itself and reach the driver's return or trap op.
			var ce *CallError
			if !errors.As(err, &ce) || !(ce.Trap || errors.Is(err, ErrGuestFailed) || errors.Is(err, ErrOverLimit)) {
				t.Fatalf("run: %v", err)
			}
		}
		if len(bad) > 0 {
			t.Fatalf("undocumented results: %v", bad)
		}
		if len(eff.Timers) > 8 {
			t.Fatalf("%d timer ops over MaxWritesPerCall", len(eff.Timers))
		}
		for _, op := range eff.Timers {
			if (kind != 2 && string(op.Key) != "k") || len(op.Name) > 16 || len(op.Payload) > 64 ||
				(!op.Delete && op.Domain != abi.DomainProcessing && op.Domain != abi.DomainEvent) {
				t.Fatalf("invalid timer op %+v", op)
			}
		}
	})
}
