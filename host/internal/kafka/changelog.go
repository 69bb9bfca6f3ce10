package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A changelog is a compacted topic that backs up a task's state: changelog partition p holds
// the state of input partition p, so the state can follow its partition to another host. The
// writer appends every state change; a host that is assigned the partition restores it by
// reading the changelog from the offset its local copy covers up to the end.

// ErrNoTopic is returned (wrapped) by PartitionCount and EndOffset when the topic does not exist.
var ErrNoTopic = errors.New("topic does not exist")

// ErrNoPartition is returned (wrapped) by EndOffset when the topic exists without the partition
// (partitions were added to the input topics: the changelog needs as many, EnsureChangelog).
var ErrNoPartition = errors.New("no such partition")

// ErrChangelogBehind is returned (wrapped) by ReadChangelog when the offset to read from is
// beyond the changelog's end: the local state covers changes the changelog no longer has (it
// was recreated or truncated), so the local state and the changelog disagree.
var ErrChangelogBehind = errors.New("changelog behind the local state")

// ChangelogLostError is CheckChangelogStart's error: records of a changelog partition that a
// restore starting at From needs were removed (its log start is Start) while the topic's
// cleanup.policy (Policy) was not compact alone, so by retention or a DeleteRecords, not by
// compaction: the keys whose last records were among them would restore partial or stale state.
type ChangelogLostError struct {
	Topic       string
	Partition   int32
	From, Start int64
	Policy      string
}

func (e *ChangelogLostError) Error() string {
	return fmt.Sprintf("kafka: changelog %s partition %d lost offsets %d to %d before this restore read them (its log start is %d, the restore starts at %d; cleanup.policy=%s)",
		e.Topic, e.Partition, e.From, e.Start-1, e.Start, e.From, e.Policy)
}

// CheckChangelogStart checks that a restore of changelog partition p starting at from (0, or
// below: from the beginning) reads everything it needs: a log start above from is fine on a
// topic compacted alone (compaction removes only records a later record of the same key
// supersedes; the development broker moves the log start past them, and a DeleteRecords there is
// not told apart), and a *ChangelogLostError otherwise (cleanup.policy with delete: retention
// removed state, or a DeleteRecords). EnsureChangelog refuses such a topic at start, but the
// policy may change while hosts run, and retention acts before anyone restarts.
func CheckChangelogStart(ctx context.Context, cfg Config, topic string, p int32, from int64) error {
	return withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error { return checkChangelogStart(ctx, adm, topic, p, from) })
}

// CheckChangelogStart is the package's CheckChangelogStart on a's client.
func (a *Admin) CheckChangelogStart(ctx context.Context, topic string, p int32, from int64) error {
	return checkChangelogStart(ctx, a.adm, topic, p, from)
}

func checkChangelogStart(ctx context.Context, adm *kadm.Client, topic string, p int32, from int64) error {
	from = max(from, 0)
	start, err := listOffset(ctx, adm.ListStartOffsets, topic, p)
	if err != nil || start <= from {
		return err
	}
	policy, err := describePolicy(ctx, adm, topic)
	if err != nil || compactAlone(policy) {
		return err
	}
	return &ChangelogLostError{Topic: topic, Partition: p, From: from, Start: start, Policy: policy}
}

// withAdmin runs fn with a client (and an admin view of it) on a short-lived connection to
// the cluster.
func withAdmin(cfg Config, fn func(cl *kgo.Client, adm *kadm.Client) error) error {
	opts, err := cfg.opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	return fn(cl, kadm.NewClient(cl))
}

// Admin is a client kept for requests a task repeats (a standby's rounds: a partition's end
// offset once a second, the records written since the last round, the input topics' partition
// count every DefaultMetadataMaxAge): its connections last as long as it does, where the
// package's functions of the same names open a client (its connections) per call. Safe for
// concurrent use (its ReadChangelog calls take turns).
type Admin struct {
	cfg Config
	cl  *kgo.Client
	adm *kadm.Client

	mu sync.Mutex  // one ReadChangelog at a time: they share rd
	rd *kgo.Client // the consuming client of ReadChangelog, made at its first call (nil before)
}

