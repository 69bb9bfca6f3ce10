//go:build !wasip1

package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

// step runs one command as a batch of its own with this key and timestamp 1000 + offset.
func step(t *testing.T, h *wasmstreamtest.Host, key string, offset int64, cmd string) (wasmstreamtest.Result, error) {
	t.Helper()
	return h.Process(wasmstreamtest.Input{Source: "in", Offset: offset, Timestamp: 1000 + offset,
		Key: []byte(key), Value: []byte(cmd)})
}

// one runs a command that must succeed with exactly one result for key and returns its value.
func one(t *testing.T, h *wasmstreamtest.Host, key, cmd string) string {
	t.Helper()
	res, err := step(t, h, key, 0, cmd)
	if err != nil {
		t.Fatalf("%q: %v", cmd, err)
	}
	if len(res.Outputs) != 1 {
		t.Fatalf("%q: %d outputs", cmd, len(res.Outputs))
	}
	o := res.Outputs[0]
	if o.Name != "result" || string(o.Key) != key || o.Timestamp != 1000 || o.Headers != nil {
		t.Fatalf("%q: output %v", cmd, o)
	}
	return string(o.Value)
}

// failure runs a command that must fail and returns the message the guest gave the host.
func failure(t *testing.T, h *wasmstreamtest.Host, key string, offset int64, cmd string) string {
	t.Helper()
	_, err := step(t, h, key, offset, cmd)
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Panic != nil {
		t.Fatalf("%q: want a failed call, got %v", cmd, err)
	}
	return ce.Reason
}

