package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Producer produces outputs and dead letters. Safe for one goroutine (the task loop) plus the
// client's own.
type Producer struct {
	cl             *kgo.Client
	log            *slog.Logger
	connectTimeout time.Duration // Config.ConnectTimeout
	shared         bool          // the client is a transactional consumer's (NewTxnProducer): it closes it

	timeout time.Duration // ProducerConfig.DeliveryTimeout
	limits  *TopicLimits  // ProducerConfig.Limits: a transactional consumer's client takes them

	mu   sync.Mutex
	err  error // the first delivery failure: sticky, every later Flush returns it (aborted excepted)
	gone bool  // Abandon was called: the records it fails are no delivery failure to report
	// tooLarge is the size of the record err names when the broker refused it as too large: a
	// larger record of the same refusal replaces it, so that the halt names the record that
	// outgrew the limit, not the first of its batch.
	tooLarge int
	since    time.Time // when the first record not yet known acknowledged was produced; zero: none
	n        int64
	slab     []slot                // records not handed out yet: one allocation for many outputs
	acks     map[string]*topicAcks // per topic: the promise of its records, and how many are unacknowledged

	clamped atomic.Bool // a timestamp past MaxTimestamp was produced (and logged)
}

// slabRecords is how many records Produce allocates at once.
const slabRecords = 256

// slot is a record of the slab with what it came from (its Context: ProduceFrom).
type slot struct {
	r    kgo.Record
	from fromCtx
}

// fromCtx is a record's Context that names what the record came from (ProduceFrom), for the
// error of a record the cluster refuses.
type fromCtx struct {
	context.Context
	from fmt.Stringer
}

// refusedFrom is " (an output of <from>)" for a refused record whose Context names what it came
// from, else "".
func refusedFrom(r *kgo.Record) string {
	if c, ok := r.Context.(*fromCtx); ok && c.from != nil {
		return " (an output of " + c.from.String() + ")"
	}
	return ""
}

// ProducerConfig tunes the producer.
type ProducerConfig struct {
	// Linger is how long a batch may wait for more records. Default 5ms.
	Linger time.Duration
	// DeliveryTimeout bounds how long a record may go unacknowledged, counted from when it was
	// produced (never from its timestamp, which is event time and may be days old): Flush
	// fails once it has passed, and with it the checkpoint, which halts the task. Until then
	// the client retries what can succeed (a broker restarting, a leader moving). Default
	// DefaultDeliveryTimeout.
	DeliveryTimeout time.Duration
	// Compression of the record batches: "none", "gzip", "snappy", "lz4" or "zstd". Default
	// "snappy".
	Compression string
	// Limits, if set, caps each topic's record batches (TopicLimits).
	Limits *TopicLimits
}

// Compressions are the names ProducerConfig.Compression takes.
var Compressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// CheckCompression reports whether name is one of Compressions (or empty: the default).
func CheckCompression(name string) error {
	_, err := codec(name)
	return err
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "snappy":
		return kgo.SnappyCompression(), nil
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("kafka: compression %q is not one of none, gzip, snappy, lz4, zstd", name)
}

// DefaultDeliveryTimeout is ProducerConfig.DeliveryTimeout's default.
const DefaultDeliveryTimeout = 2 * time.Minute

// MaxRecordBatchBytes is the largest record batch a producer makes: franz-go's default
// ProducerBatchMaxBytes, which the producers keep (a broker's default max.message.bytes,
// 1048588, takes it). A record that does not fit one batch alone fails at the next Flush, so
// the host bounds what a module emits to a Kafka output by it (modrt.Limits.MaxRecordBytes).
const MaxRecordBatchBytes = 1_000_012

// RecordBytes bounds from above what a record with key, value and headers alone takes of a
// batch of MaxRecordBatchBytes, Kafka's framing included (the batch header, and the record's and
// each header's lengths as varints).
func RecordBytes(key, value []byte, headers []Header) int {
	n := 128 + len(key) + len(value)
	for _, h := range headers {
		n += 10 + len(h.Name) + len(h.Value)
	}
	return n
}

// NewProducer creates a producer: acks from all in-sync replicas, idempotent, key-hashed
// partitioning (murmur2, as the Java client does).
func NewProducer(cfg Config, pc ProducerConfig) (*Producer, error) {
	opts, err := cfg.opts()
	if err != nil {
		return nil, err
	}
	popts, err := producerOpts(pc)
	if err != nil {
		return nil, err
	}
	opts = append(opts, popts...)
	opts = append(opts, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Producer{cl: cl, log: cfg.Logger, connectTimeout: cfg.ConnectTimeout, timeout: deliveryTimeout(pc)}, nil
}

func deliveryTimeout(pc ProducerConfig) time.Duration {
	if pc.DeliveryTimeout <= 0 {
		return DefaultDeliveryTimeout
	}
	return pc.DeliveryTimeout
}

// producerOpts are the options of every client that produces outputs. There is no
// kgo.RecordDeliveryTimeout: franz-go measures it from each batch's first record's Timestamp,
// which is the output's event time, so that a replay of records older than the timeout failed
// every batch. Flush bounds delivery from when the records were produced instead.
func producerOpts(pc ProducerConfig) ([]kgo.Opt, error) {
	if pc.Linger == 0 {
		pc.Linger = 5 * time.Millisecond
	}
	c, err := codec(pc.Compression)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(pc.Linger),
		kgo.ProducerBatchCompression(c),
		// The client retries a batch the broker refused with a retriable error
		// (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS) only after a metadata refresh, at most
		// one per min age: at franz-go's default 5 s, six refusals in a row held the outputs,
		// and so the checkpoints, 32 s (TestKafkaBrokerFaultsRiddenOut).
		kgo.MetadataMinAge(RetryMetadataMinAge),
	}
	if pc.Limits != nil {
		opts = append(opts, pc.Limits.batchMax())
	}
	return opts, nil
}