// NewAdmin creates the client; it does not contact the cluster. Close it when done.
func NewAdmin(cfg Config) (*Admin, error) {
	opts, err := cfg.opts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &Admin{cfg: cfg, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close closes the clients.
func (a *Admin) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rd != nil {
		a.rd.Close()
	}
	a.cl.Close()
}

// PartitionCount is the package's PartitionCount on a's client.
func (a *Admin) PartitionCount(ctx context.Context, topic string) (int32, error) {
	return partitionCount(ctx, a.cl, topic)
}

// EndOffset is the package's EndOffset on a's client.
func (a *Admin) EndOffset(ctx context.Context, topic string, p int32) (int64, error) {
	return listOffset(ctx, a.adm.ListCommittedOffsets, topic, p)
}

// ReadChangelog is the package's ReadChangelog on a's clients: the partition's offsets listed on
// a's client, the records read by one consuming client a keeps for every call (made at the first
// call with records to read), which consumes the partition for the call only.
func (a *Admin) ReadChangelog(ctx context.Context, topic string, p int32, from int64,
	fn func(key, value []byte, meta RecordMeta, offset int64) error, progress func(records, bytes, total int64),
) (end int64, records, bytes int64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	consume := func(from int64) (*kgo.Client, func(), error) {
		if a.rd == nil {
			opts, err := a.cfg.opts()
			if err != nil {
				return nil, nil, err
			}
			if a.rd, err = kgo.NewClient(append(opts, changelogReadOpts()...)...); err != nil {
				return nil, nil, fmt.Errorf("kafka: %w", err)
			}
		}
		a.rd.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}})
		// Removing the partition drops what the client fetched of it beyond the read: the next
		// call adds it again at its own offset.
		return a.rd, func() { a.rd.RemoveConsumePartitions(map[string][]int32{topic: {p}}) }, nil
	}
	return readChangelog(ctx, func(f func(*kadm.Client) error) error { return f(a.adm) }, consume, topic, p, from, fn, progress)
}

