package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record is one consumed record. Its byte slices belong to the receiver.
type Record struct {
	Offset int64
	// LeaderEpoch is the partition leader epoch the record was written in (-1: unknown, a
	// broker before Kafka 2.1): a position after it keeps it, so that a consumer resuming there
	// can ask the broker whether its log still holds the record (EpochOffset).
	LeaderEpoch int32
	Timestamp   int64 // ms since the epoch
	Key         []byte
	Value       []byte
	Headers     []Header
}

// Fetch is what Run hands to the task: records of one partition, in offset order.
type Fetch struct {
	TopicPartition
	Records []Record
	// HighWatermark is the offset after the partition's last record, as of this fetch.
	HighWatermark int64
	// LogStart is the partition's log start offset as of this fetch (its first record's
	// offset; -1 when the broker did not say, or the topic is compacted alone, whose log start
	// compaction may move): records below it were removed by retention or a DeleteRecords. A
	// fetch that follows records this consumer handed over, or a position it was told to
	// start at, and whose LogStart is above them says that the records between were removed
	// before they were read.
	LogStart int64
	// ControlEnd, when positive, is the offset after the fetch's last control record
	// (a transaction's commit or abort marker), which comes after its last record: the
	// partition's offsets below it hold nothing more to process (Records may be empty).
	ControlEnd int64
	// ControlEpoch is the leader epoch of the control record before ControlEnd.
	ControlEpoch int32
}

// EpochOffset is a partition's offset with the leader epoch of the record before it (Epoch -1:
// unknown). A consumer that starts at an offset with a known epoch first asks the partition's
// leader where its log for that epoch ends (OffsetForLeaderEpoch): below the offset, the log
// diverged from the records read before it (an unclean leader election, a broker that lost
// data), which Run reports as a halt (the records it would skip are no longer the ones the
// task processed). Unknown, the consumer starts there as it is told.
type EpochOffset struct {
	Offset int64
	Epoch  int32
}

// Handler is the task's side of the group's rebalances. Its methods are called from the
// client's group goroutine, one at a time, never while Run is handing over a poll.
type Handler interface {
	// Assigned is told the newly assigned partitions with the group's committed offset (-1 if
	// none), each one's end offset (the next record's; absent when it could not be listed) and
	// the ids of their topics (absent when unknown: a broker before Kafka 2.8, or the listing
	// failed), and returns where each must start (-1: where the group would, i.e. the committed
	// offset or the configured start position, with the group's epoch of it), each with the
	// leader epoch of the record before it where known (EpochOffset). external holds the
	// partitions whose committed offset was set from outside the group (ExternalCommit): an
	// offset reset made while no member ran.
	Assigned(ctx context.Context, committed, ends map[TopicPartition]int64, ids map[string]TopicID, external map[TopicPartition]bool) (map[TopicPartition]EpochOffset, error)
	// Revoked must drain and checkpoint the partitions and return the offsets to commit, each
	// with the leader epoch of the record before it where known.
	Revoked(ctx context.Context, parts []TopicPartition) map[TopicPartition]EpochOffset
	// Lost must drop the partitions without committing.
	Lost(ctx context.Context, parts []TopicPartition)
}

// TxnHandler is what a transactional consumer (ConsumerConfig.Txn) also needs of its Handler.
// Run calls Commit once per commit interval, after handing over a poll, with rebalances held
// back; Commit must process every record handed over so far, produce their results through the
// consumer's client, and end the transaction with Consumer.EndTxn before it returns. Run polls
// nothing while Commit runs, so EndTxn is never concurrent with a poll.
type TxnHandler interface {
	Handler
	Commit(ctx context.Context) error
}

// TxnConfig makes a consumer transactional (exactly once): its client is the producer of the
// task's outputs and changelog, and the offsets of what it polled commit in the same
// transaction as what it produced.
type TxnConfig struct {
	// ID is the transactional id: stable per host and task, so that a restarted host fences
	// the transactions its previous run left open.
	ID string
	// Timeout is the transaction timeout: a transaction open longer (e.g. of a killed host) is
	// aborted by the broker. Default 15s.
	Timeout time.Duration
	// Interval is how often Run commits. Default 1s.
	Interval time.Duration
	// Producers are attached to the consumer's client: what they produce joins its
	// transactions.
	Producers []*Producer
	// Changelog, if set, is attached likewise.
	Changelog *ChangelogWriter
	// Compression of what the client produces (ProducerConfig.Compression).
	Compression string
}

// TxnOutcome is how a transaction ended.
type TxnOutcome struct {
	Committed bool
	// Rewound holds, after an abort, the offset each partition polled in the transaction reads
	// again from: its committed offset, or the first offset polled when it has none.
	Rewound map[TopicPartition]int64
	// Cause is, after an abort the cluster forced with a retriable error (a transactional
	// offset commit answered REQUEST_TIMED_OUT, say), that error: the transaction aborted, the
	// client goes on, and the task reads the records again as after any abort.
	Cause error
}

// ConsumerConfig configures a group consumer.
type ConsumerConfig struct {
	// Task names the task in the errors that say which reset to run ("<task>" when empty).
	Task    string
	Group   string
	Topics  []string
	StartAt string // "earliest" (default), "latest", or an RFC 3339 time
	// MaxPollRecords bounds the records of one poll. Default 2000.
	MaxPollRecords int
	Handler        Handler
	// SessionTimeout and RebalanceTimeout; zero: franz-go's defaults (45 s, 60 s).
	SessionTimeout, RebalanceTimeout time.Duration
	// Txn, if set, makes the consumer transactional; Handler must then be a TxnHandler.
	Txn *TxnConfig
	// Progress, if set, turns on the standby balancer (StandbyBalancer): it reports the
	// changelog offset this host's copy of each partition covers.
	Progress func() map[TopicPartition]int64
	// Bounded makes the consumer list every partition's end offset when it is first assigned
	// partitions (Bound): a bounded run reads each partition up to there and ends.
	Bounded bool
	// InstanceID, if set, makes the consumer a static group member (group.instance.id): a
	// member that died (a crash, a kill) and restarts with the same id within its session
	// takes its partitions back without a rebalance. Close still leaves the group (by instance
	// id), so that a stopped member's partitions move at once.
	InstanceID string
	// UnreachableTimeout bounds how long the cluster may be unreachable (fetches failing for
	// want of a connection: refused, reset, timed out) before Run fails. Until then the client
	// retries with back-off and Run goes on. Default DefaultUnreachableTimeout.
	UnreachableTimeout time.Duration
	// Reachable, if set, is told when the cluster stops and starts answering again, from Run's
	// goroutine.
	Reachable func(bool)
	// Advertise, if set, returns the address of this host's admin API, which the member
	// advertises to the group at every join (advertise.go; "" advertises none).
	Advertise func() string
	// MetadataMaxAge is how often the client reads the topics' metadata again at most, which
	// is how soon partitions added to an input topic are noticed (the group's leader then
	// rebalances them in). Default DefaultMetadataMaxAge.
	MetadataMaxAge time.Duration
}

// DefaultUnreachableTimeout is ConsumerConfig.UnreachableTimeout's default.
const DefaultUnreachableTimeout = 2 * time.Minute

// DefaultMetadataMaxAge is ConsumerConfig.MetadataMaxAge's default. franz-go's and Kafka's own
// (metadata.max.age.ms) is 5 minutes, during which records produced to an added partition wait
// unread; one metadata request per member every 10 s costs the cluster next to nothing.
const DefaultMetadataMaxAge = 10 * time.Second

// Bounds are a partition's offsets for a bounded run (ConsumerConfig.Bounded): its log start
// offset when the partition was assigned, and its end offset when the consumer first listed the
// topics' end offsets: the last stable offset, below the first record of a transaction open then.
type Bounds struct{ Start, End int64 }

