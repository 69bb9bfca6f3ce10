package modrt

import (
	"context"
	"log/slog"
	"strings"
)

// lineWriter turns a guest's WASI stdout or stderr into log records, one per line. A line longer
// than max bytes is truncated (the rest of it is dropped). It is written only from the goroutine
// calling the guest; flush logs a pending partial line (at Instance.Close).
type lineWriter struct {
	log      *slog.Logger
	level    slog.Level
	stream   string
	max      int
	lim      *logLimiter // nil: no rate limit
	buf      []byte
	dropping bool // the current line was truncated: skip to its end
	// attrs, if set, points at the attributes of the record the guest is processing
	// (Instance.logAttrs), added to each line.
	attrs *[]slog.Attr

	// tail keeps the first tailLines non-empty lines written since resetTail (each cut to
	// tailBytes), for the error of a call that traps: a guest's runtime says why it aborts in
	// the first lines it writes to stderr ("runtime: out of memory: …", "panic: …",
	// "thread … panicked at …"), then a stack trace.
	tail []string
	// keepLast: tail keeps the last tailLines non-empty lines instead (stdout): TinyGo's runtime
	// prints "panic: …" to stdout just before it traps, after whatever the guest printed.
	keepLast bool
	// charge, if set, is called with the size of every write: the call pays for it (slice.go).
	charge func(n int)
}

const (
	tailLines = 2
	tailBytes = 256
)

// resetTail forgets the lines kept for the last call.
func (w *lineWriter) resetTail() { w.tail = w.tail[:0] }

// lines returns the first (or, with keepLast, the last) non-empty lines written since
// resetTail (at most tailLines, a pending partial line included), joined with " | "; "" when
// none.
func (w *lineWriter) lines() string {
	lines := w.tail
	if len(w.buf) > 0 && (w.keepLast || len(lines) < tailLines) {
		lines = append(lines[:len(lines):len(lines)], cut(w.buf))
	}
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return strings.Join(lines, " | ")
}

func cut(b []byte) string {
	if len(b) > tailBytes {
		b = b[:tailBytes]
	}
	return strings.ToValidUTF8(string(b), "?")
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.charge != nil {
		w.charge(n)
	}
	for len(p) > 0 {
		nl := -1
		for k, c := range p {
			if c == '\n' {
				nl = k
				break
			}
		}
		chunk := p
		if nl >= 0 {
			chunk = p[:nl]
		}
		if !w.dropping {
			room := w.max - len(w.buf)
			if len(chunk) > room {
				w.buf = append(w.buf, chunk[:room]...)
				w.dropping = true
			} else {
				w.buf = append(w.buf, chunk...)
			}
		}
		if nl < 0 {
			break
		}
		w.emit()
		p = p[nl+1:]
	}
	return n, nil
}

func (w *lineWriter) emit() {
	switch {
	case len(w.buf) == 0:
	case len(w.tail) < tailLines:
		w.tail = append(w.tail, cut(w.buf))
	case w.keepLast:
		copy(w.tail, w.tail[1:])
		w.tail[len(w.tail)-1] = cut(w.buf)
	}
	if w.log.Enabled(context.Background(), w.level) && (w.lim == nil || w.lim.allow(w.log)) {
		var attrs []slog.Attr
		if w.attrs != nil {
			attrs = *w.attrs
		}
		attrs = append(attrs[:len(attrs):len(attrs)], slog.String("stream", w.stream))
		w.log.LogAttrs(context.Background(), w.level, string(w.buf), attrs...)
	}
	w.buf = w.buf[:0]
	w.dropping = false
}

// flush logs a pending partial line, if any.
func (w *lineWriter) flush() {
	if len(w.buf) > 0 || w.dropping {
		w.emit()
	}
}