// changelogReadOpts are the options of a client reading a changelog.
func changelogReadOpts() []kgo.Opt {
	return []kgo.Opt{
		// If compaction or retention moves the log start past from while we read, go on from there.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records (transaction markers) take offsets too: see them so that a marker
		// just before the end still ends the read.
		kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(8 << 20),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
}

// EnsureChangelog creates topic when it is missing, with partitions partitions, replication
// factor rf (<= 0: the broker's default) and cleanup.policy=compact. When it exists, it checks
// that its cleanup.policy is compact (and not also delete, which would drop the state of keys
// not written within the retention time) and that it has partitions partitions: with fewer
// (partitions were added to the input topics since it was created) it adds the missing ones,
// which is safe because changelog partition p holds input partition p's state alone and the
// new input partitions have none yet; with more it is an error. It returns nil when the topic
// is usable as a changelog; another host creating or growing the topic at the same time is
// fine.
func EnsureChangelog(ctx context.Context, cfg Config, topic string, partitions int32, rf int16) error {
	if partitions <= 0 {
		return fmt.Errorf("kafka: changelog topic %q: %d partitions requested, want at least 1", topic, partitions)
	}
	if rf <= 0 {
		rf = -1
	}
	return withAdmin(cfg, func(cl *kgo.Client, adm *kadm.Client) error {
		for attempt := 0; ; attempt++ {
			n, err := partitionCount(ctx, cl, topic)
			switch {
			case err == nil && n < partitions:
				if err := growChangelog(ctx, cl, adm, topic, partitions); err != nil {
					return err
				}
				return checkChangelog(ctx, adm, topic, partitions, partitions)
			case err == nil:
				return checkChangelog(ctx, adm, topic, n, partitions)
			case !errors.Is(err, ErrNoTopic):
				return err
			}
			_, err = adm.CreateTopic(ctx, partitions, rf, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic)
			switch {
			case err == nil:
				return nil
			case !errors.Is(err, kerr.TopicAlreadyExists) || attempt >= 10:
				return fmt.Errorf("kafka: creating changelog topic %q: %w", topic, err)
			}
			// Created by someone else since we looked; its metadata may take a moment to show.
			select {
			case <-ctx.Done():
				return fmt.Errorf("kafka: changelog topic %q: %w", topic, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
}

// growChangelog adds partitions to topic up to partitions. Another host growing it at the same
// time is fine: the error is ignored once the topic has them.
func growChangelog(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, partitions int32) error {
	resp, err := adm.UpdatePartitions(ctx, int(partitions), topic)
	if err == nil {
		err = resp.Error()
	}
	if err == nil {
		return nil
	}
	if n, cerr := partitionCount(ctx, cl, topic); cerr == nil && n >= partitions {
		return nil
	}
	return fmt.Errorf("kafka: adding partitions to changelog topic %q (to %d, one per input partition): %w", topic, partitions, err)
}

// describePolicy describes a changelog topic's cleanup.policy.
func describePolicy(ctx context.Context, adm *kadm.Client, topic string) (string, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return "", fmt.Errorf("kafka: describing changelog topic %q: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return "", fmt.Errorf("kafka: describing changelog topic %q: %w", topic, err)
	}
	policy := "delete" // Kafka's default when the broker does not say
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	return policy, nil
}

// compactAlone reports whether a cleanup.policy is compact, without delete.
func compactAlone(policy string) bool {
	var parts []string
	for _, s := range strings.Split(policy, ",") {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, s)
		}
	}
	return slices.Equal(parts, []string{"compact"})
}

// checkChangelog checks an existing topic with have partitions against what a changelog needs.
func checkChangelog(ctx context.Context, adm *kadm.Client, topic string, have, want int32) error {
	if have != want {
		return fmt.Errorf("kafka: changelog topic %q has %d partitions, but %d are needed (one per input partition: "+
			"changelog partition p holds the state of input partition p); delete the changelog topic so that it is "+
			"recreated (state that is only in the changelog is lost), or use another changelog topic",
			topic, have, want)
	}
	policy, err := describePolicy(ctx, adm, topic)
	if err != nil {
		return err
	}
	if !compactAlone(policy) {
		return fmt.Errorf("kafka: changelog topic %q has cleanup.policy=%s, want compact (with delete, the state of keys "+
			"not written within the retention time is lost): set cleanup.policy=compact on the topic "+
			"(e.g. kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact)%s",
			topic, policy, topic, removedBelow(ctx, adm, topic))
	}
	return nil
}

// removedBelow says, for a changelog refused for its cleanup.policy, which of its partitions
// no longer start at offset 0 (retention may have removed state already: a restore of those
// partitions from the changelog alone would be partial, even once the policy is compact again,
// since compaction also moves a log start on some brokers and a restore then cannot tell); ""
// when none, or when the offsets cannot be listed.
func removedBelow(ctx context.Context, adm *kadm.Client, topic string) string {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return ""
	}
	var moved []string
	starts.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			moved = append(moved, fmt.Sprintf("partition %d starts at offset %d", o.Partition, o.Offset))
		}
	})
	if len(moved) == 0 {
		return ""
	}
	slices.Sort(moved)
	return fmt.Sprintf("; records were removed from it already (%s): if retention removed them, the state they held is lost, "+
		"and a host that restores those partitions from the changelog gets partial state: restore the task's data directory "+
		"from a backup, or rebuild the state from the input (wasmstream reset --task <task> --to earliest)", strings.Join(moved, ", "))
}

// PartitionCount returns the number of partitions of topic; an error wrapping ErrNoTopic if it
// does not exist.
func PartitionCount(ctx context.Context, cfg Config, topic string) (int32, error) {
	var n int32
	err := withAdmin(cfg, func(cl *kgo.Client, _ *kadm.Client) (err error) {
		n, err = partitionCount(ctx, cl, topic)
		return err
	})
	return n, err
}

// partitionCount asks the cluster (not the client's metadata cache, which may remember for a
// while that a topic did not exist) how many partitions topic has.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("kafka: describing topic %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return 0, fmt.Errorf("kafka: topic %q: %w", topic, ErrNoTopic)
		case err != nil:
			return 0, fmt.Errorf("kafka: describing topic %q: %w", topic, err)
		}
		return int32(len(t.Partitions)), nil
	}
	return 0, fmt.Errorf("kafka: topic %q: %w", topic, ErrNoTopic)
}

// EndOffset returns the committed end offset of partition p of topic: its last stable offset,
// the offset after the last record a read_committed reader can see (what ReadChangelog reads
// up to). An error wraps ErrNoTopic if the topic does not exist.
func EndOffset(ctx context.Context, cfg Config, topic string, p int32) (int64, error) {
	var end int64
	err := withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) (err error) {
		end, err = listOffset(ctx, adm.ListCommittedOffsets, topic, p)
		return err
	})
	return end, err
}