// Consumer is a consumer-group member reading the task's topics.
type Consumer struct {
	cl      *kgo.Client
	reseeks map[TopicPartition]reseekCount // logHolds's, under mu
	next    map[TopicPartition]int64       // per partition, the offset the task reads next (handOver, rewind); under mu
	failing map[TopicPartition]time.Time   // partitions whose fetches fail (serverError): since when; Run's goroutine
	// reseekCommitted holds, for a transactional consumer, the committed offset (nil: none) of
	// each partition logHolds moved back in the open transaction, which the client's view
	// lost (rewind); Run's goroutine, or the loop's in Commit.
	reseekCommitted map[TopicPartition]*kgo.EpochOffset
	max             int
	start           kgo.Offset // where a partition without a committed offset starts
	handler         Handler
	log             *slog.Logger
	connectTimeout  time.Duration // Config.ConnectTimeout
	ready           chan struct{} // closed once cl is set: the group may call back before NewClient returns

	mu     sync.Mutex
	paused map[TopicPartition]bool

	bounded bool
	ends    map[TopicPartition]int64  // bounded: end offsets, listed once (under mu)
	bounds  map[TopicPartition]Bounds // bounded: the assigned partitions' bounds (under mu)
	starts  map[TopicPartition]int64  // the assigned partitions' log starts at assignment (LogStart; under mu)
	topics  []string

	// compactOnly holds the input topics whose cleanup.policy is compact alone, as described at
	// their last assignment (under mu): their log start moves with compaction (kfake moves it
	// to the first batch compaction kept), so a fetch of theirs reports no LogStart.
	compactOnly map[string]bool

	// Static membership (ConsumerConfig.InstanceID): Close leaves the group with a client of
	// base's options.
	group, instanceID string
	base              []kgo.Opt
	task              string // ConsumerConfig.Task, or "<task>"
	// fenced: another member joined with the instance id, which is now its own (handOver).
	fenced atomic.Bool

	counts partCounts // the topics' partition counts, for Describe

	// StartAt "latest": the topics' partition counts when Run started (or at the first
	// assignment, if that came first or the listing failed then; under mu). A partition added
	// later, without a committed offset, starts at its beginning: every record in it arrived
	// after the task started, which is what latest means, while its end would skip those
	// produced before the group noticed the partition.
	latest       bool
	partsAtStart map[string]int32

	// The cluster's reachability, Run's goroutine only (health).
	unreachableTimeout time.Duration
	reachable          func(bool)
	downSince          time.Time // zero while reachable
	downLogged         time.Time

	// Transactional mode (ConsumerConfig.Txn).
	sess     *kgo.GroupTransactSession
	txn      *TxnConfig
	inTxn    bool
	polledAt map[TopicPartition]int64 // per partition polled in the open transaction, its first offset
	backoff  time.Duration            // how long Run waits before polling again after an abort; zero after a commit
	// rebalanced: the session passed a revoke or a loss on since its transaction last ended
	// (set in the group's callbacks, cleared by EndTxn). franz-go's GroupTransactSession
	// passes only the first of each on until its End: EndTxn must end it for the next to reach
	// the task.
	rebalanced atomic.Bool
	// unhanded: Run returned with records polled in the open transaction that it never handed
	// over (it stopped mid-poll). Their offsets are the client's to commit with the transaction,
	// so it may only abort (EndTxn).
	unhanded atomic.Bool
	// joinedAt: the group is joining and syncing since then (zero otherwise; joinWatch), during
	// which the topics are paused (joining).
	joinMu   sync.Mutex
	joinedAt time.Time
	begunAt  time.Time // when the open transaction began, or last ended idle (Run's goroutine, or the loop's in Commit)
}

// Generation is the group generation this member is in (-1 while it is in none): called from
// Handler.Assigned, the generation in which the coordinator assigned the partitions. The
// coordinator raises it at every rebalance, so a partition's later owner was assigned it in a
// higher generation than every earlier owner (a static member that rejoins without a
// rebalance keeps its generation).
func (c *Consumer) Generation() int32 {
	<-c.ready
	_, g := c.cl.GroupMetadata()
	return g
}

// MemberID is this member's id in the group ("" until it joined).
func (c *Consumer) MemberID() string {
	select {
	case <-c.ready:
	default:
		return ""
	}
	id, _ := c.cl.GroupMetadata()
	return id
}

// StartOffset parses a start position: "earliest", "latest" or an RFC 3339 time.
func StartOffset(s string) (kgo.Offset, error) {
	switch s {
	case "", "earliest":
		return kgo.NewOffset().AtStart(), nil
	case "latest":
		return kgo.NewOffset().AtEnd(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return kgo.Offset{}, fmt.Errorf("start_at %q is not earliest, latest or an RFC 3339 time", s)
	}
	return kgo.NewOffset().AfterMilli(t.UnixMilli()), nil
}

// NewConsumer creates the client; it joins the group when Run polls.
func NewConsumer(cfg Config, cc ConsumerConfig) (*Consumer, error) {
	opts, err := cfg.opts()
	if err != nil {
		return nil, err
	}
	start, err := StartOffset(cc.StartAt)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if cc.MaxPollRecords <= 0 {
		cc.MaxPollRecords = 2000
	}
	c := &Consumer{ready: make(chan struct{}), log: cfg.Logger, connectTimeout: cfg.ConnectTimeout, max: cc.MaxPollRecords, handler: cc.Handler, paused: map[TopicPartition]bool{}, start: start,
		bounded: cc.Bounded, topics: cc.Topics, bounds: map[TopicPartition]Bounds{}, starts: map[TopicPartition]int64{},
		unreachableTimeout: cc.UnreachableTimeout, reachable: cc.Reachable,
		group: cc.Group, instanceID: cc.InstanceID, base: slices.Clone(opts), latest: cc.StartAt == "latest", task: cc.Task}
	if c.task == "" {
		c.task = "<task>"
	}
	if c.unreachableTimeout <= 0 {
		c.unreachableTimeout = DefaultUnreachableTimeout
	}
	if cc.MetadataMaxAge <= 0 {
		cc.MetadataMaxAge = DefaultMetadataMaxAge
	}
	opts = append(opts,
		kgo.ConsumerGroup(cc.Group),
		kgo.ConsumeTopics(cc.Topics...),
		// Set both: since franz-go 1.22 the start offset no longer sets the reset offset.
		// The reset offset is always the log start, whatever start_at says: a position below
		// the log start (retention, a DeleteRecords) resumes at the first record still there,
		// which the task counts as records lost to retention (Fetch.LogStart); with start_at
		// latest (the reset's offset before) such a partition jumped to its end, skipping
		// every record still there without a word. A position past the log's end (a log
		// truncated below it) is a fetch error (kgo.ErrDataLoss) the task halts on.
		kgo.ConsumeStartOffset(start),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// A paused partition's buffered fetch is dropped and fetched again on resume; keep
		// fetches per partition small enough that they seldom cross the task's queue bound
		// alone, and the long poll short enough that a resumed partition is fetched soon.
		kgo.FetchMaxPartitionBytes(256<<10),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.Balancers(c.watchJoins(cc.Txn != nil, balancers(cc.Progress, cc.Advertise))...),
		kgo.AdjustFetchOffsetsFn(c.adjust),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.MetadataMaxAge(cc.MetadataMaxAge),
		kgo.MetadataMinAge(min(RetryMetadataMinAge, cc.MetadataMaxAge)),
	)
	if cc.SessionTimeout > 0 {
		// Heartbeats at a third of the session (franz-go's default of 3 s would outlast a short one).
		opts = append(opts, kgo.SessionTimeout(cc.SessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, cc.SessionTimeout/3)))
	}
	if cc.RebalanceTimeout > 0 {
		opts = append(opts, kgo.RebalanceTimeout(cc.RebalanceTimeout))
	}
	if cc.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cc.InstanceID))
	}
	// Both clients keep control records (transaction markers): they are handed over as
	// Fetch.ControlEnd, so that the position committed after a transaction's last record
	// passes its marker (and the aborted records after it): otherwise the group's lag stayed
	// above 0 for good. A transactional consumer's offsets commit with its transactions, from
	// what its client polled, which includes the markers too.
	if tc := cc.Txn; tc != nil {
		if _, ok := cc.Handler.(TxnHandler); !ok {
			return nil, errors.New("kafka: a transactional consumer needs a TxnHandler")
		}
		if tc.Timeout <= 0 {
			tc.Timeout = 15 * time.Second
		}
		if tc.Interval <= 0 {
			tc.Interval = time.Second
		}
		pc := ProducerConfig{Compression: tc.Compression}
		for _, p := range tc.Producers {
			if p.limits != nil {
				pc.Limits = p.limits // one task's producers share them
			}
		}
		popts, err := producerOpts(pc)
		if err != nil {
			return nil, err
		}
		opts = append(opts, popts...)
		opts = append(opts,
			kgo.TransactionalID(tc.ID),
			kgo.TransactionTimeout(tc.Timeout),
			kgo.RecordPartitioner(txnPartitioner{changelog: tc.Changelog}),
			// The client retries a batch the broker refused with a retriable error (e.g.
			// NOT_ENOUGH_REPLICAS) only after a metadata refresh, at most one per min age: at
			// the default 5 s, three refusals in a row outlasted a 15 s transaction, which the
			// broker then aborted, fencing the producer (the task halted).
			kgo.MetadataMinAge(RetryMetadataMinAge),
		)
		c.txn, c.polledAt = tc, map[TopicPartition]int64{}
		c.sess, err = kgo.NewGroupTransactSession(append(opts, kgo.KeepControlRecords())...)
		if err != nil {
			return nil, fmt.Errorf("kafka: %w", err)
		}
		c.cl = c.sess.Client()
		for _, p := range tc.Producers {
			p.attach(c.cl)
		}
		if tc.Changelog != nil {
			tc.Changelog.attach(c.cl)
		}
		close(c.ready)
		return c, nil
	}
	c.cl, err = kgo.NewClient(append(opts, kgo.KeepControlRecords())...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	close(c.ready)
	return c, nil
}

