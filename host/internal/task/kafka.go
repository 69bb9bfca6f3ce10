package task

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/positions"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

// KafkaInput is a task's Kafka source: one consumer-group member reading its topics.
type KafkaInput struct {
	Name    string // the input's name, for logs and dead letters
	Client  kafka.Config
	Group   string
	Topics  []string
	StartAt string // "earliest", "latest" or an RFC 3339 time
	// DrainTimeout bounds how long a revoke waits for the partition's batches in flight.
	// Default 30s.
	DrainTimeout time.Duration
	// SessionTimeout and RebalanceTimeout of the group; zero: the client's defaults.
	SessionTimeout, RebalanceTimeout time.Duration
	// ExactlyOnce commits outputs, dead letters, changelog and input offsets in one Kafka
	// transaction per checkpoint interval (eos.go). It needs a changelog, and TxnProducers must
	// be the producers of the task's Kafka sinks, made with kafka.NewTxnProducer.
	ExactlyOnce bool
	// Bounded reads each partition up to its end offset as listed when the consumer is first
	// assigned partitions, then ends it like a file (its watermark goes to the end of time and
	// every event-time timer fires); once every partition of the topics has ended here, the
	// task ends. StartAt must be "earliest" or "latest".
	Bounded        bool
	TxnID          string        // the transactional id: stable per host and task
	TxnTimeout     time.Duration // the transaction timeout; zero: the client's default here (15s)
	TxnProducers   []*kafka.Producer
	TxnCompression string // the compression of what the transactional client produces
	// DeliveryTimeout bounds how long a changelog record may go unacknowledged (at least once:
	// then the checkpoint fails and the task halts), and how long exactly-once transactions may
	// go on aborting (a produce failure aborts one) before the task halts with the cause; zero:
	// kafka.DefaultDeliveryTimeout.
	DeliveryTimeout time.Duration
	// InstanceID, if set, makes the consumer a static group member (kafka.ConsumerConfig).
	InstanceID string
	// UnreachableTimeout bounds how long the cluster may be unreachable before the task halts;
	// the task is not Ready meanwhile. Zero: kafka.DefaultUnreachableTimeout.
	UnreachableTimeout time.Duration
	// FollowExternalReset makes a partition whose committed offset was set from outside the
	// group (kafka.ExternalCommit) to another offset than the local checkpoint's restart there,
	// its state and timers moved aside as `wasmstream reset` does; false: a warning says how to
	// replay, and the partition resumes at the local checkpoint.
	FollowExternalReset bool
	// Advertise, if set, returns the address of the host's admin API, which the consumer
	// advertises to its group (state queries find a partition's owner with it).
	Advertise func() string
}

// kafkaSide is the loop's state for a Kafka input.
type kafkaSide struct {
	in       *KafkaInput
	log      *slog.Logger
	consumer *kafka.Consumer
	streams  map[kafka.TopicPartition]*stream
	bounded  map[kafka.TopicPartition]bool // a bounded run: the partitions ever assigned here
	fetches  chan kafka.Fetch
	assign   chan assignReq
	revoke   chan revokeReq
	lost     chan lostReq
	barrier  chan barrierReq
	done     chan struct{}   // closed when the loop has stopped serving requests
	stopped  <-chan struct{} // closed when the loop returned (exactly-once barriers fail then)
	revoking []*pendingRevoke
	final    map[kafka.TopicPartition]kafka.EpochOffset // positions of the last checkpoint, once the loop ended

	// Exactly once: restores beside the loop (eosassign.go). restoreCtx ends, and restores is
	// waited for, when the task stops.
	restored     chan restoredReq
	restoreCtx   context.Context
	stopRestores context.CancelFunc
	restores     sync.WaitGroup
}

type assignReq struct {
	committed map[kafka.TopicPartition]int64
	ends      map[kafka.TopicPartition]int64 // end offsets, where known
	ids       map[string]kafka.TopicID       // topic ids, where known
	external  map[kafka.TopicPartition]bool  // committed offsets set from outside the group
	reply     chan assignReply
}

type assignReply struct {
	start map[kafka.TopicPartition]kafka.EpochOffset
	err   error
}

type revokeReq struct {
	parts []kafka.TopicPartition
	reply chan map[kafka.TopicPartition]kafka.EpochOffset
}

type lostReq struct {
	parts []kafka.TopicPartition
	reply chan struct{}
}

type pendingRevoke struct {
	streams  []*stream
	deadline time.Time
	reply    chan map[kafka.TopicPartition]kafka.EpochOffset
}

// kafkaHandler is the consumer's Handler: it hands each rebalance step to the loop and waits.
type kafkaHandler struct{ k *kafkaSide }

