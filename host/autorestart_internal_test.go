package host

import (
	"testing"
	"time"
)

// TestRestartBackoff drives the back-off of automatic restarts with a clock of its own: 1 s
// after a first halt, doubling with each halt in a row (a failed restart counts as one) up to
// 1 min; a run of restartResetAfter since the last start begins a new row, a shorter one does
// not.
func TestRestartBackoff(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var b restartBackoff
	b.ran(now)
	s := time.Second
	steps := []struct {
		name    string
		advance time.Duration // since the previous step
		ran     bool          // the restart before this halt succeeded (the task ran)
		want    time.Duration
	}{
		{"first halt, a second after the start", s, false, s},
		{"the restart failed", s, false, 2 * s},
		{"failed again", 2 * s, false, 4 * s},
		{"restarted, halted again within seconds", 4 * s, true, 8 * s},
		{"failed", 8 * s, false, 16 * s},
		{"failed", 16 * s, false, 32 * s},
		{"failed: capped", 32 * s, false, time.Minute},
		{"failed: stays capped", time.Minute, false, time.Minute},
		{"ran 4 min: still in the row", 4 * time.Minute, true, time.Minute},
		{"ran 5 min: a new row", restartResetAfter, true, s},
		{"the restart failed", s, false, 2 * s},
		{"a failed restart long after the halt is no run", 10 * time.Minute, false, 4 * s},
	}
	for _, st := range steps {
		if st.ran {
			b.ran(now)
		}
		now = now.Add(st.advance)
		if got := b.halted(now); got != st.want {
			t.Fatalf("%s: delay %s, want %s", st.name, got, st.want)
		}
	}
}