// listBounds records the bounds of newly assigned partitions: their log start offsets now, and
// their end offsets (last stable offsets) as listed the first time (a bounded run's end does not
// move with a rebalance).
func (c *Consumer) listBounds(ctx context.Context, parts []TopicPartition) error {
	<-c.ready
	adm := kadm.NewClient(c.cl)
	c.mu.Lock()
	ends := c.ends
	c.mu.Unlock()
	if ends == nil {
		// The end a read_committed reader can reach: the last stable offset. The records of a
		// transaction open now (and any after its first) become readable only when it ends,
		// which may take the transaction's timeout; the partition's high watermark would have
		// the run wait for that.
		listed, err := adm.ListCommittedOffsets(ctx, c.topics...)
		if err == nil {
			err = listed.Error()
		}
		if err != nil {
			return fmt.Errorf("kafka: listing the end offsets of a bounded run: %w", err)
		}
		ends = map[TopicPartition]int64{}
		listed.Each(func(o kadm.ListedOffset) { ends[TopicPartition{o.Topic, o.Partition}] = o.Offset })
		c.log.Info("bounded run: reading every partition up to its end offset now", "partitions", len(ends))
	}
	starts, err := adm.ListStartOffsets(ctx, c.topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: listing the start offsets of a bounded run: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ends = ends
	for _, tp := range parts {
		b := Bounds{End: ends[tp]}
		if o, ok := starts.Lookup(tp.Topic, tp.Partition); ok {
			b.Start = o.Offset
		}
		c.bounds[tp] = b
		c.starts[tp] = b.Start
	}
	return nil
}

// listStarts records the log start offsets of newly assigned partitions (LogStart); a failure is
// logged, and their log starts are then unknown.
func (c *Consumer) listStarts(ctx context.Context, parts []TopicPartition) {
	starts := c.listOffsets(ctx, parts, (*kadm.Client).ListStartOffsets,
		"kafka: listing the assigned partitions' log start offsets failed; records removed below them are counted at their next fetch")
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.Copy(c.starts, starts)
}

// LogStart returns a partition's log start offset as listed when it was assigned; false when
// unknown, or its topic is compacted alone (as a fetch's LogStart). Safe from any goroutine; a
// Handler's Assigned may call it for the partitions it is told.
func (c *Consumer) LogStart(tp TopicPartition) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.compactOnly[tp.Topic] {
		return -1, false
	}
	s, ok := c.starts[tp]
	return s, ok
}

// Bound returns a partition's bounds in a bounded run; false when the consumer is not bounded
// or the partition was never assigned. Safe from any goroutine; a Handler's Assigned may call
// it for the partitions it is told.
func (c *Consumer) Bound(tp TopicPartition) (Bounds, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.bounds[tp]
	return b, ok
}

// EachBound calls fn for every partition of a bounded run's topics (those whose end offsets were
// listed). Safe from any goroutine.
func (c *Consumer) EachBound(fn func(TopicPartition)) {
	c.mu.Lock()
	tps := make([]TopicPartition, 0, len(c.ends))
	for tp := range c.ends {
		tps = append(tps, tp)
	}
	c.mu.Unlock()
	for _, tp := range tps {
		fn(tp)
	}
}

// balancers are the group protocols the consumer offers, the preferred first.
func balancers(progress func() map[TopicPartition]int64, advertise func() string) []kgo.GroupBalancer {
	bs := []kgo.GroupBalancer{kgo.CooperativeStickyBalancer()}
	if progress != nil {
		bs = []kgo.GroupBalancer{StandbyBalancer(progress), kgo.CooperativeStickyBalancer()}
	}
	if advertise != nil {
		for i, b := range bs {
			bs[i] = advertising{GroupBalancer: b, addr: advertise}
		}
	}
	return bs
}

// txnPartitioner partitions a transactional client's records: changelog records go to the
// partition they name, outputs are hashed by key like Producer's.
type txnPartitioner struct{ changelog *ChangelogWriter }

func (p txnPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	if p.changelog != nil && topic == p.changelog.topic {
		return kgo.ManualPartitioner().ForTopic(topic)
	}
	return kgo.StickyKeyPartitioner(nil).ForTopic(topic)
}

func (c *Consumer) adjust(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	committed := map[TopicPartition]int64{}
	for t, ps := range offs {
		for p, o := range ps {
			v := o.EpochOffset().Offset
			if o == c.start || v < 0 {
				v = -1 // not a committed offset: the group's start position
			}
			committed[TopicPartition{t, p}] = v
		}
	}
	fresh := make([]TopicPartition, 0, len(committed))
	for tp := range committed {
		fresh = append(fresh, tp)
	}
	c.forget(fresh)
	if c.bounded {
		if err := c.listBounds(ctx, fresh); err != nil {
			return nil, err
		}
	} else {
		c.listStarts(ctx, fresh)
	}
	if c.latest {
		c.addedFromStart(ctx, offs, committed)
	}
	c.describeCleanup(ctx, fresh)
	start, err := c.handler.Assigned(ctx, committed, c.endOffsets(ctx, fresh), c.topicIDs(ctx, fresh), c.externalCommits(ctx, committed))
	if err != nil {
		return nil, err
	}
	for tp, at := range start {
		if at.Offset < 0 {
			continue
		}
		if at.Epoch < 0 && committed[tp] == at.Offset {
			// The group's committed offset, with the epoch it was committed with (if any).
			continue
		}
		// With a known epoch the client asks the leader where its log for that epoch ends
		// before it fetches: a log that diverged below the offset is a kgo.ErrDataLoss.
		offs[tp.Topic][tp.Partition] = kgo.NewOffset().At(at.Offset).WithEpoch(at.Epoch)
	}
	return offs, nil
}

