package kafka

import (
	"context"
	"errors"
	"math"
	"strconv"
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
	if err == nil || !strings.Contains(err.Error(), "outputs to out (1 unacknowledged) not acknowledged within 500ms") {
		t.Fatalf("Flush with the cluster gone: %v", err)
	}
	if err2 := p.Flush(context.Background()); err2 != err {
		t.Fatalf("second Flush: %v, want the same failure", err2)
	}
}

// An output stamped past 2262-04-11T23:47:16.854Z, the latest time franz-go can produce (it
// computes a record's milliseconds through time.Time.UnixNano), leaves stamped with that latest
// time, its own timestamp in the header wasmstream.timestamp; earlier ones leave as they are.
// Before, the timestamp wrapped silently (the year 3000 came out in 1830).
func TestProducerTimestampsPast2262(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(1, "out"))
	p, err := NewProducer(cfg, ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	year3000 := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	stamps := []int64{MaxTimestamp - 1, MaxTimestamp, MaxTimestamp + 1, year3000, math.MaxInt64}
	for i, ts := range stamps {
		p.Produce("out", []byte{byte(i)}, []byte("v"), []Header{{Name: []byte("mine"), Value: []byte("x")}}, ts)
	}
	if err := p.Flush(testCtx(t)); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	ctx := testCtx(t)
	for len(got) < len(stamps) && ctx.Err() == nil {
		got = append(got, cl.PollFetches(ctx).Records()...)
	}
	if len(got) != len(stamps) {
		t.Fatalf("%d of %d records", len(got), len(stamps))
	}
	for _, r := range got {
		ts := stamps[r.Key[0]]
		wantTS, wantHeader := ts, ""
		if ts > MaxTimestamp {
			wantTS, wantHeader = MaxTimestamp, strconv.FormatInt(ts, 10)
		}
		header := ""
		for _, h := range r.Headers {
			if h.Key == TimestampHeader {
				header = string(h.Value)
			}
		}
		if r.Timestamp.UnixMilli() != wantTS || header != wantHeader || r.Headers[0].Key != "mine" {
			t.Errorf("produced with timestamp %d: got timestamp %d (%s) and %s %q, headers %v; want %d and %q",
				ts, r.Timestamp.UnixMilli(), r.Timestamp.UTC().Format(time.RFC3339Nano), TimestampHeader, header, r.Headers, wantTS, wantHeader)
		}
	}
}