// listOffset returns partition p's offset from a kadm listing (start, end or committed end).
func listOffset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topic string, p int32) (int64, error) {
	los, err := list(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafka: listing offsets of %s/%d: %w", topic, p, err)
	}
	if lo, ok := los.Lookup(topic, -1); ok && errors.Is(lo.Err, kerr.UnknownTopicOrPartition) {
		return 0, fmt.Errorf("kafka: topic %q: %w", topic, ErrNoTopic)
	}
	lo, ok := los.Lookup(topic, p)
	if !ok {
		return 0, fmt.Errorf("kafka: topic %q has no partition %d: %w", topic, p, ErrNoPartition)
	}
	if lo.Err != nil {
		return 0, fmt.Errorf("kafka: listing offsets of %s/%d: %w", topic, p, lo.Err)
	}
	return lo.Offset, nil
}

// ChangelogWriter produces records to explicit partitions of one topic: idempotently, acked by
// all in-sync replicas, in call order within a partition. Write and Flush are meant for one
// goroutine (the task loop); the client's goroutines deliver the acknowledgements.
type ChangelogWriter struct {
	cl     *kgo.Client
	topic  string
	log    *slog.Logger
	once   sync.Once
	shared bool // the client is a transactional consumer's (NewTxnChangelogWriter)
	// timeout is the records' delivery timeout (zero with shared: the transaction's own).
	timeout time.Duration

	mu   sync.Mutex
	next map[int32]int64 // per partition written since the last Flush: the offset after its last acknowledged record
	err  error           // first produce failure since the last Flush
	// after is, per partition, where this writer's next record would land if nobody else wrote
	// (the offset after its last acknowledged record, or the one Expect named); gaps holds the
	// partitions where another writer's records came first since the last Gaps, each with the
	// first offset of such records.
	after, gaps map[int32]int64
}

// NewChangelogWriter creates the producer client for topic; it does not contact the cluster
// (a failure to reach it surfaces from Flush). A record unacknowledged for deliveryTimeout
// (zero: DefaultDeliveryTimeout) fails, and with it the Flush that covers it. log (may be nil)
// gets a warning on the first failure after each Flush.
func NewChangelogWriter(cfg Config, topic string, deliveryTimeout time.Duration, log *slog.Logger) (*ChangelogWriter, error) {
	opts, err := cfg.opts()
	if err != nil {
		return nil, err
	}
	if deliveryTimeout <= 0 {
		deliveryTimeout = DefaultDeliveryTimeout
	}
	opts = append(opts,
		kgo.RequiredAcks(kgo.AllISRAcks()), // idempotence (the default) needs it and keeps order per partition
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordDeliveryTimeout(deliveryTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(RetryMetadataMinAge), // retries of refused batches wait for a refresh (producerOpts)
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return &ChangelogWriter{cl: cl, topic: topic, log: log, timeout: deliveryTimeout, next: map[int32]int64{}, after: map[int32]int64{}, gaps: map[int32]int64{}}, nil
}

// FlushWithin is Flush bounded by the records' delivery timeout (kafka.delivery_timeout): the
// client fails a record at its timeout only between two tries, not while a broker holds the
// request, so the wait itself is bounded too, and its end named.
func (w *ChangelogWriter) FlushWithin(ctx context.Context) (map[int32]int64, error) {
	timeout := w.timeout
	if timeout <= 0 {
		timeout = DefaultDeliveryTimeout
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	next, err := w.Flush(fctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("kafka: changelog %s: records not acknowledged within %s (kafka.delivery_timeout): once the cluster acknowledges again, restart the task (wasmstream restart)", w.topic, timeout)
	}
	return next, err
}

// NewTxnChangelogWriter returns a writer without a client of its own: it writes through the
// transactional consumer it is given to (TxnConfig.Changelog), inside its transactions. Its
// Flush then waits for the records' acknowledgements, which does not commit them: the
// transaction does.
func NewTxnChangelogWriter(topic string, log *slog.Logger) *ChangelogWriter {
	return &ChangelogWriter{topic: topic, log: log, next: map[int32]int64{}, after: map[int32]int64{}, gaps: map[int32]int64{}, shared: true}
}

// Expect says that the caller has read partition p up to offset at (a restore): a record of this
// writer acknowledged at a higher offset shows that others wrote the records between (Gaps).
func (w *ChangelogWriter) Expect(p int32, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.after[p] = at
	delete(w.gaps, p)
}

// Gaps returns, and forgets, the partitions in which records of other writers came before a
// record of this writer since the last call (after the offset Expect named, or between two
// of this writer's records), each with the first offset of those records. Under a transaction
// its markers count as such records.
func (w *ChangelogWriter) Gaps() map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.gaps) == 0 {
		return nil
	}
	g := w.gaps
	w.gaps = map[int32]int64{}
	return g
}

func (w *ChangelogWriter) attach(cl *kgo.Client) { w.cl = cl }

// AwaitPartition makes the writer's client read the topic's metadata again and waits, at most
// until ctx ends, until it knows partition p: a client that knew the topic before partitions
// were added to it fails a record to a new partition at once for up to its metadata age. It
// returns ctx's error when the client still does not know p. A client that never wrote to the
// topic has not loaded it, nor will a refresh load it: its first record loads the topic's
// metadata as it is now, p included, so there is nothing to wait for (before, such a client was
// waited for until ctx ended, and the assignment of the added partition failed).
func (w *ChangelogWriter) AwaitPartition(ctx context.Context, p int32) error {
	if leader, _, _ := w.cl.PartitionLeader(w.topic, 0); leader < 0 {
		return nil
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		w.cl.ForceMetadataRefresh()
		if leader, _, _ := w.cl.PartitionLeader(w.topic, p); leader >= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: changelog %s: the client does not know partition %d yet: %w", w.topic, p, ctx.Err())
		case <-tick.C:
		}
	}
}

