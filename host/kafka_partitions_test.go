package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
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
	produceNew := func(batch int) { outputs += produceToAdded(t, cl, want, batch) }

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

// TestKafkaStandbyTailsAddedPartitions adds partitions to the input topic (4 to 6) while two
// hosts with standbys run, in either delivery mode, and produces to the new ones only: the host that does not own an
// added partition tails its changelog into its store (its standby applies every record of it),
// and when the owner stops, it takes the partition over replaying less than that, the state
// exact. Before, a standby counted the partitions once, at the start: the added ones were tailed
// only after a restart, and a takeover restored them in full.
func TestKafkaStandbyTailsAddedPartitions(t *testing.T) {
	t.Parallel() // it mostly waits for the metadata age, on a cluster of its own
	module := guestbuild.Go(t, "wordcount")
	for _, delivery := range []host.Delivery{host.AtLeastOnce, host.ExactlyOnce} {
		t.Run(string(delivery), func(t *testing.T) {
			t.Parallel()
			standbyTailsAddedPartitions(t, module, delivery)
		})
	}
}

func standbyTailsAddedPartitions(t *testing.T, module string, delivery host.Delivery) {
	c := newCluster(t, "words", "counts")
	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true, Standby: true}
	tc.Delivery = delivery
	dirs := map[string]string{"a": filepath.Join(t.TempDir(), "a"), "b": filepath.Join(t.TempDir(), "b")}
	hosts := map[string]*hosttest.Running{}
	for _, name := range []string{"a", "b"} {
		hosts[name] = startKafkaHost(t, c, tc, dirs[name])
	}
	stats := func(name string) host.TaskStats {
		if s := hosts[name].Stats(); len(s) > 0 {
			return s[0]
		}
		return host.TaskStats{}
	}
	owns := func(name string, p int32) bool {
		for _, in := range stats(name).Inputs {
			if in.Partition == p {
				return true
			}
		}
		return false
	}
	hosttest.WaitFor(t, 60*time.Second, "a and b share the four partitions", func() bool {
		na, nb := len(stats("a").Inputs), len(stats("b").Inputs)
		return na > 0 && nb > 0 && na+nb == 4
	})
	adm := kadm.NewClient(newClient(t, c))
	resp, err := adm.UpdatePartitions(context.Background(), 6, "words")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	// Records on the added partitions only: their changelog partitions hold everything there is
	// to tail.
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	want := map[string]map[string]int{}
	outputs := 0
	for batch := range 4 {
		outputs += produceToAdded(t, cl, want, batch)
	}
	consumeOutputs(t, c, "counts", outputs, 60*time.Second)
	owner, other := "a", "b"
	if owns("b", 4) {
		owner, other = "b", "a"
	}
	waitCommitted(t, hosts[owner])
	// Every changelog record of the added partitions the owner has: the other's standby applies
	// them all (it never owned them).
	ends, err := adm.ListEndOffsets(context.Background(), "wc-changelog")
	if err != nil {
		t.Fatal(err)
	}
	var ownerAdded []int32
	for _, p := range []int32{4, 5} {
		if owns(owner, p) {
			ownerAdded = append(ownerAdded, p)
		}
	}
	need := committedChangelogRecords(t, c, ends, ownerAdded)
	if need == 0 {
		t.Fatalf("the changelog of the added partitions %s owns holds no record", owner)
	}
	hosttest.WaitFor(t, 40*time.Second, fmt.Sprintf("%s's standby applying the %d changelog records of the added partitions %s owns", other, need, owner),
		func() bool { return stats(other).StandbyRecords >= need })
	tailed := time.Since(added)
	before := stats(other)

	if err := hosts[owner].Stop(); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, 60*time.Second, other+" takes the partition over", func() bool { return owns(other, 4) && len(stats(other).Inputs) == 6 })
	waitCommitted(t, hosts[other])
	after := stats(other)
	if err := hosts[other].Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dirs[other], "wc"))
	takeover := after.RestoredRecords - before.RestoredRecords
	if takeover >= need {
		t.Errorf("the takeover replayed %d changelog records; the standby had applied the %d of the added partitions: a warm standby must leave only a tail", takeover, need)
	}
	t.Logf("%s's standby applied the %d changelog records of the added partitions %s owned %v after they were added; the takeover replayed %d",
		other, need, owner, tailed.Round(time.Millisecond), takeover)
}

// committedChangelogRecords counts the committed records of the changelog partitions parts up to their
// ends: exactly once, the offsets also count transaction markers, which no reader applies.
func committedChangelogRecords(t *testing.T, c *kfake.Cluster, ends kadm.ListedOffsets, parts []int32) int64 {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for _, p := range parts {
		if o, ok := ends.Lookup("wc-changelog", p); ok && o.Offset > 0 {
			offsets[p] = kgo.NewOffset().AtStart()
			left[p] = o.Offset
		}
	}
	if len(left) == 0 {
		return 0
	}
	cl := newClient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"wc-changelog": offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	var n int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the changelog partitions %v: %d records, partitions %v not read to their ends", parts, n, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				n++
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	return n
}

// produceToAdded produces batch's 100 records to the added partitions 4 and 5 of topic words,
// users of their own (a key's state is per input partition, and adding partitions moves keys),
// counts their words in want and returns the outputs they make.
func produceToAdded(t *testing.T, cl *kgo.Client, want map[string]map[string]int, batch int) int {
	t.Helper()
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
	return 2 * len(recs)
}
