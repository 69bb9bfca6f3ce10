package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// A partition tick that would take a key past max_state_bytes_per_key fails like a record (its
// effects discarded, as any failed tick's) and the task goes on: the bound holds for ticks too,
// without a changelog. Before the bound the hostile guest's tick put its 1.2 MB on key "k" every
// time.
func TestTickKeyStateBounded(t *testing.T) {
	module := guestbuild.Go(t, "testguests/hostile")
	c := newCluster(t, "src", "echoes")
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "src", Partition: 0, Key: []byte("j"), Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	h := hosttest.Start(t, host.Config{
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{{
			Name: "ticker", Module: module, Config: map[string]any{"tick": "fill"},
			Inputs:              []host.InputConfig{{Name: "src", Type: "kafka", Topics: []string{"src"}}},
			Output:              host.OutputConfig{Type: "kafka", Topic: "echoes"},
			MaxStateBytesPerKey: 1 << 20, // the tick writes 6 values of 200 KB
			Time:                host.TimeConfig{TickInterval: 50 * time.Millisecond},
		}},
	})
	consumeOutputs(t, c, "echoes", 1, 60*time.Second) // the record's echo: the task goes on
	hosttest.WaitFor(t, 30*time.Second, "3 failed ticks", func() bool { return h.Stats()[0].Failures >= 3 })
	if err := h.Stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// No tick's writes were applied (the guest also fails ticks on its own, out of memory, after
	// a while: the failures alone do not tell).
	r, err := host.OpenState(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	if err := r.Scan("ticker", []byte("k"), true, func(e host.StateEntry) bool {
		names = append(names, string(e.Name))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(names) > 0 {
		t.Errorf("key k holds %q: a tick past max_state_bytes_per_key was applied", names)
	}
}
