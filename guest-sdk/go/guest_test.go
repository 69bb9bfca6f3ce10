//go:build !wasip1

package wasmstream

import (
	"errors"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

func TestGetRetriesWithBiggerBuffer(t *testing.T) {
	h := install(t)
	getBuf = nil
	h.value = []byte(strings.Repeat("v", getBufInitial+1))
	v, ok, err := StateOf(nil).Get("n")
	if err != nil || !ok || string(v) != string(h.value) || h.getCalls != 2 {
		t.Fatalf("Get = %d bytes, %v, %v after %d calls", len(v), ok, err, h.getCalls)
	}
	h.value, h.getCalls = []byte{}, 0
	v, ok, err = StateOf(nil).Get("n")
	if err != nil || !ok || v == nil || len(v) != 0 || h.getCalls != 1 {
		t.Fatalf("empty value: Get = %q, %v, %v after %d calls", v, ok, err, h.getCalls)
	}
	h.value = nil
	if v, ok, err := StateOf(nil).Get("n"); v != nil || ok || err != nil {
		t.Fatalf("missing value: Get = %q, %v, %v", v, ok, err)
	}
}

func TestGetAppend(t *testing.T) {
	h := install(t)
	h.value = []byte("42")
	buf := make([]byte, 2, 8)
	copy(buf, "n=")
	v, ok, err := StateOf(nil).GetAppend(buf, "n")
	if err != nil || !ok || string(v) != "n=42" || &v[0] != &buf[0] || h.getCalls != 1 {
		t.Fatalf("GetAppend with room = %q, %v, %v after %d calls (same array: %v)", v, ok, err, h.getCalls, &v[0] == &buf[0])
	}
	h.value, h.getCalls = []byte(strings.Repeat("v", 10)), 0
	v, ok, err = StateOf(nil).GetAppend(buf, "n")
	if err != nil || !ok || string(v) != "n="+string(h.value) || h.getCalls != 2 {
		t.Fatalf("GetAppend without room = %q, %v, %v after %d calls", v, ok, err, h.getCalls)
	}
	h.value = nil
	if v, ok, err := StateOf(nil).GetAppend(buf, "n"); string(v) != "n=" || ok || err != nil {
		t.Fatalf("missing value: GetAppend = %q, %v, %v", v, ok, err)
	}
	h.value = []byte("x")
	if v, ok, err := StateOf(nil).GetAppend(nil, "n"); string(v) != "x" || !ok || err != nil {
		t.Fatalf("nil dst: GetAppend = %q, %v, %v", v, ok, err)
	}
}

func TestProcessFailures(t *testing.T) {
	cases := []struct {
		name    string
		handler func(r *Record) error
		payload []byte
		reason  string
	}{
		{"no handler", nil, abi.AppendBatchHeader(nil, 0), "no record handler"},
		{"malformed batch", func(*Record) error { return nil }, []byte{1, 0, 0}, "malformed"},
		{"handler error", func(*Record) error { return errors.New("bad record") },
			abi.AppendRecord(abi.AppendBatchHeader(nil, 1), &abi.Record{Source: []byte("in"), Partition: 2, Offset: 7}),
			"wasmstream: record in/2@7: bad record"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := install(t)
			Handle(c.handler)
			if rc := deliver(t, c.payload, callProcess); rc == 0 {
				t.Fatal("process succeeded")
			}
			if !strings.Contains(h.failMsg, c.reason) {
				t.Fatalf("fail message %q does not contain %q", h.failMsg, c.reason)
			}
		})
	}
}

func TestInitFailure(t *testing.T) {
	h := install(t)
	HandleInit(func([]byte) error { return errors.New("bad config") })
	if rc := deliver(t, golden(t, "init"), callInit); rc == 0 || h.failMsg != "bad config" {
		t.Fatalf("rc %d, fail message %q", rc, h.failMsg)
	}
}

func TestHostError(t *testing.T) {
	err := check(abi.FuncStatePut, int32(abi.ErrKeyNotInBatch))
	if !errors.Is(err, ErrKeyNotInBatch) || errors.Is(err, ErrNotFound) {
		t.Fatalf("errors.Is does not match: %v", err)
	}
	if err.Error() != "wasmstream: state_put: ERR_KEY_NOT_IN_BATCH" {
		t.Fatalf("message %q", err)
	}
	if check(abi.FuncStatePut, 0) != nil || check(abi.FuncStateGet, 5) != nil {
		t.Fatal("a status >= 0 is not an error")
	}
}

func TestAlloc(t *testing.T) {
	if alloc(-1) != nil || alloc(inBufMax+1) != nil {
		t.Fatal("invalid sizes must fail")
	}
	if b := alloc(0); b == nil || cap(b) == 0 {
		t.Fatal("alloc(0) must return a real buffer")
	}
	a := alloc(10)
	b := alloc(20)
	if &a[0] != &b[0] {
		t.Fatal("alloc must reuse its buffer while it fits")
	}
	if c := alloc(1 << 20); len(c) != 1<<20 {
		t.Fatal("alloc must grow")
	}
}
