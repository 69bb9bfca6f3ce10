package kafka

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A development broker killed with a transaction open comes back with that transaction's records
// aborted in its index but without an abort marker in the log: kfake's crash recovery aborts it
// implicitly and bumps the producer's epoch. A read_committed client skips a producer's records
// from an aborted transaction's first offset until that producer's abort marker, so without the
// marker it also skips what the same producer (same transactional id, hence same producer id)
// commits after the restart, as far as one fetch reaches. A real broker's coordinator writes the
// marker before it gives the producer its new epoch.
//
// endCrashedTxns writes those markers at start, before any client is let in (gatedListener): it
// scans every partition's batch headers for a transactional producer whose last transaction has
// no marker and that the broker does not list as in a transaction (a clean shutdown keeps open
// transactions open), and writes a marker for it, through the broker's own WriteTxnMarkers: a
// COMMIT marker where the kill came while the broker wrote the transaction's commit markers (a
// COMMIT marker of the same producer id and epoch in another partition; see devtxnlog.go), with
// the group offsets the transaction commits, and an abort marker otherwise.

// CrashEndedTxn is a transaction that a crash of the development broker had left without its
// marker in a partition, and that the broker's start ended with one.
type CrashEndedTxn struct {
	Topic       string
	Partition   int32
	ProducerID  int64
	Epoch       int16
	FirstOffset int64 // the transaction's first offset in the partition
	// Committed: the kill came while the broker wrote the transaction's commit markers, and the
	// start completed the commit (the marker, and the group offsets it logged); otherwise the
	// transaction aborted.
	Committed bool
}

// gatedListener holds the clients of a starting broker back: until open, Accept hands out only
// connections dialled in memory through dial (the start's own recovery client); connections to
// the TCP listener wait in its backlog.
type gatedListener struct {
	net.Listener
	inner     chan net.Conn
	opened    chan struct{}
	openOnce  sync.Once
	closed    chan struct{}
	closeOnce sync.Once
}

func newGatedListener(ln net.Listener) *gatedListener {
	return &gatedListener{Listener: ln, inner: make(chan net.Conn), opened: make(chan struct{}),
		closed: make(chan struct{})}
}

