package modrt

import (
	"slices"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// gateEnv is a memEnv with a TimerGate: room for `room` new timers, and the timers in exist
// already pending (a replacement needs no room). It records what it was asked.
type gateEnv struct {
	*memEnv
	room  int
	exist map[string]bool // key + "/" + name
	asked []string
}

func (e *gateEnv) ReserveTimer(key, name []byte) (bool, error) {
	id := string(key) + "/" + string(name)
	e.asked = append(e.asked, id)
	if e.room > 0 {
		e.room--
		return true, nil
	}
	return e.exist[id], nil
}

// TestTimerSetPendingLimit: timer_set asks the Env's TimerGate once per (key, name) and call;
// a refusal is ERR_LIMIT for that timer_set alone (not set, the call goes on and succeeds), and
// a timer the gate says exists is set at the limit.
func TestTimerSetPendingLimit(t *testing.T) {
	r := newRuntime(t, RuntimeConfig{})
	i := instantiate(t, compile(t, r, "driver02", Limits{}), InstanceConfig{})
	rs := observe(i)
	env := &gateEnv{memEnv: newEnv(nil), room: 1, exist: map[string]bool{"k1/old": true}}
	recs := []abi.Record{rec("k1", new(prog).
		timerSet("k1", "a", abi.DomainProcessing, 100, "").   // takes the room
		timerSet("k1", "a", abi.DomainProcessing, 200, "").   // the same timer: not asked again
		timerSet("k1", "b", abi.DomainProcessing, 100, "").   // no room: ERR_LIMIT
		timerSet("k1", "old", abi.DomainProcessing, 100, ""). // exists: replaced
		timerDelete("k1", "a").
		put("k1", "s", "v").
		bytes())}
	eff, err := i.Process(ctx, recs, env)
	if err != nil {
		t.Fatalf("the call failed: %v", err)
	}
	got := results(*rs, hfTimerSet)
	if want := []int64{0, 0, int64(abi.ErrLimit), 0}; !slices.Equal(got, want) {
		t.Errorf("timer_set results %v, want %v", got, want)
	}
	if want := []string{"k1/a", "k1/b", "k1/old"}; !slices.Equal(env.asked, want) {
		t.Errorf("the gate was asked %q, want %q", env.asked, want)
	}
	want := []TimerOp{
		{Key: []byte("k1"), Name: []byte("a"), Domain: abi.DomainProcessing, Due: 100, Payload: []byte{}},
		{Key: []byte("k1"), Name: []byte("a"), Domain: abi.DomainProcessing, Due: 200, Payload: []byte{}},
		{Key: []byte("k1"), Name: []byte("old"), Domain: abi.DomainProcessing, Due: 100, Payload: []byte{}},
		{Key: []byte("k1"), Name: []byte("a"), Delete: true},
	}
	if g, w := fmtTimers(eff.Timers), fmtTimers(want); g != w {
		t.Errorf("timers\n got %s\nwant %s", g, w)
	}
	if len(eff.Writes) != 1 {
		t.Errorf("writes %+v, want the call's one put", eff.Writes)
	}

	// The next call asks again.
	env.asked = nil
	if _, err := i.Process(ctx, []abi.Record{rec("k1", new(prog).timerSet("k1", "a", 0, 1, "").bytes())}, env); err != nil {
		t.Fatal(err)
	}
	if want := []string{"k1/a"}; !slices.Equal(env.asked, want) {
		t.Errorf("second call: the gate was asked %q, want %q", env.asked, want)
	}
}
