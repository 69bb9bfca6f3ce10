package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaInputPartitionsAdded adds partitions to a running task's input topic (4 to 6) and
// produces to the new ones: the task's consumer is assigned them within its metadata age, the
// changelog gets the partitions it lacks, and every record's output arrives, the state exact.
// After a restart the same holds. Before, the added partitions went unread for 5 minutes (the
// client's metadata age), and once assigned the task halted (`changelog wc-changelog partition
// 4: kafka: topic "wc-changelog" has no partition 4`), and a restarted host refused to start
// (`changelog topic "wc-changelog" has 4 partitions, but 6 are needed`), advising to delete the
// changelog and with it every partition's state.
func TestKafkaInputPartitionsAdded(t *testing.T) {
	t.Parallel() // it mostly waits for the metadata age, on a cluster of its own
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	dir := filepath.Join(t.TempDir(), "data")
	want := produceWords(t, newClient(t, c), "words", 400, 20, 1)
	outputs := 2 * 400

	// Users of their own on the added partitions: a key's state is per input partition, and
	// adding partitions moves keys (the producer's hash modulo the partition count).
	produceNew := func(batch int) {
		var recs []*kgo.Record
		for i := range 100 {
			p := int32(4 + i%2)
			user := fmt.Sprintf("new%d-%d", p, i%5)
			w1, w2 := fmt.Sprintf("w%02d", i%7), fmt.Sprintf("b%d", batch)
			if want[user] == nil {
				want[user] = map[string]int{}
			}
			want[user][w1]++
			want[user][w2]++
			recs = append(recs, &kgo.Record{Topic: "words", Partition: p, Key: []byte(user), Value: []byte(w1 + " " + w2)})
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		outputs += 2 * len(recs)
	}

	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	cfg := host.Config{
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{tc},
	}
	h := hosttest.Start(t, cfg)
	consumeOutputs(t, c, "counts", outputs, 60*time.Second)

	resp, err := kadm.NewClient(newClient(t, c)).UpdatePartitions(context.Background(), 6, "words")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	produceNew(1)
	consumeOutputs(t, c, "counts", outputs, 60*time.Second)
	t.Logf("the added partitions' outputs arrived %v after the partitions were added", time.Since(added).Round(time.Millisecond))
	waitCommitted(t, h)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))

	// Restarted: the changelog has its six partitions; the new partitions resume where they were.
	produceNew(2)
	h = hosttest.Start(t, cfg)
	consumeOutputs(t, c, "counts", outputs, 60*time.Second)
	waitCommitted(t, h)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))
}
