package task

func (t *Task) applyFlow() {
	for _, fc := range t.sched.Flow() {
		st := t.streams[fc.Stream]
		if st == nil {
			continue
		}
		switch {
		case st.kafka && fc.Paused:
			t.stats.Pauses++
			t.pausePartition(st.tp, true)
		case st.kafka && t.eos() && t.paused:
			// Stays paused: a paused exactly-once task reads nothing (pauseFetching).
		case st.kafka:
			t.pausePartition(st.tp, false)
		case fc.Paused:
			t.stats.Pauses++
			st.reader.Pause()
		default:
			st.reader.Resume()
		}
	}
}

// dispatch forms batches for the idle workers (t.out.jobs).
func (t *Task) dispatch() {
	// A barrier runs the queues dry even when paused: the transaction cannot end before.
	for (!t.paused || t.barrier != nil) && len(t.inflight) < t.cfg.Workers {
		b, ok := t.sched.Next(t.cfg.Now())
		if !ok {
			return
		}
		j := t.newJob(b)
		t.meters.batchSize.Observe(float64(len(j.items)))
		t.startJob(j)
	}
}
