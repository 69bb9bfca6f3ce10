package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A delivery failure is sticky: every Flush after it returns it, also once later records were
// acknowledged, so that no checkpoint after the failure covers the record that failed. Before,
// Flush returned it once and cleared it, and the next checkpoint committed over the lost output.
func TestProducerFailureIsSticky(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(1, "there"))
	p, err := NewProducer(cfg, ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Produce("missing", []byte("k"), []byte("v"), nil, time.Now().UnixMilli())
	err = p.Flush(testCtx(t))
	if !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("first Flush: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	p.Produce("there", []byte("k"), []byte("v"), nil, time.Now().UnixMilli())
	if err2 := p.Flush(testCtx(t)); !errors.Is(err2, kerr.UnknownTopicOrPartition) {
		t.Fatalf("Flush after the failure and a good record: %v, want the failure again", err2)
	}
}

// Records whose timestamps (event time) are a day old are delivered: the delivery bound counts
// from when they were produced. Before, franz-go's RecordDeliveryTimeout, measured from the
// timestamp, failed them at once.
func TestProducerOldTimestamps(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(1, "out"))
	p, err := NewProducer(cfg, ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	old := time.Now().Add(-24 * time.Hour).UnixMilli()
	for range 100 {
		p.Produce("out", []byte("k"), []byte("v"), nil, old)
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatalf("Flush of day-old records: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	ctx := testCtx(t)
	for n < 100 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n++
			if r.Timestamp.UnixMilli() != old {
				t.Fatalf("timestamp %d, want %d", r.Timestamp.UnixMilli(), old)
			}
		})
	}
	if n != 100 {
		t.Fatalf("%d of 100 records", n)
	}
}

// With the cluster gone, Flush fails once DeliveryTimeout passed since the records were
// produced, saying so, and stays failed.
func TestProducerDeliveryTimeout(t *testing.T) {
	c, cfg := testCluster(t, kfake.SeedTopics(1, "out"))
	p, err := NewProducer(cfg, ProducerConfig{DeliveryTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	p.Produce("out", []byte("k"), []byte("v"), nil, time.Now().UnixMilli())
	err = p.Flush(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not acknowledged within 500ms") {
		t.Fatalf("Flush with the cluster gone: %v", err)
	}
	if err2 := p.Flush(context.Background()); err2 != err {
		t.Fatalf("second Flush: %v, want the same failure", err2)
	}
}
