package task

import (
	"github.com/wasmstream/wasmstream/host/internal/kafka"
)

// Exactly-once assignments restore beside the loop. The group calls Handler.Assigned from its
// own goroutine while the poller goes on polling the partitions this host kept, and the
// transaction they are in may already hold records: a restore on the loop would stop every
// partition, and keep that transaction open, for as long as it takes. One longer than
// kafka.transaction_timeout got the transaction aborted by the broker and the producer fenced:
// the task halted. Ending the transaction before the restore instead would need the poller's
// barrier, which cannot come while the group waits for the assignment to end a rebalance
// (the poller waits for the rebalance, the rebalance for the fetch of the new partitions'
// offsets, which calls Assigned).
//
// So the loop claims the partitions (claimPartition: the old stream goes, an external offset
// reset is followed), a goroutine restores them (replayOwned: it touches only the store and the
// standby, as a standby round does), and the loop, told by kafka.restored, opens them
// (onRestored → openPartition) and answers the assignment. Meanwhile the kept partitions go on
// and their transactions commit at every interval; the new partitions are fetched only after
// the answer, so none of their records is in a transaction before their state is restored. No
// rebalance step can reach the loop meanwhile: the client revokes or drops partitions only
// after Assigned returned.

// restoredReq is an assignment whose partitions were restored beside the loop (or whose restore
// failed: err).
type restoredReq struct {
	assignReq
	n      int32                           // the partitions counted as restoring (meters.restoring)
	stream map[kafka.TopicPartition]uint32 // each partition's stream id
	got    map[kafka.TopicPartition]replayed
	err    error
}

// assignAside claims an exactly-once assignment's partitions and starts their restore beside the
// loop; onRestored opens them. An error claiming one halts the task, as in assign.
func (t *Task) assignAside(req assignReq, n int32) error {
	ids := make(map[kafka.TopicPartition]uint32, len(req.committed))
	for tp, committed := range req.committed {
		id, err := t.claimPartition(tp, committed, req.ends, req.external)
		if err != nil {
			t.replyAssign(req, n, nil, err)
			return err
		}
		ids[tp] = id
	}
	k := t.kafka
	k.restores.Add(1)
	go func() {
		defer k.restores.Done()
		res := restoredReq{assignReq: req, n: n, stream: ids, got: make(map[kafka.TopicPartition]replayed, len(ids))}
		if t.changelog != nil {
			for tp, id := range ids {
				r, err := t.replayOwned(k.restoreCtx, tp, id)
				if err != nil {
					res.err = err
					break
				}
				res.got[tp] = r
			}
		}
		select {
		case k.restored <- res:
		case <-t.stopped:
		}
	}()
	return nil
}

// onRestored opens the partitions of an assignment restored beside the loop and answers it.
func (t *Task) onRestored(res restoredReq) error {
	start, err := map[kafka.TopicPartition]kafka.EpochOffset{}, res.err
	for tp, committed := range res.committed {
		if err != nil {
			break
		}
		var epoch uint64
		if t.changelog != nil {
			epoch = t.restoredPartition(tp, res.got[tp])
		}
		var at kafka.EpochOffset
		if at, err = t.openPartition(tp, res.stream[tp], epoch, committed, res.ends, res.ids); err == nil && at.Offset >= 0 {
			start[tp] = at
		}
	}
	t.replyAssign(res.assignReq, res.n, start, err)
	return err
}

// kafkaRestored is the loop's channel of restores done beside it; nil without a Kafka input.
func (t *Task) kafkaRestored() chan restoredReq {
	if t.kafka == nil {
		return nil
	}
	return t.kafka.restored
}
