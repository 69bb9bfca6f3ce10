package e2e

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKafkaRetentionThroughBinary: through the binary and the development broker in its own
// process, records of every input partition are deleted below the host's positions while it is
// down (DeleteRecords, as retention would). The restarted host processes every record still
// there (each count once and in order, none of the deleted records counted) and logs, per
// partition, the offsets lost: 200 in all. Before, it said nothing.
func TestKafkaRetentionThroughBinary(t *testing.T) {
	r := newDeliveryRig(t, "words", "counts")
	want := r.produceWords(200, time.Time{}, 31)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once", ""))
	h := r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	h.stop(t)

	ctx := context.Background()
	adm := kadm.NewClient(r.cl)
	r.produceWords(200, time.Time{}, 32) // deleted below
	ends, err := adm.ListEndOffsets(ctx, "words")
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	o := kadm.Offsets{}
	ends.Each(func(l kadm.ListedOffset) { o.Add(kadm.Offset{Topic: l.Topic, Partition: l.Partition, At: l.Offset}) })
	rs, err := adm.DeleteRecords(ctx, o)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	for user, ws := range r.produceWords(200, time.Time{}, 33) {
		if want[user] == nil {
			want[user] = map[string]int{}
		}
		for w, n := range ws {
			want[user][w] += n
		}
	}

	h = r.start()
	consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	lost := 0
	for _, m := range regexp.MustCompile(`before this task read them.* offsets_lost=(\d+)`).FindAllStringSubmatch(h.logs.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		lost += n
	}
	h.stop(t)
	if lost != 200 {
		t.Fatalf("the log says %d offsets lost to retention, want 200; the log:\n%s", lost, tail(h.logs.String(), 8000))
	}
}
