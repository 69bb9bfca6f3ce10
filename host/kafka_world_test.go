package host_test

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// The tests of this file move an input topic's log under a host's position, as the world does
// (retention, DeleteRecords, compaction), and check what the host makes of it.

// startWorldHost starts a host of the wordcount task over one partition of topic words on
// cluster c, in data directory dir, start_at startAt, logging to the test and to logs; eos makes
// it exactly once (with a changelog).
func startWorldHost(t *testing.T, c *kfake.Cluster, module, dir, startAt string, logs io.Writer, eos ...bool) *hosttest.Running {
	t.Helper()
	tc := wordcountKafkaTask(module)
	tc.Inputs[0].StartAt = startAt
	if len(eos) > 0 && eos[0] {
		tc.Delivery, tc.Changelog = host.ExactlyOnce, host.ChangelogConfig{Enabled: true}
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, logs), &slog.HandlerOptions{Level: slog.LevelInfo}))
	return hosttest.Start(t, host.Config{DataDir: dir, Logger: log, CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
}

// waitPosition waits until task 0 of h has committed partition 0 of its input through next, and
// has nothing pending.
func waitPosition(t *testing.T, h *hosttest.Running, next int64) host.TaskStats {
	t.Helper()
	var st host.TaskStats
	hosttest.WaitFor(t, 30*time.Second, "the partition committed through its end", func() bool {
		s := h.Stats()
		if len(s) == 0 || len(s[0].Inputs) != 1 || s[0].Pending != 0 {
			return false
		}
		st = s[0]
		return st.Inputs[0].Committed == next
	})
	return st
}

// TestKafkaRetentionBelowPosition: while the host is down, retention (here a DeleteRecords)
// moves the log start of its input partition above the position its checkpoint resumes at. The
// host goes on from the log start, whatever start_at says: every record still there is
// processed (state exact for them), and the records lost are logged with the partition, the
// position and the new start, and counted (retention_lost). Before, the loss went unsaid and
// uncounted, and with start_at latest the partition jumped to its end, skipping the records
// still there. Exactly once (the transactional consumer) behaves the same.
func TestKafkaRetentionBelowPosition(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	for _, tc := range []struct {
		name, startAt string
		eos           bool
	}{{"earliest", "earliest", false}, {"latest", "latest", false}, {"exactly_once", "earliest", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClusterParts(t, 1, "words", "counts")
			cl := newClient(t, c)
			dir := filepath.Join(t.TempDir(), "data")

			want := produceWords(t, cl, "words", 300, 20, 1) // offsets 0..299
			h := startWorldHost(t, c, module, dir, "earliest", io.Discard, tc.eos)
			waitPosition(t, h, 300)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}

			produceWords(t, cl, "words", 80, 20, 2)                   // offsets 300..379: removed below
			addCounts(want, produceWords(t, cl, "words", 120, 20, 3)) // offsets 380..499
			deleteRecordsBelow(t, cl, "words", 0, 380)

			var abort *kfake.FaultHandle
			if tc.eos {
				// The restarted host's first transaction aborts: the partition reads again from
				// its committed offset, below the log start again, and is counted once.
				abort = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 1})
			}
			var logs syncBuffer
			h = startWorldHost(t, c, module, dir, tc.startAt, &logs, tc.eos)
			st := waitPosition(t, h, 500)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			if abort != nil && (abort.Hits() == 0 || st.TxnAborts == 0) {
				t.Fatalf("the transaction fault was hit %d times, %d transactions aborted; want an abort", abort.Hits(), st.TxnAborts)
			}
			sameCounts(t, want, stateOf(t, dir, "wc"))
			if st.RetentionLost != 80 {
				t.Errorf("retention_lost = %d, want 80", st.RetentionLost)
			}
			var line string
			for l := range strings.Lines(logs.String()) {
				if strings.Contains(l, "before this task read them") {
					line = l
				}
			}
			for _, want := range []string{"topic=words", "partition=0", "position=300", "log_start=380", "offsets_lost=80"} {
				if !strings.Contains(line, want) {
					t.Fatalf("no log line of the records lost with %s; the line: %q", want, line)
				}
			}
		})
	}
}

