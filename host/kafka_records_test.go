package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaInputRecordShapes feeds one partition with records unlike the usual fixtures: batches
// of every codec (none, gzip, snappy, lz4, zstd) in turn, tombstones (null values), empty
// values, a record with 200 headers and binary keys (NUL and 0xff bytes). The counter task counts
// every record once per key: each key's outputs are 1..n in order, none twice, none missing
// (a record sent to the dead letters would leave its key one short). (kcat with -z and -Z did the same through the binary.)
func TestKafkaInputRecordShapes(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	c := newCluster(t, "in", "counts", "dlq")
	want := map[string]int{}
	total := 0
	produce := func(codec kgo.CompressionCodec, recs []*kgo.Record) {
		t.Helper()
		cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(codec))
		for _, r := range recs {
			r.Topic, r.Partition = "in", 0
			want[string(r.Key)]++
			total++
		}
		if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()}
	for round := range 2 {
		for i, codec := range codecs {
			var recs []*kgo.Record
			for j := range 40 {
				recs = append(recs, &kgo.Record{Key: []byte("k" + strconv.Itoa(j%4)), Value: fmt.Appendf(nil, "r%d c%d %d", round, i, j)})
			}
			recs = append(recs,
				&kgo.Record{Key: []byte("k1"), Value: nil},                    // a tombstone
				&kgo.Record{Key: []byte("k2"), Value: []byte{}},               // an empty value
				&kgo.Record{Key: []byte{0, 0xff, 'b', 0}, Value: []byte("x")}, // a binary key
			)
			produce(codec, recs)
		}
	}
	var headers []kgo.RecordHeader
	for i := range 200 {
		headers = append(headers, kgo.RecordHeader{Key: "h" + strconv.Itoa(i), Value: []byte("v")})
	}
	produce(kgo.ZstdCompression(), []*kgo.Record{{Key: []byte("k3"), Value: []byte("headers"), Headers: headers}})

	tc := host.TaskConfig{
		Name: "c", Module: module,
		Inputs:     []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
		Output:     host.OutputConfig{Type: "kafka", Topic: "counts"},
		DeadLetter: host.DeadLetterConfig{Topic: "dlq"},
	}
	hosttest.Start(t, host.Config{
		DataDir: filepath.Join(t.TempDir(), "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{tc},
	})
	got := map[string][]string{}
	for _, r := range consumeRecords(t, c, "counts", total) {
		got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
	}
	for key, n := range want {
		outs := got[key]
		if len(outs) != n {
			t.Errorf("key %q: %d outputs, want %d: %v", key, len(outs), n, outs)
			continue
		}
		for i, v := range outs {
			if v != strconv.Itoa(i+1) {
				t.Errorf("key %q: output %d is %s, want %d", key, i, v, i+1)
				break
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("outputs for %d keys, want %d", len(got), len(want))
	}
}

// TestKafkaTransactionalInputLag: an input partition written by a transactional producer, two
// transactions committed and two aborted (the log ends with an abort marker): the task sees the
// committed records alone, and once they are processed its lag is 0 and the group's committed
// offset is the partition's end, past the markers. Before, the committed offset stayed after the
// last record (32 with the end at 44) and the lag at 12 for good.
func TestKafkaTransactionalInputLag(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	c := newCluster(t, "in", "counts")
	txn := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("input-producer"))
	ctx := context.Background()
	for i, commit := range []bool{true, false, true, false} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := range 10 {
			r := &kgo.Record{Topic: "in", Partition: 0, Key: []byte("k"), Value: fmt.Appendf(nil, "t%d %d", i, j)}
			if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(newClient(t, c))
	ends, err := adm.ListEndOffsets(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("in", 0)

	tc := host.TaskConfig{
		Name: "c", Module: module,
		Inputs: []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
		Output: host.OutputConfig{Type: "kafka", Topic: "counts"},
	}
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(t.TempDir(), "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{tc},
	})
	var got []string
	for _, r := range consumeRecords(t, c, "counts", 20) {
		got = append(got, string(r.Value))
	}
	if len(got) != 20 || got[19] != "20" {
		t.Fatalf("outputs %v, want 1..20: the committed transactions' records once each", got)
	}
	waitCommitted(t, h) // every input's lag 0
	hosttest.WaitFor(t, 30*time.Second, "the group's offset at the partition's end", func() bool {
		offs, err := adm.FetchOffsets(ctx, "wasmstream-c")
		if err != nil {
			return false
		}
		o, ok := offs.Lookup("in", 0)
		return ok && o.At == end.Offset
	})
}
