package fuel

import (
	"math/rand/v2"
	"testing"
)

// A Meter changes neither what a call spends nor where it stops: for random sequences of
// charges, a counter handed out in slices traps at the same charge, with the same fuel left, as
// a counter holding the whole budget.
func TestMeterSlicingIsInvisible(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 1))
	for range 2000 {
		budget := rng.Int64N(10_000)
		charges := make([]int64, 1+rng.IntN(200))
		for k := range charges {
			charges[k] = 1 + rng.Int64N(300)
		}
		// The whole budget in the counter: the first charge that drives it negative traps.
		whole, wholeStop := budget, -1
		for k, c := range charges {
			if whole -= c; whole < 0 {
				wholeStop = k
				break
			}
		}
		m := &Meter{Slice: 1 + rng.Int64N(500)}
		counter, stop := m.Start(budget), -1
		for k, c := range charges {
			if counter -= c; counter < 0 {
				if counter = m.Refill(counter); counter < 0 {
					stop = k
					break
				}
			}
		}
		if stop != wholeStop || m.Left(counter) != whole {
			t.Fatalf("budget %d, slice %d, charges %v: stopped at %d with %d left; whole counter: %d with %d left",
				budget, m.Slice, charges, stop, m.Left(counter), wholeStop, whole)
		}
		if counter > m.Slice {
			t.Fatalf("the counter holds %d, more than a slice of %d", counter, m.Slice)
		}
	}
}
