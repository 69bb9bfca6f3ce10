package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaTombstone (ABI 0.5): Kafka records with a null value (tombstones) and with an empty
// value keep apart through a table task, in Go and in Rust, at least once and exactly once: the
// guest sees the tombstones as null (it deletes the key's state: only the keys whose last record
// has a value keep state, the empty value included) and publishes a tombstone for each, which a
// franz-go reader gets with a nil value while the empty value's output is empty and not nil; a
// tombstone that goes to the dead letters (its key is the null key's reserved bytes) keeps its
// nil value there.
func TestKafkaTombstone(t *testing.T) {
	for _, tc := range []struct {
		name, delivery string
		module         func(t *testing.T) string
	}{
		{"go", "at_least_once", func(t *testing.T) string { return guestbuild.Go(t, "testguests/ktable") }},
		{"rust_exactly_once", "exactly_once", func(t *testing.T) string { return guestbuild.Rust(t, "testguests/ktable-rust") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			module := tc.module(t)
			c := newCluster(t, "rows", "table", "dlq")
			rec := func(k string, v []byte) *kgo.Record {
				return &kgo.Record{Topic: "rows", Partition: 0, Key: []byte(k), Value: v}
			}
			recs := []*kgo.Record{
				rec("a", []byte("1")), rec("b", []byte{}), rec("c", []byte("3")), rec("d", []byte("4")),
				rec("a", nil), rec("c", []byte("33")), rec("d", nil), rec("d", []byte{}),
				rec(abi.NullKey, nil),
			}
			if err := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			task := host.TaskConfig{
				Name: "kt", Module: module, Delivery: host.Delivery(tc.delivery),
				Inputs:     []host.InputConfig{{Name: "rows", Type: "kafka", Topics: []string{"rows"}}},
				Output:     host.OutputConfig{Type: "kafka", Topic: "table"},
				DeadLetter: host.DeadLetterConfig{Topic: "dlq"},
			}
			if tc.delivery == "exactly_once" {
				task.Changelog = host.ChangelogConfig{Enabled: true} // the state commits in the outputs' transaction
			}
			h := hosttest.Start(t, host.Config{
				DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
				Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
				Tasks: []host.TaskConfig{task},
			})
			outs := consumeRecords(t, c, "table", 8)
			dead := consumeRecords(t, c, "dlq", 1)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}

			// Per key, in order (a key's outputs share a partition).
			got := map[string][]string{}
			for _, r := range outs {
				v := "null"
				if r.Value != nil {
					v = "'" + string(r.Value) + "'"
				}
				got[string(r.Key)] = append(got[string(r.Key)], v)
			}
			want := map[string][]string{"a": {"'1'", "null"}, "b": {"''"}, "c": {"'3'", "'33'"}, "d": {"'4'", "null", "''"}}
			if len(outs) != 8 || len(got) != len(want) {
				t.Fatalf("outputs per key %v, want %v", got, want)
			}
			for k, vs := range want {
				if len(got[k]) != len(vs) {
					t.Fatalf("outputs of %s: %v, want %v", k, got[k], vs)
				}
				for i := range vs {
					if got[k][i] != vs[i] {
						t.Fatalf("outputs of %s: %v, want %v", k, got[k], vs)
					}
				}
			}

			state := map[string]string{}
			r, err := host.OpenState(filepath.Join(dir, "data"))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.Scan("kt", nil, false, func(e host.StateEntry) bool {
				state[string(e.Key)+"/"+string(e.Name)] = string(e.Value)
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if len(state) != 3 || state["b/v"] != "" || state["c/v"] != "33" || state["d/v"] != "" {
				t.Fatalf("state %q, want b/v \"\", c/v 33, d/v \"\" (a's deleted by its tombstone)", state)
			}

			if len(dead) != 1 || dead[0].Value != nil {
				t.Fatalf("%d dead letters, want 1: the tombstone with the reserved key, its value nil", len(dead))
			}
			for _, h := range dead[0].Headers {
				if h.Key == "wasmstream.error" && !strings.Contains(string(h.Value), "stand for a null key") {
					t.Fatalf("dead letter error %q, want the reserved key named", h.Value)
				}
			}
		})
	}
}

// TestChainTombstone (ABI 0.5): a tombstone emitted to a chained output reaches the downstream
// task as a null value (flag bit 2), which deletes its state too and publishes a tombstone of its
// own, written to its file output as "value":null, apart from the empty value's "value":"".
func TestChainTombstone(t *testing.T) {
	module := guestbuild.Go(t, "testguests/ktable")
	c := newCluster(t, "rows")
	var recs []*kgo.Record
	for _, kv := range []struct {
		k string
		v []byte
	}{{"a", []byte("1")}, {"b", []byte{}}, {"a", nil}, {"b", nil}, {"b", []byte{}}} {
		recs = append(recs, &kgo.Record{Topic: "rows", Partition: 0, Key: []byte(kv.k), Value: kv.v})
	}
	if err := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.ndjson")
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{
			{Name: "up", Module: module, Inputs: []host.InputConfig{{Name: "rows", Type: "kafka", Topics: []string{"rows"}}},
				Output: host.OutputConfig{Type: "stdout"}},
			{Name: "down", Module: module, Inputs: []host.InputConfig{{Name: "up", Type: "task", Task: "up", Output: "table"}},
				Output: host.OutputConfig{Type: "file", Path: out}},
		},
	})
	var lines []string
	hosttest.WaitFor(t, 30*time.Second, "5 lines in the downstream's file output", func() bool {
		b, _ := os.ReadFile(out)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		return len(lines) >= 5
	})
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	perKey := map[string][]string{} // in order per key; keys interleave as the scheduler runs them
	for _, l := range lines {
		var o struct {
			Key   string
			Value *string
		}
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("line %s: %v", l, err)
		}
		v := "null"
		if o.Value != nil {
			v = "'" + *o.Value + "'"
		}
		perKey[o.Key] = append(perKey[o.Key], v)
		if (v == "null") != strings.Contains(l, `"value":null`) {
			t.Errorf("line %s: a tombstone is \"value\":null, and only a tombstone", l)
		}
	}
	if got := fmt.Sprint(perKey); got != "map[a:['1' null] b:['' null '']]" {
		t.Fatalf("downstream outputs per key %s, want a: '1' null, b: '' null ''\n%s", got, strings.Join(lines, "\n"))
	}
	if st := chainState(t, filepath.Join(dir, "data"), "down", ""); len(st) != 1 || st["b/v"] != "" {
		t.Fatalf("downstream state %q, want only b/v \"\"", st)
	}
}