// NewTxnProducer returns a producer without a client of its own: it produces through the
// transactional consumer it is given to (TxnConfig.Producers), inside its transactions, and
// must not be used before that consumer is created. Only pc.DeliveryTimeout applies: the
// consumer's TxnConfig.Compression is the client's.
func NewTxnProducer(log *slog.Logger, pc ProducerConfig) *Producer {
	return &Producer{log: log, shared: true, timeout: deliveryTimeout(pc), limits: pc.Limits}
}

func (p *Producer) attach(cl *kgo.Client) { p.cl = cl }

// Ping waits until the cluster answers; a refusal (e.g. authentication) is an error at once.
// A transactional producer's consumer pings instead.
func (p *Producer) Ping(ctx context.Context) error {
	if p.shared {
		return nil
	}
	return ping(ctx, p.cl, p.connectTimeout, p.log)
}

// MaxTimestamp is the latest record timestamp, in ms since the epoch, that the Kafka client can
// produce: 2262-04-11T23:47:16.854Z. franz-go computes a record's milliseconds through
// time.Time.UnixNano, which wraps past it (Kafka's own bound, an i64 of milliseconds, is some
// 292 million years away).
const MaxTimestamp = math.MaxInt64 / int64(time.Millisecond)

// TimestampHeader is the header that carries, in decimal milliseconds since the epoch, the
// timestamp of a record produced later than MaxTimestamp: the record itself is stamped
// MaxTimestamp.
const TimestampHeader = "wasmstream.timestamp"

// Produce sends a record asynchronously; ts is ms since the epoch (past MaxTimestamp: stamped
// MaxTimestamp, ts in TimestampHeader). The byte slices must stay unmodified until the next
// Flush returns.
func (p *Producer) Produce(topic string, key, value []byte, headers []Header, ts int64) {
	p.ProduceFrom(topic, key, value, headers, ts, nil)
}

// ProduceFrom is Produce for a record that came from from (nil: not said): the input records
// whose processing emitted it, which a delivery failure of the record names, with its topic,
// in the task's halt. from.String is called only then, from the client's goroutine.
func (p *Producer) ProduceFrom(topic string, key, value []byte, headers []Header, ts int64, from fmt.Stringer) {
	p.mu.Lock()
	p.n++
	if p.since.IsZero() {
		p.since = time.Now()
	}
	if len(p.slab) == 0 {
		p.slab = make([]slot, slabRecords)
	}
	sl := &p.slab[0]
	p.slab = p.slab[1:]
	ta := p.acksFor(topic)
	ta.unack.Add(1)
	p.mu.Unlock()
	r := &sl.r
	*r = kgo.Record{Topic: topic, Key: key, Value: value, Timestamp: time.UnixMilli(ts)}
	if from != nil {
		sl.from = fromCtx{Context: context.Background(), from: from}
		r.Context = &sl.from
	}
	for _, h := range headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(h.Name), Value: h.Value})
	}
	if ts > MaxTimestamp {
		p.clampTimestamp(r, ts)
	}
	p.cl.Produce(context.Background(), r, ta.ack)
}

// clampTimestamp stamps r, whose timestamp ts is past MaxTimestamp, with MaxTimestamp and
// carries ts in TimestampHeader; the first such record of the producer is logged.
func (p *Producer) clampTimestamp(r *kgo.Record, ts int64) {
	r.Timestamp = time.UnixMilli(MaxTimestamp)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: TimestampHeader, Value: strconv.AppendInt(nil, ts, 10)})
	if p.log != nil && p.clamped.CompareAndSwap(false, true) {
		p.log.Warn("kafka: a record's timestamp is past the latest a Kafka record can carry here (2262-04-11T23:47:16.854Z): it is stamped with that, its own timestamp in the header "+TimestampHeader+" (logged once)",
			"topic", r.Topic, "timestamp_ms", ts)
	}
}

// topicAcks is the promise of one topic's records and the count of those not acknowledged yet.
type topicAcks struct {
	ack   func(*kgo.Record, error)
	unack atomic.Int64
}