func (h kafkaHandler) Assigned(ctx context.Context, committed, ends map[kafka.TopicPartition]int64, ids map[string]kafka.TopicID, external map[kafka.TopicPartition]bool) (map[kafka.TopicPartition]kafka.EpochOffset, error) {
	req := assignReq{committed: committed, ends: ends, ids: ids, external: external, reply: make(chan assignReply, 1)}
	select {
	case h.k.assign <- req:
	case <-h.k.done:
		return nil, errStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r.start, r.err
	case <-h.k.done:
		return nil, errStopped
	}
}

func (h kafkaHandler) Revoked(ctx context.Context, parts []kafka.TopicPartition) map[kafka.TopicPartition]kafka.EpochOffset {
	req := revokeReq{parts: parts, reply: make(chan map[kafka.TopicPartition]kafka.EpochOffset, 1)}
	select {
	case h.k.revoke <- req:
	case <-h.k.done:
		return h.k.finalFor(parts)
	}
	select {
	case offs := <-req.reply:
		return offs
	case <-h.k.done:
		return h.k.finalFor(parts)
	}
}

func (h kafkaHandler) Lost(ctx context.Context, parts []kafka.TopicPartition) {
	req := lostReq{parts: parts, reply: make(chan struct{}, 1)}
	select {
	case h.k.lost <- req:
	case <-h.k.done:
		return
	}
	select {
	case <-req.reply:
	case <-h.k.done:
	}
}

// finalFor is what a revoke after the loop ended commits: the last checkpoint's positions.
// final is written by the loop before done is closed, so reading it after done is safe.
func (k *kafkaSide) finalFor(parts []kafka.TopicPartition) map[kafka.TopicPartition]kafka.EpochOffset {
	out := map[kafka.TopicPartition]kafka.EpochOffset{}
	for _, tp := range parts {
		if o, ok := k.final[tp]; ok {
			out[tp] = o
			k.log.Info("partition revoked", "topic", tp.Topic, "partition", tp.Partition, "committed", o.Offset, "at", "shutdown")
		} else {
			k.log.Info("partition revoked", "topic", tp.Topic, "partition", tp.Partition, "at", "shutdown")
		}
	}
	return out
}

func kafkaStreamName(tp kafka.TopicPartition) string {
	return "kafka:" + tp.Topic + "/" + strconv.Itoa(int(tp.Partition))
}

// startKafka creates the consumer; the caller runs its poll loop.
func (t *Task) startKafka() error {
	in := t.cfg.Kafka
	if in.DrainTimeout <= 0 {
		in.DrainTimeout = 30 * time.Second
	}
	k := &kafkaSide{
		in:      in,
		log:     t.log,
		streams: map[kafka.TopicPartition]*stream{},
		bounded: map[kafka.TopicPartition]bool{},
		fetches: make(chan kafka.Fetch),
		assign:  make(chan assignReq),
		revoke:  make(chan revokeReq),
		lost:    make(chan lostReq),
		barrier: make(chan barrierReq),
		done:    make(chan struct{}),
		stopped: t.stopped,

		restored: make(chan restoredReq),
	}
	k.restoreCtx, k.stopRestores = context.WithCancel(context.Background())
	cc := kafka.ConsumerConfig{
		Group: in.Group, Topics: in.Topics, StartAt: in.StartAt, Handler: kafkaHandler{k},
		SessionTimeout: in.SessionTimeout, RebalanceTimeout: in.RebalanceTimeout, Bounded: in.Bounded,
		UnreachableTimeout: in.UnreachableTimeout, InstanceID: in.InstanceID,
		Reachable: func(ok bool) { t.meters.unreachable.Store(!ok) },
		Advertise: in.Advertise, Task: t.cfg.Name,
	}
	if t.cfg.Changelog != nil {
		cc.Progress = t.changelogProgress
	}
	if in.ExactlyOnce {
		if t.cfg.Changelog == nil {
			return fmt.Errorf("input %s: exactly-once mode needs a changelog", in.Name)
		}
		t.txnChangelog = kafka.NewTxnChangelogWriter(t.cfg.Changelog.Topic, t.log)
		cc.Txn = &kafka.TxnConfig{ID: in.TxnID, Timeout: in.TxnTimeout, Interval: t.cfg.Checkpoint,
			Producers: in.TxnProducers, Changelog: t.txnChangelog, Compression: in.TxnCompression}
		t.log.Info("exactly-once delivery: one transaction per checkpoint interval", "transactional_id", in.TxnID,
			"interval", t.cfg.Checkpoint, "transaction_timeout", in.TxnTimeout)
	}
	c, err := kafka.NewConsumer(in.Client, cc)
	if err != nil {
		return fmt.Errorf("input %s: %w", in.Name, err)
	}
	k.consumer = c
	t.kafka = k
	return nil
}

