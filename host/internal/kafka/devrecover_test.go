package kafka

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startTestDevBroker starts a development broker on dir with one partition of "out", closed when
// the test ends.
func startTestDevBroker(t *testing.T, dir string, port int) *DevBroker {
	t.Helper()
	b, err := StartDevBroker(DevBrokerConfig{Dir: dir, Port: port, Partitions: 1, Topics: []string{"out"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// txnProducer is a transactional client of "out" with the transactional id "tx".
func txnProducer(t *testing.T, addrs []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produceTxn(t *testing.T, cl *kgo.Client, commit bool, values ...string) {
	t.Helper()
	ctx := testCtx(t)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !commit {
		return
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// readCommitted produces a last record, end, without a transaction and returns the values that a
// read_committed reader of "out" sees from the start up to it.
func readCommitted(t *testing.T, addrs []string, end string) []string {
	t.Helper()
	ctx := testCtx(t)
	p, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(end)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no %q after %q: %v", end, got, err)
		}
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fs.Records() {
			if string(r.Value) == end {
				return got
			}
			got = append(got, string(r.Value))
		}
	}
}

// copyDir copies a broker's directory as a SIGKILL leaves it: the broker writes every batch to
// its files as it takes it, without a buffer of its own, and is idle while the copy is made.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := os.Create(filepath.Join(to, rel))
		if err != nil {
			return err
		}
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			return err
		}
		return dst.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDevBrokerCrashAbortedTxnHidesNothing: a development broker killed while a transaction is
// open comes back with that transaction aborted, and what the same transactional producer
// commits after the restart is read by a read_committed reader. Without the abort marker that
// the start writes, the reader skipped the restarted producer's records along with the aborted
// ones (same producer id).
func TestDevBrokerCrashAbortedTxnHidesNothing(t *testing.T) {
	dir := t.TempDir()
	b := startTestDevBroker(t, dir, 0)
	p := txnProducer(t, b.Addrs())
	produceTxn(t, p, true, "kept")
	produceTxn(t, p, false, "lost-0", "lost-1")
	killed := t.TempDir()
	copyDir(t, dir, killed) // the broker "killed" here, its transaction open
	p.Close()
	b.Close()

	b = startTestDevBroker(t, killed, 0)
	crashed := b.CrashEnded()
	if len(crashed) != 1 || crashed[0].Topic != "out" || crashed[0].Partition != 0 || crashed[0].FirstOffset != 2 {
		t.Errorf("CrashEnded() = %+v; want one transaction of out/0 from offset 2", crashed)
	}
	p = txnProducer(t, b.Addrs())
	produceTxn(t, p, true, "after-0", "after-1")
	want := []string{"kept", "after-0", "after-1"}
	if got := readCommitted(t, b.Addrs(), "end-0"); !slices.Equal(got, want) {
		t.Fatalf("a read_committed reader read %q after the crash; want %q", got, want)
	}

	// The next start finds nothing left to end.
	b.Close()
	b = startTestDevBroker(t, killed, 0)
	if crashed := b.CrashEnded(); len(crashed) != 0 {
		t.Errorf("CrashEnded() after a clean restart = %+v; want none", crashed)
	}
	if got := readCommitted(t, b.Addrs(), "end-1"); !slices.Equal(got, append(want, "end-0")) {
		t.Fatalf("a read_committed reader read %q after a clean restart; want %q", got, append(want, "end-0"))
	}
}

// TestDevBrokerCleanRestartKeepsOpenTxn: a transaction open when the broker is closed cleanly
// stays open across the restart (the broker keeps it), is not ended by the start, and its
// producer commits it afterwards.
func TestDevBrokerCleanRestartKeepsOpenTxn(t *testing.T) {
	dir := t.TempDir()
	b := startTestDevBroker(t, dir, 0)
	addr := b.Addrs()[0]
	port, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	if err != nil {
		t.Fatal(err)
	}
	p := txnProducer(t, b.Addrs())
	produceTxn(t, p, false, "open-0", "open-1")
	b.Close()

	b = startTestDevBroker(t, dir, port)
	if crashed := b.CrashEnded(); len(crashed) != 0 {
		t.Errorf("CrashEnded() after a clean shutdown = %+v; want none", crashed)
	}
	if err := p.EndTransaction(testCtx(t), kgo.TryCommit); err != nil {
		t.Fatalf("committing the transaction across the restart: %v", err)
	}
	want := []string{"open-0", "open-1"}
	if got := readCommitted(t, b.Addrs(), "end"); !slices.Equal(got, want) {
		t.Fatalf("a read_committed reader read %q; want %q", got, want)
	}
}

// midCommitRig is a development broker with an input topic "in" (1 partition) and an output
// topic "out" (2 partitions), and a GroupTransactSession of group "g" that reads "in" and
// produces to both partitions of "out".
type midCommitRig struct {
	t    *testing.T
	dir  string
	b    *DevBroker
	sess *kgo.GroupTransactSession
}

func newMidCommitRig(t *testing.T) *midCommitRig {
	r := &midCommitRig{t: t, dir: t.TempDir()}
	r.start(r.dir)
	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(r.b.Addrs()...), kgo.TransactionalID("tx"),
		kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.SessionTimeout(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	r.sess = sess
	return r
}

func (r *midCommitRig) start(dir string) {
	r.t.Helper()
	b, err := StartDevBroker(DevBrokerConfig{Dir: dir, Partitions: 2, Topics: []string{"in", "out"}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(b.Close)
	r.b = b
}

// input produces values to "in" outside any transaction.
func (r *midCommitRig) input(values ...string) {
	r.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range values {
		if err := cl.ProduceSync(testCtx(r.t), &kgo.Record{Topic: "in", Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// process polls n records of "in" in a transaction and produces each to both partitions of
// "out"; before ending the transaction it calls beforeEnd.
func (r *midCommitRig) process(n int, beforeEnd func()) {
	r.t.Helper()
	ctx := testCtx(r.t)
	if err := r.sess.Begin(); err != nil {
		r.t.Fatal(err)
	}
	for got := 0; got < n; {
		fs := r.sess.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			r.t.Fatalf("polled %d of %d records: %v", got, n, err)
		}
		for _, rec := range fs.Records() {
			got++
			for p := int32(0); p < 2; p++ {
				if err := r.sess.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: p, Value: rec.Value}).FirstErr(); err != nil {
					r.t.Fatal(err)
				}
			}
		}
	}
	if beforeEnd != nil {
		beforeEnd()
	}
	committed, err := r.sess.End(ctx, kgo.TryCommit)
	if err != nil || !committed {
		r.t.Fatalf("End: committed %v, %v", committed, err)
	}
}

// committedOut is what a read_committed reader reads from each partition of "out", up to a last
// record, end, that it produces to each outside any transaction.
func committedOut(t *testing.T, addrs []string, end string) [2][]string {
	t.Helper()
	ctx := testCtx(t)
	p, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for part := int32(0); part < 2; part++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: part, Value: []byte(end)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got [2][]string
	var ended [2]bool
	for !ended[0] || !ended[1] {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %q, not up to %q in each partition: %v", got, end, err)
		}
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case ended[r.Partition]:
			case string(r.Value) == end:
				ended[r.Partition] = true
			default:
				got[r.Partition] = append(got[r.Partition], string(r.Value))
			}
		})
	}
	return got
}

// groupOffset is group g's committed offset of in/0 (-1: none).
func groupOffset(t *testing.T, addrs []string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(testCtx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	o, ok := offs.Lookup("in", 0)
	if !ok {
		return -1
	}
	return o.At
}

// replaceFrom replaces each of names (files or directories, relative) in dir with from's copy.
func replaceFrom(t *testing.T, from, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(from, n)
		if fi, err := os.Stat(src); err != nil {
			t.Fatal(err)
		} else if fi.IsDir() {
			copyDir(t, src, filepath.Join(dir, n))
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDevBrokerCrashMidCommitCompletes: a development broker killed while it wrote a
// transaction's commit markers — one partition of "out" marked, the other not, the group's offset
// not committed yet (kfake commits it after the markers) — completes the commit when it starts
// again: a read_committed reader reads the whole transaction in both partitions and the group's
// offset is the one the transaction committed. Before, the start aborted the unmarked partition
// and the group read its input again: half the transaction's outputs twice
// (TestKafkaExactlyOnceBrokerGone once saw 8,000 duplicates). Killed with no marker written yet,
// the transaction aborts.
func TestDevBrokerCrashMidCommitCompletes(t *testing.T) {
	r := newMidCommitRig(t)
	r.input("a", "b")
	r.process(2, nil)
	r.input("c", "d")
	open, done := t.TempDir(), t.TempDir()
	r.process(2, func() { copyDir(t, r.dir, open) }) // the transaction's records written, nothing else
	copyDir(t, r.dir, done)                          // committed: markers in both partitions, the offsets
	r.sess.Close()
	r.b.Close()
	if entries, err := os.ReadDir(done); err == nil {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Logf("the broker's directory: %v", names)
	}

	// Killed after out/0's COMMIT marker, before out/1's and the group's offsets.
	mid := t.TempDir()
	copyDir(t, done, mid)
	replaceFrom(t, open, mid, filepath.Join("partitions", "out-1"), "groups.log", "pids.log")
	r.start(mid)
	crashed := r.b.CrashEnded()
	if len(crashed) != 1 || crashed[0].Topic != "out" || crashed[0].Partition != 1 || !crashed[0].Committed {
		t.Errorf("CrashEnded() = %+v; want out/1's transaction committed", crashed)
	}
	want := [2][]string{{"a", "b", "c", "d"}, {"a", "b", "c", "d"}}
	if got := committedOut(t, r.b.Addrs(), "end-0"); !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
		t.Errorf("a read_committed reader read %q after the crash; want %q", got, want)
	}
	if got := groupOffset(t, r.b.Addrs()); got != 4 {
		t.Errorf("group g's offset of in/0 is %d after the crash; want 4, the transaction's", got)
	}
	// The same transactional id goes on.
	r.b.Close()
	r.start(mid)
	if crashed := r.b.CrashEnded(); len(crashed) != 0 {
		t.Errorf("CrashEnded() after a clean restart = %+v; want none", crashed)
	}
	if got := committedOut(t, r.b.Addrs(), "end-1"); !slices.Equal(got[0], append(want[0], "end-0")) || !slices.Equal(got[1], append(want[1], "end-0")) {
		t.Errorf("a read_committed reader read %q after a clean restart", got)
	}

	// Killed after the last COMMIT marker, before the group's offsets: they are committed.
	r.b.Close()
	marked := t.TempDir()
	copyDir(t, done, marked)
	replaceFrom(t, open, marked, "groups.log", "pids.log")
	r.start(marked)
	if crashed, n := r.b.CrashEnded(), r.b.CrashCompletedOffsets(); len(crashed) != 0 || n != 1 {
		t.Errorf("CrashEnded() = %+v, CrashCompletedOffsets() = %d; want no marker written and one transaction's offsets", crashed, n)
	}
	if got := groupOffset(t, r.b.Addrs()); got != 4 {
		t.Errorf("group g's offset of in/0 is %d after a crash between the markers and the offsets; want 4", got)
	}
	// A transaction whose end the broker logged is left alone: a reset of the group's offsets
	// made after it stays.
	r.b.Close()
	reset := t.TempDir()
	copyDir(t, done, reset)
	r.start(reset)
	if crashed, n := r.b.CrashEnded(), r.b.CrashCompletedOffsets(); len(crashed) != 0 || n != 0 {
		t.Errorf("after a clean stop: CrashEnded() = %+v, CrashCompletedOffsets() = %d; want nothing", crashed, n)
	}
	resetGroup(t, r.b.Addrs(), 0)
	killed := t.TempDir()
	copyDir(t, reset, killed) // killed after the reset
	r.b.Close()
	r.start(killed)
	if got := groupOffset(t, r.b.Addrs()); got != 0 || r.b.CrashCompletedOffsets() != 0 {
		t.Errorf("group g's offset of in/0 is %d after a reset to 0 and a kill (%d offsets completed); want 0 kept", got, r.b.CrashCompletedOffsets())
	}

	// Killed with the offsets logged but no marker written: the transaction aborts.
	r.b.Close()
	none := t.TempDir()
	copyDir(t, done, none)
	replaceFrom(t, open, none, filepath.Join("partitions", "out-0"), filepath.Join("partitions", "out-1"), "groups.log", "pids.log")
	r.start(none)
	crashed = r.b.CrashEnded()
	if len(crashed) != 2 || crashed[0].Committed || crashed[1].Committed {
		t.Errorf("CrashEnded() = %+v; want both partitions' transaction aborted", crashed)
	}
	want = [2][]string{{"a", "b"}, {"a", "b"}}
	if got := committedOut(t, r.b.Addrs(), "end-2"); !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
		t.Errorf("a read_committed reader read %q after a crash before any marker; want %q", got, want)
	}
	if got := groupOffset(t, r.b.Addrs()); got != 2 {
		t.Errorf("group g's offset of in/0 is %d after a crash before any marker; want 2", got)
	}
}

// TestTxnOffsetLogKeepsLatest: the transaction offset log keeps, across a reopen and past its
// compaction size, the offsets of each producer's latest transaction (the last logged for a
// partition winning), and a line torn by a kill is left out.
func TestTxnOffsetLogKeepsLatest(t *testing.T) {
	dir := t.TempDir()
	l, err := openTxnOffsetLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(pid int64, epoch int16, offset int64) {
		t.Helper()
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.Group, req.ProducerID, req.ProducerEpoch = "g", pid, epoch
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = "in"
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = 0, offset
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		if err := l.logCommit(req); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20_000 { // ~2.5 MB of lines: past the compaction size twice
		commit(1, int16(i/2), int64(i))
	}
	commit(2, 7, 100)
	commit(2, 7, 101)
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, txnOffsetLogName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"pid":2,"epoch":7,"group":"g","topic":"in","partition":0,"off`) // torn
	f.Close()
	if l, err = openTxnOffsetLog(dir); err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if fi, err := os.Stat(filepath.Join(dir, txnOffsetLogName)); err != nil || fi.Size() > 1024 {
		t.Errorf("the log after a reopen: %v, %v; want the lines of two transactions", fi.Size(), err)
	}
	lines, err := readTxnOffsets(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := txnOffsetsOf(lines)
	want := map[producerEpoch]int64{{1, 9999}: 19_999, {2, 7}: 101}
	if len(got) != len(want) {
		t.Fatalf("transactions logged: %v; want %v", got, want)
	}
	for pe, off := range want {
		o, ok := got[pe][groupPartition{"g", "in#", 0}]
		if !ok || o.Offset != off {
			t.Errorf("producer %d epoch %d: %+v, %v; want offset %d", pe.id, pe.epoch, o, ok, off)
		}
	}
}

// resetGroup commits offset for in/0 to group g, as a reset does.
func resetGroup(t *testing.T, addrs []string, offset int64) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "in", Partition: 0, At: offset, LeaderEpoch: -1})
	resp, err := kadm.NewClient(cl).CommitOffsets(testCtx(t), "g", offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}