// TestKafkaRetentionWhileRunning: the same while the host runs, its consumer having read the
// partition up to its end: its next fetch is held at the broker while records are produced and
// the first of them deleted, so that retention overtakes it. It goes on from the log start, says
// so and counts the records lost, the state exact for the others.
func TestKafkaRetentionWhileRunning(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 1, "words", "counts")
	cl := newClient(t, c)
	dir := filepath.Join(t.TempDir(), "data")

	want := produceWords(t, cl, "words", 300, 20, 1)
	var logs syncBuffer
	h := startWorldHost(t, c, module, dir, "earliest", &logs)
	waitPosition(t, h, 300)
	held, release := make(chan struct{}), make(chan struct{})
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.DropControl()
		close(held)
		c.SleepControl(func() { <-release }) // the host's next fetch, at offset 300
		return nil, nil, false
	})
	<-held
	produceWords(t, cl, "words", 80, 20, 2)
	addCounts(want, produceWords(t, cl, "words", 120, 20, 3))
	deleteRecordsBelow(t, cl, "words", 0, 380)
	close(release)
	st := waitPosition(t, h, 500)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))
	if st.RetentionLost != 80 {
		t.Errorf("retention_lost = %d, want 80", st.RetentionLost)
	}
	if !strings.Contains(logs.String(), "offsets_lost=80") {
		t.Error("no log line of the 80 records lost")
	}
}

// deleteRecordsBelow deletes the records of topic's partition below offset (DeleteRecords): its
// log start becomes offset.
func deleteRecordsBelow(t *testing.T, cl *kgo.Client, topic string, partition int32, offset int64) {
	t.Helper()
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset})
	rs, err := kadm.NewClient(cl).DeleteRecords(context.Background(), o)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestKafkaCompactedInputGaps: an input topic with cleanup.policy=compact, compacted while the
// host was down, has offset gaps above the position (compaction removed superseded records) and
// tombstones (null values). The host reads through the gaps to the partition's end: the
// committed position reaches it, the state is exact over the records that were still there, a
// tombstone reaches the guest as a record with an empty value, and no gap counts as lost to
// retention.
func TestKafkaCompactedInputGaps(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 1, "counts")
	cl := newClient(t, c)
	ctx := context.Background()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &compact}, "words"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "data")
	// Ten batches of 30 records over 10 keys; batch b's record i has words w<b> and w<i%7>, but
	// record 3 of batch 7 is a tombstone of key gone.
	produceBatch := func(b int) {
		var recs []*kgo.Record
		for i := range 30 {
			r := &kgo.Record{Topic: "words", Key: []byte(fmt.Sprintf("u%d", i%10)), Value: []byte(fmt.Sprintf("w%d w%d", b, i%7))}
			if b == 7 && i == 3 {
				r.Key, r.Value = []byte("gone"), nil // a key's only record: compaction keeps it
			}
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for b := range 5 {
		produceBatch(b)
	}
	h := startWorldHost(t, c, module, dir, "earliest", io.Discard)
	waitPosition(t, h, 150)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	want := stateOf(t, dir, "wc")

	for b := 5; b < 10; b++ {
		produceBatch(b)
	}
	c.Compact() // keeps each key's last record (the last batch is never compacted)
	// What compaction left above the position: the records the host must count now.
	rd := newClient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"words": {0: kgo.NewOffset().At(150)}}))
	left, tombstones, maxOff := 0, 0, int64(-1)
	for maxOff < 299 {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fs := rd.PollFetches(fctx)
		timedOut := fctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("reading the compacted topic: only through offset %d", maxOff)
		}
		fs.EachRecord(func(r *kgo.Record) {
			left++
			maxOff = r.Offset
			if r.Value == nil {
				tombstones++
				return
			}
			u := string(r.Key)
			if want[u] == nil {
				want[u] = map[string]int{}
			}
			for w := range strings.FieldsSeq(string(r.Value)) {
				want[u][w]++
			}
		})
	}
	if left >= 150 || tombstones != 1 {
		t.Fatalf("compaction left %d of 150 records above the position, %d tombstones; want gaps and the tombstone", left, tombstones)
	}

	h = startWorldHost(t, c, module, dir, "earliest", io.Discard)
	st := waitPosition(t, h, 300)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))
	if st.Records != int64(left) || st.RetentionLost != 0 {
		t.Fatalf("%d records read, %d lost to retention; want the %d left by compaction, 0", st.Records, st.RetentionLost, left)
	}
}

