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
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaResetReplays runs `wasmstream reset` through the real binary against a broker in its
// own process, with a changelog: a wordcount over two batches of records (the second stamped a
// minute after the first), stopped, reset to earliest, run again: every output comes again from
// count 1, and no count goes past one pass (the state was moved aside, not added to). Then reset
// to a time between the batches, with the host's data directory deleted (a host with an empty
// disk restores from the changelog): the outputs start again from the second batch alone, with
// fresh counts, so the changelog restored no old state. A reset while the host runs is refused.
func TestKafkaResetReplays(t *testing.T) {
	t.Parallel() // it mostly waits (sessions, stops, restarts); each subtest on a broker, port and directory of its own
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		t.Run(delivery, func(t *testing.T) {
			t.Parallel()
			testKafkaResetReplays(t, delivery)
		})
	}
}

func testKafkaResetReplays(t *testing.T, delivery string) {
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
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), delivery, "") + "    changelog:\n      enabled: true\n")

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
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"counts": from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
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

// TestKafkaExternalOffsetReset: a group offset reset made with an admin client (kadm, as
// kafka-consumer-groups --reset-offsets does) while the host was stopped. With the default
// (report), the restarted host logs each partition with both offsets and the reset command,
// resumes at its checkpoint, and commits its checkpoint's offsets soon after the start, before
// any new record arrives, so that lag tools tell the truth (before, the group kept the reset
// offsets until records arrived). With kafka.external_offset_reset: follow, the host replays
// from the reset offsets on fresh state: every output again from count 1, none past one pass.
func TestKafkaExternalOffsetReset(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts")
	want := r.produceWords(300, time.Time{}, 21)
	yaml := r.wordcountYAML(guestbuild.Go(t, "wordcount"), "at_least_once", "")
	r.writeConfig(yaml)
	from := countsEnds(t, r.cl)
	h := r.start()
	readCountsUntil(t, r.brokers, from, want, h.logs.String)
	h.stop(t)

	adm := kadm.NewClient(r.cl)
	ctx := context.Background()
	fetch := func() map[int32]int64 {
		rs, err := adm.FetchOffsets(ctx, "wasmstream-wc")
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]int64{}
		rs.Each(func(o kadm.OffsetResponse) { out[o.Partition] = o.At })
		return out
	}
	ends := fetch()
	rewind := func() {
		t.Helper()
		offs := kadm.Offsets{}
		for p := range ends {
			offs.Add(kadm.Offset{Topic: "words", Partition: p, At: 0, LeaderEpoch: -1})
		}
		if err := adm.CommitAllOffsets(ctx, "wasmstream-wc", offs); err != nil {
			t.Fatal(err)
		}
	}
	rewind()

	h = r.start()
	hosttest.WaitFor(t, time.Minute, "the group's offsets back at the checkpoint", func() bool {
		got := fetch()
		for p, o := range ends {
			if o > 0 && got[p] != o {
				return false
			}
		}
		return true
	})
	h.stop(t)
	log := h.logs.String()
	if !strings.Contains(log, "wasmstream reset --task wc --to words:") || !strings.Contains(log, "set from outside the group") {
		t.Fatalf("no report of the external reset; the log:\n%s", tail(log, 8000))
	}

	rewind()
	r.writeConfig(strings.Replace(yaml, "kafka:\n", "kafka:\n  external_offset_reset: follow\n", 1))
	from = countsEnds(t, r.cl)
	h = r.start()
	readCountsUntil(t, r.brokers, from, want, h.logs.String)
	h.stop(t)
	if log := h.logs.String(); !strings.Contains(log, "followed an offset reset") {
		t.Fatalf("the follow is not logged; the log:\n%s", tail(log, 8000))
	}
}