func (l *gatedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.inner:
		return c, nil
	case <-l.opened:
		return l.Listener.Accept()
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *gatedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// open lets every client in.
func (l *gatedListener) open() { l.openOnce.Do(func() { close(l.opened) }) }

// dial is a kgo.Dialer that connects to the broker in memory, whatever the address.
func (l *gatedListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.inner <- server:
		return client, nil
	case <-l.closed:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	return nil, errors.New("kafka: dev broker: closed while starting")
}

// recoverTimeout bounds endCrashedTxns.
const recoverTimeout = time.Minute

// endCrashedTxns ends every transaction that a crash left without its marker (see above) and
// returns them, and how many transactions it committed the group offsets of with every marker
// already written. offsets are the group offsets each transaction commits (txnOffsetLog.logged). With
// a transaction committed, the broker's index still holds it aborted (kfake's own recovery
// aborted it): the broker must be started again, with a full replay of those partitions.
func endCrashedTxns(ctx context.Context, l *gatedListener, offsets map[producerEpoch]map[groupPartition]txnOffset) ([]CrashEndedTxn, int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.Addr().String()), kgo.Dialer(l.dial),
		kgo.RequestRetries(3))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("metadata: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, md.Topics.Names()...)
	if err != nil {
		return nil, 0, fmt.Errorf("start offsets: %w", err)
	}
	type open struct {
		epoch int16
		first int64
	}
	var found []CrashEndedTxn
	commits := map[producerEpoch]bool{} // transactions with a COMMIT marker in some partition
	reused := map[int64]bool{}          // producers whose epoch did not change from a transaction to the next
	for _, td := range md.Topics.Sorted() {
		if td.Err != nil {
			return nil, 0, fmt.Errorf("metadata of %s: %w", td.Topic, td.Err)
		}
		for _, pd := range td.Partitions.Sorted() {
			start, ok := starts.Lookup(td.Topic, pd.Partition)
			if !ok || start.Err != nil {
				return nil, 0, fmt.Errorf("the start offset of %s/%d: %v", td.Topic, pd.Partition, start.Err)
			}
			opens := map[int64]open{}
			marked := map[int64]int16{} // each producer's last marker's epoch
			err := scanBatches(ctx, cl, td.Topic, td.ID, pd.Partition, start.Offset, func(b *kmsg.RecordBatch) {
				const transactional, control = 0x10, 0x20
				switch {
				case b.Attributes&control != 0:
					delete(opens, b.ProducerID)
					marked[b.ProducerID] = b.ProducerEpoch
					if controlCommits(b) {
						commits[producerEpoch{b.ProducerID, b.ProducerEpoch}] = true
					}
				case b.Attributes&transactional != 0:
					if e, ok := marked[b.ProducerID]; ok && e == b.ProducerEpoch {
						reused[b.ProducerID] = true
					}
					if _, ok := opens[b.ProducerID]; !ok {
						opens[b.ProducerID] = open{b.ProducerEpoch, b.FirstOffset}
					}
				}
			})
			if err != nil {
				return nil, 0, fmt.Errorf("scanning %s/%d: %w", td.Topic, pd.Partition, err)
			}
			if len(opens) == 0 {
				continue
			}
			active, err := activeProducers(ctx, cl, td.Topic, pd.Partition)
			if err != nil {
				return nil, 0, fmt.Errorf("producers of %s/%d: %w", td.Topic, pd.Partition, err)
			}
			for pid, o := range opens {
				if active[pid] {
					continue // restored after a clean shutdown: its producer may still end it
				}
				found = append(found, CrashEndedTxn{Topic: td.Topic, Partition: pd.Partition,
					ProducerID: pid, Epoch: o.epoch, FirstOffset: o.first})
			}
		}
	}
	committing := map[producerEpoch]bool{}
	for i := range found {
		t := &found[i]
		pe := producerEpoch{t.ProducerID, t.Epoch}
		// An epoch that names more than one transaction (a client without KIP-890's bump per
		// transaction) cannot tell whose COMMIT marker it is: abort, as before.
		t.Committed = commits[pe] && !reused[t.ProducerID]
		if t.Committed {
			committing[pe] = true
		}
	}
	sort.Slice(found, func(i, j int) bool {
		a, b := found[i], found[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.ProducerID < b.ProducerID
	})
	if len(found) > 0 {
		if err := writeMarkers(ctx, cl, found); err != nil {
			return nil, 0, err
		}
	}
	// A kill after the last COMMIT marker and before the group offsets leaves every partition
	// marked and the offsets missing. kfake logs a commit's end (the producer's epoch moves on)
	// only after the offsets: a producer still at the epoch of a transaction with a COMMIT marker
	// had not finished it.
	offsetsOnly := 0
	for pe, logged := range offsets {
		if committing[pe] || !commits[pe] || reused[pe.id] {
			continue
		}
		epoch, ok, err := txnEpoch(ctx, cl, logged, pe.id)
		if err != nil {
			return nil, 0, fmt.Errorf("the state of producer %d: %w", pe.id, err)
		}
		if ok && epoch == pe.epoch {
			committing[pe] = true
			offsetsOnly++
		}
	}
	names := map[string]string{} // topic ids (hex) to names
	for _, td := range md.Topics {
		names[hex.EncodeToString(td.ID[:])] = td.Topic
	}
	for pe := range committing {
		if err := commitLoggedOffsets(ctx, adm, offsets[pe], names); err != nil {
			return nil, 0, fmt.Errorf("committing the group offsets of producer %d's transaction: %w", pe.id, err)
		}
	}
	return found, offsetsOnly, nil
}

// txnEpoch is the broker's epoch of producer pid, asked by the transactional id of its logged
// offsets; ok is false when the id is unknown or now has another producer.
func txnEpoch(ctx context.Context, cl *kgo.Client, logged map[groupPartition]txnOffset, pid int64) (epoch int16, ok bool, err error) {
	var txid string
	for _, o := range logged {
		txid = o.TransactionalID
		break
	}
	if txid == "" {
		return 0, false, nil
	}
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{txid}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, false, err
	}
	for _, st := range resp.TransactionStates {
		if errors.Is(kerr.ErrorForCode(st.ErrorCode), kerr.TransactionalIDNotFound) {
			return 0, false, nil
		}
		if err := kerr.ErrorForCode(st.ErrorCode); err != nil {
			return 0, false, err
		}
		if st.ProducerID == pid {
			return st.ProducerEpoch, true, nil
		}
	}
	return 0, false, nil
}