// onAssign opens the newly assigned partitions' streams and replies with where each starts. An
// error (the store's, or a partition whose records restart below this host's checkpoint) halts
// the task. Exactly once, the partitions' restore runs beside the loop (assignAside) and
// onRestored opens them.
func (t *Task) onAssign(req assignReq) error {
	// The checkpoint in flight lands first: an assignment reads and restores the store.
	if err := t.awaitCheckpoint(); err != nil {
		t.reply(func() { req.reply <- assignReply{err: err} })
		return err
	}
	n := int32(0)
	if t.changelog != nil {
		// None of the partitions is read before the reply, which waits for every restore: the
		// task is not Ready until then.
		n = int32(len(req.committed))
		t.meters.restoring.Add(n)
	}
	if t.eos() {
		return t.assignAside(req, n)
	}
	start, err := t.assign(req.committed, req.ends, req.ids, req.external)
	t.replyAssign(req, n, start, err)
	return err
}

// replyAssign answers an assignment once its n partitions' restores are over.
func (t *Task) replyAssign(req assignReq, n int32, start map[kafka.TopicPartition]kafka.EpochOffset, err error) {
	if err != nil {
		start = nil
	}
	t.reply(func() {
		req.reply <- assignReply{start: start, err: err}
		t.meters.restoring.Add(-n)
	})
}

// assign opens the streams of newly assigned partitions and says where each starts: at the
// local checkpoint, unless the group's committed offset is further along (the partition was
// processed elsewhere meanwhile; its local state is then stale, and the changelog that would
// bring it up to date is not there yet), or where the group starts when neither exists.
//
// A partition that ends below where this host's checkpoint resumes it was deleted and recreated
// (or truncated) since: resuming there would skip every record of the new topic below that
// offset, so assign fails, naming the partition and both offsets (the task halts). So does a
// partition whose topic's id differs from the one stored with the checkpoint's position, however
// far the new topic reaches (its id is stored with each position; a position without one, from
// an older host or from the changelog, is checked by its end offset only).
func (t *Task) assign(committed, ends map[kafka.TopicPartition]int64, ids map[string]kafka.TopicID, external map[kafka.TopicPartition]bool) (map[kafka.TopicPartition]kafka.EpochOffset, error) {
	start := map[kafka.TopicPartition]kafka.EpochOffset{}
	for tp, committed := range committed {
		id, err := t.claimPartition(tp, committed, ends, external)
		if err != nil {
			return nil, err
		}
		var epoch uint64
		if t.changelog != nil {
			// The partition stays unread until its state is restored: the loop replies only after.
			if epoch, err = t.restorePartition(tp, id); err != nil {
				return nil, err
			}
		}
		at, err := t.openPartition(tp, id, epoch, committed, ends, ids)
		if err != nil {
			return nil, err
		}
		if at.Offset >= 0 {
			start[tp] = at
		}
	}
	return start, nil
}

