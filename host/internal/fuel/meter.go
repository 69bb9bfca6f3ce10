package fuel

// Meter hands a call's budget to a metered module one slice at a time: the counter never holds
// more than Slice units, and every time a charge drives it negative the module calls the slice
// import (SliceModule.SliceFunc), whose host side is Refill. The host thereby gets control back
// after every slice of work, however long the call: compiled guest code cannot be preempted,
// and a call that kept the CPU for seconds would hold up the Go collector's stop-the-world and
// with it every goroutine of the process.
//
// Slicing changes neither what a call spends nor where it stops: the call's fuel left is always
// the counter plus the reserve, and Refill traps (returns a negative counter) at the very charge
// that drove the whole budget negative, as a counter holding the whole budget would have.
//
// A Meter serves one call at a time; it is not safe for concurrent use.
type Meter struct {
	// Slice is the most the counter holds at once; 0 or less: the whole budget at once (Refill
	// is then only called when the budget is spent).
	Slice   int64
	reserve int64 // the part of the budget not yet in the counter
}

// Start begins a call with a budget of units ≥ 0 and returns the counter to set.
func (m *Meter) Start(units int64) int64 {
	c := units
	if m.Slice > 0 && c > m.Slice {
		c = m.Slice
	}
	m.reserve = units - c
	return c
}

// Refill takes the counter v < 0 that a charge left and returns the counter to go on with: the
// next slice less the overdraft, or, when the reserve does not cover the overdraft, the
// negative fuel left (the budget is spent: the module stores it and traps).
func (m *Meter) Refill(v int64) int64 {
	left := v + m.reserve // no overflow: v < 0 ≤ reserve
	if left < 0 {
		m.reserve = 0
		return left
	}
	return m.Start(left)
}

// Left returns the fuel the call has left, counter being the counter's value now.
func (m *Meter) Left(counter int64) int64 { return counter + m.reserve }
