package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKafkaForeignRecordsThroughBinary: one input partition written in turn by kcat (librdkafka)
// with each codec (gzip, snappy, lz4, zstd) and by franz-go with each codec, in record shapes
// our fixtures never have: null and empty keys, null values (kcat -Z) and empty values, 100
// headers of one name, a 60 KB header, timestamps -1, 0 and in the year 9999, a 600 KB record
// (above the consumer's 256 KB fetch size per partition), and message sets of format 1 (kcat as
// a client before Kafka 0.11: no headers, no leader epoch) uncompressed and in three codecs,
// which end the first run, so that the restarted host resumes at a position without a leader
// epoch. The binary's counter task, at least once without a changelog and exactly once with
// one, counts every record once per key, in order: each key's outputs are 1..n (the null key's
// in some order: they leave with a null key, spread over the output's partitions), the empty
// key's leave with an empty one, and nothing is dead-lettered.
func TestKafkaForeignRecordsThroughBinary(t *testing.T) {
	kcat := guestbuild.Tool(t, "kcat")
	module := guestbuild.Go(t, "testguests/counter")
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		t.Run(delivery, func(t *testing.T) { foreignRecords(t, kcat, module, delivery) })
	}
}

func foreignRecords(t *testing.T, kcat, module, delivery string) {
	r := newDeliveryRig(t, "in", "counts", "dlq")
	big := strings.Repeat("h", 60<<10)
	kcatWrite := func(lines string, args ...string) {
		t.Helper()
		produce := exec.Command(kcat, append([]string{"-b", r.brokers, "-P", "-t", "in", "-p", "0", "-K:"}, args...)...)
		produce.Stdin = strings.NewReader(lines)
		if out, err := produce.CombinedOutput(); err != nil {
			t.Fatalf("kcat %q: %v\n%s", args, err, out)
		}
	}
	// kcat as a client before Kafka 0.11 writes message sets of format 1 (no headers, no
	// leader epoch; zstd needs format 2).
	oldFormat := []string{"-X", "api.version.request=false", "-X", "broker.version.fallback=0.10.0"}
	for round, codec := range []string{"gzip", "snappy", "lz4", "zstd"} {
		// kcat: -K: splits key and value at the first colon (a line without one has a null
		// key), -Z sends an empty key or value as null; -H adds headers to every record.
		args := []string{"-z", codec, "-Z", "-H", "big=" + big}
		for i := range 100 {
			args = append(args, "-H", "dup="+strconv.Itoa(i))
		}
		kcatWrite(fmt.Sprintf("a:%[1]s 1\nb:%[1]s 2\n:empty key\nno key at all %[1]s\nc:\na:%[1]s 3\n", codec), args...)
		var recs []*kgo.Record
		for i, ts := range []time.Time{time.UnixMilli(-1), time.UnixMilli(0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), {}} {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Key: []byte("a"), Value: fmt.Appendf(nil, "franz %d %d", round, i), Timestamp: ts})
		}
		recs = append(recs,
			&kgo.Record{Topic: "in", Partition: 0, Key: nil, Value: []byte("franz null key")},
			&kgo.Record{Topic: "in", Partition: 0, Key: []byte{}, Value: nil},
			&kgo.Record{Topic: "in", Partition: 0, Key: []byte{0xff, 0xfe, 0}, Value: []byte("binary key")},
			&kgo.Record{Topic: "in", Partition: 0, Key: []byte("big"), Value: []byte(strings.Repeat("v", 600<<10))},
		)
		cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers), kgo.ProducerBatchCompression(franzCodec(codec)), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		err = cl.ProduceSync(context.Background(), recs...).FirstErr()
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, codec := range []string{"none", "gzip", "snappy", "lz4"} {
		kcatWrite("a:old 1\n:old empty key\nold no key\n", append([]string{"-z", codec}, oldFormat...)...)
	}

	changelog := "false"
	if delivery == "exactly_once" {
		changelog = "true"
	}
	r.writeConfig(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  brokers: [%s]
tasks:
  - name: c
    module: %s
    delivery: %s
    changelog:
      enabled: %s
    inputs:
      - name: in
        type: kafka
        topics: [in]
    output:
      type: kafka
      topic: counts
    dead_letter:
      topic: dlq
`, filepath.Join(r.dir, "data"), r.brokers, module, delivery, changelog))
	// Run to the end, stop (the position follows a record of format 1, without a leader
	// epoch), add records and run again.
	h := r.start()
	awaitForeignCounts(t, r, h, 68)
	h.stop(t)
	kcatWrite("a:new\n:new empty key\nnew no key\n")
	kcatWrite("a:old again\n", oldFormat...)
	h = r.start()
	got := awaitForeignCounts(t, r, h, 72)
	h.stop(t)

	// What the broker holds, per key as the outputs name it.
	want := map[string]int{}
	for _, rec := range readTopic(t, r.brokers, "in") {
		want[keyLabel(rec.Key)]++
	}
	// kcat sends a line without a key, and one with an empty key with -Z, with a null key.
	if want["(null)"] != 17 || want["(empty)"] != 9 {
		t.Fatalf("the input holds per key %v; want 17 of a null key and 9 of an empty one", want)
	}
	for key, w := range want {
		outs := got[key]
		if key == "(null)" {
			// Outputs of a null key spread over the output's partitions (a producer's
			// choice, as for any keyless record): their order is per partition alone.
			slices.SortFunc(outs, func(a, b string) int { return cmp.Compare(len(a), len(b))*2 + strings.Compare(a, b) })
		}
		ok := len(outs) == w
		for i := 0; ok && i < w; i++ {
			ok = outs[i] == strconv.Itoa(i+1)
		}
		if !ok {
			t.Errorf("key %s: outputs %v, want 1..%d", key, outs, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("outputs for keys %v, want %v", got, want)
	}
	if dead := readTopic(t, r.brokers, "dlq"); len(dead) > 0 {
		t.Errorf("%d dead letters, want none; the first: %q", len(dead), dead[0].Value)
	}
}

// awaitForeignCounts waits until topic counts holds n records and returns them per key label.
func awaitForeignCounts(t *testing.T, r *deliveryRig, h *hostRun, n int) map[string][]string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a failure bound
	for {
		got, have := map[string][]string{}, 0
		for _, rec := range readTopic(t, r.brokers, "counts") {
			got[keyLabel(rec.Key)] = append(got[keyLabel(rec.Key)], string(rec.Value))
			have++
		}
		if have >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d outputs; the host's log:\n%s", have, n, tail(h.logs.String(), 8000))
		}
	}
}

// franzCodec is franz-go's codec of the name kcat's -z takes.
func franzCodec(name string) kgo.CompressionCodec {
	return map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[name]
}

// keyLabel names a record key: (null), (empty), or the key quoted.
func keyLabel(k []byte) string {
	switch {
	case k == nil:
		return "(null)"
	case len(k) == 0:
		return "(empty)"
	}
	return strconv.Quote(string(k))
}

// readTopic returns every record topic holds now (read_committed: up to each partition's last
// stable offset), in each partition's order.
func readTopic(t *testing.T, brokers, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []*kgo.Record
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("reading %s: partitions %v not read to their end", topic, left)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return out
}