// controlCommits reports whether control batch b is a COMMIT marker (its record's key: a version
// and a type, 0 abort, 1 commit).
func controlCommits(b *kmsg.RecordBatch) bool {
	var r kmsg.Record
	if err := r.ReadFrom(b.Records); err != nil || len(r.Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(r.Key[2:4]) == 1
}

// commitLoggedOffsets commits the offsets a transaction logged, except where the group's
// committed offset is already there or past it. names maps topic ids (hex) to names.
func commitLoggedOffsets(ctx context.Context, adm *kadm.Client, logged map[groupPartition]txnOffset, names map[string]string) error {
	byGroup := map[string]kadm.Offsets{}
	for gp, o := range logged {
		topic := o.Topic
		if topic == "" {
			if topic = names[o.TopicID]; topic == "" {
				return fmt.Errorf("group %s: no topic has the id %s any more", gp.group, o.TopicID)
			}
		}
		if byGroup[gp.group] == nil {
			byGroup[gp.group] = kadm.Offsets{}
		}
		meta := ""
		if o.Metadata != nil {
			meta = *o.Metadata
		}
		offs := byGroup[gp.group]
		offs.Add(kadm.Offset{Topic: topic, Partition: gp.partition, At: o.Offset,
			LeaderEpoch: o.LeaderEpoch, Metadata: meta})
	}
	for group, offs := range byGroup {
		have, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return fmt.Errorf("group %s: %w", group, err)
		}
		offs.KeepFunc(func(o kadm.Offset) bool {
			h, ok := have.Lookup(o.Topic, o.Partition)
			return !ok || h.Err != nil || h.At < o.At
		})
		if len(offs) == 0 {
			continue
		}
		resp, err := adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("group %s: %w", group, err)
		}
	}
	return nil
}

// scanBatches calls fn with the header of every batch of a partition, from offset to its high
// watermark at the time of the first fetch (nothing is produced meanwhile: no client is in).
func scanBatches(ctx context.Context, cl *kgo.Client, topic string, id kadm.TopicID, partition int32, offset int64, fn func(*kmsg.RecordBatch)) error {
	end := int64(-1)
	for end < 0 || offset < end {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = -1
		req.MaxBytes = 64 << 20
		req.SessionEpoch = -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = topic, id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = partition, offset, 16<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return errors.New("a fetch answered without the partition")
		}
		p := resp.Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
			return fmt.Errorf("fetching from %d: %w", offset, err)
		}
		if end < 0 {
			end = p.HighWatermark
		}
		next, err := eachBatch(p.RecordBatches, fn)
		if err != nil {
			return err
		}
		if next <= offset {
			if offset < end {
				return fmt.Errorf("a fetch at %d below the end %d returned no batch", offset, end)
			}
			break
		}
		offset = next
	}
	return nil
}

// eachBatch calls fn with each complete batch header in raw (a fetch response's record batches;
// the last one may be cut short) and returns the offset after the last of them, or 0 if none.
func eachBatch(raw []byte, fn func(*kmsg.RecordBatch)) (int64, error) {
	var next int64
	for len(raw) >= 12 {
		n := 12 + int(int32(binary.BigEndian.Uint32(raw[8:12])))
		if n < 12 || n > len(raw) {
			break // cut short by the fetch's size limit
		}
		var b kmsg.RecordBatch
		if len(raw) > 16 && raw[16] == 2 { // magic 2: only these can be transactional
			if err := b.ReadFrom(raw[:n]); err != nil {
				return 0, fmt.Errorf("a batch at %d: %w", int64(binary.BigEndian.Uint64(raw)), err)
			}
			fn(&b)
			next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		} else {
			next = int64(binary.BigEndian.Uint64(raw)) + 1 // older formats end at their own last offset
		}
		raw = raw[n:]
	}
	return next, nil
}

// activeProducers are the producers that the broker has in a transaction on the partition.
func activeProducers(ctx context.Context, cl *kgo.Client, topic string, partition int32) (map[int64]bool, error) {
	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{partition}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	active := map[int64]bool{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, err
			}
			for _, ap := range p.ActiveProducers {
				active[ap.ProducerID] = true
			}
		}
	}
	return active, nil
}

// writeMarkers writes the marker of each of txns (commit or abort) at the end of its partition.
func writeMarkers(ctx context.Context, cl *kgo.Client, txns []CrashEndedTxn) error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	type marker struct {
		pid    int64
		epoch  int16
		commit bool
	}
	at := map[marker]int{}
	for _, t := range txns {
		k := marker{t.ProducerID, t.Epoch, t.Committed}
		i, ok := at[k]
		if !ok {
			m := kmsg.NewWriteTxnMarkersRequestMarker()
			m.ProducerID, m.ProducerEpoch, m.Committed = t.ProducerID, t.Epoch, t.Committed
			req.Markers = append(req.Markers, m)
			i = len(req.Markers) - 1
			at[k] = i
		}
		m := &req.Markers[i]
		if n := len(m.Topics); n == 0 || m.Topics[n-1].Topic != t.Topic {
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic = t.Topic
			m.Topics = append(m.Topics, mt)
		}
		mt := &m.Topics[len(m.Topics)-1]
		mt.Partitions = append(mt.Partitions, t.Partition)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("writing transaction markers: %w", err)
	}
	var errs []error
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("writing the marker of producer %d to %s/%d: %w", m.ProducerID, t.Topic, p.Partition, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
