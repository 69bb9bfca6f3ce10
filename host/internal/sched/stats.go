package sched

import (
	"cmp"
	"slices"
)

// Stats is a snapshot of the scheduler's figures.
type Stats struct {
	Keys            int // keys with items queued or in flight
	ReadyKeys       int // keys with items queued, in no in-flight batch and not delayed
	DelayedKeys     int // keys held back by Delay
	QueuedItems     int // items pushed and not dispatched
	QueuedBytes     int // Size of the queued items
	InFlightBatches int
	InFlightItems   int           // including items of removed streams still in flight
	Streams         []StreamStats // by stream ID
}

// StreamStats are the figures of one stream.
type StreamStats struct {
	ID            uint32
	Keys          int
	QueuedItems   int
	QueuedBytes   int
	InFlightItems int
	Paused        bool // the current flow state, reported or not yet reported by Flow
}

// Stats returns a snapshot of the scheduler's figures. It costs O(streams).
func (s *Scheduler[T]) Stats() Stats {
	out := Stats{
		Keys:            s.keys,
		ReadyKeys:       s.readyKeys,
		DelayedKeys:     len(s.delays),
		QueuedItems:     s.queued,
		QueuedBytes:     s.queuedBytes,
		InFlightBatches: len(s.batches),
		InFlightItems:   s.inFlightItems,
		Streams:         make([]StreamStats, 0, len(s.streams)),
	}
	for _, st := range s.streams {
		out.Streams = append(out.Streams, StreamStats{
			ID:            st.id,
			Keys:          len(st.keys),
			QueuedItems:   st.queued,
			QueuedBytes:   st.bytes,
			InFlightItems: st.inFlight,
			Paused:        st.paused,
		})
	}
	slices.SortFunc(out.Streams, func(a, b StreamStats) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
