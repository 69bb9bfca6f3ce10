package kafka

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TopicLimits are the largest record batches the topics a task produces to take: each topic's
// max.message.bytes as the cluster reports it (Learn), at most MaxRecordBatchBytes. A broker
// refuses a whole batch over it for good (MESSAGE_TOO_LARGE), which halted the task, and a
// restart replayed the record into the same halt: with the limits known, the producers cap
// their batches at them (a batch of small records never grows past its topic's limit) and an
// emit of a record over its topic's limit fails in the guest (ERR_TOO_LARGE), so the record is
// retried and dead-lettered like any failed record. Safe for concurrent use; a nil
// *TopicLimits knows no topic. Get runs on every emit, from every worker, so it reads a map
// that Learn replaces whole (copy on write) and takes no lock.
type TopicLimits struct {
	mu sync.Mutex                     // serialises Learn's copy-and-replace
	m  atomic.Pointer[map[string]int] // never modified once stored
}

// NewTopicLimits returns limits that know no topic yet.
func NewTopicLimits() *TopicLimits { return &TopicLimits{} }

// Get returns the largest record batch topic takes: MaxRecordBatchBytes unless Learn found
// less.
func (l *TopicLimits) Get(topic string) int {
	if l == nil {
		return MaxRecordBatchBytes
	}
	if m := l.m.Load(); m != nil {
		if n, ok := (*m)[topic]; ok {
			return n
		}
	}
	return MaxRecordBatchBytes
}

// batchMax is the client option that caps each topic's batches at Get; franz-go asks once per
// partition, when it first produces to it.
func (l *TopicLimits) batchMax() kgo.ProducerOpt {
	return kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
		return int32(max(minBatchBytes, l.Get(topic)))
	})
}

// minBatchBytes is the smallest batch cap franz-go accepts.
const minBatchBytes = 512

// Learn asks the cluster of cfg for the max.message.bytes of topics, through a client of its
// own that it closes. A topic the cluster does not describe (missing, or not allowed) keeps
// MaxRecordBatchBytes: producing to a missing topic fails on its own, with its cause. The
// error is for the log: a cluster that refuses DescribeConfigs leaves every limit as it was.
func (l *TopicLimits) Learn(ctx context.Context, cfg Config, topics []string) error {
	if l == nil || len(topics) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rcs kadm.ResourceConfigs
	err := withAdmin(cfg, func(_ *kgo.Client, adm *kadm.Client) error {
		var err error
		rcs, err = adm.DescribeTopicConfigs(ctx, topics...)
		return err
	})
	if err != nil {
		return fmt.Errorf("kafka: describing the configs of topics %v: %w", topics, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	if old := l.m.Load(); old != nil {
		maps.Copy(m, *old)
	}
	defer l.m.Store(&m)
	for _, rc := range rcs {
		if rc.Err != nil {
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil || n <= 0 {
				continue
			}
			m[rc.Name] = int(min(n, MaxRecordBatchBytes, math.MaxInt32))
		}
	}
	return nil
}