// TestKafkaRecreatedTopicRestoredPosition: a host with an empty disk restores a partition's
// position from the changelog after the input topic was deleted and recreated, the new topic
// already past that position. The changelog's position record carries the topic's id, so the
// task halts naming the reset, as a host that kept its disk does. Before, a restored position
// had no id: the host resumed the new topic at the old position and skipped its first 200
// records without a word.
func TestKafkaRecreatedTopicRestoredPosition(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 1, "words", "counts")
	ctx := context.Background()
	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	start := func(dir string) *hosttest.Running {
		return hosttest.Start(t, host.Config{DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
	}

	produceWords(t, newClient(t, c), "words", 200, 20, 1)
	h := start(filepath.Join(t.TempDir(), "a"))
	waitPosition(t, h, 200)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}

	adm := kadm.NewClient(newClient(t, c))
	if _, err := adm.DeleteTopic(ctx, "words"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "words"); err != nil {
		t.Fatal(err)
	}
	produceWords(t, newClient(t, c), "words", 400, 20, 2) // a new client: not the old topic's id

	h = start(filepath.Join(t.TempDir(), "b")) // an empty disk: the position comes from the changelog
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		st := h.Stats()[0]
		t.Fatalf("the task did not halt on the recreated topic: %d records read, committed %d", st.Records, st.Inputs[0].Committed)
	}
	err := h.Wait()
	if err == nil || !strings.Contains(err.Error(), "the topic's id changed") || !strings.Contains(err.Error(), "wasmstream reset --task wc --to earliest") {
		t.Fatalf("the host ended with %v; want the task halted on the topic's changed id, naming the reset", err)
	}
}

// TestKafkaLogTruncatedHalts: while the host runs, its input partition's leader moves to another
// broker whose log for the epoch the host read at ends at offset 100, below the 300 the host
// processed (an unclean leader election: the broker's OffsetForLeaderEpoch answer is injected,
// kfake having no replication). The client detects the loss (kgo.ErrDataLoss) and the task
// halts naming the partition, the offset it had read to and the reset; it does not read the new
// leader's records from its log start as already processed.
func TestKafkaLogTruncatedHalts(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(1, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	produceWords(t, newClient(t, c), "words", 300, 20, 1)
	h := startWorldHost(t, c, module, filepath.Join(t.TempDir(), "data"), "earliest", io.Discard)
	waitPosition(t, h, 300)

	c.ControlKey(kmsg.OffsetForLeaderEpoch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, 100
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	leader := c.LeaderFor("words", 0)
	other := int32(0)
	if leader == 0 {
		other = 1
	}
	if err := c.MoveTopicPartition("words", 0, other); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not halt on the truncated log")
	}
	err = h.Wait()
	if err == nil || !strings.Contains(err.Error(), "input topic words partition 0 lost records at the broker") ||
		!strings.Contains(err.Error(), "up to offset 300") || !strings.Contains(err.Error(), "wasmstream reset --task wc --to earliest") {
		t.Fatalf("the host ended with %v; want the task halted on the lost records, naming the reset", err)
	}
}

// divergedCluster is a two-broker cluster of topics words and counts (one partition each) kept
// in dir, so that a test can stop it, copy its files and start it again: a log on disk the
// way a broker keeps it, leader epochs and all.
func divergedCluster(t *testing.T, dir string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.DataDir(dir), kfake.SeedTopics(1, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// copyTree copies the files under src to dst (created), as a broker's disk at a moment.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKafkaLogDivergedWhileDownHalts: while the host is down, its input partition's log is
// truncated below the position its checkpoint stored and grows back past it (an unclean leader
// election: the new leader lacked the last records the host read, and producers wrote on in
// the new leader epoch). The host stored 300 (leader epoch 0); the new leader's log holds
// offsets 0-199 of epoch 0 and 200-349 of epoch 1. The broker's log is real (kfake keeps it on
// disk: the input partition's files are put back as they were before offsets 200-299 were
// written, the rest of the cluster as the host left it), and so is its OffsetForLeaderEpoch
// answer (epoch 0 ends at 200). The task halts at assignment naming the partition, the stored
// offset and epoch, where the log diverged and the reset, whether the position comes from the
// host's disk, from the group's committed offset (an empty disk), or from the changelog (an
// empty disk, the group's offsets gone), exactly once too. Before, positions, commits and the
// changelog kept no epoch: the host resumed at 300 and processed 300-349, skipping 200-299
// (records it never saw) without a word. The cases run in parallel (each has its own cluster).
func TestKafkaLogDivergedWhileDownHalts(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	for _, tc := range []struct {
		name      string
		empty     bool // the restarted host has an empty disk
		changelog bool // the task has a changelog, and the group's offsets are gone
		eos       bool // exactly once (with a changelog; the group's offsets kept)
	}{{"local_position", false, false, false}, {"group_offset", true, false, false}, {"changelog", true, true, false}, {"exactly_once", false, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			task := wordcountKafkaTask(module)
			task.Changelog.Enabled = tc.changelog || tc.eos
			if tc.eos {
				task.Delivery = host.ExactlyOnce
			}
			start := func(c *kfake.Cluster, dir string) *hosttest.Running {
				return hosttest.Start(t, host.Config{DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
					Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{task}})
			}
			disk, early := t.TempDir(), t.TempDir()
			words := filepath.Join("partitions", "words-0")
			c := divergedCluster(t, disk)
			produceWords(t, newClient(t, c), "words", 200, 20, 1) // offsets 0..199, epoch 0
			c.Close()
			copyTree(t, filepath.Join(disk, words), early) // the input partition's files now

			c = divergedCluster(t, disk)
			produceWords(t, newClient(t, c), "words", 100, 20, 2) // offsets 200..299, epoch 0
			dir := filepath.Join(t.TempDir(), "data")
			h := start(c, dir)
			waitPosition(t, h, 300)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			c.Close()
			// The broker that leads next lost offsets 200..299 of the input partition.
			if err := os.RemoveAll(filepath.Join(disk, words)); err != nil {
				t.Fatal(err)
			}
			copyTree(t, early, filepath.Join(disk, words))
			if tc.changelog {
				if err := os.Remove(filepath.Join(disk, "groups.log")); err != nil {
					t.Fatal(err)
				}
			}

			c = divergedCluster(t, disk)
			other := int32(1 - c.LeaderFor("words", 0))
			if err := c.MoveTopicPartition("words", 0, other); err != nil { // leader epoch 1
				t.Fatal(err)
			}
			produceWords(t, newClient(t, c), "words", 150, 20, 3) // offsets 200..349, epoch 1

			if tc.empty {
				dir = filepath.Join(t.TempDir(), "empty")
			}
			h = start(c, dir)
			hosttest.WaitFor(t, 30*time.Second, "the task halted, or read the partition to its end", func() bool {
				select {
				case <-h.Done():
					return true
				default:
				}
				s := h.Stats()
				return len(s) > 0 && len(s[0].Inputs) == 1 && s[0].Inputs[0].Committed == 350
			})
			select {
			case <-h.Done():
			default:
				st := h.Stats()[0]
				t.Fatalf("the task did not halt on the diverged log: it read %d records and committed %d, skipping offsets 200-299", st.Records, st.Inputs[0].Committed)
			}
			err := h.Wait()
			for _, want := range []string{"input topic words partition 0 lost records at the broker", "up to offset 300 (leader epoch 0)",
				"diverged from what it read at offset 200", "from offset 200 to 299 are gone", "wasmstream reset --task wc --to earliest"} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("the host ended with %v; want the task halted on the diverged log, with %q", err, want)
				}
			}
		})
	}
}

