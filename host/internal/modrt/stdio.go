package modrt

import (
	"context"
	"log/slog"
)

// lineWriter turns a guest's WASI stdout or stderr into log records, one per line. A line longer
// than max bytes is truncated (the rest of it is dropped). It is written only from the goroutine
// calling the guest; flush logs a pending partial line (at Instance.Close).
type lineWriter struct {
	log      *slog.Logger
	level    slog.Level
	stream   string
	max      int
	buf      []byte
	dropping bool // the current line was truncated: skip to its end
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
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
	if w.log.Enabled(context.Background(), w.level) {
		w.log.LogAttrs(context.Background(), w.level, string(w.buf), slog.String("stream", w.stream))
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