// listPartsAtStart records the topics' partition counts (StartAt "latest"), unless they were
// recorded already, and reports whether they are. A failure is logged and leaves them unset.
func (c *Consumer) listPartsAtStart(ctx context.Context) bool {
	c.mu.Lock()
	listed := c.partsAtStart != nil
	c.mu.Unlock()
	if listed {
		return true
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	details, err := kadm.NewClient(c.cl).ListTopics(lctx, c.topics...)
	cancel()
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		if c.log != nil {
			c.log.Warn("kafka: listing the input topics' partitions failed; start_at latest starts the partitions assigned now at their end", "err", err)
		}
		return false
	}
	counts := map[string]int32{}
	for name, d := range details {
		counts[name] = int32(len(d.Partitions))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.partsAtStart == nil {
		c.partsAtStart = counts
	}
	return true
}

// addedFromStart (StartAt "latest") starts the partitions without a committed offset that were
// added to their topics since Run started (listPartsAtStart) at their beginning instead of their
// end. Until the counts are listed, no partition counts as added.
func (c *Consumer) addedFromStart(ctx context.Context, offs map[string]map[int32]kgo.Offset, committed map[TopicPartition]int64) {
	c.mu.Lock()
	counts := c.partsAtStart
	c.mu.Unlock()
	if counts == nil {
		c.listPartsAtStart(ctx) // the first assignment came first: its partitions were all there
		return
	}
	for tp, v := range committed {
		if n, ok := counts[tp.Topic]; ok && v < 0 && tp.Partition >= n {
			offs[tp.Topic][tp.Partition] = kgo.NewOffset().AtStart()
			if c.log != nil {
				c.log.Info("kafka: a partition added to the topic since the task started: read from its beginning (start_at latest)",
					"topic", tp.Topic, "partition", tp.Partition)
			}
		}
	}
}

// describeCleanup records which of the partitions' topics are compacted alone
// (cleanup.policy=compact, without delete): on those, records below the log start were
// superseded by later records of their keys, not lost. A failure is logged, and the topics
// then count as not compacted.
func (c *Consumer) describeCleanup(ctx context.Context, parts []TopicPartition) {
	names := topicNames(parts)
	if len(names) == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rcs, err := kadm.NewClient(c.cl).DescribeTopicConfigs(lctx, names...)
	if err != nil {
		if c.log != nil {
			c.log.Warn("kafka: describing the input topics' cleanup.policy failed; records below a partition's log start count as lost to retention this time", "err", err)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.compactOnly == nil {
		c.compactOnly = map[string]bool{}
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		compact := false
		for _, cf := range rc.Configs {
			if cf.Key == "cleanup.policy" && cf.Value != nil {
				compact = *cf.Value == "compact"
			}
		}
		c.compactOnly[rc.Name] = compact
	}
}

// logStart is a fetch's LogStart: the partition's log start offset, or -1 for a topic compacted
// alone (describeCleanup).
func (c *Consumer) logStart(topic string, at int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.compactOnly[topic] {
		return -1
	}
	return at
}

// TopicID is a Kafka topic's id (Kafka 2.8 and later): a topic deleted and created again under
// the same name has a new one.
type TopicID [16]byte

// topicIDs lists the ids of the partitions' topics from the cluster's metadata; a failure is
// logged, and the ids are then unknown (as they are from a broker that has none: all zero).
func (c *Consumer) topicIDs(ctx context.Context, parts []TopicPartition) map[string]TopicID {
	if len(parts) == 0 {
		return nil
	}
	names := map[string]bool{}
	var list []string
	for _, tp := range parts {
		if !names[tp.Topic] {
			names[tp.Topic] = true
			list = append(list, tp.Topic)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	details, err := kadm.NewClient(c.cl).ListTopics(lctx, list...)
	if err != nil {
		if c.log != nil {
			c.log.Warn("kafka: listing the assigned topics' ids failed; a recreated topic is told only by its end offsets this time", "err", err)
		}
		return nil
	}
	out := map[string]TopicID{}
	for name, d := range details {
		if d.Err == nil && d.ID != (kadm.TopicID{}) {
			out[name] = TopicID(d.ID)
		}
	}
	return out
}

// endOffsets lists the partitions' end offsets; a failure is logged, and the partitions' ends
// are then unknown.
func (c *Consumer) endOffsets(ctx context.Context, parts []TopicPartition) map[TopicPartition]int64 {
	return c.listOffsets(ctx, parts, (*kadm.Client).ListEndOffsets,
		"kafka: listing the assigned partitions' end offsets failed; a recreated topic is not detected this time")
}

// listOffsets lists the partitions' offsets with list (of their topics); a failure is logged
// with warning, and the partitions' offsets are then unknown (absent).
func (c *Consumer) listOffsets(ctx context.Context, parts []TopicPartition, list func(*kadm.Client, context.Context, ...string) (kadm.ListedOffsets, error), warning string) map[TopicPartition]int64 {
	if len(parts) == 0 {
		return nil // (no topics would list every topic)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	listed, err := list(kadm.NewClient(c.cl), lctx, topicNames(parts)...)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		if c.log != nil {
			c.log.Warn(warning, "err", err)
		}
		return nil
	}
	out := map[TopicPartition]int64{}
	for _, tp := range parts {
		if o, ok := listed.Lookup(tp.Topic, tp.Partition); ok && o.Err == nil {
			out[tp] = o.Offset
		}
	}
	return out
}

// ResetMetadata is the metadata of the offsets `wasmstream reset` commits (CommitOffsets).
const ResetMetadata = "wasmstream reset"

// ExternalCommit reports whether a committed offset's metadata says it was set from outside the
// group: the commits of a wasmstream host (franz-go's group and transactional commits) carry
// the member id, an admin tool's (kafka-consumer-groups --reset-offsets, kadm) no metadata,
// `wasmstream reset`'s ResetMetadata.
func ExternalCommit(metadata string) bool { return metadata == "" || metadata == ResetMetadata }

// topicNames returns the distinct topics of parts.
func topicNames(parts []TopicPartition) []string {
	seen := map[string]bool{}
	var names []string
	for _, tp := range parts {
		if !seen[tp.Topic] {
			seen[tp.Topic] = true
			names = append(names, tp.Topic)
		}
	}
	return names
}

// externalCommits reads the metadata of the partitions' committed offsets (those of committed
// that have one) and returns those set from outside the group (ExternalCommit). A failure is
// logged and returns none.
func (c *Consumer) externalCommits(ctx context.Context, committed map[TopicPartition]int64) map[TopicPartition]bool {
	var parts []TopicPartition
	for tp, o := range committed {
		if o >= 0 {
			parts = append(parts, tp)
		}
	}
	names := topicNames(parts)
	if len(names) == 0 {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rs, err := kadm.NewClient(c.cl).FetchOffsetsForTopics(lctx, c.group, names...)
	if err != nil {
		if c.log != nil {
			c.log.Warn("kafka: fetching the committed offsets' metadata failed; an external offset reset is not detected this time", "err", err)
		}
		return nil
	}
	out := map[TopicPartition]bool{}
	for tp, o := range committed {
		if r, ok := rs.Lookup(tp.Topic, tp.Partition); ok && r.Err == nil && o >= 0 && r.At == o && ExternalCommit(r.Metadata) {
			out[tp] = true
		}
	}
	return out
}

func flatten(m map[string][]int32) []TopicPartition {
	var out []TopicPartition
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, TopicPartition{t, p})
		}
	}
	return out
}

func (c *Consumer) revoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	parts := flatten(m)
	if len(parts) == 0 {
		if c.txn != nil {
			// The end of a group session: the join follows. Called before the next poll
			// takes records (the rebalance goes first), so that the poll finds the topics paused.
			c.joining(true)
		}
		return
	}
	if c.txn != nil {
		c.rebalanced.Store(true)
	}
	offsets := c.handler.Revoked(ctx, parts)
	c.forget(parts)
	if len(offsets) == 0 || c.txn != nil {
		// A transactional consumer's offsets commit only in its transactions.
		return
	}
	commit := groupCommit(offsets)
	// The documented place for a blocking commit: the rebalance waits for it.
	cl.CommitOffsetsSync(ctx, commit, nil)
}

func (c *Consumer) lost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	parts := flatten(m)
	if c.txn != nil {
		c.rebalanced.Store(true)
	}
	c.forget(parts)
	if len(parts) > 0 {
		c.handler.Lost(ctx, parts)
	}
}

