package host_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaNullKey: Kafka records without a key and records with the empty key keep apart, in
// the Go and the Rust wordcount: each has its own counts in the state (the null key under
// abi.NullKey), the outputs of the null-key records reach a franz-go reader with a nil key and
// those of the empty key with an empty, non-nil one; a record whose key is the reserved bytes of
// the null key goes to the dead letters instead of joining the null key's state.
func TestKafkaNullKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		module func(t *testing.T) string
	}{
		{"go", func(t *testing.T) string { return guestbuild.Go(t, "wordcount") }},
		{"rust", func(t *testing.T) string { return guestbuild.Rust(t, "wordcount-rust") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			module := tc.module(t)
			c := newCluster(t, "words", "counts", "dlq")
			// Null keys: "alpha" 30 times; empty keys: "alpha" 20 times; key "k": "alpha" 10 times,
			// all to partition 0 (state is per partition; a producer spreads null keys).
			var recs []*kgo.Record
			for i := 0; i < 30; i++ {
				recs = append(recs, &kgo.Record{Topic: "words", Partition: 0, Key: nil, Value: []byte("alpha")})
				if i < 20 {
					recs = append(recs, &kgo.Record{Topic: "words", Partition: 0, Key: []byte{}, Value: []byte("alpha")})
				}
				if i < 10 {
					recs = append(recs, &kgo.Record{Topic: "words", Partition: 0, Key: []byte("k"), Value: []byte("alpha")})
				}
			}
			recs = append(recs, &kgo.Record{Topic: "words", Partition: 0, Key: []byte(abi.NullKey), Value: []byte("alpha")})
			if err := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			tc := wordcountKafkaTask(module)
			tc.DeadLetter = host.DeadLetterConfig{Topic: "dlq"}
			h := hosttest.Start(t, host.Config{
				DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
				Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
				Tasks: []host.TaskConfig{tc},
			})
			outs := consumeRecords(t, c, "counts", 60)

			// The outputs: per kind of key, "alpha 1".."alpha n" once each (outputs with a null key
			// are spread over the output topic's partitions, so their order is not kept).
			last := map[string]int{}
			seen := map[string]bool{}
			for _, r := range outs {
				kind := "key " + string(r.Key)
				switch {
				case r.Key == nil:
					kind = "null key"
				case len(r.Key) == 0:
					kind = "empty key"
				}
				if seen[kind+string(r.Value)] || !strings.HasPrefix(string(r.Value), "alpha ") {
					t.Fatalf("%s: output %q twice or unexpected", kind, r.Value)
				}
				seen[kind+string(r.Value)] = true
				last[kind]++
			}
			for kind, n := range last {
				for i := 1; i <= n; i++ {
					if !seen[kind+"alpha "+strconv.Itoa(i)] {
						t.Fatalf("%s: %d outputs but no \"alpha %d\"", kind, n, i)
					}
				}
			}
			if last["null key"] != 30 || last["empty key"] != 20 || last["key k"] != 10 || len(last) != 3 {
				t.Fatalf("outputs per key %v, want null key 30, empty key 20, key k 10", last)
			}

			dead := consumeRecords(t, c, "dlq", 1)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			st := stateOf(t, filepath.Join(dir, "data"), "wc")
			if st[abi.NullKey]["alpha"] != 30 || st[""]["alpha"] != 20 || st["k"]["alpha"] != 10 || len(st) != 3 {
				t.Fatalf("state %v, want the null key 30, the empty key 20, k 10", st)
			}

			if len(dead) != 1 || string(dead[0].Value) != "alpha" {
				t.Fatalf("dead letters %v, want the record with the reserved key", dead)
			}
			hs := map[string]string{}
			for _, h := range dead[0].Headers {
				hs[h.Key] = string(h.Value)
			}
			if !strings.Contains(hs["wasmstream.error"], "stand for a null key") {
				t.Fatalf("dead letter error %q, want the reserved key named", hs["wasmstream.error"])
			}
		})
	}
}

// consumeRecords reads topic from its start (read_committed) until n records arrived, then
// what else arrives shortly (duplicates would show), and returns them in the order read.
func consumeRecords(t *testing.T, c interface{ ListenAddrs() []string }, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records arrived on %s", len(got), n, topic)
		}
		got = append(got, fs.Records()...)
	}
	settle, stop := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer stop()
	for settle.Err() == nil {
		got = append(got, cl.PollFetches(settle).Records()...)
	}
	return got
}
