// Command sessions is a wasmstream example task: per-user sessions in event time, closed after a
// gap of inactivity, with an event-time timer per user.
//
// Each record is one event of the user named by its key, at its timestamp (event time). The
// user's open session (state "session": count, late count, first and last event time) counts it,
// and the event-time timer "close" is set to last + gap, replacing the previous setting. When the
// partition's watermark reaches that time the timer fires: the session's summary is emitted to
// output "sessions" and its state deleted. A record at or after its open session's close time
// closes that session first (as its timer would have) and starts a new one, so the result does
// not depend on whether the host ran the firing before or after the record.
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
	"math"
	"strconv"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

// A wasip1 reactor never runs main: the handlers are registered in init.
func main() {}

func init() {
	wasmstream.HandleInit(configure)
	wasmstream.Handle(event)
	wasmstream.HandleTimer(fire)
}

const (
	// Output is the output the session summaries are emitted to.
	Output = "sessions"
	// StateName is the state entry of a user's open session.
	StateName = "session"
	// TimerName is the event-time timer that closes a user's open session.
	TimerName = "close"

	defaultGapMinutes = 30
	maxGapMinutes     = 1_000_000_000
)

// gapMs is the config's gap_minutes in milliseconds.
var gapMs int64 = defaultGapMinutes * 60_000

func configure(cfg []byte) error {
	n, err := jsonconfig.UintMember(cfg, "gap_minutes", defaultGapMinutes, maxGapMinutes)
	if err != nil {
		return errors.New("sessions: invalid config: " + err.Error())
	}
	gapMs = int64(n) * 60_000
	return nil
}

// session is a user's open session. In state it is "<count> <late> <first> <last>" in decimal.
type session struct {
	count, late int64 // events, and how many of them were late
	first, last int64 // event times, ms since the epoch
}

// closeAt is when the session closes: gap after its last event (the end of time on overflow).
func (s *session) closeAt() int64 {
	if s.last > math.MaxInt64-gapMs {
		return math.MaxInt64
	}
	return s.last + gapMs
}

// Reused between calls.
var (
	stateBuf []byte
	outBuf   []byte
)

func event(r *wasmstream.Record) error {
	ts := r.Timestamp()
	if ts < 0 {
		return nil // no event time: it belongs to no session
	}
	st := r.State()
	s, open, err := load(st)
	if err != nil {
		return err
	}
	if open && ts >= s.closeAt() {
		// The open session ended before this event: close it exactly as its timer does.
		if err := emit(r.Key(), &s); err != nil {
			return err
		}
		open = false
	}
	if !open {
		s = session{first: ts, last: ts}
	}
	s.count++
	if r.Late() {
		s.late++
	}
	s.first, s.last = min(s.first, ts), max(s.last, ts)
	if err := save(st, &s); err != nil {
		return err
	}
	return wasmstream.SetTimer(r.Key(), TimerName, wasmstream.EventTime, s.closeAt(), nil)
}

func fire(f *wasmstream.Firing) error {
	if f.Name() != TimerName {
		return nil
	}
	st := f.State()
	s, open, err := load(st)
	if err != nil || !open {
		return err // no session: it was closed by a record already
	}
	if at := s.closeAt(); f.Time() < at {
		// The session grew after this timer was set (a host cancels such firings; this guards
		// a redelivery): keep it open until its real close time.
		return wasmstream.SetTimer(f.Key(), TimerName, wasmstream.EventTime, at, nil)
	}
	if err := emit(f.Key(), &s); err != nil {
		return err
	}
	return st.Delete(StateName)
}

// emit sends the summary of user's session s to Output, with the session's close time as its
// timestamp.
func emit(user []byte, s *session) error {
	b := append(outBuf[:0], `{"user":`...)
	b = appendJSONString(b, user)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, s.count, 10)
	b = append(b, `,"late":`...)
	b = strconv.AppendInt(b, s.late, 10)
	b = append(b, `,"first":`...)
	b = strconv.AppendInt(b, s.first, 10)
	b = append(b, `,"last":`...)
	b = strconv.AppendInt(b, s.last, 10)
	b = append(b, '}')
	outBuf = b
	return wasmstream.EmitWith(wasmstream.Output{Name: Output, Key: user, Value: b, Timestamp: s.closeAt()})
}

// load reads the open session of st; open is false when there is none.
func load(st wasmstream.State) (s session, open bool, err error) {
	v, ok, err := st.Get(StateName)
	if err != nil || !ok {
		return s, false, err
	}
	var f [4]int64
	rest := v
	for i := range f {
		j := 0
		for j < len(rest) && rest[j] != ' ' {
			j++
		}
		if f[i], err = strconv.ParseInt(string(rest[:j]), 10, 64); err != nil || i < 3 && j == len(rest) {
			return s, false, errors.New("sessions: malformed session state " + strconv.Quote(string(v)))
		}
		if j < len(rest) {
			j++
		}
		rest = rest[j:]
	}
	if len(rest) != 0 {
		return s, false, errors.New("sessions: malformed session state " + strconv.Quote(string(v)))
	}
	return session{count: f[0], late: f[1], first: f[2], last: f[3]}, true, nil
}

func save(st wasmstream.State, s *session) error {
	b := strconv.AppendInt(stateBuf[:0], s.count, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.late, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.first, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.last, 10)
	stateBuf = b
	return st.Put(StateName, b)
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
