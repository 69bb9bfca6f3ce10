package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestKafkaResetReplays runs `wasmstream reset` through the real binary against a broker in its
// own process, with a changelog: a wordcount over two batches of records (the second stamped a
// minute after the first), stopped, reset to earliest, run again: every output comes again from
// count 1, and no count goes past one pass (the state was moved aside, not added to). Then reset
// to a time between the batches, with the host's data directory deleted (a host with an empty
// disk restores from the changelog): the outputs start again from the second batch alone, with
// fresh counts, so the changelog restored no old state. A reset while the host runs is refused.
func TestKafkaResetReplays(t *testing.T) {
	r := newDeliveryRig(t, "words", "counts")
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	wantA := r.produceWords(300, base, 11)
	wantB := r.produceWords(300, base.Add(time.Minute), 12)
	want := wordcountExpect{}
	for _, w := range []wordcountExpect{wantA, wantB} {
		for u, ws := range w {
			for word, n := range ws {
				if want[u] == nil {
					want[u] = map[string]int{}
				}
				want[u][word] += n
			}
		}
	}
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once", "") + "    changelog:\n      enabled: true\n")

	from := countsEnds(t, r.cl)
	h := r.start()
	readCountsUntil(t, r.brokers, from, want, h.logs.String)
	out, err := r.reset("--to", "earliest")
	if err == nil || !strings.Contains(out, "stop every host") {
		t.Fatalf("a reset while the host runs: %v\n%s", err, out)
	}
	h.stop(t)

	out, err = r.reset("--to", "earliest", "--dry-run")
	if err != nil || !strings.Contains(out, "dry run") || !strings.Contains(out, "kafka:words/0") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	t.Logf("dry run:\n%s", out)
	out, err = r.reset("--to", "earliest")
	if err != nil || !strings.Contains(out, "wc.reset-") {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	t.Logf("reset:\n%s", out)

	// Pass 2: from the start, on the moved-aside state.
	from = countsEnds(t, r.cl)
	h = r.start()
	readCountsUntil(t, r.brokers, from, want, h.logs.String)
	h.stop(t)

	// Pass 3: from the time between the batches, on an empty disk: the changelog restores.
	out, err = r.reset("--to", base.Add(30*time.Second).Format(time.RFC3339))
	if err != nil {
		t.Fatalf("reset to a time: %v\n%s", err, out)
	}
	t.Logf("reset to a time:\n%s", out)
	if err := os.RemoveAll(filepath.Join(r.dir, "data")); err != nil {
		t.Fatal(err)
	}
	from = countsEnds(t, r.cl)
	h = r.start()
	readCountsUntil(t, r.brokers, from, wantB, h.logs.String)
	h.stop(t)
}

// reset runs `wasmstream reset -c <config> --task wc` with args and returns its output.
func (r *deliveryRig) reset(args ...string) (string, error) {
	cmd := exec.Command(r.bin, append([]string{"reset", "-c", r.cfg, "--task", "wc"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// countsEnds is the end offset of each partition of the counts topic.
func countsEnds(t *testing.T, cl *kgo.Client) map[int32]kgo.Offset {
	t.Helper()
	listed, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), "counts")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]kgo.Offset{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = kgo.NewOffset().At(o.Offset) })
	return out
}

// readCountsUntil reads the counts topic from from until every output of want is there (each
// (user, word) from count 1 to its total), and fails on an output past want: a count the
// records since the reset cannot have made.
func readCountsUntil(t *testing.T, brokers string, from map[int32]kgo.Offset, want wordcountExpect, logs func() string) {
	t.Helper()
	need := wordTotalOf(want)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"counts": from}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < need {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d distinct outputs arrived; the host's log:\n%s", len(seen), need, tail(logs(), 8000))
		}
		fs.EachRecord(func(rec *kgo.Record) {
			word, count, _ := strings.Cut(string(rec.Value), " ")
			n, _ := strconv.Atoi(count)
			if n < 1 || n > want[string(rec.Key)][word] {
				t.Fatalf("output %s %s: past the %d the records since the reset make", rec.Key, rec.Value, want[string(rec.Key)][word])
			}
			seen[string(rec.Key)+"/"+string(rec.Value)] = true
		})
	}
}
