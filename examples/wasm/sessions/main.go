// Command sessions is a wasmstream example task: per-user sessions in event time, closed after a
// gap of inactivity, with the SDK's session windows (wasmstream.Windows with Session(gap)).
//
// Each record is one event of the user named by its key, at its timestamp (event time). An event
// joins every open session of its user it is less than gap from (merging them) or starts one; a
// session closes when the partition's watermark reaches its last event + gap, and its summary is
// emitted to output "sessions". A late event (below the watermark when the host read it) or one
// without a timestamp goes to output "late" as it is: the result depends on the input alone, not
// on when the host ran a firing.
//
// README.md next to this file is the exact specification.
//
// Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o sessions.wasm .
//	tinygo build -target=wasip1 -buildmode=c-shared -scheduler=none -no-debug -o sessions.wasm .
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
	wasmstream.Handle(sessions.Add)
	wasmstream.HandleTimer(fire)
}

const (
	// Output is the output the session summaries are emitted to.
	Output = "sessions"
	// LateOutput is the output late events and events without a timestamp go to, as they are.
	LateOutput = "late"
	// WindowsName is the name of the session windows' state entries and timers.
	WindowsName = "session"

	defaultGapMinutes = 30
	maxGapMinutes     = 1_000_000_000
)

// sessions are the users' open sessions.
var sessions = wasmstream.Windows[summary]{
	Name: WindowsName, Kind: wasmstream.Session(defaultGapMinutes * 60_000), Codec: summaryCodec{},
	Late: LateOutput, Fold: fold, Merge: merge, Emit: emit,
}

func configure(cfg []byte) error {
	n, err := jsonconfig.UintMember(cfg, "gap_minutes", defaultGapMinutes, maxGapMinutes)
	if err != nil {
		return errors.New("sessions: invalid config: " + err.Error())
	}
	sessions.Kind = wasmstream.Session(int64(n) * 60_000)
	return nil
}

// summary is a session's accumulator: its number of events and its latest event time (its
// earliest is the window's start).
type summary struct{ count, last int64 }

// summaryCodec stores a summary as 16 bytes: count and last, each an i64 little-endian.
type summaryCodec struct{}

func (summaryCodec) Append(dst []byte, s summary) []byte {
	for _, v := range [2]int64{s.count, s.last} {
		for i := 0; i < 8; i++ {
			dst = append(dst, byte(uint64(v)>>(8*i)))
		}
	}
	return dst
}

func (summaryCodec) Decode(b []byte) (summary, error) {
	if len(b) != 16 {
		return summary{}, errors.New("sessions: a session summary is 16 bytes, not " + strconv.Itoa(len(b)))
	}
	var v [2]int64
	for k := range v {
		for i := 0; i < 8; i++ {
			v[k] |= int64(b[8*k+i]) << (8 * i)
		}
	}
	return summary{count: v[0], last: v[1]}, nil
}

func fold(s summary, r *wasmstream.Record) (summary, error) {
	return summary{count: s.count + 1, last: max(s.last, r.Timestamp())}, nil
}

func merge(a, b summary) (summary, error) {
	return summary{count: a.count + b.count, last: max(a.last, b.last)}, nil
}

func fire(f *wasmstream.Firing) error {
	_, err := sessions.Fire(f) // any other timer is not this task's: ignored
	return err
}

var outBuf []byte // reused between calls

// emit sends the summary of user's session to Output, with the session's close time as its
// timestamp.
func emit(user []byte, w wasmstream.Window, s summary) error {
	b := append(outBuf[:0], `{"user":`...)
	b = appendJSONString(b, user)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, s.count, 10)
	b = append(b, `,"first":`...)
	b = strconv.AppendInt(b, w.Start, 10)
	b = append(b, `,"last":`...)
	b = strconv.AppendInt(b, s.last, 10)
	b = append(b, '}')
	outBuf = b
	return wasmstream.EmitWith(wasmstream.Output{Name: Output, Key: user, Value: b, Timestamp: w.End})
}

// appendJSONString appends s as a JSON string: '"' and '\' escaped, control bytes as \u00XX,
// every other byte as it is.
func appendJSONString(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