// claimPartition is the first step of assigning a partition, before its restore: the stream of
// an earlier ownership goes, and an offset reset made from outside the group is followed (or
// reported). It returns the partition's stream id.
func (t *Task) claimPartition(tp kafka.TopicPartition, committed int64, ends map[kafka.TopicPartition]int64, external map[kafka.TopicPartition]bool) (uint32, error) {
	if old := t.kafka.streams[tp]; old != nil {
		t.dropStream(old)
	}
	id, err := t.cfg.Store.StreamID(t.cfg.Name, kafkaStreamName(tp))
	if err != nil {
		return 0, err
	}
	// The cache holds nothing of this partition: dropStream took it out with the earlier
	// ownership's stream (another host may have processed the partition since).
	if external[tp] {
		end, known := ends[tp]
		if !known {
			end = -1
		}
		// It may move the partition's stream aside: the standby must not be tailing it.
		t.claimStandby(tp)
		if err := t.externalReset(tp, id, committed, end); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// openPartition is the last step of assigning a partition, after its restore: it opens the
// partition's stream from the store's position, with this owner's epoch of it (0 without a
// changelog), and returns the offset it starts at (-1: where the group starts) with the leader
// epoch of the record before it, where the position knows it (the consumer then has the
// broker check that its log still holds that record as it was read: kafka.EpochOffset).
func (t *Task) openPartition(tp kafka.TopicPartition, id uint32, epoch uint64, committed int64, ends map[kafka.TopicPartition]int64, ids map[string]kafka.TopicID) (kafka.EpochOffset, error) {
	none := kafka.EpochOffset{Offset: -1, Epoch: -1}
	pos, ok, err := t.cfg.Store.Position(t.cfg.Name, id)
	if err != nil {
		return none, err
	}
	st := &stream{id: id, in: &Input{Name: t.cfg.Kafka.Name}, kafka: true, tp: tp, horizon: -1, replay: -1,
		source: []byte(tp.Topic), lastAdded: -1, highWater: -1, tm: newStreamTime(t.cfg.Now(), t.cfg.TickEvery)}
	topicID, idKnown := ids[tp.Topic]
	if ok {
		st.tm.wm = pos.Watermark // the watermark moves with the checkpoint
		if idKnown && pos.TopicID != ([16]byte{}) && pos.TopicID != topicID {
			return none, t.recreatedID(tp, pos)
		}
	} else {
		st.durable = store.Position{Next: -1, Horizon: -1, Watermark: -1}
	}
	at := int64(-1)
	switch {
	case ok && committed > pos.Next:
		t.log.Warn("the group committed further than this host's checkpoint: the partition was processed elsewhere, its local state is stale",
			"topic", tp.Topic, "partition", tp.Partition, "committed", committed, "local", pos.Next)
		at = committed
		// Marks stay valid for this host's own state: records up to its horizon may be in it.
		st.durable, st.horizon, st.replay = pos, max(pos.Horizon, committed-1), pos.Horizon
	case ok:
		at = pos.Next
		st.durable, st.horizon, st.replay = pos, pos.Horizon, pos.Horizon
		st.commitStart = !t.eos() && committed != at
	case committed >= 0:
		at = committed
	}
	if end, known := ends[tp]; known && at > end {
		return none, t.recreated(tp, end, at)
	}
	if ok {
		if err := t.loadApplied(st); err != nil {
			return none, err
		}
	}
	leader := int32(-1) // the leader epoch of the record before at, where known
	if ok && at == pos.Next {
		leader = pos.LeaderEpoch.Epoch()
	}
	if idKnown {
		st.durable.TopicID = topicID // written with the partition's next position
	}
	st.durable.Epoch = epoch // this owner's: every changelog record of the partition carries it
	if at >= 0 {
		st.tracker, st.origin = positions.NewTracker(at), at
		st.noteEpoch(at-1, leader)
	}
	if err := t.removedBelow(st, ends); err != nil {
		return none, err
	}
	st.boundEnd = -1
	if b, ok := t.bound(tp); ok {
		st.boundEnd = b.End
		first := at
		if first < 0 {
			first = b.Start // start_at earliest
			if t.cfg.Kafka.StartAt == "latest" {
				first = b.End
			}
		} else if first < b.Start {
			first = b.Start // the records between were removed: counted above
		}
		if first >= b.End {
			st.done = true // nothing to read in this run
		}
		t.kafka.bounded[tp] = true
	}
	if err := t.countStreamTimers(st); err != nil {
		return none, err
	}
	t.streams[id] = st
	t.order = append(t.order, st)
	t.kafka.streams[tp] = st
	t.sched.AddStream(id)
	if t.eos() && t.paused {
		t.pausePartition(tp, true)
	}
	if err := t.loadReplay(st); err != nil {
		return none, err
	}
	args := []any{"topic", tp.Topic, "partition", tp.Partition, "start", at, "replay_through", st.replay}
	if leader >= 0 {
		args = append(args, "leader_epoch", leader)
	}
	if t.changelog != nil {
		args = append(args, "owner_epoch", epochString(epoch))
	}
	t.log.Info("partition assigned", args...)
	return kafka.EpochOffset{Offset: at, Epoch: leader}, nil
}

// externalReset handles a partition whose committed offset was set from outside the group
// (kafka.ExternalCommit) while no member ran, when it differs from the local checkpoint: with
// FollowExternalReset it resets the partition there as `wasmstream reset` would (its state and
// timers moved aside under <task>.reset-<time>, its changelog tombstoned, its position set);
// otherwise it logs how to replay, and the partition resumes at the local checkpoint (whose
// offset the next checkpoint commits).
func (t *Task) externalReset(tp kafka.TopicPartition, id uint32, committed, end int64) error {
	pos, ok, err := t.cfg.Store.Position(t.cfg.Name, id)
	if err != nil || !ok || committed < 0 || pos.Next == committed {
		return err
	}
	if !t.cfg.Kafka.FollowExternalReset {
		if committed > pos.Next {
			return nil // assign resumes at the committed offset, and says so
		}
		t.log.Warn("the group's committed offset was set from outside the group while the task was stopped (an offset reset?), and differs from this host's checkpoint: "+
			"kafka.external_offset_reset is report, so the partition resumes at the checkpoint; to replay from the committed offset, stop the host and run the command given",
			"topic", tp.Topic, "partition", tp.Partition, "committed", committed, "local", pos.Next,
			"command", fmt.Sprintf("wasmstream reset --task %s --to %s:%d:%d", t.cfg.Name, tp.Topic, tp.Partition, committed))
		return nil
	}
	backup := t.cfg.Name + ".reset-" + t.cfg.Now().UTC().Format("20060102T150405Z")
	bid, err := t.cfg.Store.StreamID(backup, kafkaStreamName(tp))
	if err != nil {
		return err
	}
	m, err := t.cfg.Store.MoveStream(t.cfg.Name, id, backup, bid)
	if err != nil {
		return err
	}
	np := store.Position{Next: committed, Horizon: -1, Watermark: -1}
	if t.changelog != nil {
		cr, err := ResetChangelog(context.Background(), t.cfg.Kafka.Client, t.changelog.topic, tp, committed, false)
		if err != nil {
			return err
		}
		np.Resume, np.Epoch = cr.End, cr.Epoch
	}
	if err := t.cfg.Store.Restore(t.cfg.Name, id, nil, &np); err != nil {
		return err
	}
	if end > committed {
		if err := t.cfg.Store.SetReplay(t.cfg.Name, id, &store.Replay{From: committed, Head: end, At: t.cfg.Now().UnixMilli()}); err != nil {
			return err
		}
	}
	t.log.Warn("followed an offset reset made from outside the group (kafka.external_offset_reset: follow): the partition restarts at the committed offset, its state and timers moved aside",
		"topic", tp.Topic, "partition", tp.Partition, "committed", committed, "local", pos.Next, "keys", m.Keys, "timers", m.Timers, "backup", backup)
	return nil
}

// commitStarts has the driver commit, once, the resume offset of the partitions whose group
// offset differed from it at assignment (stream.commitStart), so that the group's offsets tell
// the truth soon after a start even before a record arrives; and, after a failed commit
// (commitFailed), the durable position of every partition: a checkpoint commits only the
// positions it moves, so a failed commit of a partition's last position (no record after it)
// was otherwise never made again.
func (t *Task) commitStarts() {
	if t.kafka == nil {
		return
	}
	again := !t.eos() && t.recommit.Swap(false)
	var offs map[kafka.TopicPartition]kafka.EpochOffset
	for tp, st := range t.kafka.streams {
		// Not before the stream's first checkpoint of this ownership: a partition resumed at the
		// group's offset past its stale local position (openPartition) keeps that position
		// until then, and committing it would move the group's offset back.
		retry := again && st.tracker != nil && st.durable.Next >= max(st.origin, 0) && !st.revoking
		if !st.commitStart && !retry {
			continue
		}
		st.commitStart = false
		if offs == nil {
			offs = map[kafka.TopicPartition]kafka.EpochOffset{}
		}
		offs[tp] = groupOffset(st.durable)
	}
	if len(offs) > 0 {
		t.out.commits = append(t.out.commits, offs)
	}
}

// recreated is the error of a partition that ends below where the task resumes it (assign) or
// below what it has processed (ingestKafka).
func (t *Task) recreated(tp kafka.TopicPartition, end, at int64) error {
	return fmt.Errorf("input %s: topic %s partition %d ends at offset %d, below offset %d up to which this task has processed it: "+
		"the topic was deleted and recreated (or truncated) since, and reading on would skip its records, so the task halts; "+
		"to process the new topic from its beginning, run: wasmstream reset --task %s --to earliest (with --admin-addr while the host runs)",
		t.cfg.Kafka.Name, tp.Topic, tp.Partition, end, at, t.cfg.Name)
}

// recreatedID is the error of a partition whose topic's id is not the one of the checkpoint's
// position: the topic was deleted and created again, whatever its end offset.
func (t *Task) recreatedID(tp kafka.TopicPartition, pos store.Position) error {
	return fmt.Errorf("input %s: topic %s partition %d is not the partition up to whose offset %d this task has processed: the topic's id changed: "+
		"the topic was deleted and recreated since, and reading on would skip its records, so the task halts; "+
		"to process the new topic from its beginning, run: wasmstream reset --task %s --to earliest (with --admin-addr while the host runs)",
		t.cfg.Kafka.Name, tp.Topic, tp.Partition, pos.Next, t.cfg.Name)
}

// sourceRecord sets rec to the Kafka record r, as admit takes it.
func sourceRecord(rec *source.Record, r *kafka.Record) {
	*rec = source.Record{Offset: r.Offset, Raw: r.Value}
	rec.Key, rec.Value, rec.Timestamp = r.Key, r.Value, r.Timestamp
	rec.ValueNull = r.Value == nil // a tombstone: apart from an empty value (ABI.md §6.2)
	switch {
	case r.Key == nil:
		// A null key is its own key, distinct from the empty key (ABI.md §6.2).
		rec.Key = nullKey
	case abi.IsNullKey(r.Key):
		rec.Err = errReservedKey
	}
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, abi.Header{Name: h.Name, Value: h.Value})
	}
}

