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
// Limits.MaxLogLinesPerSecond. A line without a token is dropped and counted; the next line that
// gets a token is preceded by one warning saying how many were dropped since the last such warning,
// so a guest that floods the log costs the host at most one summary line per refill. It is safe for
// concurrent use.
type logLimiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	pending int64 // dropped since the last summary

	dropped atomic.Int64 // dropped in total
}

func newLogLimiter(perSecond, burst int) *logLimiter {
	return &logLimiter{rate: float64(perSecond), burst: float64(burst), tokens: float64(burst), now: time.Now}
}

// allow takes a token for one line. When it returns true and lines were dropped before, it first
// logs the summary on log.
func (l *logLimiter) allow(log *slog.Logger) bool {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < 1 {
		l.pending++
		l.mu.Unlock()
		l.dropped.Add(1)
		return false
	}
	l.tokens--
	n := l.pending
	l.pending = 0
	l.mu.Unlock()
	if n > 0 {
		log.LogAttrs(context.Background(), slog.LevelWarn, "guest log rate limited: dropped lines",
			slog.Int64("dropped", n), slog.Int64("dropped_total", l.dropped.Load()))
	}
	return true
}

// Dropped returns the guest log lines the instances of m dropped by the rate limit
// (Limits.MaxLogLinesPerSecond), since m was compiled.
func (m *Module) LogDropped() int64 { return m.logLim.dropped.Load() }
