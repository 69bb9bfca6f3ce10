package kafka

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
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
	crashed := b.CrashAborted()
	if len(crashed) != 1 || crashed[0].Topic != "out" || crashed[0].Partition != 0 || crashed[0].FirstOffset != 2 {
		t.Errorf("CrashAborted() = %+v; want one transaction of out/0 from offset 2", crashed)
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
	if crashed := b.CrashAborted(); len(crashed) != 0 {
		t.Errorf("CrashAborted() after a clean restart = %+v; want none", crashed)
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
	if crashed := b.CrashAborted(); len(crashed) != 0 {
		t.Errorf("CrashAborted() after a clean shutdown = %+v; want none", crashed)
	}
	if err := p.EndTransaction(testCtx(t), kgo.TryCommit); err != nil {
		t.Fatalf("committing the transaction across the restart: %v", err)
	}
	want := []string{"open-0", "open-1"}
	if got := readCommitted(t, b.Addrs(), "end"); !slices.Equal(got, want) {
		t.Fatalf("a read_committed reader read %q; want %q", got, want)
	}
}
