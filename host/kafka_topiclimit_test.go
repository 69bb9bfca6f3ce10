package host_test

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// An output topic whose max.message.bytes (2,000) is below the producer's batch: the host learns
// it at the task's start, through the transactional client under exactly once and the producer
// of each loop at least once (two loops). Every record is delivered but the one over the limit
// (5,000 bytes), which is dead-lettered with ERR_TOO_LARGE. Before, the broker refused a batch
// and the task halted (MESSAGE_TOO_LARGE), at every restart again.
func TestKafkaOutputTopicLimit(t *testing.T) {
	module := guestbuild.Go(t, "testguests/ktable")
	for _, tc := range []struct {
		delivery string
		loops    int
	}{{"at_least_once", 2}, {"exactly_once", 1}} {
		t.Run(tc.delivery, func(t *testing.T) {
			c := newCluster(t, "words")
			cl := newClient(t, c)
			limit := "2000"
			resp, err := kadm.NewClient(cl).CreateTopics(context.Background(), 2, 1, map[string]*string{"max.message.bytes": &limit}, "table")
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			random := func(n int) string { // values that do not compress
				b := make([]byte, n)
				crand.Read(b)
				return base64.StdEncoding.EncodeToString(b)[:n]
			}
			const records, bigAt = 200, 77
			var recs []*kgo.Record
			for i := range records {
				v := fmt.Sprintf("v%03d-%s", i, random(100))
				if i == bigAt {
					v = "big-" + random(5000)
				}
				recs = append(recs, &kgo.Record{Topic: "words", Key: []byte(fmt.Sprintf("k%02d", i%20)), Value: []byte(v)})
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t),
				DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
				Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
				Tasks: []host.TaskConfig{{
					Name: "kt", Module: module, Workers: 2, Loops: tc.loops, Delivery: host.Delivery(tc.delivery),
					Changelog: host.ChangelogConfig{Enabled: tc.delivery == "exactly_once"},
					Inputs:    []host.InputConfig{{Name: "words", Type: "kafka", Topics: []string{"words"}}},
					Output:    host.OutputConfig{Type: "kafka", Topic: "table"},
					Retry:     host.RetryConfig{MaxAttempts: 2, Backoff: time.Millisecond, MaxBackoff: time.Millisecond},
				}},
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- h.Run(ctx) }()
			deadPath := filepath.Join(dir, "kt.deadletter.ndjson")
			hosttest.WaitFor(t, time.Minute, "the big record dead-lettered", func() bool {
				select {
				case err := <-done:
					t.Fatalf("the host stopped: %v", err)
				default:
				}
				b, _ := os.ReadFile(deadPath)
				return strings.Contains(string(b), "ERR_TOO_LARGE")
			})
			got := consumeOutputs(t, c, "table", records-1, 30*time.Second)
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			n := 0
			for key, vs := range got {
				for _, v := range vs {
					n++
					if strings.HasPrefix(v, "big-") {
						t.Fatalf("key %s: the record over the topic's limit reached it", key)
					}
				}
			}
			if tc.delivery == "exactly_once" && n != records-1 {
				t.Errorf("%d outputs under exactly once, want %d", n, records-1)
			}
			dead, err := os.ReadFile(deadPath)
			if err != nil || strings.Count(string(dead), "\n") != 1 || !strings.Contains(string(dead), "ERR_TOO_LARGE") ||
				!strings.Contains(string(dead), fmt.Sprintf(`"offset":%d`, recs[bigAt].Offset)) {
				t.Errorf("dead letters (%v), want the big record's alone:\n%.300s", err, dead)
			}
		})
	}
}
