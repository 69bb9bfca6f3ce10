package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record is one consumed record. Its byte slices belong to the receiver.
type Record struct {
	Offset    int64
	Timestamp int64 // ms since the epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Fetch is what Run hands to the task: records of one partition, in offset order.
type Fetch struct {
	TopicPartition
	Records []Record
}

// Handler is the task's side of the group's rebalances. Its methods are called from the
// client's group goroutine, one at a time, never while Run is handing over a poll.
type Handler interface {
	// Assigned is told the newly assigned partitions with the group's committed offset (-1 if
	// none) and returns where each must start (-1: where the group would, i.e. the committed
	// offset or the configured start position).
	Assigned(ctx context.Context, committed map[TopicPartition]int64) (map[TopicPartition]int64, error)
	// Revoked must drain and checkpoint the partitions and return the offsets to commit.
	Revoked(ctx context.Context, parts []TopicPartition) map[TopicPartition]int64
	// Lost must drop the partitions without committing.
	Lost(ctx context.Context, parts []TopicPartition)
}

// ConsumerConfig configures a group consumer.
type ConsumerConfig struct {
	Group   string
	Topics  []string
	StartAt string // "earliest" (default), "latest", or an RFC 3339 time
	// MaxPollRecords bounds the records of one poll. Default 2000.
	MaxPollRecords int
	Handler        Handler
	// SessionTimeout and RebalanceTimeout; zero: franz-go's defaults (45 s, 60 s).
	SessionTimeout, RebalanceTimeout time.Duration
}

// Consumer is a consumer-group member reading the task's topics.
type Consumer struct {
	cl      *kgo.Client
	max     int
	start   kgo.Offset // where a partition without a committed offset starts
	handler Handler
	log     *slog.Logger
	ready   chan struct{} // closed once cl is set: the group may call back before NewClient returns

	mu     sync.Mutex
	paused map[TopicPartition]bool
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
	c := &Consumer{ready: make(chan struct{}), log: cfg.Logger, max: cc.MaxPollRecords, handler: cc.Handler, paused: map[TopicPartition]bool{}, start: start}
	opts = append(opts,
		kgo.ConsumerGroup(cc.Group),
		kgo.ConsumeTopics(cc.Topics...),
		// Set both: since franz-go 1.22 the start offset no longer sets the reset offset.
		kgo.ConsumeStartOffset(start),
		kgo.ConsumeResetOffset(start),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		// A paused partition's buffered fetch is dropped and fetched again on resume; keep
		// fetches per partition small enough that they seldom cross the task's queue bound
		// alone, and the long poll short enough that a resumed partition is fetched soon.
		kgo.FetchMaxPartitionBytes(256<<10),
		kgo.FetchMaxWait(200*time.Millisecond),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.AdjustFetchOffsetsFn(c.adjust),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
	if cc.SessionTimeout > 0 {
		// Heartbeats at a third of the session (franz-go's default of 3 s would outlast a short one).
		opts = append(opts, kgo.SessionTimeout(cc.SessionTimeout), kgo.HeartbeatInterval(min(3*time.Second, cc.SessionTimeout/3)))
	}
	if cc.RebalanceTimeout > 0 {
		opts = append(opts, kgo.RebalanceTimeout(cc.RebalanceTimeout))
	}
	c.cl, err = kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	close(c.ready)
	return c, nil
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
	start, err := c.handler.Assigned(ctx, committed)
	if err != nil {
		return nil, err
	}
	for tp, at := range start {
		if at >= 0 {
			offs[tp.Topic][tp.Partition] = kgo.NewOffset().At(at).WithEpoch(-1)
		}
	}
	return offs, nil
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
		return
	}
	offsets := c.handler.Revoked(ctx, parts)
	c.forget(parts)
	if len(offsets) == 0 {
		return
	}
	commit := map[string]map[int32]kgo.EpochOffset{}
	for tp, o := range offsets {
		if commit[tp.Topic] == nil {
			commit[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		commit[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	// The documented place for a blocking commit: the rebalance waits for it.
	cl.CommitOffsetsSync(ctx, commit, nil)
}

func (c *Consumer) lost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	parts := flatten(m)
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
		resume[tp.Topic] = append(resume[tp.Topic], tp.Partition)
	}
	if len(resume) > 0 {
		c.cl.ResumeFetchPartitions(resume)
	}
}

// Run polls until ctx is done or the client fails, handing each poll's records to out one
// partition at a time before letting a rebalance proceed.
func (c *Consumer) Run(ctx context.Context, out chan<- Fetch) error {
	if err := ping(ctx, c.cl, c.log); err != nil {
		return err
	}
	for {
		fs := c.cl.PollRecords(ctx, c.max)
		if ctx.Err() != nil {
			c.cl.AllowRebalance()
			return nil
		}
		if errors.Is(fs.Err0(), kgo.ErrClientClosed) {
			c.cl.AllowRebalance()
			return nil
		}
		var fatal error
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			// Retryable fetch errors are retried by the client; report what reaches us.
			if fatal == nil && !kgo.IsRetryableBrokerErr(err) {
				fatal = fmt.Errorf("kafka: fetching %s/%d: %w", t, p, err)
			}
		})
		ok := true
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if !ok || len(p.Records) == 0 {
				return
			}
			f := Fetch{TopicPartition: TopicPartition{p.Topic, p.Partition}, Records: make([]Record, len(p.Records))}
			for i, r := range p.Records {
				rec := Record{Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value}
				for _, h := range r.Headers {
					rec.Headers = append(rec.Headers, Header{Name: []byte(h.Key), Value: h.Value})
				}
				f.Records[i] = rec
			}
			select {
			case out <- f:
			case <-ctx.Done():
				ok = false
			}
		})
		c.cl.AllowRebalance()
		if !ok {
			return nil
		}
		if fatal != nil {
			return fatal
		}
	}
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

// Commit commits offsets asynchronously (the next offset to read, per partition); errors are
// logged by the client and retried by the next commit.
func (c *Consumer) Commit(offsets map[TopicPartition]int64, done func(error)) {
	commit := map[string]map[int32]kgo.EpochOffset{}
	for tp, o := range offsets {
		if commit[tp.Topic] == nil {
			commit[tp.Topic] = map[int32]kgo.EpochOffset{}
		}
		commit[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: o}
	}
	c.cl.CommitOffsets(context.Background(), commit, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
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

// Close leaves the group and closes the client. Call it after Run returned, never from a
// Handler method.
func (c *Consumer) Close() { c.cl.Close() }

// ConnectTimeout is how long a client waits for the cluster to answer at start before the task
// fails with an error naming the brokers and the last failure (a wrong address, password or
// certificate looks like this from a client: most brokers simply close the connection).
const ConnectTimeout = 30 * time.Second

// ping waits until the cluster answers. A definitive refusal (e.g. authentication refused with
// an error code) is returned at once; anything else is retried every half second, logged, and
// returned after ConnectTimeout.
func ping(ctx context.Context, cl *kgo.Client, log *slog.Logger) error {
	deadline := time.Now().Add(ConnectTimeout)
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
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
				cl.OptValue(kgo.SeedBrokers), ConnectTimeout, err)
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
