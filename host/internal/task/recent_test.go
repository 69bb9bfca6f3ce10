package task

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The recent errors are bounded: the last RecentErrors, oldest first, each key and error cut.
func TestRecentErrorsBounded(t *testing.T) {
	tk := &Task{}
	tk.cfg.Now = time.Now
	for i := range RecentErrors + 7 {
		tk.noteError("dead letter", fmt.Sprintf("input x line %d", i), []byte(strings.Repeat("k", 100)),
			errors.New(strings.Repeat("é", 1000)))
	}
	got := tk.recent.list()
	if len(got) != RecentErrors || got[0].Where != "input x line 7" || got[len(got)-1].Where != fmt.Sprintf("input x line %d", RecentErrors+6) {
		t.Fatalf("%d errors, first %q, last %q", len(got), got[0].Where, got[len(got)-1].Where)
	}
	for _, e := range got {
		if len(e.Key) > recentKeyBytes+len("…") || len(e.Err) > recentErrBytes+len("…") || !strings.HasSuffix(e.Err, "é…") {
			t.Fatalf("not cut on a rune boundary: key %d bytes, error %d bytes %q", len(e.Key), len(e.Err), e.Err[len(e.Err)-8:])
		}
	}
}