// forget clears the pause of partitions that are no longer ours (or newly ours): franz-go keeps
// a partition paused across rebalances, and a partition that comes back must not stay paused
// when nothing of the task is holding it back any more.
func (c *Consumer) forget(parts []TopicPartition) {
	<-c.ready
	c.mu.Lock()
	defer c.mu.Unlock()
	resume := map[string][]int32{}
	for _, tp := range parts {
		delete(c.paused, tp)
		delete(c.next, tp)
		delete(c.starts, tp)
		resume[tp.Topic] = append(resume[tp.Topic], tp.Partition)
	}
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// Run polls until ctx is done or the client fails, handing each poll's records to out one
// partition at a time before letting a rebalance proceed.
func (c *Consumer) Run(ctx context.Context, out chan<- Fetch) error {
	if err := ping(ctx, c.cl, c.connectTimeout, c.log); err != nil {
		return err
	}
	if c.latest {
		c.listPartsAtStart(ctx)
	}
	if c.txn != nil {
		return c.runTxn(ctx, out)
	}
	for {
		// Polls return at least every healthEvery, so that an outage is noticed (and its end)
		// even when no fetch reports it.
		pctx, cancel := context.WithTimeout(ctx, healthEvery)
		fs := c.cl.PollRecords(pctx, c.max)
		cancel()
		if ctx.Err() != nil {
			c.cl.AllowRebalance()
			return nil
		}
		if errors.Is(fs.Err0(), kgo.ErrClientClosed) {
			c.cl.AllowRebalance()
			return nil
		}
		ok, fatal := c.handOver(ctx, fs, out)
		c.cl.AllowRebalance()
		if !ok {
			return nil
		}
		if fatal != nil {
			return fatal
		}
	}
}

// handOver sends a poll's records to out, partition by partition, and returns the first fatal
// fetch error; ok is false if ctx ended first.
func (c *Consumer) handOver(ctx context.Context, fs kgo.Fetches, out chan<- Fetch) (ok bool, fatal error) {
	var outage error
	var reseek map[string]map[int32]kgo.EpochOffset // partitions moved back by a spurious OFFSET_OUT_OF_RANGE (logHolds)
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if isConnectionErr(err) {
			// The client retries; an outage only fails Run once it lasted UnreachableTimeout.
			if outage == nil {
				outage = fmt.Errorf("kafka: fetching %s/%d: %w", t, p, err)
			}
			return
		}
		if errors.Is(err, kerr.FencedInstanceID) && fatal == nil {
			// Another member took this one's group.instance.id: it now owns our partitions.
			// Rejoining would fence it in turn, and leaving by the instance id would throw it
			// out (Close): the task stops.
			c.fenced.Store(true)
			fatal = fmt.Errorf("kafka: another consumer joined the group %q with this host's group.instance.id %q and took its partitions: "+
				"another host runs with the same host_id (each host needs its own, stable across its restarts), so this task stops: %w",
				c.group, c.instanceID, err)
			return
		}
		if rejoins(err) {
			// The coordinator no longer knows this member (its session expired while it was
			// slow to rejoin, or it was removed from outside the group): the client has called
			// Lost and joins again.
			if c.log != nil {
				c.log.Warn("kafka: the group no longer knew this member; its partitions were dropped and it joins again", "group", c.group, "err", err)
			}
			return
		}
		// Retryable fetch errors are retried by the client; report what reaches us.
		var loss *kgo.ErrDataLoss
		switch {
		case fatal != nil || kgo.IsRetryableBrokerErr(err):
		case errors.As(err, &loss):
			if c.logHolds(ctx, loss) {
				if reseek == nil {
					reseek = map[string]map[int32]kgo.EpochOffset{}
				}
				if reseek[t] == nil {
					reseek[t] = map[int32]kgo.EpochOffset{}
				}
				// Where the task reads next: the offset after what was handed over, unless an
				// abort's rewind (or an assignment) moved the partition since the client read
				// up to loss.ConsumedTo.
				at := kgo.EpochOffset{Epoch: loss.ConsumedToEpoch, Offset: loss.ConsumedTo}
				c.mu.Lock()
				if n, ok := c.next[TopicPartition{t, p}]; ok && n != at.Offset {
					at = kgo.EpochOffset{Epoch: -1, Offset: n}
				}
				c.mu.Unlock()
				reseek[t][p] = at
				return
			}
			fatal = dataLoss(loss, c.task)
		case errors.Is(err, kerr.UnknownServerError):
			// A broker's unexpected failure, which Kafka's own consumer logs and fetches again
			// (before, the task halted at the first one): ridden out for
			// kafka.unreachable_timeout in a row, then a halt.
			fatal = c.serverError(TopicPartition{t, p}, err)
		case errors.Is(err, kerr.UnknownTopicID):
			// The client fetches by topic id: the topic it was assigned is gone.
			fatal = fmt.Errorf("kafka: fetching %s/%d: input topic %s was deleted while the task read it "+
				"(a topic created again under its name is a new topic: to process it, reset the task: "+
				"wasmstream reset --task %s --to earliest): %w", t, p, t, c.task, err)
		default:
			fatal = fmt.Errorf("kafka: fetching %s/%d: %w (the task halts; once the cause is fixed, restart it: wasmstream restart --task %s; it resumes from its last checkpoint)", t, p, err, c.task)
		}
	})
	if fatal == nil {
		fatal = c.health(ctx, outage, len(fs.Records()) > 0)
	}
	if fatal == nil && len(reseek) > 0 {
		// Back to where the task had read: what this poll holds of such a partition is the
		// client's rewind (from the log start), handed over already or fetched again.
		if c.txn != nil {
			// SetOffsets makes the offset the partition's committed one in the client's
			// view, which an abort rewinds to: keep the real one for rewind.
			committed := c.cl.CommittedOffsets()
			if c.reseekCommitted == nil {
				c.reseekCommitted = map[TopicPartition]*kgo.EpochOffset{}
			}
			for t, ps := range reseek {
				for p := range ps {
					tp := TopicPartition{t, p}
					if _, kept := c.reseekCommitted[tp]; kept {
						continue
					}
					var real *kgo.EpochOffset
					if eo, ok := committed[t][p]; ok && eo.Offset >= 0 {
						real = &eo
					}
					c.reseekCommitted[tp] = real
				}
			}
		}
		c.cl.SetOffsets(reseek)
	}
	ok = true
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if !ok || len(p.Records) == 0 {
			return
		}
		if _, moved := reseek[p.Topic][p.Partition]; moved {
			return
		}
		if len(c.failing) > 0 {
			delete(c.failing, TopicPartition{p.Topic, p.Partition})
		}
		tp := TopicPartition{p.Topic, p.Partition}
		f := Fetch{TopicPartition: tp, Records: make([]Record, 0, len(p.Records)), HighWatermark: p.HighWatermark, LogStart: c.logStart(p.Topic, p.LogStartOffset)}
		for _, r := range p.Records {
			if r.Attrs.IsControl() {
				f.ControlEnd, f.ControlEpoch = r.Offset+1, r.LeaderEpoch
				continue
			}
			f.ControlEnd = 0
			rec := Record{Offset: r.Offset, LeaderEpoch: r.LeaderEpoch, Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, Header{Name: []byte(h.Key), Value: h.Value})
			}
			f.Records = append(f.Records, rec)
		}
		if len(f.Records) == 0 && f.ControlEnd == 0 {
			return
		}
		next := f.ControlEnd
		if n := len(f.Records); n > 0 {
			next = max(next, f.Records[n-1].Offset+1)
		}
		c.mu.Lock()
		if c.next == nil {
			c.next = map[TopicPartition]int64{}
		}
		c.next[tp] = next
		c.mu.Unlock()
		if c.polledAt != nil {
			if _, seen := c.polledAt[tp]; !seen {
				// A fetch of markers alone moved the partition too: an abort rewinds it.
				first := f.ControlEnd - 1
				if len(f.Records) > 0 {
					first = f.Records[0].Offset
				}
				c.polledAt[tp] = first
			}
		}
		select {
		case out <- f:
		case <-ctx.Done():
			ok = false
		}
	})
	return ok, fatal
}