// EpochHeader is the Kafka record header that carries a changelog record's owner epoch: 8
// bytes, a big-endian uint64. A record without it (written before epochs existed) has epoch 0.
const EpochHeader = "wasmstream.epoch"

// LeaderEpochHeader is the Kafka record header that carries, on a changelog record of an input
// partition's position, the leader epoch of the input record before the position's offset: 4
// bytes, a big-endian int32. A position record without it (written before it existed, or when
// the epoch was unknown) has none (-1). Readers before it ignore it.
const LeaderEpochHeader = "wasmstream.leader_epoch"

// RecordMeta is what a changelog record's headers say: its owner epoch (EpochHeader; 0 without
// one) and, on a position record, the leader epoch of the input record before its offset
// (LeaderEpochHeader; -1 without one).
type RecordMeta struct {
	Epoch       uint64
	LeaderEpoch int32
}

// Write queues a record for partition p, without an epoch (see WriteEpoch).
func (w *ChangelogWriter) Write(p int32, key, value []byte) { w.WriteEpoch(p, key, value, 0) }

// WritePosition is WriteEpoch for a position record, which also carries leader, the leader
// epoch of the input record before the position's offset, in its LeaderEpochHeader (none when
// negative: unknown).
func (w *ChangelogWriter) WritePosition(p int32, key, value []byte, epoch uint64, leader int32) {
	w.write(p, key, value, epoch, leader)
}

// WriteEpoch queues a record for partition p that carries epoch in its EpochHeader (none when
// epoch is 0). key and value are copied: the caller may reuse them at once. A nil value is a
// tombstone (the key's state is deleted); a nil key stays nil. Records of one partition are
// written in call order. WriteEpoch may block while the client's buffer is full
// (backpressure); a record that cannot be written (e.g. p is not a partition of the topic)
// fails the next Flush.
func (w *ChangelogWriter) WriteEpoch(p int32, key, value []byte, epoch uint64) {
	w.write(p, key, value, epoch, -1)
}

// WriteOwned is WriteEpoch for a record made for the writer alone: kv holds its key
// (kv[:keyLen]) then its value (a non-nil value: no tombstone), and the writer keeps kv as it is,
// copying nothing; the caller must not touch kv afterwards. A checkpoint's key snapshots are
// written so: each one's key and value made once, in one allocation.
func (w *ChangelogWriter) WriteOwned(p int32, kv []byte, keyLen int, epoch uint64) {
	w.produce(p, kv[:keyLen:keyLen], kv[keyLen:len(kv):len(kv)], epoch, -1)
}

func (w *ChangelogWriter) write(p int32, key, value []byte, epoch uint64, leader int32) {
	// One allocation for the two; nil stays nil (a nil value is a tombstone).
	buf := make([]byte, len(key)+len(value))
	k, v := buf[:len(key):len(key)], buf[len(key):len(key)+len(value):len(key)+len(value)]
	copy(k, key)
	copy(v, value)
	if key == nil {
		k = nil
	}
	if value == nil {
		v = nil
	}
	w.produce(p, k, v, epoch, leader)
}