// ingestKafka admits a fetch's records, dropping those of partitions no longer assigned. A
// partition whose end went below what the task processed was recreated: the task halts
// (recreated) rather than drop the new records as already admitted.
func (t *Task) ingestKafka(f kafka.Fetch) error {
	st := t.kafka.streams[f.TopicPartition]
	if st == nil || st.revoking {
		return nil
	}
	if st.tracker != nil && f.HighWatermark >= 0 && f.HighWatermark < st.tracker.Committable() {
		return t.recreated(f.TopicPartition, f.HighWatermark, st.tracker.Committable())
	}
	st.highWater = f.HighWatermark
	t.lostToRetention(st, f.LogStart)
	// One Record for the whole fetch, overwritten for each: admit keeps none of it but its
	// fields' values, and a Record per record would be a heap allocation per record.
	var rec source.Record
	now := t.cfg.Now()
	for i := range f.Records {
		r := &f.Records[i]
		if st.boundEnd >= 0 && r.Offset >= st.boundEnd {
			// A bounded run reads up to the end offset listed at its start; a record at or
			// past it also says that everything below it was read (offsets may have gaps:
			// transaction markers, compaction).
			t.endBounded(st)
			break
		}
		if st.tracker == nil {
			st.tracker, st.origin = positions.NewTracker(r.Offset), r.Offset
		} else if r.Offset < st.tracker.Committable() || r.Offset <= st.lastAdded {
			continue // already admitted
		}
		st.lastAdded = r.Offset
		st.noteEpoch(r.Offset, r.LeaderEpoch)
		sourceRecord(&rec, r)
		if err := t.admit(st, &rec, now); err != nil {
			return err
		}
	}
	if f.ControlEnd > 0 && st.tracker != nil && !st.done && f.ControlEnd-1 > st.lastAdded && f.ControlEnd-1 >= st.tracker.Committable() {
		// Transaction markers (and the aborted records before them) after the last record:
		// nothing to process, but the committed position passes them (else the group's lag
		// stays above 0 for good, and a bounded run waits for a record past its end).
		if err := st.pass(f.ControlEnd-1, f.ControlEpoch); err != nil {
			return err
		}
	}
	if st.boundEnd >= 0 && st.lastAdded+1 >= st.boundEnd {
		t.endBounded(st)
	}
	if q := t.sched.Stats().QueuedItems; q > t.stats.PeakQueued {
		t.stats.PeakQueued = q
	}
	t.applyFlow()
	return nil
}

