package modrt

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// logLimiter bounds the log lines the instances of one Module write (log, and captured stdout and
// stderr lines): a token bucket of Limits.LogBurstLines tokens refilled at
// Limits.MaxLogLinesPerSecond. A line without a token is dropped and counted; at most once per
// summaryEvery, while lines are being dropped, one warning says how many were dropped since the
// last one. It is safe for concurrent use.
type logLimiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time // of the last refill
	summary time.Time // of the last summary
	pending int64     // dropped since the last summary

	dropped atomic.Int64 // dropped in total
}

// summaryEvery is the least time between two summaries of dropped lines.
const summaryEvery = time.Second

func newLogLimiter(perSecond, burst int) *logLimiter {
	return &logLimiter{rate: float64(perSecond), burst: float64(burst), tokens: float64(burst), now: time.Now}
}

// allow takes a token for one line and reports whether the line may be written. It logs the
// summary of the lines dropped so far on log when one is due.
func (l *logLimiter) allow(log *slog.Logger) bool {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	ok := l.tokens >= 1
	if ok {
		l.tokens--
	} else {
		l.pending++
		l.dropped.Add(1)
	}
	var n int64
	if l.pending > 0 && (l.summary.IsZero() || now.Sub(l.summary) >= summaryEvery) {
		n, l.pending, l.summary = l.pending, 0, now
	}
	l.mu.Unlock()
	if n > 0 {
		log.LogAttrs(context.Background(), slog.LevelWarn, "guest log rate limited: dropped lines",
			slog.Int64("dropped", n), slog.Int64("dropped_total", l.dropped.Load()))
	}
	return ok
}

// LogDropped returns the guest log lines the instances of m dropped by the rate limit
// (Limits.MaxLogLinesPerSecond), since m was compiled.
func (m *Module) LogDropped() int64 { return m.logLim.dropped.Load() }
