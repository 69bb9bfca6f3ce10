package kafka

import (
	"context"
	"encoding/binary"
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
// transactions open), and writes an abort marker for it, through the broker's own
// WriteTxnMarkers.

// CrashAbortedTxn is a transaction that a crash of the development broker had left without its
// abort marker, and that the broker's start ended with one.
type CrashAbortedTxn struct {
	Topic       string
	Partition   int32
	ProducerID  int64
	FirstOffset int64 // the transaction's first offset in the partition
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

// endCrashedTxns writes an abort marker for every transaction that a crash left without one (see
// above) and returns them.
func endCrashedTxns(ctx context.Context, l *gatedListener) ([]CrashAbortedTxn, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(l.Addr().String()), kgo.Dialer(l.dial),
		kgo.RequestRetries(3))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, md.Topics.Names()...)
	if err != nil {
		return nil, fmt.Errorf("start offsets: %w", err)
	}
	type open struct {
		epoch int16
		first int64
	}
	var found []CrashAbortedTxn
	epochs := map[int64]int16{}
	for _, td := range md.Topics.Sorted() {
		if td.Err != nil {
			return nil, fmt.Errorf("metadata of %s: %w", td.Topic, td.Err)
		}
		for _, pd := range td.Partitions.Sorted() {
			start, ok := starts.Lookup(td.Topic, pd.Partition)
			if !ok || start.Err != nil {
				return nil, fmt.Errorf("the start offset of %s/%d: %v", td.Topic, pd.Partition, start.Err)
			}
			opens := map[int64]open{}
			err := scanBatches(ctx, cl, td.Topic, td.ID, pd.Partition, start.Offset, func(b *kmsg.RecordBatch) {
				const transactional, control = 0x10, 0x20
				switch {
				case b.Attributes&control != 0:
					delete(opens, b.ProducerID)
				case b.Attributes&transactional != 0:
					if _, ok := opens[b.ProducerID]; !ok {
						opens[b.ProducerID] = open{b.ProducerEpoch, b.FirstOffset}
					}
				}
			})
			if err != nil {
				return nil, fmt.Errorf("scanning %s/%d: %w", td.Topic, pd.Partition, err)
			}
			if len(opens) == 0 {
				continue
			}
			active, err := activeProducers(ctx, cl, td.Topic, pd.Partition)
			if err != nil {
				return nil, fmt.Errorf("producers of %s/%d: %w", td.Topic, pd.Partition, err)
			}
			for pid, o := range opens {
				if active[pid] {
					continue // restored after a clean shutdown: its producer may still end it
				}
				found = append(found, CrashAbortedTxn{Topic: td.Topic, Partition: pd.Partition,
					ProducerID: pid, FirstOffset: o.first})
				epochs[pid] = o.epoch
			}
		}
	}
	if len(found) == 0 {
		return nil, nil
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
	if err := writeAbortMarkers(ctx, cl, found, epochs); err != nil {
		return nil, err
	}
	return found, nil
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

// writeAbortMarkers writes an abort marker for each of txns at the end of its partition.
func writeAbortMarkers(ctx context.Context, cl *kgo.Client, txns []CrashAbortedTxn, epochs map[int64]int16) error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	byPID := map[int64]int{}
	for _, t := range txns {
		i, ok := byPID[t.ProducerID]
		if !ok {
			m := kmsg.NewWriteTxnMarkersRequestMarker()
			m.ProducerID, m.ProducerEpoch, m.Committed = t.ProducerID, epochs[t.ProducerID], false
			req.Markers = append(req.Markers, m)
			i = len(req.Markers) - 1
			byPID[t.ProducerID] = i
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
		return fmt.Errorf("writing abort markers: %w", err)
	}
	var errs []error
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("writing the abort marker of producer %d to %s/%d: %w", m.ProducerID, t.Topic, p.Partition, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