// changelogRecord is a record with room for its headers and their values: one allocation per
// record (kgo keeps the *kgo.Record, &r.rec, until its acknowledgement).
type changelogRecord struct {
	rec  kgo.Record
	hdrs [2]kgo.RecordHeader
	vals [12]byte // the owner epoch (8 bytes), then the leader epoch (4)
}

// produce hands the record to the client with its headers: epoch in an EpochHeader (none when
// 0), leader in a LeaderEpochHeader (none when negative). key and value are the record's own.
func (w *ChangelogWriter) produce(p int32, key, value []byte, epoch uint64, leader int32) {
	cr := &changelogRecord{rec: kgo.Record{Topic: w.topic, Partition: p, Key: key, Value: value}}
	r := &cr.rec
	if epoch != 0 {
		e := binary.BigEndian.AppendUint64(cr.vals[:0:8], epoch)
		r.Headers = append(cr.hdrs[:0], kgo.RecordHeader{Key: EpochHeader, Value: e})
	}
	if leader >= 0 {
		l := binary.BigEndian.AppendUint32(cr.vals[8:8:12], uint32(leader))
		r.Headers = append(cr.hdrs[:len(r.Headers)], kgo.RecordHeader{Key: LeaderEpochHeader, Value: l})
	}
	w.cl.Produce(context.Background(), r, w.done)
}

// RecordEpoch is a changelog record's owner epoch: its EpochHeader, or 0 without one (or with
// one that is not 8 bytes).
func RecordEpoch(headers []kgo.RecordHeader) uint64 {
	return recordMeta(headers).Epoch
}

// recordMeta reads a changelog record's headers (RecordMeta); a header of the wrong size counts
// as absent.
func recordMeta(headers []kgo.RecordHeader) RecordMeta {
	m := RecordMeta{LeaderEpoch: -1}
	for _, h := range headers {
		switch {
		case h.Key == EpochHeader && len(h.Value) == 8:
			m.Epoch = binary.BigEndian.Uint64(h.Value)
		case h.Key == LeaderEpochHeader && len(h.Value) == 4:
			m.LeaderEpoch = max(int32(binary.BigEndian.Uint32(h.Value)), -1)
		}
	}
	return m
}

func (w *ChangelogWriter) done(r *kgo.Record, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("kafka: writing changelog %s/%d: %w", r.Topic, r.Partition, err)
			if w.log != nil {
				w.log.Warn("kafka: changelog write failed", "topic", r.Topic, "partition", r.Partition, "err", err)
			}
		}
		return
	}
	// Acknowledgements of one partition come in offset order; max() guards anyway.
	w.next[r.Partition] = max(w.next[r.Partition], r.Offset+1)
	if a, ok := w.after[r.Partition]; ok && r.Offset > a {
		if _, seen := w.gaps[r.Partition]; !seen {
			w.gaps[r.Partition] = a
		}
	}
	w.after[r.Partition] = max(w.after[r.Partition], r.Offset+1)
}

