//go:build !wasip1

package wasmstreamtest_test

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
	"github.com/wasmstream/wasmstream/guest-sdk/go/wasmstreamtest"
)

func rec(key, value string) wasmstreamtest.Input {
	return wasmstreamtest.Input{Source: "in", Key: []byte(key), Value: []byte(value), Timestamp: 5}
}

func TestRunCountsAndEmits(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		st := r.State()
		v, _, err := st.Get("n")
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(v))
		n++
		if err := st.Put("n", []byte(strconv.Itoa(n))); err != nil {
			return err
		}
		return wasmstream.EmitWith(wasmstream.Output{Name: "out", Key: r.Key(),
			Value: append(append([]byte{}, r.Value()...), strconv.Itoa(n)...), Timestamp: r.Timestamp(),
			Headers: []wasmstream.Header{{Name: []byte("h"), Value: []byte("1")}}})
	})
	res, err := wasmstreamtest.Run(wasmstreamtest.Options{}, []wasmstreamtest.Input{rec("a", "x"), rec("b", "y"), rec("a", "z")})
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, o := range res.Outputs {
		outs = append(outs, o.Name+":"+string(o.Key)+":"+string(o.Value)+":"+strconv.FormatInt(o.Timestamp, 10)+":"+string(o.Headers[0].Name))
	}
	if got := strings.Join(outs, ","); got != "out:a:x1:5:h,out:b:y1:5:h,out:a:z2:5:h" {
		t.Fatalf("outputs %s", got)
	}
	if got := stateString(res.State); got != "a/n=2,b/n=1" {
		t.Fatalf("state %s", got)
	}
}

func stateString(es []wasmstreamtest.StateEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, string(e.Key)+"/"+e.Name+"="+string(e.Value))
	}
	return strings.Join(s, ",")
}