// logHolds reports whether the log of e's partition still holds every offset below where the
// consumer had read it, as the cluster says now: its end offset is not below, and the leader's
// log for the epoch of the last record read ends at or above it. The client reports a fetch
// answered OFFSET_OUT_OF_RANGE at an offset the partition holds (a leader whose high watermark
// lagged after a leadership change, a broker's transient answer) as data loss too, moving the
// partition back to its log start: the task then halted claiming records were gone (the log
// diverged "at offset 0"). When the log holds them, the partition goes back to where the task
// had read and the warning says so; a partition answered so more than maxReseeks times in a
// row at the same offset halts as a loss. Unknown (the cluster did not answer) is a loss.
func (c *Consumer) logHolds(ctx context.Context, e *kgo.ErrDataLoss) bool {
	if c.cl == nil || e.ConsumedTo <= 0 {
		return false
	}
	tp := TopicPartition{e.Topic, e.Partition}
	c.mu.Lock()
	if c.reseeks == nil {
		c.reseeks = map[TopicPartition]reseekCount{}
	}
	rc := c.reseeks[tp]
	if rc.at != e.ConsumedTo {
		rc = reseekCount{at: e.ConsumedTo}
	}
	rc.n++
	c.reseeks[tp] = rc
	c.mu.Unlock()
	if rc.n > maxReseeks {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.cl)
	ends, err := adm.ListEndOffsets(ctx, e.Topic)
	if err != nil {
		return false
	}
	end, ok := ends.Lookup(e.Topic, e.Partition)
	if !ok || end.Err != nil || end.Offset < e.ConsumedTo {
		return false
	}
	epochEnd := int64(-1)
	if e.ConsumedToEpoch >= 0 {
		var req kadm.OffsetForLeaderEpochRequest
		req.Add(e.Topic, e.Partition, e.ConsumedToEpoch)
		res, err := adm.OffsetForLeaderEpoch(ctx, req)
		if err != nil {
			return false
		}
		r, ok := res[e.Topic][e.Partition]
		if !ok || r.Err != nil || r.LeaderEpoch < 0 || r.EndOffset < e.ConsumedTo {
			return false
		}
		epochEnd = r.EndOffset
	}
	if c.log != nil {
		c.log.Warn("kafka: the broker answered a fetch of an input partition as out of range although its log holds the offset, and the client moved the partition back to its log start; it goes on from where the task had read",
			"topic", e.Topic, "partition", e.Partition, "offset", e.ConsumedTo, "leader_epoch", e.ConsumedToEpoch,
			"end_offset", end.Offset, "epoch_end_offset", epochEnd, "moved_to", e.ResetTo)
	}
	return true
}

// serverError notes a fetch of tp answered UNKNOWN_SERVER_ERROR, which the client fetches again:
// the first of a run is logged, and a run that lasts kafka.unreachable_timeout (no record of tp
// in between) is the error that halts the task.
func (c *Consumer) serverError(tp TopicPartition, err error) error {
	now := time.Now()
	if c.failing == nil {
		c.failing = map[TopicPartition]time.Time{}
	}
	since, ok := c.failing[tp]
	if !ok {
		c.failing[tp] = now
		if c.log != nil {
			c.log.Warn("kafka: a broker failed a fetch of an input partition; fetching it again", "topic", tp.Topic, "partition", tp.Partition,
				"halt_after", c.unreachableTimeout, "err", err)
		}
		return nil
	}
	if d := now.Sub(since); d >= c.unreachableTimeout {
		return fmt.Errorf("kafka: fetching %s/%d: the broker has failed every fetch of the partition for %s (kafka.unreachable_timeout %s): "+
			"see its log for the partition; once it serves it again, restart the task (wasmstream restart --task %s): it resumes from its last checkpoint: %w",
			tp.Topic, tp.Partition, d.Round(time.Millisecond), c.unreachableTimeout, c.task, err)
	}
	return nil
}

// maxReseeks bounds the partitions logHolds moves back in a row at one offset.
const maxReseeks = 5

// reseekCount counts logHolds's answers for a partition at one offset.
type reseekCount struct {
	at int64
	n  int
}

// dataLoss is the error of a partition whose log lost records below where the consumer had
// read it, with the same topic id (an unclean leader election, a broker that lost data, a log
// truncated): the client found its position past the log's end, or the log diverged from the
// records it had read (its leader epochs: while it runs, or at a start from a position stored
// with the epoch of the record before it), and moved the partition back, to where the log
// diverged when it could tell, else to the log start. Read on, the task would skip the records
// written since the loss as already processed (their offsets are below its position), so it
// halts.
func dataLoss(e *kgo.ErrDataLoss, task string) error {
	at := fmt.Sprintf("offset %d", e.ConsumedTo)
	if e.ConsumedToEpoch >= 0 {
		at += fmt.Sprintf(" (leader epoch %d)", e.ConsumedToEpoch)
	}
	where := "which the log no longer holds as it was read"
	if e.ResetTo >= 0 && e.ResetTo < e.ConsumedTo {
		where = fmt.Sprintf("but the partition's log diverged from what it read at offset %d (where the leader's log for that epoch ends): "+
			"the records it processed from offset %d to %d are gone, and those the partition holds there now were written since", e.ResetTo, e.ResetTo, e.ConsumedTo-1)
	}
	return fmt.Errorf("kafka: input topic %s partition %d lost records at the broker (an unclean leader election, a broker that lost data, or a truncated log): "+
		"this task had read it up to %s, %s; reading on would skip the records written since as already processed, so the task halts; "+
		"to read the partition again from its beginning, reset the task: wasmstream reset --task %s --to earliest (or --to %s:%d:<offset> from an offset of your choosing): %w",
		e.Topic, e.Partition, at, where, task, e.Topic, e.Partition, e)
}

// rejoins reports whether err is the client's notice that the group no longer knew the member
// (kgo.ErrGroupSession with UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION): the client has dropped the
// partitions (Handler.Lost) and joins the group again by itself.
func rejoins(err error) bool {
	var gs *kgo.ErrGroupSession
	return errors.As(err, &gs) && (errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration))
}

