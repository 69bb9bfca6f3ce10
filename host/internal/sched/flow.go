package sched

// checkFlow moves the stream between running and paused (Juggle's two marks): it pauses when its
// queued items or bytes reach their high mark or one of its keys is deep, and resumes when items
// and bytes are at or below their low marks and no key is deep.
func (s *Scheduler[T]) checkFlow(st *stream[T]) {
	c := &s.cfg
	if !st.paused {
		if st.queued < c.HighItems && st.bytes < c.HighBytes && st.deepKeys == 0 {
			return
		}
	} else if st.queued > c.LowItems || st.bytes > c.LowBytes || st.deepKeys > 0 {
		return
	}
	st.paused = !st.paused
	if !st.inFlow {
		st.inFlow = true
		s.flow = append(s.flow, st)
	}
}

// Flow returns the streams whose flow state changed since the last call, in the order they first
// changed, each with its current state: Paused true means stop fetching the stream, false means
// fetch again. A pause followed by a resume (or the reverse) between two calls cancels out and is
// not reported. Streams start running. Removed streams are not reported. Flow returns nil when
// nothing changed.
func (s *Scheduler[T]) Flow() []FlowChange {
	var out []FlowChange
	for i, st := range s.flow {
		s.flow[i] = nil
		st.inFlow = false
		if st.removed || st.paused == st.reported {
			continue
		}
		st.reported = st.paused
		out = append(out, FlowChange{Stream: st.id, Paused: st.paused})
	}
	s.flow = s.flow[:0]
	return out
}