func newHost(t *testing.T, config string) *wasmstreamtest.Host {
	h := wasmstreamtest.New(wasmstreamtest.Options{Config: []byte(config)})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestStateCommands(t *testing.T) {
	h := newHost(t, "{}")
	steps := []struct{ key, cmd, want string }{
		{"a", "get x", "missing"},
		{"a", "put x 1", "ok"},
		{"a", "put y two words ", "ok"},
		{"a", "put z", "ok"},
		{"a", "put  empty-name", "ok"},
		{"a", "get x", "1"},
		{"a", "get y", "two words "},
		{"a", "get z", ""},
		{"a", "get ", "empty-name"},
		{"a", "get", "empty-name"},
		{"b", "get x", "missing"},
		{"a", "scan", "=empty-name;x=1;y=two words ;z="},
		{"a", "scan y", "y=two words "},
		{"a", "scan q", ""},
		{"a", "del x", "ok"},
		{"a", "del nothing", "ok"},
		{"a", "scan x", ""},
		{"", "put k v", "ok"},
		{"", "get k", "v"},
	}
	for _, s := range steps {
		if got := one(t, h, s.key, s.cmd); got != s.want {
			t.Errorf("key %q %q = %q, want %q", s.key, s.cmd, got, s.want)
		}
	}
}

func TestMany(t *testing.T) {
	h := newHost(t, "{}")
	for _, s := range []struct{ cmd, want string }{
		// 2000 entries are several of the SDK's 4 KiB scan pages.
		{"many 2000 p/", "2000 p/00000 p/01999"},
		{"many 0 q/", "0  "},
		{"many 2 p/", "2000 p/00000 p/01999"},
		{"many 3 ", "2003 00000 p/01999"},
	} {
		if got := one(t, h, "k", s.cmd); got != s.want {
			t.Errorf("%q = %q, want %q", s.cmd, got, s.want)
		}
	}
	var want []string
	for i := 10; i < 20; i++ {
		want = append(want, "p/000"+strconv.Itoa(i)+"="+strconv.Itoa(i))
	}
	if got := one(t, h, "k", "scan p/0001"); got != strings.Join(want, ";") {
		t.Errorf("scan p/0001 = %q", got)
	}
	for _, bad := range []string{"many", "many x p", "many 100000 p", "many -1 p", "many +1 p", "many 0000000001 p"} {
		if got := failure(t, h, "k", 3, bad); got != "wasmstream: record in/0@3: bad number" {
			t.Errorf("%q: fail message %q", bad, got)
		}
	}
}

func TestBig(t *testing.T) {
	h := newHost(t, "{}")
	for _, s := range []struct{ cmd, want string }{
		{"big 200000", "200000"},
		{"big 5000", "5000"},
		{"scan b", "big=" + strings.Repeat("x", 5000)},
		{"big 0", "0"},
	} {
		if got := one(t, h, "k", s.cmd); got != s.want {
			t.Errorf("%q = %.40q, want %.40q", s.cmd, got, s.want)
		}
	}
}

func TestEmit(t *testing.T) {
	h := newHost(t, "{}")
	res, err := step(t, h, "k", 4, "emit side v1 a=1 b= c=x=y d")
	if err != nil {
		t.Fatal(err)
	}
	o := res.Outputs[0]
	var hs []string
	for _, hd := range o.Headers {
		hs = append(hs, string(hd.Name)+":"+string(hd.Value))
	}
	if len(res.Outputs) != 1 || o.Name != "side" || string(o.Key) != "k" || string(o.Value) != "v1" ||
		o.Timestamp != 1004 || strings.Join(hs, ",") != "a:1,b:,c:x=y,d:" {
		t.Fatalf("outputs %v, headers %v", res.Outputs, hs)
	}
	res, err = step(t, h, "k", 5, "emit side")
	if err != nil || len(res.Outputs[0].Value) != 0 || res.Outputs[0].Headers != nil {
		t.Fatalf("emit side: %v %v", res.Outputs, err)
	}
	res, err = step(t, h, "k", 6, "emit")
	if err != nil || res.Outputs[0].Name != "" {
		t.Fatalf("emit: %v %v", res.Outputs, err)
	}
}

func TestConfigAndMeta(t *testing.T) {
	const cfg = `{"a":[1,"two"],"b":"é"}`
	h := newHost(t, cfg)
	if got := one(t, h, "k", "config"); got != cfg {
		t.Errorf("config = %q", got)
	}
	res, err := h.Process(wasmstreamtest.Input{Source: "src", Partition: 3, Offset: 42, Timestamp: 0,
		Key: []byte("k"), Value: []byte("meta")})
	if err != nil || string(res.Outputs[0].Value) != "src 3 42 0" || res.Outputs[0].Timestamp != 0 {
		t.Fatalf("meta: %v %v", res.Outputs, err)
	}
}

func TestFailures(t *testing.T) {
	h := newHost(t, "{}")
	one(t, h, "k", "put n 1")
	for _, c := range []struct{ cmd, msg string }{
		{"fail boom", "boom"},
		{`fail with "quotes" and é`, `with "quotes" and é`},
		{"fail", ""},
		{"", "unknown command"},
		{"PUT n 2", "unknown command"},
		// (wasmstreamtest enforces no value size limit: ERR_TOO_LARGE is checked by the host runs.)
	} {
		if got := failure(t, h, "k", 7, c.cmd); got != "wasmstream: record in/0@7: "+c.msg {
			t.Errorf("%q: fail message %q", c.cmd, got)
		}
	}
	if got := one(t, h, "k", "get n"); got != "1" {
		t.Errorf("after the failures n = %q", got)
	}
}

func TestForeign(t *testing.T) {
	h := newHost(t, "{}")
	one(t, h, "k", "put n 1")
	for _, s := range []struct{ cmd, want string }{
		{"foreign k n", "ok 1"},
		{"foreign k m", "ok missing"},
		{"foreign other n", "ERR_KEY_NOT_IN_BATCH"},
		{"foreign", "ERR_KEY_NOT_IN_BATCH"},
	} {
		if got := one(t, h, "k", s.cmd); got != s.want {
			t.Errorf("%q = %q, want %q", s.cmd, got, s.want)
		}
	}
	res, err := h.Process(wasmstreamtest.Input{Key: []byte("k"), Value: []byte("foreign j n")},
		wasmstreamtest.Input{Key: []byte("j"), Value: []byte("get n")})
	if err != nil || string(res.Outputs[0].Value) != "ok missing" {
		t.Fatalf("foreign key in the batch: %v %v", res.Outputs, err)
	}
}

func TestHelperCommands(t *testing.T) {
	h := newHost(t, "{}")
	for _, s := range []struct{ cmd, want string }{
		{"count n 2", "2"},
		{"count n 40", "42"},
		{"append l a b", "a b"},
		{"append l c", "a b;c"},
		{"mput m y 1", "y=1"},
		{"mput m x 2", "x=2;y=1"},
		{`json {"a":"x\n","b":1.50,"c":true,"d":null}`, `{"a":"x\n","b":1.5,"c":true,"d":null}`},
	} {
		if got := one(t, h, "k", s.cmd); got != s.want {
			t.Errorf("%q: %q, want %q", s.cmd, got, s.want)
		}
	}
	if got := failure(t, h, "k", 3, `json {"a":[]}`); got != "wasmstream: record in/0@3: bad json" {
		t.Errorf("nested json: %q", got)
	}
	res, err := step(t, h, "k", 0, "emitdef side v")
	if err != nil || len(res.Outputs) != 1 || res.Outputs[0].Name != "side" || res.Outputs[0].Timestamp != 1000 {
		t.Fatalf("emitdef: %v, %v", err, res.Outputs)
	}
}

// TestTombstone (ABI 0.5): a record with a null value deletes every state entry of its key (more
// than a scan page of them) and emits a tombstone to result; another key's state stays, and an
// empty value is an unknown command, no tombstone.
func TestTombstone(t *testing.T) {
	h := newHost(t, "{}")
	one(t, h, "k", "many 300 p/")
	one(t, h, "k", "put x 1")
	one(t, h, "other", "put x 2")
	res, err := h.Process(wasmstreamtest.Input{Source: "in", Offset: 5, Timestamp: 1005, Key: []byte("k"), ValueNull: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 1 {
		t.Fatalf("tombstone: %d outputs", len(res.Outputs))
	}
	if o := res.Outputs[0]; o.Name != "result" || string(o.Key) != "k" || !o.ValueNull || o.Timestamp != 1005 || o.Headers != nil {
		t.Errorf("tombstone: output %v, want a tombstone for k at 1005 to result", o)
	}
	if got := one(t, h, "k", "scan"); got != "" {
		t.Errorf("k's state after its tombstone: %.80q, want none", got)
	}
	if got := one(t, h, "other", "get x"); got != "2" {
		t.Errorf("other's x = %q, want 2", got)
	}
	if got := failure(t, h, "k", 6, ""); got != "wasmstream: record in/0@6: unknown command" {
		t.Errorf("empty value: fail message %q", got)
	}
}
