package task

import (
	"sync"
	"unicode/utf8"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/stats"
)

// RecentErrors is how many of a task's last errors Stats keeps (Stats.Recent).
const RecentErrors = 20

// The bounds of a recent error's fields: a guest's error or key may be long.
const (
	recentKeyBytes = 64
	recentErrBytes = 512
)

// RecentError is one of a task's last errors (see stats.RecentError), cut to a bounded size.
type RecentError = stats.RecentError

// recentRing is a task's last RecentErrors errors, oldest first once full.
type recentRing struct {
	mu   sync.Mutex
	buf  [RecentErrors]RecentError
	next int
	n    int
}

func (r *recentRing) add(e RecentError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = e
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// list returns the errors, oldest first.
func (r *recentRing) list() []RecentError {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecentError, 0, r.n)
	for i := range r.n {
		out = append(out, r.buf[(r.next-r.n+i+len(r.buf))%len(r.buf)])
	}
	return out
}

// noteError records an error in the task's recent errors.
func (t *Task) noteError(kind, where string, key []byte, err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	e := RecentError{Time: t.cfg.Now(), Kind: kind, Where: where,
		Key: cut(string(key), recentKeyBytes), Err: cut(msg, recentErrBytes)}
	if abi.IsNullKey(key) {
		e.Key, e.KeyNull = "", true
	}
	t.recent.add(e)
}

// cut returns s cut to at most n bytes, on a rune boundary, with "…" when cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