// removedBelow counts the records removed (retention, a DeleteRecords) after a partition's
// position while no host read it, as the log start listed at its assignment says: the consumer
// resumes at the log start. Said and counted here (lostToRetention), as a partition with nothing
// left after them sees no fetch that would; and then the position passes them, so that the
// group's lag reaches 0 and the next start does not count them again (the record before the
// position is gone: its leader epoch is unknown).
func (t *Task) removedBelow(st *stream, ends map[kafka.TopicPartition]int64) error {
	if st.tracker == nil || t.kafka.consumer == nil {
		return nil
	}
	start, ok := t.kafka.consumer.LogStart(st.tp)
	if !ok || start <= st.tracker.Committable() {
		return nil
	}
	t.lostToRetention(st, start)
	if end, known := ends[st.tp]; !known || start < end {
		return nil // records follow: the first fetch moves the position
	}
	return st.pass(start-1, -1)
}

// pass moves a partition's position past offset at, which holds nothing to process (a
// transaction marker, or the last of records removed), with the leader epoch of at.
func (st *stream) pass(at int64, epoch int32) error {
	if err := st.tracker.Add(at); err != nil {
		return err
	}
	if err := st.tracker.Complete(at); err != nil {
		return err
	}
	st.lastAdded = at
	st.noteEpoch(at, epoch)
	return nil
}

// lostToRetention counts and logs the records of a partition that were removed (retention, a
// DeleteRecords) before the task read them: the fetch's log start is above the next offset the
// task expected, the one after the last it admitted or, before any, where it resumed. The
// consumer resumes such a partition at its log start (kafka.Fetch.LogStart): every record still
// there is processed, the state stays exact for them, and the gap is said once, here.
func (t *Task) lostToRetention(st *stream, logStart int64) {
	if st.tracker == nil || logStart < 0 {
		return // no position yet: the group's start position, nothing skipped
	}
	next := st.tracker.Committable()
	if st.lastAdded >= next {
		next = st.lastAdded + 1
	}
	next = max(next, st.lostBelow) // below lostBelow: counted already
	if logStart <= next {
		return
	}
	lost := logStart - next
	st.lostBelow = logStart
	t.stats.RetentionLost += lost
	t.log.Warn("records of an input partition were removed (retention.ms, retention.bytes or a DeleteRecords) before this task read them: "+
		"it goes on from the partition's log start; they are lost to it",
		"input", t.cfg.Kafka.Name, "topic", st.tp.Topic, "partition", st.tp.Partition,
		"position", next, "log_start", logStart, "offsets_lost", lost)
}

