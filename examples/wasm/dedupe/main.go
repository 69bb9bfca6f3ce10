// Command dedupe is a wasmstream example task: it drops records whose id was already seen within
// a window of processing time, with a processing-time timer per id that forgets it.
//
// The record key is the id. The first record of an id is emitted to output "unique" (its value
// and timestamp unchanged), the state entry "seen" of the id is set to 1, and the processing-time
// timer "expire" is set to now + window. A record of an id whose "seen" exists is a duplicate: it
// only increments "seen". When "expire" fires, "seen" is deleted, so state holds only the ids
// seen within the last window, and a later record of the id is emitted again.
//
// README.md next to this file is the exact specification.
//
// Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o dedupe.wasm .
//	tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none -no-debug -o dedupe.wasm .
package main

import (
	"errors"
	"github.com/wasmstream/wasmstream/examples/wasm/internal/jsonconfig"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

// A wasip1 reactor never runs main: the handlers are registered in init.
func main() {}

func init() {
	wasmstream.HandleInit(configure)
	wasmstream.Handle(record)
	wasmstream.HandleTimer(expire)
}

const (
	// Output is the output the first record of each id is emitted to.
	Output = "unique"
	// StateName is the state entry of an id seen within the window: how many records of it
	// arrived, in decimal.
	StateName = "seen"
	// TimerName is the processing-time timer that forgets an id.
	TimerName = "expire"

	defaultWindowSeconds = 600
	maxWindowSeconds     = 1_000_000_000
)

// windowMs is the config's window_seconds in milliseconds.
var windowMs int64 = defaultWindowSeconds * 1000

func configure(cfg []byte) error {
	n, err := jsonconfig.UintMember(cfg, "window_seconds", defaultWindowSeconds, maxWindowSeconds)
	if err != nil {
		return errors.New("dedupe: invalid config: " + err.Error())
	}
	windowMs = int64(n) * 1000
	return nil
}

var countBuf []byte // reused between records

func record(r *wasmstream.Record) error {
	st := r.State()
	v, seen, err := st.Get(StateName)
	if err != nil {
		return err
	}
	if seen {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return errors.New("dedupe: the count of " + strconv.Quote(string(r.Key())) + " is not a number: " + strconv.Quote(string(v)))
		}
		countBuf = strconv.AppendUint(countBuf[:0], n+1, 10)
		return st.Put(StateName, countBuf)
	}
	err = wasmstream.EmitWith(wasmstream.Output{Name: Output, Key: r.Key(), Value: r.Value(), Timestamp: r.Timestamp()})
	if err != nil {
		return err
	}
	if err := st.Put(StateName, []byte("1")); err != nil {
		return err
	}
	return wasmstream.SetTimer(r.Key(), TimerName, wasmstream.ProcessingTime, wasmstream.NowMs()+windowMs, nil)
}

func expire(f *wasmstream.Firing) error {
	if f.Name() != TimerName {
		return nil
	}
	return f.State().Delete(StateName)
}