// Flush waits until every record written so far is acknowledged or has failed. It returns, for
// each partition with a record acknowledged since the last Flush, the offset just after its
// last acknowledged record (the partition's next offset), and the first produce failure since
// the last Flush. After a failure the changelog may miss changes the caller's state has: the
// caller must not commit what the records covered (and should treat the task as failed).
// When ctx ends first, Flush returns ctx's error and nothing is reset: the next Flush reports
// these records.
func (w *ChangelogWriter) Flush(ctx context.Context) (next map[int32]int64, err error) {
	if err := w.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("kafka: flushing changelog %s: %w", w.topic, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	next, err = w.next, w.err
	w.next, w.err = map[int32]int64{}, nil
	return next, err
}

// Close closes the client at once; records not flushed yet may or may not be written. Close is
// idempotent.
func (w *ChangelogWriter) Close() {
	if !w.shared {
		w.once.Do(w.cl.Close)
	}
}

// ReadChangelog reads partition p of topic from offset from (inclusive) up to the partition's
// committed end offset (its last stable offset, see EndOffset) taken when it starts, calling fn
// for each record in offset order (read_committed: records of aborted transactions and control
// records are skipped). fn's key and value are valid only during the call; a nil value is a
// tombstone; meta is what its headers say (RecordMeta: owner epoch 0 and leader epoch -1
// without them). An error from
// fn stops the read and is returned wrapped.
//
// A from below the partition's log start (compaction, retention, or a negative from: no local
// state) reads from the log start. A from beyond the end is an error wrapping
// ErrChangelogBehind. A from equal to the end returns at once.
//
// It returns end, the offset it read up to (on success: the end offset taken at the start; on
// error: the offset after the last record fn accepted, where a retry may resume), and the
// records and bytes (keys plus values) passed to fn. progress (may be nil) is called at most
// once a second with the records and bytes so far and the total number of offsets to read
// (end minus the start offset; records removed by compaction make the real count lower).
func ReadChangelog(ctx context.Context, cfg Config, topic string, p int32, from int64,
	fn func(key, value []byte, meta RecordMeta, offset int64) error, progress func(records, bytes, total int64),
) (end int64, records, bytes int64, err error) {
	admin := func(f func(*kadm.Client) error) error {
		return withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error { return f(adm) })
	}
	consume := func(from int64) (*kgo.Client, func(), error) {
		opts, err := cfg.opts()
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}))
		cl, err := kgo.NewClient(append(opts, changelogReadOpts()...)...)
		if err != nil {
			return nil, nil, fmt.Errorf("kafka: %w", err)
		}
		return cl, cl.Close, nil
	}
	return readChangelog(ctx, admin, consume, topic, p, from, fn, progress)
}

// readChangelog is ReadChangelog listing the partition's offsets through admin and reading its
// records through the client consume returns, consuming the partition from the offset given,
// with done to call once the read ends. The client may hold what it fetched of other partitions
// before (an Admin's): only the partition's records are read.
func readChangelog(ctx context.Context, admin func(func(*kadm.Client) error) error,
	consume func(from int64) (cl *kgo.Client, done func(), err error), topic string, p int32, from int64,
	fn func(key, value []byte, meta RecordMeta, offset int64) error, progress func(records, bytes, total int64),
) (end int64, records, bytes int64, err error) {
	var start int64
	err = admin(func(adm *kadm.Client) error {
		var err error
		if start, err = listOffset(ctx, adm.ListStartOffsets, topic, p); err != nil {
			return err
		}
		end, err = listOffset(ctx, adm.ListCommittedOffsets, topic, p)
		return err
	})
	if err != nil {
		return from, 0, 0, err
	}
	if from > end {
		return from, 0, 0, fmt.Errorf("kafka: changelog %s/%d ends at offset %d, but the local state covers it up to offset %d "+
			"(was the changelog topic recreated or truncated?): %w", topic, p, end, from, ErrChangelogBehind)
	}
	from = max(from, start)
	if from >= end {
		return end, 0, 0, nil
	}

	cl, done, err := consume(from)
	if err != nil {
		return from, 0, 0, err
	}
	defer done()

	next, total := from, end-from
	last := time.Now()
	for next < end {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return next, records, bytes, fmt.Errorf("kafka: reading changelog %s/%d at offset %d: %w", topic, p, next, ctx.Err())
		}
		var ferr error
		fs.EachError(func(t string, fp int32, err error) {
			// The client retries retryable errors itself; what reaches us is fatal.
			// (An error of no partition, such as a closed client's, is too; other partitions'
			// are what a shared client fetched of them before.)
			if ferr == nil && (t == "" || t == topic && fp == p) {
				ferr = fmt.Errorf("kafka: reading changelog %s/%d at offset %d: %w", t, fp, next, err)
			}
		})
		if ferr != nil {
			return next, records, bytes, ferr
		}
		for it := fs.RecordIter(); !it.Done() && next < end; {
			r := it.Next()
			if r.Topic != topic || r.Partition != p || r.Offset < next || r.Offset >= end {
				continue
			}
			if !r.Attrs.IsControl() {
				if err := fn(r.Key, r.Value, recordMeta(r.Headers), r.Offset); err != nil {
					return next, records, bytes, fmt.Errorf("kafka: restoring from changelog %s/%d at offset %d: %w", topic, p, r.Offset, err)
				}
				records++
				bytes += int64(len(r.Key) + len(r.Value))
			}
			next = r.Offset + 1
		}
		if progress != nil && next < end && time.Since(last) >= time.Second {
			last = time.Now()
			progress(records, bytes, total)
		}
	}
	return end, records, bytes, nil
}