// nullKey is the key of a Kafka record whose key is null (abi.NullKey).
var nullKey = []byte(abi.NullKey)

// errReservedKey refuses a Kafka record whose key is the null key's reserved bytes: it would
// share the state of the records without a key.
var errReservedKey = fmt.Errorf("%w: the record key is the bytes ff 6e 75 6c 6c ff that stand for a null key (ABI.md, NullKey); send a null key instead", source.ErrMalformed)

// bound returns a partition's bounds in a bounded run.
func (t *Task) bound(tp kafka.TopicPartition) (kafka.Bounds, bool) {
	if !t.cfg.Kafka.Bounded || t.kafka.consumer == nil {
		return kafka.Bounds{}, false
	}
	return t.kafka.consumer.Bound(tp)
}

// endBounded marks a partition of a bounded run read to its end: it is done like a file input
// (fireDue then ends its event time once its records are processed) and no longer fetched.
func (t *Task) endBounded(st *stream) {
	if st.done {
		return
	}
	st.done = true
	t.pausePartition(st.tp, true)
	t.log.Info("bounded run: partition read to its end offset", "topic", st.tp.Topic, "partition", st.tp.Partition, "end", st.boundEnd)
}

// boundedDone reports whether a bounded run is over: every partition of its topics was assigned
// here and read to its end, and nothing of them is left to do (Task.finished checks the rest).
func (t *Task) boundedDone() bool {
	k := t.kafka
	if !k.in.Bounded || len(k.bounded) == 0 {
		return false
	}
	total := 0
	k.consumer.EachBound(func(kafka.TopicPartition) { total++ })
	if len(k.bounded) < total {
		return false
	}
	for _, st := range k.streams {
		if !st.done || !st.tm.ended {
			return false
		}
	}
	return true
}

// onRevoke stops the partitions (their queued records are dropped, uncommitted) and waits —
// without blocking the loop — for their batches in flight; finishRevokes then checkpoints and
// answers with the offsets to commit.
func (t *Task) onRevoke(req revokeReq) {
	pr := &pendingRevoke{deadline: t.cfg.Now().Add(t.kafka.in.DrainTimeout), reply: req.reply}
	for _, tp := range req.parts {
		st := t.kafka.streams[tp]
		if st == nil {
			continue
		}
		st.revoking = true
		t.pending -= len(t.sched.RemoveStream(st.id))
		pr.streams = append(pr.streams, st)
	}
	t.kafka.revoking = append(t.kafka.revoking, pr)
}

// finishRevokes completes the revokes whose partitions have drained (or whose drain timed out).
func (t *Task) finishRevokes() error {
	if t.kafka == nil || len(t.kafka.revoking) == 0 {
		return nil
	}
	now := t.cfg.Now()
	kept := t.kafka.revoking[:0]
	var ready []*pendingRevoke
	for _, pr := range t.kafka.revoking {
		drained := true
		for _, st := range pr.streams {
			if st.inflight > 0 {
				drained = false
			}
		}
		if drained || now.After(pr.deadline) {
			if !drained {
				t.log.Warn("revoke: batches still in flight after the drain timeout; committing what completed", "timeout", t.kafka.in.DrainTimeout)
			}
			ready = append(ready, pr)
		} else {
			kept = append(kept, pr)
		}
	}
	t.kafka.revoking = kept
	if len(ready) == 0 {
		return nil
	}
	// The partitions are handed over only once the store (and the changelog) hold their last
	// checkpoint.
	err := t.checkpointWait()
	for _, pr := range ready {
		offs := map[kafka.TopicPartition]kafka.EpochOffset{}
		for _, st := range pr.streams {
			if err == nil && st.durable.Next >= 0 && st.tracker != nil {
				offs[st.tp] = groupOffset(st.durable)
			}
			t.dropStream(st)
			t.log.Info("partition revoked", "topic", st.tp.Topic, "partition", st.tp.Partition, "committed", offs[st.tp].Offset)
		}
		t.reply(func() { pr.reply <- offs })
	}
	return err
}

// onLost drops the partitions at once, without committing anything more: the checkpoint in
// flight, collected before the loss, lands first (as it would have before the loss was heard of
// had it committed on the loop).
func (t *Task) onLost(req lostReq) error {
	err := t.awaitCheckpoint()
	for _, tp := range req.parts {
		if st := t.kafka.streams[tp]; st != nil {
			t.pending -= len(t.sched.RemoveStream(st.id))
			t.dropStream(st)
			t.log.Warn("partition lost", "topic", tp.Topic, "partition", tp.Partition)
		}
	}
	t.reply(func() { req.reply <- struct{}{} })
	return err
}

