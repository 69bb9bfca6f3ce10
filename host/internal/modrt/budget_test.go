package modrt

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/store"
)

// resultsOf returns every host function result observed, in order.
func resultsOf(rs *[]hostResult) []int64 {
	var got []int64
	for _, r := range *rs {
		got = append(got, r.r)
	}
	return got
}

// wantOverLimit checks that err is a failed call over a limit whose message contains what.
func wantOverLimit(t *testing.T, err error, what string) {
	t.Helper()
	ce := asCallError(t, err)
	if !errors.Is(err, ErrOverLimit) || ce.Trap || !strings.Contains(err.Error(), what) {
		t.Errorf("call error %v; want one over a limit naming %q", err, what)
	}
}

// Issue 13 §2: a state name the store cannot hold with its key is ERR_TOO_LARGE, and the call
// fails even when the guest ignores the error and returns 0, so the write is not lost silently.
// Before, state_put accepted it and the checkpoint failed.
func TestStateNameOverTheStoresLimitFailsTheCall(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{}), InstanceConfig{Task: "t"})
	rs := observe(i)
	room := store.StateKeyRoom("t") // for key and name together
	fits, over := strings.Repeat("n", room-1), strings.Repeat("n", room)
	p := new(prog).
		get("k", over, 0x8000, 16). // no such entry can exist
		put("k", fits, "v").
		put("k", over, "v").
		ret(0)
	eff, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	tl := int64(abi.ErrTooLarge)
	if got, want := resultsOf(rs), []int64{tl, 0, tl}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	wantOverLimit(t, err, "over the store's limit of 64988 bytes for key and name")
	if len(eff.Writes) != 0 {
		t.Errorf("a failed call has writes: %d", len(eff.Writes))
	}
	// The same for a timer name, whose store keys are longer.
	i2 := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{Task: "t"})
	rs2 := observe(i2)
	p = new(prog).timerSet("k", strings.Repeat("n", store.TimerKeyRoom("t")), 0, 0, "").ret(0)
	_, err = i2.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if got := resultsOf(rs2); !slices.Equal(got, []int64{tl}) {
		t.Errorf("timer_set results %v, want [%d]", got, tl)
	}
	wantOverLimit(t, err, "timer name")
}

// Issue 13 §4: a call's emitted bytes and state bytes are bounded; beyond, ERR_LIMIT and the call
// fails naming the budget. Before, a call could emit 65536 × 1 MiB.
func TestPerCallByteBudgets(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{MaxEmitBytesPerCall: 10, MaxStateBytesPerCall: 10}), InstanceConfig{})
	rs := observe(i)
	lm := int64(abi.ErrLimit)

	p := new(prog).emit("out", "k", "12345678", nil, -1).emit("out", "k", "1", nil, -1).ret(0)
	_, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if got, want := resultsOf(rs), []int64{0, lm}; !slices.Equal(got, want) {
		t.Errorf("emit results %v, want %v", got, want)
	}
	wantOverLimit(t, err, "budget of 10 bytes (max_emit_bytes_per_call)")

	*rs = nil
	p = new(prog).put("k", "n", "123456789").put("k", "m", "").ret(0)
	_, err = i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil)
	if got, want := resultsOf(rs), []int64{0, lm}; !slices.Equal(got, want) {
		t.Errorf("put results %v, want %v", got, want)
	}
	wantOverLimit(t, err, "budget of 10 state bytes (max_state_bytes_per_call)")

	// The budgets are per call: the next call starts afresh.
	*rs = nil
	p = new(prog).put("k", "n", "123456789").emit("out", "k", "12345678", nil, -1).ret(0)
	if _, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil); err != nil {
		t.Fatal(err)
	}
}

// Issue 13 §3: the writes of one key in one call are bounded by what one store transaction takes
// (a name written again costs no new entry); beyond, ERR_LIMIT and the call fails. Before, 65000
// puts to one key made the checkpoint fail.
func TestKeyWritesPerCallFitOneTransaction(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver", Limits{KeyTxnEntries: 3}), InstanceConfig{Task: "t"})
	rs := observe(i)
	p := new(prog).
		put("k", "a", "1").put("k", "b", "1"). // with the mark: 3 entries
		put("k", "a", "2").                    // the same name: still 3
		put("j", "a", "1").                    // another key has its own
		put("k", "c", "1").                    // a fourth entry
		ret(0)
	_, err := i.Process(ctx, []abi.Record{rec("k", p.bytes()), rec("j", nil)}, nil)
	if got, want := resultsOf(rs), []int64{0, 0, 0, 0, int64(abi.ErrLimit)}; !slices.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	wantOverLimit(t, err, `the writes of key "k" in this call are more than one store transaction holds (3 entries`)
}

// Issue 13 §4: guest log lines are rate-limited per module; dropped lines are counted and
// summarised once logging resumes. Before, 200000 lines from one call all reached the log.
func TestGuestLogIsRateLimited(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "driver", Limits{MaxLogLinesPerSecond: 1, LogBurstLines: 3})
	clock := time.Unix(1000, 0)
	m.logLim.now = func() time.Time { return clock }
	logger, logs := newLogger()
	i := instantiate(t, m, InstanceConfig{Logger: logger})
	p := new(prog)
	for range 10 {
		p.log(abi.LevelInfo, "line")
	}
	if _, err := i.Process(ctx, []abi.Record{rec("k", p.ret(0).bytes())}, nil); err != nil {
		t.Fatal(err)
	}
	// The burst, then one summary when the first line is dropped.
	summary := "guest log rate limited: dropped lines"
	if l := logs(); len(l) != 4 || l[2].msg != "line" || l[3].msg != summary || l[3].attrs["dropped"] != "1" {
		t.Errorf("logs: %+v; want the burst of 3 lines and a summary of 1 dropped", l)
	}
	if n := m.LogDropped(); n != 7 {
		t.Errorf("LogDropped = %d, want 7", n)
	}
	clock = clock.Add(2 * time.Second) // two tokens
	p = new(prog).log(abi.LevelInfo, "again").ret(0)
	if _, err := i.Process(ctx, []abi.Record{rec("k", p.bytes())}, nil); err != nil {
		t.Fatal(err)
	}
	// A second later: the next summary, then the line.
	l := logs()
	if len(l) != 6 || l[4].msg != summary || l[4].attrs["dropped"] != "6" || l[4].attrs["dropped_total"] != "7" || l[5].msg != "again" {
		t.Errorf("logs after the refill: %+v", l)
	}
}
