package host_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKafkaFailedGroupCommitRetried: the broker refuses every group offset commit while the host
// processes its input to the end; once it takes them again, the group's offsets reach the end of
// every partition although no record arrives any more. Before, a failed commit was made again
// only by a checkpoint that moved its partition's position: after the input's last record, the
// group's offsets stayed behind the store's positions for good (the lag shown, and where a host
// with an empty disk would start), and the e2e crash tests, which wait for the group to commit
// the whole input before they read the state, would wait in vain.
func TestKafkaFailedGroupCommitRetried(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	var refuse atomic.Bool
	var refused atomic.Int64
	refuse.Store(true)
	c.ControlKey(int16(kmsg.OffsetCommit), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		req := kr.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.OffsetCommitResponseTopic{Topic: rt.Topic, TopicID: rt.TopicID}
			for _, rp := range rt.Partitions {
				st.Partitions = append(st.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: rp.Partition, ErrorCode: kerr.OffsetMetadataTooLarge.Code})
			}
			resp.Topics = append(resp.Topics, st)
		}
		refused.Add(1)
		return resp, nil, true
	})
	cl := newClient(t, c)
	produceWords(t, cl, "words", 2000, 50, 7)
	h := startWorldHost(t, c, module, filepath.Join(t.TempDir(), "data"), "earliest", io.Discard)
	waitCommitted(t, h) // the store's positions are at the end of every partition
	if refused.Load() == 0 {
		t.Fatal("no group commit was refused")
	}
	refuse.Store(false)

	adm := kadm.NewClient(cl)
	var behind []string
	caughtUp := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, "words")
		if err != nil {
			behind = []string{err.Error()}
			return false
		}
		committed, err := adm.FetchOffsets(ctx, "wasmstream-wc")
		if err != nil {
			behind = []string{err.Error()}
			return false
		}
		behind = behind[:0]
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := committed.Lookup(o.Topic, o.Partition); !ok || c.At != o.Offset {
				behind = append(behind, fmt.Sprintf("partition %d at %d of %d", o.Partition, c.At, o.Offset))
			}
		})
		slices.Sort(behind)
		return len(behind) == 0
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !caughtUp() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("20 s after the broker took commits again, the group's offsets are behind the store's positions: %s (%d commits refused)",
				strings.Join(behind, ", "), refused.Load())
		}
	}
}
