// Package lib is the timers test guest for the host's timer, watermark, tick and migration tests
// (S14–S16, ABI 0.2). Each record's value is a command, applied to the record's key:
//
//	set NAME p|e AT [PAYLOAD]   set timer NAME in processing (p) or event (e) time at AT (ms)
//	del NAME                    delete timer NAME
//	count                       nothing but the record counter below
//	fail                        fail the record (a guest error)
//
// Every record adds 1 to state "records" and emits "rec <key> <offset>" to output "log" ("late"
// appended when the record carries the late flag). A firing adds 1 to state "fired", emits
// "fired <key> <name> <time> <payload> wm=<watermark>" to "log", and when its payload is
// "again:N" (N > 0) sets the same timer again 1000 ms later with payload "again:N-1". A tick
// emits "tick <partition> keys=<keys with state> wm=<watermark>" to "ticks". The module's state
// version is the task config's "state_version" (default: Register's argument); a migration emits
// "migrate <key> <from>-><to>" to "log" and records the version in state "v".
package lib

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func add(st wasmstream.State, name string, n int) error {
	cur := 0
	if b, ok, err := st.Get(name); err != nil {
		return err
	} else if ok {
		cur, _ = strconv.Atoi(string(b))
	}
	return st.Put(name, []byte(strconv.Itoa(cur+n)))
}

func emit(out, key string, parts ...string) error {
	var b []byte
	for i, p := range parts {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, p...)
	}
	return wasmstream.Emit(out, []byte(key), b)
}

// Register registers the guest's handlers; its state version is the config's "state_version",
// or def when the config has none.
func Register(def uint32) {
	wasmstream.HandleInit(func(cfg []byte) error {
		c := struct {
			StateVersion uint32 `json:"state_version"`
		}{def}
		if err := json.Unmarshal(cfg, &c); err != nil {
			return err
		}
		wasmstream.SetStateVersion(c.StateVersion)
		return nil
	})
	wasmstream.Handle(func(r *wasmstream.Record) error {
		key := r.Key()
		f := bytes.Fields(r.Value())
		if len(f) == 0 {
			return errors.New("timers: empty command")
		}
		switch string(f[0]) {
		case "set":
			if len(f) < 4 {
				return errors.New("timers: set NAME p|e AT [PAYLOAD]")
			}
			d := wasmstream.ProcessingTime
			if string(f[2]) == "e" {
				d = wasmstream.EventTime
			}
			at, err := strconv.ParseInt(string(f[3]), 10, 64)
			if err != nil {
				return err
			}
			var payload []byte
			if len(f) > 4 {
				payload = f[4]
			}
			if err := wasmstream.SetTimer(key, string(f[1]), d, at, payload); err != nil {
				return err
			}
		case "del":
			if len(f) < 2 {
				return errors.New("timers: del NAME")
			}
			if err := wasmstream.DeleteTimer(key, string(f[1])); err != nil {
				return err
			}
		case "count":
		case "fail":
			return errors.New("timers: asked to fail")
		default:
			return errors.New("timers: unknown command " + string(f[0]))
		}
		if err := add(r.State(), "records", 1); err != nil {
			return err
		}
		parts := []string{"rec", string(key), strconv.FormatInt(r.Offset(), 10)}
		if r.Late() {
			parts = append(parts, "late")
		}
		return emit("log", string(key), parts...)
	})
	wasmstream.HandleTimer(func(t *wasmstream.Firing) error {
		key := t.Key()
		if err := add(t.State(), "fired", 1); err != nil {
			return err
		}
		p := string(t.Payload())
		if n, ok := bytes.CutPrefix(t.Payload(), []byte("again:")); ok {
			left, _ := strconv.Atoi(string(n))
			if left > 0 {
				next := "again:" + strconv.Itoa(left-1)
				if err := wasmstream.SetTimer(key, t.Name(), t.Domain(), t.Time()+1000, []byte(next)); err != nil {
					return err
				}
			}
		}
		return emit("log", string(key), "fired", string(key), t.Name(), strconv.FormatInt(t.Time(), 10), p,
			"wm="+strconv.FormatInt(wasmstream.Watermark(), 10))
	})
	wasmstream.HandleTick(func(t *wasmstream.Tick) error {
		n := 0
		if err := t.Keys(func(key []byte) bool { n++; return true }); err != nil {
			return err
		}
		return emit("ticks", "", "tick", strconv.FormatUint(uint64(t.Partition()), 10),
			"keys="+strconv.Itoa(n), "wm="+strconv.FormatInt(t.Watermark(), 10))
	})
	wasmstream.HandleMigrate(func(m *wasmstream.Migration) error {
		if err := m.State().Put("v", []byte(strconv.FormatUint(uint64(m.To()), 10))); err != nil {
			return err
		}
		return emit("log", string(m.Key()), "migrate", string(m.Key()),
			strconv.FormatUint(uint64(m.From()), 10)+"->"+strconv.FormatUint(uint64(m.To()), 10))
	})
}