// TestKafkaLeaderMovedWhileDownResumes: the partition's leader changes while the host is down
// (leader epoch 0 to 1) and producers write on, without any loss: the stored position's epoch
// (0) ends on the new leader exactly at the position, so the host resumes there and processes
// every new record, state exact; and again after a restart whose position is in epoch 1. The
// leader epoch check halts only a log that diverged (TestKafkaLogDivergedWhileDownHalts).
func TestKafkaLeaderMovedWhileDownResumes(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(1, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl := newClient(t, c)
	dir := filepath.Join(t.TempDir(), "data")
	want := produceWords(t, cl, "words", 300, 20, 1)
	for i, next := range []int64{300, 400, 500} {
		h := startWorldHost(t, c, module, dir, "earliest", io.Discard)
		waitPosition(t, h, next)
		if err := h.Stop(); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if i == 2 {
			break
		}
		if err := c.MoveTopicPartition("words", 0, 1-c.LeaderFor("words", 0)); err != nil {
			t.Fatal(err)
		}
		addCounts(want, produceWords(t, cl, "words", 100, 20, uint64(i+2)))
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))
	// The position keeps the epoch of its last record, written after two moves.
	db, err := store.Open(filepath.Join(dir, "state"), store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id, err := db.StreamID("wc", "kafka:words/0")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok, err := db.Position("wc", id); err != nil || !ok || p.Next != 500 || p.LeaderEpoch.Epoch() != 2 {
		t.Fatalf("stored position %+v, %v, %v; want Next 500, leader epoch 2", p, ok, err)
	}
}

// TestChangelogRetentionLostHalts: a changelog's cleanup.policy is set to compact,delete while
// the hosts run (the host refuses such a topic at its start, not later), and retention (here a
// DeleteRecords) removes the first records of a changelog partition. When that partition's
// input moves to a host with no copy of it, whose restore would start at offset 0, below the
// log start, the task halts naming the changelog partition, the offsets lost and what to do,
// instead of restoring the state that is left: before, the restore read from the log start
// without a word, and the keys whose records were removed restored nothing (partial state).
func TestChangelogRetentionLostHalts(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 2, "words", "counts")
	cl := newClient(t, c)
	produceWords(t, cl, "words", 400, 20, 1)
	tc := wordcountKafkaTask(module)
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	a := startKafkaHost(t, c, tc, filepath.Join(t.TempDir(), "a"))
	waitCommitted(t, a)
	b := startKafkaHost(t, c, tc, filepath.Join(t.TempDir(), "b"))
	// The group gives b one of the two partitions (restored from the changelog while its policy
	// is compact alone); a keeps the other.
	var kept int32
	hosttest.WaitFor(t, 30*time.Second, "each host owns one partition", func() bool {
		sa, sb := a.Stats(), b.Stats()
		if len(sa) == 0 || len(sb) == 0 || len(sa[0].Inputs) != 1 || len(sb[0].Inputs) != 1 {
			return false
		}
		kept = sa[0].Inputs[0].Partition
		return true
	})
	waitCommitted(t, a)

	adm := kadm.NewClient(cl)
	ctx := context.Background()
	both := "compact,delete"
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &both}}, "wc-changelog"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	ends, err := adm.ListEndOffsets(ctx, "wc-changelog")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("wc-changelog", kept)
	if end.Offset < 2 {
		t.Fatalf("changelog partition %d ends at %d; want records to remove", kept, end.Offset)
	}
	deleteRecordsBelow(t, cl, "wc-changelog", kept, end.Offset/2)
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}

	select {
	case <-b.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("host b did not halt on the changelog's lost records; it owns %d partitions", len(b.Stats()[0].Inputs))
	}
	err = b.Wait()
	for _, want := range []string{fmt.Sprintf("input topic words partition %d: its state cannot be restored", kept),
		fmt.Sprintf("changelog topic wc-changelog partition %d lost offsets 0 to %d", kept, end.Offset/2-1),
		"cleanup.policy being compact,delete", "set cleanup.policy=compact alone", "from a backup", "wasmstream reset --task wc --to earliest"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("host b ended with %v; want the task halted on the changelog's lost records, with %q", err, want)
		}
	}
}