// acksFor returns topic's topicAcks, made at its first record; p.mu is held.
func (p *Producer) acksFor(topic string) *topicAcks {
	ta := p.acks[topic]
	if ta == nil {
		if p.acks == nil {
			p.acks = map[string]*topicAcks{}
		}
		ta = &topicAcks{}
		ta.ack = func(r *kgo.Record, err error) {
			ta.unack.Add(-1)
			p.acked(r, err)
		}
		p.acks[topic] = ta
	}
	return ta
}

// unacknowledged says which topics hold records not acknowledged yet, and how many: for the
// error of a Flush that timed out.
func (p *Producer) unacknowledged() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for topic, ta := range p.acks {
		if v := ta.unack.Load(); v > 0 {
			parts = append(parts, fmt.Sprintf("%s (%d unacknowledged)", topic, v))
		}
	}
	slices.Sort(parts)
	if len(parts) == 0 {
		return "outputs"
	}
	return "outputs to " + strings.Join(parts, ", ")
}

// acked is the promise of every record: it keeps the first failure.
func (p *Producer) acked(r *kgo.Record, err error) {
	switch {
	case err == nil:
	case errors.Is(err, kerr.MessageTooLarge):
		// The host learns each topic's max.message.bytes when the task starts (TopicLimits): a
		// topic whose limit was lowered since, or a cluster that did not say.
		e := fmt.Errorf("kafka: producing to %s%s: %w: the topic's max.message.bytes is below what the task was started with (it learns the limit at start): restart the task (wasmstream restart) to produce under it", r.Topic, refusedFrom(r), err)
		p.failSized(e, len(r.Key)+len(r.Value))
	default:
		// Retrying could not fix it (the client retries what it can until the delivery timeout).
		where := r.Topic
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			// A record the client could not place (its topic unknown) has no partition yet.
			where = fmt.Sprintf("%s partition %d", r.Topic, r.Partition)
		}
		p.fail(fmt.Errorf("kafka: producing to %s%s: %w (the task halts with its state and offsets at the last checkpoint whose outputs were acknowledged: "+
			"fix the cause, then restart the task, wasmstream restart, which produces them again)", where, refusedFrom(r), err))
	}
}

func (p *Producer) fail(err error) { p.failSized(err, 0) }

// failSized is fail for a record refused as too large, of size bytes (0: another failure): it
// also replaces a failure of a smaller record refused so (tooLarge).
func (p *Producer) failSized(err error, size int) {
	p.mu.Lock()
	if p.err != nil && !p.gone && size > p.tooLarge && p.tooLarge > 0 {
		p.err, p.tooLarge = err, size
	}
	if p.err == nil && !p.gone {
		p.err, p.tooLarge = err, size
		if p.log != nil {
			p.log.Error("an output could not be delivered: no checkpoint covers it, and the task halts at its next checkpoint", "err", err)
		}
	}
	p.mu.Unlock()
}

// Flush waits until every record produced so far is acknowledged, at most until
// DeliveryTimeout after the first of them was produced, and returns the first delivery failure
// since the producer was created, if any: a failure is sticky, so that no later checkpoint
// covers the record that failed (or one produced after it). A transactional producer's failure
// is cleared when its transaction aborts (Consumer.EndTxn), which drops every record of it.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	since, err := p.since, p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if !since.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, since.Add(p.timeout))
		defer cancel()
	}
	if err := p.cl.Flush(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("kafka: %s not acknowledged within %s (kafka.delivery_timeout) of being produced: is the cluster reachable? (the client's warnings say what it retried); "+
				"the task halts with its state and offsets at the last checkpoint whose outputs were acknowledged: once the cluster acknowledges again, restart the task (wasmstream restart), which produces them again: %w",
				p.unacknowledged(), p.timeout, err)
		} else {
			err = fmt.Errorf("kafka: flush: %w", err)
		}
		p.fail(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.since = time.Time{}
	}
	return p.err
}

// aborted forgets the failure of a transactional producer whose transaction aborted: none of
// its records remain.
func (p *Producer) aborted() {
	p.mu.Lock()
	p.err, p.since, p.tooLarge = nil, time.Time{}, 0
	p.mu.Unlock()
}

// Produced is the number of records produced since the Producer was created.
func (p *Producer) Produced() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// Abandon fails every record not yet delivered, waiting at most a second for the requests in
// flight to be answered: the task that produced them halted, so no checkpoint covers them, and
// delivered late (the client retries in the background, say until a missing topic is created)
// they would only repeat outputs that the restarted task produces again. A transactional
// producer's records are its transaction's, which the consumer aborts: nothing to do.
func (p *Producer) Abandon() {
	if p.shared || p.cl == nil {
		return
	}
	p.mu.Lock()
	p.gone = true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.cl.AbortBufferedRecords(ctx)
}

// Close flushes what it can within a second and closes the client (not a transactional
// consumer's, which the consumer closes).
func (p *Producer) Close() {
	if p.shared {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.cl.Flush(ctx)
	p.cl.Close()
}