// runTxn is Run for a transactional consumer. Rebalances are held from one commit to the next,
// so that a partition only ever moves between transactions: what was polled of it is then
// committed, and nothing of it is in the open transaction.
func (c *Consumer) runTxn(ctx context.Context, out chan<- Fetch) error {
	h := c.handler.(TxnHandler)
	if err := c.sess.Begin(); err != nil {
		return fmt.Errorf("kafka: beginning a transaction: %w", err)
	}
	c.inTxn, c.begunAt = true, time.Now()
	next := time.Now().Add(c.txn.Interval)
	for {
		pctx, cancel := context.WithDeadline(ctx, next)
		fs := c.cl.PollRecords(pctx, c.max)
		cancel()
		if ctx.Err() != nil || errors.Is(fs.Err0(), kgo.ErrClientClosed) {
			if len(fs.Records()) > 0 {
				c.unhanded.Store(true)
			}
			return nil // rebalances stay held: the task ends the transaction, then Close
		}
		ok, fatal := c.handOver(ctx, fs, out)
		if !ok {
			c.unhanded.Store(true)
			return nil
		}
		if fatal != nil {
			return fatal
		}
		if time.Now().Before(next) {
			continue
		}
		if err := h.Commit(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c.cl.AllowRebalance()
		if c.backoff > 0 {
			// The transaction aborted: the records are read again, and what failed would most
			// likely fail again at once (a missing topic, a broker gone). The task says why.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.backoff):
			}
		}
		next = time.Now().Add(c.txn.Interval)
	}
}

// EndTxn ends the open transaction — committing what was produced and the offsets of everything
// polled, or aborting — and begins the next one. After an abort the client reads again from
// the offsets in the outcome. Call it only from TxnHandler.Commit, or after Run returned.
// An error means the transactional client is unusable (e.g. fenced by another host with the
// same transactional id): the task must stop. With idle (nothing was produced) and nothing polled
// since the last end, the transaction is left open and reported committed: there is nothing in it.
func (c *Consumer) EndTxn(ctx context.Context, commit, idle bool) (TxnOutcome, error) {
	if !c.inTxn {
		return TxnOutcome{}, errors.New("kafka: no transaction is open")
	}
	if c.unhanded.Load() {
		// The transaction would commit the offsets of records the task never got.
		commit = false
	}
	if idle && commit && len(c.polledAt) == 0 {
		if !c.rebalanced.Load() {
			c.begunAt = time.Now() // nothing is in it: the broker has not begun it either
			return TxnOutcome{Committed: true}, nil
		}
		// Nothing is in it, but the session took a revoke (or a loss) since it last ended, and
		// passes no other on until it ends: a second revoke in one session was never heard of,
		// and its partitions stayed the task's (listed, and never tailed by the standby).
		// Ending it sends the broker nothing.
		_, err := c.sess.End(ctx, kgo.TryAbort)
		c.inTxn = false
		c.rebalanced.Store(false)
		if err != nil {
			return TxnOutcome{}, fmt.Errorf("kafka: ending an empty transaction: %w", err)
		}
		if err := c.sess.Begin(); err != nil {
			return TxnOutcome{}, fmt.Errorf("kafka: beginning a transaction: %w", err)
		}
		c.inTxn, c.begunAt = true, time.Now()
		return TxnOutcome{Committed: true}, nil
	}
	committed, err := c.sess.End(ctx, kgo.TransactionEndTry(commit))
	c.inTxn = false
	c.rebalanced.Store(false)
	open := time.Since(c.begunAt) // until its end: ending it may wait (a join, the cluster)
	out := TxnOutcome{Committed: committed && err == nil}
	if !out.Committed {
		out.Rewound = c.rewind()
		for _, p := range c.txn.Producers {
			p.aborted() // none of their records remain
		}
		c.backoff = min(max(2*c.backoff, txnBackoffMin), txnBackoffMax)
	} else {
		c.backoff = 0
		c.reseekCommitted = nil // the commit made the client's committed offsets real
	}
	clear(c.polledAt)
	if open >= c.txn.Timeout && (errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidTxnState)) {
		// The broker aborts a transaction open longer than its timeout and bumps the
		// producer's epoch, which fences this producer as a newer one would (kfake answers a
		// commit of a transaction it aborted so with INVALID_TXN_STATE).
		return out, fmt.Errorf("kafka: ending the transaction: it was open %s, longer than kafka.transaction_timeout %s, so the broker aborted it and fenced this producer (or another host runs with the same host_id); nothing of it was committed: %w",
			open.Round(time.Millisecond), c.txn.Timeout, err)
	}
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
		return out, fmt.Errorf("kafka: ending the transaction: fenced by a newer producer with the transactional id %q (does another host run with the same host_id?): %w", c.txn.ID, err)
	}
	if err != nil && retriableEnd(err) {
		// The client gave up on a retriable error (a TxnOffsetCommit answered
		// REQUEST_TIMED_OUT is not among those it aborts on quietly). If the end it sent was
		// the abort that followed, the transaction is over and the client can begin the next
		// one: an abort like any other. If the EndTxn itself failed, whether it committed is
		// unknown, the client refuses to begin, and the error stands.
		if berr := c.sess.Begin(); berr == nil {
			out.Cause = fmt.Errorf("kafka: the cluster refused to commit the transaction, which aborted: %w", err)
			c.inTxn, c.begunAt = true, time.Now()
			return out, nil
		}
	}
	if err != nil {
		if retriableEnd(err) {
			return out, fmt.Errorf("kafka: ending the transaction: the cluster did not confirm its end, so whether it committed is unknown (the client cannot go on): "+
				"restart the task (wasmstream restart): the new client fences it, and the task resumes from what the cluster committed: %w", err)
		}
		return out, fmt.Errorf("kafka: ending the transaction: %w", err)
	}
	if err := c.sess.Begin(); err != nil {
		return out, fmt.Errorf("kafka: beginning a transaction: %w", err)
	}
	c.inTxn, c.begunAt = true, time.Now()
	return out, nil
}

// retriableEnd reports whether a transaction's end failed on a retriable broker error
// (REQUEST_TIMED_OUT, NOT_COORDINATOR, ...): the cluster may answer the next one.
func retriableEnd(err error) bool {
	var ke *kerr.Error
	return errors.As(err, &ke) && ke.Retriable
}

// Unhanded reports whether Run returned (stopped) with records of the open transaction that it
// polled but did not hand over: the client would commit their offsets with the transaction, so
// the transaction can only abort, and EndTxn aborts it. Call it after Run returned.
func (c *Consumer) Unhanded() bool { return c.unhanded.Load() }

// RetryMetadataMinAge is the minimum time between metadata refreshes of the clients that produce
// and consume a task's records, which paces their retries of what a broker refused with a
// retriable error (a batch refused NOT_LEADER_OR_FOLLOWER or NOT_ENOUGH_REPLICAS, a fetch refused
// NOT_LEADER_OR_FOLLOWER): each waits for a refresh. franz-go's default is 5 s.
const RetryMetadataMinAge = 250 * time.Millisecond

// The back-off of a transactional consumer after an abort: doubled from txnBackoffMin with each
// abort in a row, up to txnBackoffMax.
const (
	txnBackoffMin = 500 * time.Millisecond
	txnBackoffMax = 10 * time.Second
)