// TestKafkaRetentionRemovedAllWhileDown: while the host is down, every record after its position
// is removed (a DeleteRecords up to the end offset, as retention may do). The restarted host says
// and counts the loss at once, from the log start listed at the assignment, and its position
// passes the removed records (at least once, the group's offset too: its lag is 0); the records
// produced next are counted, the state exact. Before, nothing was said or counted, and the
// position stayed below the log start, until a new record came.
func TestKafkaRetentionRemovedAllWhileDown(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	for _, eos := range []bool{false, true} {
		t.Run(map[bool]string{false: "at_least_once", true: "exactly_once"}[eos], func(t *testing.T) {
			c := newClusterParts(t, 1, "words", "counts")
			cl := newClient(t, c)
			dir := filepath.Join(t.TempDir(), "data")
			want := produceWords(t, cl, "words", 100, 20, 1)
			h := startWorldHost(t, c, module, dir, "earliest", io.Discard, eos)
			waitPosition(t, h, 100)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			produceWords(t, cl, "words", 50, 20, 2) // offsets 100..149: removed below
			deleteRecordsBelow(t, cl, "words", 0, 150)

			var logs syncBuffer
			h = startWorldHost(t, c, module, dir, "earliest", &logs, eos)
			st := waitPosition(t, h, 150)
			if st.RetentionLost != 50 || !strings.Contains(logs.String(), "offsets_lost=50") {
				t.Fatalf("retention_lost = %d, want 50 and a log line of them; the log:\n%s", st.RetentionLost, logs.String())
			}
			if !eos { // exactly once, the offsets commit with what the client polled: nothing here
				hosttest.WaitFor(t, 30*time.Second, "the group's offset at the log start", func() bool {
					offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "wasmstream-wc")
					o, _ := offs.Lookup("words", 0)
					return err == nil && o.At == 150
				})
			}
			addCounts(want, produceWords(t, cl, "words", 30, 20, 3))
			waitPosition(t, h, 180)
			if err := h.Stop(); err != nil {
				t.Fatal(err)
			}
			if st := h.Stats(); st[0].RetentionLost != 50 {
				t.Errorf("retention_lost = %d after the new records, want 50 (counted once)", st[0].RetentionLost)
			}
			sameCounts(t, want, stateOf(t, dir, "wc"))
		})
	}
}
