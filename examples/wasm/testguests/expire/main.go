// Command expire is a test guest for the host's event-time determinism tests (issue 23): a
// session counter per key that expires a gap of event time after the key's last record, with a
// raw event-time timer re-armed by every record.
//
// A record's value is a command for its key:
//
//	add   adds 1 to state "n" and sets timer "expire" (event time) at the record's timestamp
//	      plus the gap
//	del   deletes timer "expire" and state "n"
//
// A firing of "expire" emits the count and deletes "n". Every output goes to output "out" under
// the record's key, as "<seq> <what>": seq numbers the key's outputs from 1 (state "seq"), so a
// replay after a crash repeats an output with the same seq. The outputs are
//
//	<seq> late <offset>          an add or del that carried the late flag (before its effect)
//	<seq> del <n>                a del, with the count it discarded
//	<seq> expire <n> <time>      a firing, with the count and the timer's time
//
// The gap is the task config's "gap_ms" (default 1,800,000: 30 minutes).
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o expire.wasm .
package main

import (
	"encoding/json"
	"errors"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

var gap int64 = 1_800_000

func get(st wasmstream.State, name string) (int64, error) {
	b, ok, err := st.Get(name)
	if err != nil || !ok {
		return 0, err
	}
	return strconv.ParseInt(string(b), 10, 64)
}

func put(st wasmstream.State, name string, v int64) error {
	return st.Put(name, []byte(strconv.FormatInt(v, 10)))
}

// emit sends "<seq> <what>" for key, seq being the key's next output number.
func emit(key []byte, st wasmstream.State, what string) error {
	seq, err := get(st, "seq")
	if err != nil {
		return err
	}
	seq++
	if err := put(st, "seq", seq); err != nil {
		return err
	}
	return wasmstream.Emit("out", key, []byte(strconv.FormatInt(seq, 10)+" "+what))
}

func init() {
	wasmstream.HandleInit(func(cfg []byte) error {
		c := struct {
			GapMs *int64 `json:"gap_ms"`
		}{}
		if len(cfg) > 0 {
			if err := json.Unmarshal(cfg, &c); err != nil {
				return err
			}
		}
		if c.GapMs != nil {
			if *c.GapMs <= 0 {
				return errors.New("expire: gap_ms must be positive")
			}
			gap = *c.GapMs
		}
		return nil
	})
	wasmstream.Handle(func(r *wasmstream.Record) error {
		key, st := r.Key(), r.State()
		if r.Late() {
			if err := emit(key, st, "late "+strconv.FormatInt(r.Offset(), 10)); err != nil {
				return err
			}
		}
		switch string(r.Value()) {
		case "add":
			n, err := get(st, "n")
			if err != nil {
				return err
			}
			if err := put(st, "n", n+1); err != nil {
				return err
			}
			return wasmstream.SetTimer(key, "expire", wasmstream.EventTime, r.Timestamp()+gap, nil)
		case "del":
			n, err := get(st, "n")
			if err != nil {
				return err
			}
			if err := wasmstream.DeleteTimer(key, "expire"); err != nil {
				return err
			}
			if err := st.Delete("n"); err != nil {
				return err
			}
			return emit(key, st, "del "+strconv.FormatInt(n, 10))
		}
		return errors.New("expire: unknown command " + strconv.Quote(string(r.Value())))
	})
	wasmstream.HandleTimer(func(f *wasmstream.Firing) error {
		key, st := f.Key(), f.State()
		n, err := get(st, "n")
		if err != nil {
			return err
		}
		if err := st.Delete("n"); err != nil {
			return err
		}
		return emit(key, st, "expire "+strconv.FormatInt(n, 10)+" "+strconv.FormatInt(f.Time(), 10))
	})
}