// rewind says where each partition polled in an aborted transaction reads again from. The
// session has rewound those with a committed offset; one without any would go on from what was
// polled, so it is set back to its first offset polled.
//
// That seek carries no leader epoch, and needs none: the client counts as committed both the
// group's offsets and the start an assignment gave a partition (adjust: a store's position,
// with the epoch of the record before it), so a partition started at a position takes the
// session's rewind, to that offset with that epoch (TestTxnAbortRewindCarriesEpoch). Only a
// partition started where the group starts (start_at: no committed offset, no local position)
// has none, and there no record before the first one polled was read: its log start, or the
// end start_at latest began at, whose record before the task never processed, so there is no
// epoch to carry and nothing processed a diverged log could have changed.
func (c *Consumer) rewind() map[TopicPartition]int64 {
	committed := c.cl.CommittedOffsets()
	out := map[TopicPartition]int64{}
	set := map[string]map[int32]kgo.EpochOffset{}
	for tp, first := range c.polledAt {
		at := kgo.EpochOffset{Epoch: -1, Offset: first}
		if real, moved := c.reseekCommitted[tp]; moved {
			// The client's committed offset is the one logHolds moved the partition back to,
			// and the client went there: back to the real one (or the first polled).
			if real != nil {
				at = *real
			}
		} else if eo, ok := committed[tp.Topic][tp.Partition]; ok && eo.Offset >= 0 {
			out[tp] = eo.Offset
			continue
		}
		out[tp] = at.Offset
		if set[tp.Topic] == nil {
			set[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		set[tp.Topic][tp.Partition] = at
	}
	c.reseekCommitted = nil
	c.cl.SetOffsets(set)
	c.mu.Lock()
	if c.next == nil {
		c.next = map[TopicPartition]int64{}
	}
	for tp, at := range out {
		c.next[tp] = at
	}
	c.mu.Unlock()
	return out
}

// healthEvery is how often Run looks at the cluster's reachability at least.
const healthEvery = time.Second

// isConnectionErr reports whether err is a failure to reach a broker (a refused, reset or timed
// out connection): something the client retries and that goes away when the broker is back.
func isConnectionErr(err error) bool {
	if errors.Is(err, kgo.ErrClientClosed) {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// health follows the cluster's reachability after a poll: outage is the poll's connection
// failure, if any; got says records came. While the cluster is unreachable, a poll without a
// failure only ends the outage once the cluster answers a ping. It returns an error once the
// outage lasted UnreachableTimeout.
func (c *Consumer) health(ctx context.Context, outage error, got bool) error {
	now := time.Now()
	if outage == nil {
		if c.downSince.IsZero() {
			return nil
		}
		if !got {
			pctx, cancel := context.WithTimeout(ctx, healthEvery)
			err := c.cl.Ping(pctx)
			cancel()
			if err != nil {
				outage = fmt.Errorf("kafka: ping: %w", err)
			}
		}
		if outage == nil {
			if c.log != nil {
				c.log.Warn("kafka: the cluster answers again", "unreachable_for", now.Sub(c.downSince).Round(time.Millisecond))
			}
			c.downSince = time.Time{}
			if c.reachable != nil {
				c.reachable(true)
			}
			return nil
		}
	}
	if c.downSince.IsZero() {
		c.downSince, c.downLogged = now, now
		if c.log != nil {
			c.log.Warn("kafka: the cluster is unreachable; retrying (not ready meanwhile)", "halt_after", c.unreachableTimeout, "err", outage)
		}
		if c.reachable != nil {
			c.reachable(false)
		}
	} else if now.Sub(c.downLogged) >= 10*time.Second && c.log != nil {
		c.downLogged = now
		c.log.Warn("kafka: the cluster is still unreachable; retrying", "for", now.Sub(c.downSince).Round(time.Second), "halt_after", c.unreachableTimeout, "err", outage)
	}
	if down := now.Sub(c.downSince); down >= c.unreachableTimeout {
		return fmt.Errorf("kafka: the cluster has been unreachable for %s (kafka.unreachable_timeout %s): %w", down.Round(time.Millisecond), c.unreachableTimeout, outage)
	}
	return nil
}

// Pause stops fetching tp until Resume. Safe from any goroutine.
func (c *Consumer) Pause(tp TopicPartition) {
	c.mu.Lock()
	c.paused[tp] = true
	c.mu.Unlock()
	c.cl.PauseFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

// Resume undoes Pause. Safe from any goroutine.
func (c *Consumer) Resume(tp TopicPartition) {
	c.mu.Lock()
	delete(c.paused, tp)
	c.mu.Unlock()
	c.cl.ResumeFetchPartitions(map[string][]int32{tp.Topic: {tp.Partition}})
}

// groupCommit is offsets as the client commits them: each with its leader epoch (-1: unknown),
// which a member that starts from the group's offsets later resumes with (EpochOffset).
func groupCommit(offsets map[TopicPartition]EpochOffset) map[string]map[int32]kgo.EpochOffset {
	commit := map[string]map[int32]kgo.EpochOffset{}
	for tp, o := range offsets {
		if commit[tp.Topic] == nil {
			commit[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		commit[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: max(o.Epoch, -1), Offset: o.Offset}
	}
	return commit
}

// Commit commits offsets asynchronously (the next offset to read, per partition, with the
// leader epoch of the record before it); errors are logged by the client and retried by the
// next commit.
func (c *Consumer) Commit(offsets map[TopicPartition]EpochOffset, done func(error)) {
	c.cl.CommitOffsets(context.Background(), groupCommit(offsets), func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						err = fmt.Errorf("kafka: committing %s/%d: %w", t.Topic, p.Partition, e)
					}
				}
			}
		}
		if done != nil {
			done(err)
		}
	})
}

// Close leaves the group and closes the client; a transaction still open is aborted. Call it
// after Run returned, never from a Handler method. A static member fenced by another with its
// instance id (Run's error says so) does not leave: the instance id is the other's now.
func (c *Consumer) Close() {
	if c.sess != nil && c.inTxn {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.sess.End(ctx, kgo.TryAbort)
		cancel()
		c.inTxn = false
	}
	c.cl.CloseAllowingRebalance()
	if c.instanceID != "" && !c.fenced.Load() {
		c.leave()
	}
}

// leave sends the group a LeaveGroup for the consumer's instance id: franz-go's client does not
// for a static member, whose partitions would otherwise wait for its session to time out.
func (c *Consumer) leave() {
	cl, err := kgo.NewClient(c.base...)
	if err == nil {
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp kadm.LeaveGroupResponses
		resp, err = kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(c.group).InstanceIDs(c.instanceID).Reason("wasmstream stopping"))
		if err == nil {
			err = resp.Error()
		}
	}
	if err != nil && c.log != nil {
		c.log.Warn("kafka: leaving the group as a static member failed; its partitions move once its session times out",
			"group", c.group, "instance_id", c.instanceID, "err", err)
	}
}

// DefaultConnectTimeout is Config.ConnectTimeout's default: how long a client waits for the
// cluster to answer at start before the task fails with an error naming the brokers and the last
// failure (a wrong address, password or certificate looks like this from a client: most brokers
// simply close the connection).
const DefaultConnectTimeout = 30 * time.Second

// ping waits until the cluster answers. A definitive refusal (e.g. authentication refused with
// an error code) is returned at once; anything else is retried every half second, logged, and
// returned after timeout (DefaultConnectTimeout if zero).
func ping(ctx context.Context, cl *kgo.Client, timeout time.Duration, log *slog.Logger) error {
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	deadline := time.Now().Add(timeout)
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, min(10*time.Second, timeout))
		err := cl.Ping(pctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		var ke *kerr.Error
		if errors.As(err, &ke) && !ke.Retriable {
			return fmt.Errorf("kafka: the cluster refused this client: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka: no answer from the cluster (%v) for %s; check the brokers, TLS and SASL settings: last error: %w",
				cl.OptValue(kgo.SeedBrokers), timeout, err)
		}
		if log != nil && attempt%10 == 0 {
			log.Warn("kafka: the cluster does not answer yet; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}
