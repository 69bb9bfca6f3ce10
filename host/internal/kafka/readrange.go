package kafka

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadRange reads partition p of topic from offset from up to, not including, offset to, read
// committed (records of aborted transactions and control records are skipped), and calls fn
// for each record in offset order. fn's record is valid only during the call. It stops at the
// partition's end (its last stable offset) when that is lower: nothing is there yet. Offsets
// below the log start (retention, compaction) have no record to read; the read goes on from
// there.
func ReadRange(ctx context.Context, cfg Config, topic string, p int32, from, to int64, fn func(r *Record) error) error {
	end, err := EndOffset(ctx, cfg, topic, p)
	if err != nil {
		return err
	}
	to = min(to, end)
	if from >= to {
		return nil
	}
	opts, err := cfg.opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Control records take offsets too: a marker before to still ends the read.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(500*time.Millisecond),
	)...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	var rec Record
	for next := from; next < to; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("kafka: reading %s/%d at offset %d: %w", topic, p, next, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			// The client retries retryable errors itself; what reaches us is fatal.
			if ferr == nil {
				ferr = fmt.Errorf("kafka: reading %s/%d at offset %d: %w", topic, p, next, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fs.RecordIter(); !it.Done() && next < to; {
			r := it.Next()
			if r.Offset < next {
				continue
			}
			next = r.Offset + 1
			if r.Offset >= to || r.Attrs.IsControl() {
				continue
			}
			rec = Record{Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value, Headers: rec.Headers[:0]}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, Header{Name: []byte(h.Key), Value: h.Value})
			}
			if err := fn(&rec); err != nil {
				return err
			}
		}
	}
	return nil
}