// dropStream forgets a stream. Results of its batches still in flight are discarded when they
// come back (finish compares streams by identity), records it had queued are not complete, and
// what the cache holds of its keys goes with it — a lost partition's applied but uncommitted
// state too, which the next checkpoint would otherwise commit to the store after the partition's
// new owner took over; an assignment later starts from the store and the changelog —, so
// nothing of it beyond the last checkpoint is ever committed.
func (t *Task) dropStream(st *stream) {
	if t.streams[st.id] == st {
		delete(t.streams, st.id)
		t.sched.RemoveStream(st.id)
		t.uncountStreamTimers(st)
	}
	t.cache.DropStream(st.id)
	for i, o := range t.order {
		if o == st {
			t.order = append(t.order[:i], t.order[i+1:]...)
			break
		}
	}
	if t.kafka != nil && t.kafka.streams[st.tp] == st {
		delete(t.kafka.streams, st.tp)
		t.releasePartition(st.tp, st.id)
	}
}

// commitKafka has the driver commit the group offsets of the positions a checkpoint just made
// durable.
func (t *Task) commitKafka(positions []store.StreamPosition) {
	if t.kafka == nil {
		return
	}
	offs := map[kafka.TopicPartition]kafka.EpochOffset{}
	for _, sp := range positions {
		if st := t.streams[sp.Stream]; st != nil && st.kafka {
			offs[st.tp] = groupOffset(sp.Position)
			st.commitStart = false // this commit covers it
		}
	}
	if len(offs) == 0 {
		return
	}
	t.out.commits = append(t.out.commits, offs)
}

// kafkaFinal records the final positions for revokes that come after the loop ended.
func (t *Task) kafkaFinal() {
	if t.kafka == nil {
		return
	}
	t.kafka.final = map[kafka.TopicPartition]kafka.EpochOffset{}
	for tp, st := range t.kafka.streams {
		if st.tracker != nil {
			t.kafka.final[tp] = groupOffset(st.durable)
		}
	}
	close(t.kafka.done)
}

// The loop's Kafka channels; nil (never ready) without a Kafka input.
func (t *Task) kafkaFetches() chan kafka.Fetch {
	if t.kafka == nil {
		return nil
	}
	return t.kafka.fetches
}

func (t *Task) kafkaAssigns() chan assignReq {
	if t.kafka == nil {
		return nil
	}
	return t.kafka.assign
}

func (t *Task) kafkaRevokes() chan revokeReq {
	if t.kafka == nil {
		return nil
	}
	return t.kafka.revoke
}

func (t *Task) kafkaLosses() chan lostReq {
	if t.kafka == nil {
		return nil
	}
	return t.kafka.lost
}

// groupOffset is the group offset of a partition's position: its Next, with the leader epoch of
// the record before it where known, so that a member that later starts from the group's offset
// (no local position: an empty disk, another host) has the broker check it as well.
func groupOffset(p store.Position) kafka.EpochOffset {
	return kafka.EpochOffset{Offset: p.Next, Epoch: p.LeaderEpoch.Epoch()}
}

// epochMark says that the records of a Kafka partition from offset on (up to the next mark)
// were written in leader epoch epoch (-1: unknown).
type epochMark struct {
	offset int64
	epoch  int32
}

// noteEpoch records that the record at offset (a record admitted, a control record passed, or
// at-1 when the partition starts at at) was written in leader epoch epoch. Epochs change
// seldom (a leader change): the marks hold one entry per change above the committed position.
// A record read again (an aborted transaction rewound the partition) replaces the marks at and
// above its offset.
func (st *stream) noteEpoch(offset int64, epoch int32) {
	for n := len(st.epochs); n > 0 && st.epochs[n-1].offset >= offset; n-- {
		st.epochs = st.epochs[:n-1]
	}
	if n := len(st.epochs); n > 0 && st.epochs[n-1].epoch == epoch {
		return
	}
	st.epochs = append(st.epochs, epochMark{offset, epoch})
}

// epochBelow is the leader epoch of the last record below next (-1: unknown), which a position
// at next keeps (store.Position.LeaderEpoch); the marks below it that no later position needs go.
func (st *stream) epochBelow(next int64) int32 {
	i := len(st.epochs) - 1
	for i >= 0 && st.epochs[i].offset >= next {
		i--
	}
	if i < 0 {
		return -1
	}
	e := st.epochs[i].epoch
	st.epochs = st.epochs[:copy(st.epochs, st.epochs[i:])]
	return e
}