func TestScopeAndPhase(t *testing.T) {
	var initErrs, procErrs []error
	wasmstream.HandleInit(func([]byte) error {
		_, _, err := wasmstream.StateOf([]byte("a")).Get("n")
		initErrs = append(initErrs, err, wasmstream.Emit("out", nil, nil))
		return nil
	})
	defer wasmstream.HandleInit(nil)
	wasmstream.Handle(func(r *wasmstream.Record) error {
		other := wasmstream.StateOf([]byte("zzz"))
		_, _, err := other.Get("n")
		procErrs = append(procErrs, err, other.Put("n", nil), other.Delete("n"),
			other.Scan("", func(_, _ []byte) bool { return true }))
		// Another key of the same batch is in scope.
		return wasmstream.StateOf([]byte("b")).Put("n", []byte("from a"))
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Process(rec("a", ""), rec("b", "")); err != nil {
		t.Fatal(err)
	}
	for _, err := range initErrs {
		if !errors.Is(err, wasmstream.ErrNotAllowed) {
			t.Errorf("during init: %v, want ErrNotAllowed", err)
		}
	}
	for _, err := range procErrs {
		var he *wasmstream.HostError
		if !errors.Is(err, wasmstream.ErrKeyNotInBatch) || !errors.As(err, &he) || he.Errno.String() != "ERR_KEY_NOT_IN_BATCH" {
			t.Errorf("key outside the batch: %v, want ErrKeyNotInBatch", err)
		}
	}
	if len(procErrs) != 8 {
		t.Fatalf("%d errors", len(procErrs))
	}
	if got := stateString(h.State()); got != "b/n=from a" {
		t.Fatalf("state %s", got)
	}
}

func TestFailedBatchHasNoEffects(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		if err := r.State().Put("seen", r.Value()); err != nil {
			return err
		}
		if err := wasmstream.Emit("out", r.Key(), r.Value()); err != nil {
			return err
		}
		switch string(r.Value()) {
		case "fail":
			return errors.New("asked to fail")
		case "panic":
			panic("asked to panic")
		}
		return nil
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Process(rec("a", "ok")); err != nil {
		t.Fatal(err)
	}
	_, err := h.Process(rec("a", "again"), rec("b", "fail"))
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || ce.Code != 1 || ce.Reason != "wasmstream: record in/0@0: asked to fail" {
		t.Fatalf("error %v", err)
	}
	_, err = h.Process(rec("a", "panic"))
	if !errors.As(err, &ce) || ce.Panic != "asked to panic" {
		t.Fatalf("error %v", err)
	}
	if got := stateString(h.State()); got != "a/seen=ok" {
		t.Fatalf("state after failed batches %s", got)
	}
}

// An error made by wasmstream.Permanent (even wrapped again) fails the call permanently: the
// harness reports it as the host sees it; a plain error is not permanent.
func TestPermanentFailure(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		if err := r.State().Put("seen", r.Value()); err != nil {
			return err
		}
		switch string(r.Value()) {
		case "bad":
			return fmt.Errorf("parsing: %w", wasmstream.Permanent(errors.New("not a number")))
		case "flaky":
			return errors.New("try again")
		}
		return nil
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	if err := h.Init(); err != nil {
		t.Fatal(err)
	}
	_, err := h.Process(rec("a", "ok"), rec("b", "bad"))
	var ce *wasmstreamtest.CallError
	if !errors.As(err, &ce) || !ce.Permanent || ce.Reason != "wasmstream: record in/0@0: parsing: not a number" {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(err.Error(), "failed permanently") {
		t.Fatalf("error text %q", err)
	}
	_, err = h.Process(rec("a", "flaky"))
	if !errors.As(err, &ce) || ce.Permanent || ce.Code != 1 {
		t.Fatalf("plain error %v", err)
	}
	if got := stateString(h.State()); got != "" {
		t.Fatalf("state after failed batches %q", got)
	}
	if wasmstream.IsPermanent(errors.New("x")) || wasmstream.Permanent(nil) != nil {
		t.Fatal("IsPermanent of a plain error, or Permanent(nil) not nil")
	}
}

// Scan pages through entries larger than the SDK's first buffer, sees the batch's own writes and
// deletes, honours the prefix and stops when fn returns false; a nested Scan works.
func TestScan(t *testing.T) {
	big := bytes.Repeat([]byte("v"), 12<<10)
	var got, nested []string
	stopped := 0
	wasmstream.Handle(func(r *wasmstream.Record) error {
		st := r.State()
		for i := 0; i < 20; i++ {
			if err := st.Put("p/"+strconv.Itoa(100+i), big[:i*600]); err != nil {
				return err
			}
		}
		if err := st.Delete("p/105"); err != nil {
			return err
		}
		err := st.Scan("p/", func(name, value []byte) bool {
			got = append(got, string(name)+"#"+strconv.Itoa(len(value)))
			if string(name) == "p/101" {
				return st.Scan("q", func(name, _ []byte) bool { nested = append(nested, string(name)); return true }) == nil
			}
			return true
		})
		if err != nil {
			return err
		}
		return st.Scan("", func(name, _ []byte) bool { stopped++; return stopped < 3 })
	})
	h := wasmstreamtest.New(wasmstreamtest.Options{})
	h.SetState("k", "q1", []byte("x"))
	h.SetState("k", "q2", big)
	h.SetState("k", "p/105", []byte("deleted in the batch"))
	if _, err := h.Process(rec("k", "")); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < 20; i++ {
		if i != 5 {
			want = append(want, "p/"+strconv.Itoa(100+i)+"#"+strconv.Itoa(i*600))
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("scan:\n got %v\nwant %v", got, want)
	}
	if strings.Join(nested, ",") != "q1,q2" || stopped != 3 {
		t.Fatalf("nested %v, stopped after %d", nested, stopped)
	}
}

func TestDeclaredOutputsLogsAndClock(t *testing.T) {
	wasmstream.Handle(func(r *wasmstream.Record) error {
		wasmstream.Info("now " + strconv.FormatInt(wasmstream.NowMs(), 10) + " cfg " + string(wasmstream.Config()))
		if err := wasmstream.Emit("undeclared", nil, nil); !errors.Is(err, wasmstream.ErrInvalid) {
			return errors.New("undeclared output: " + errString(err))
		}
		return wasmstream.Emit("out", nil, nil)
	})
	res, err := wasmstreamtest.Run(wasmstreamtest.Options{Outputs: []string{"out"}, NowMs: 42, Config: []byte(`{"a":1}`)},
		[]wasmstreamtest.Input{rec("k", "")})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 1 || res.Outputs[0].Timestamp != 5 || len(res.Logs) != 1 ||
		res.Logs[0] != (wasmstreamtest.LogLine{Level: wasmstream.LevelInfo, Msg: `now 42 cfg {"a":1}`}) {
		t.Fatalf("result %+v", res)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
