package host_test

import (
	"context"
	"fmt"
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
)

// The tests of this file read input topics written by another client's transactions: committed,
// aborted and still open when the task starts.

// txnWrite produces n records of key to partition p of topic "in" in a transaction of cl (a
// transactional client) and ends it: committed if commit, else aborted; open (not ended) if
// !end.
func txnWrite(t *testing.T, cl *kgo.Client, p int32, key string, n int, commit, end bool) {
	t.Helper()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := &kgo.Record{Topic: "in", Partition: p, Key: []byte(key), Value: fmt.Appendf(nil, "%s %d", key, i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if !end {
		return
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
}

// plainWrite produces n records of key to partition p of topic "in" without a transaction.
func plainWrite(t *testing.T, cl *kgo.Client, p int32, key string, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Key: []byte(key), Value: fmt.Appendf(nil, "%s %d", key, i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// counterTask is the counter task over topic "in" to topic "counts", exactly once if eos, with a
// changelog if changelog.
func counterTask(module string, eos, changelog bool) host.TaskConfig {
	tc := host.TaskConfig{
		Name: "c", Module: module,
		Inputs:    []host.InputConfig{{Name: "in", Type: "kafka", Topics: []string{"in"}}},
		Output:    host.OutputConfig{Type: "kafka", Topic: "counts"},
		Changelog: host.ChangelogConfig{Enabled: changelog},
	}
	if eos {
		tc.Delivery = host.ExactlyOnce
	}
	return tc
}

// counterOutputs returns, per key, the counter task's outputs in the order read.
func counterOutputs(t *testing.T, c *kfake.Cluster, n int) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, r := range consumeRecords(t, c, "counts", n) {
		got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
	}
	return got
}

// wantCounts fails t unless got holds, for each key of want, the outputs 1..want[key] in order,
// and no other key.
func wantCounts(t *testing.T, got map[string][]string, want map[string]int) {
	t.Helper()
	for key, outs := range got {
		n := want[key]
		ok := len(outs) == n
		for i := 0; ok && i < n; i++ {
			ok = outs[i] == fmt.Sprint(i+1)
		}
		if !ok {
			t.Errorf("key %q: outputs %v, want 1..%d", key, outs, n)
		}
	}
	for key, n := range want {
		if _, ok := got[key]; !ok && n > 0 {
			t.Errorf("key %q: no outputs, want 1..%d", key, n)
		}
	}
}

// runBounded runs a bounded task tc on cluster c in data directory dir until it ends (failing t
// if it does not), and returns its last figures.
func runBounded(t *testing.T, c *kfake.Cluster, dir string, tc host.TaskConfig) host.TaskStats {
	t.Helper()
	tc.Inputs[0].Bounded = true
	h := hosttest.Start(t, host.Config{DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
	select {
	case <-h.Done():
	case <-time.After(60 * time.Second): // a failure bound
		t.Fatalf("the bounded run did not end; its inputs: %+v", h.Stats()[0].Inputs)
	}
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	return h.Stats()[0]
}

// TestKafkaTransactionalInput: partition 0 of the input is written by another client's
// transactions, committed and aborted, with the log ending in an abort marker; partition 1 holds
// a transaction still open when the task starts, and after it records of a producer without
// transactions. At least once (with and without a changelog) and exactly once: the task
// processes every committed record once and no aborted one; the open transaction holds back
// partition 1 (read_committed: the records after it wait for its end) and not partition 0; once
// it aborts, the records after it are processed and its own never. Every partition's committed
// offset then reaches its end, past the markers, and the lag is 0 (exactly once, before: the
// lag stayed above 0 for good). Exactly once, a transaction of the task's that read an aborted
// transaction alone (markers, no record) aborts: the partition is read again and its offset
// still reaches its end (before, the abort left it uncommitted until a record came).
func TestKafkaTransactionalInput(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	for _, mode := range []string{"at_least_once", "at_least_once_changelog", "exactly_once"} {
		eos := mode == "exactly_once"
		t.Run(mode, func(t *testing.T) {
			c := newCluster(t, "in", "counts")
			manual := kgo.RecordPartitioner(kgo.ManualPartitioner())
			txn := newClient(t, c, manual, kgo.TransactionalID("writer"))
			open := newClient(t, c, manual, kgo.TransactionalID("open-writer"))
			plain := newClient(t, c, manual)
			txnWrite(t, txn, 0, "committed", 10, true, true)
			txnWrite(t, txn, 0, "aborted", 10, false, true)
			txnWrite(t, txn, 0, "committed", 10, true, true)
			txnWrite(t, txn, 0, "aborted", 5, false, true)
			txnWrite(t, open, 1, "open", 5, false, false)
			plainWrite(t, plain, 1, "after", 5)

			h := hosttest.Start(t, host.Config{
				DataDir: filepath.Join(t.TempDir(), "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
				Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
				Tasks: []host.TaskConfig{counterTask(module, eos, mode != "at_least_once")},
			})
			// Partition 0 is processed to its end while partition 1's transaction is open.
			wantCounts(t, counterOutputs(t, c, 20), map[string]int{"committed": 20})
			if err := open.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			plainWrite(t, plain, 1, "after", 5)
			wantCounts(t, counterOutputs(t, c, 30), map[string]int{"committed": 20, "after": 10})

			ctx := context.Background()
			adm := kadm.NewClient(newClient(t, c))
			ends, err := adm.ListEndOffsets(ctx, "in")
			if err == nil {
				err = ends.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			atEnds := func(parts ...int32) {
				t.Helper()
				hosttest.WaitFor(t, 30*time.Second, "the group's offsets at the partitions' ends", func() bool {
					offs, err := adm.FetchOffsets(ctx, "wasmstream-c")
					if err != nil {
						return false
					}
					for _, p := range parts {
						end, _ := ends.Lookup("in", p)
						if o, ok := offs.Lookup("in", p); !ok || o.At != end.Offset {
							return false
						}
					}
					return true
				})
			}
			waitCommitted(t, h) // every input's lag 0
			atEnds(0, 1)
			if !eos {
				return
			}
			// A transaction of the task's that read nothing but an aborted transaction's
			// markers aborts: the partition reads them again, and the next one commits past
			// them.
			abort := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 1,
				When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).TransactionalID != "writer" }})
			txnWrite(t, txn, 2, "aborted", 5, false, true)
			if ends, err = adm.ListEndOffsets(ctx, "in"); err != nil {
				t.Fatal(err)
			}
			atEnds(0, 1, 2)
			waitCommitted(t, h)
			if st := h.Stats()[0]; abort.Hits() != 1 || st.TxnAborts == 0 {
				t.Fatalf("the transaction fault was hit %d times, %d transactions aborted; want an abort", abort.Hits(), st.TxnAborts)
			}
		})
	}
}

// TestKafkaBoundedTransactionalInput: a bounded run over partitions that do not end in a record
// of their own: partition 0 ends with an aborted transaction (its end offset is after an abort
// marker), partition 1 with a transaction still open when the run starts, and records after it,
// partition 2 is empty, and partition 3's log start was moved by a DeleteRecords. The run
// processes every committed record once and ends without waiting for the open transaction
// (read_committed, its end is the partition's last stable offset); once the transaction
// aborts, a second bounded run processes the records after it and none of it.
func TestKafkaBoundedTransactionalInput(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	c := newCluster(t, "in", "counts")
	manual := kgo.RecordPartitioner(kgo.ManualPartitioner())
	txn := newClient(t, c, manual, kgo.TransactionalID("writer"))
	open := newClient(t, c, manual, kgo.TransactionalID("open-writer"), kgo.TransactionTimeout(5*time.Minute))
	plain := newClient(t, c, manual)
	txnWrite(t, txn, 0, "p0", 5, true, true)
	txnWrite(t, txn, 0, "aborted", 5, false, true)
	plainWrite(t, plain, 1, "p1", 4)
	txnWrite(t, open, 1, "open", 3, false, false)
	plainWrite(t, plain, 1, "late", 3)
	plainWrite(t, plain, 3, "p3", 10)
	deleteRecordsBelow(t, plain, "in", 3, 6)

	dir := filepath.Join(t.TempDir(), "data")
	runBounded(t, c, dir, counterTask(module, false, false))
	wantCounts(t, counterOutputs(t, c, 13), map[string]int{"p0": 5, "p1": 4, "p3": 4})

	if err := open.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	runBounded(t, c, dir, counterTask(module, false, false))
	wantCounts(t, counterOutputs(t, c, 16), map[string]int{"p0": 5, "p1": 4, "p3": 4, "late": 3})
}

// TestKafkaManyPartitionsFewWithData: an input topic of 64 partitions of which 3 hold records.
// Exactly once with a changelog, every record is counted once and every partition's lag reaches
// 0, the 61 empty ones included; a bounded run over the same topic ends.
func TestKafkaManyPartitionsFewWithData(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	c := newClusterParts(t, 64, "in", "counts")
	plain := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for _, p := range []int32{5, 40, 63} {
		plainWrite(t, plain, p, fmt.Sprint("p", p), 4)
	}
	want := map[string]int{"p5": 4, "p40": 4, "p63": 4}
	h := hosttest.Start(t, host.Config{
		DataDir: filepath.Join(t.TempDir(), "data"), Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{counterTask(module, true, true)},
	})
	wantCounts(t, counterOutputs(t, c, 12), want)
	hosttest.WaitFor(t, 60*time.Second, "64 partitions assigned, their lag 0", func() bool {
		s := h.Stats()
		if len(s) == 0 || len(s[0].Inputs) != 64 || s[0].Pending != 0 {
			return false
		}
		for _, in := range s[0].Inputs {
			if in.Lag > 0 {
				return false
			}
		}
		return true
	})
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}

	tc := counterTask(module, false, false)
	tc.Name = "b"
	out := filepath.Join(t.TempDir(), "out.ndjson")
	tc.Output = host.OutputConfig{Type: host.OutputFile, Path: out}
	runBounded(t, c, filepath.Join(t.TempDir(), "data"), tc)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 12 {
		t.Fatalf("the bounded run wrote %d outputs, want 12:\n%s", n, data)
	}
}

// TestKafkaBoundedLogDeletedToEnd: a bounded run resumes a partition whose every record after its
// position was deleted (a DeleteRecords up to the end offset, as retention may do): there is
// nothing left to read, and the run ends, counting the 5 records lost (retention_lost) and
// committing the partition's end, so that a third run counts none. Before, the run waited for a
// fetch that never came.
func TestKafkaBoundedLogDeletedToEnd(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	c := newClusterParts(t, 2, "in")
	plain := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	dir := filepath.Join(t.TempDir(), "data")
	out := filepath.Join(t.TempDir(), "out.ndjson")
	tc := counterTask(module, false, false)
	tc.Output = host.OutputConfig{Type: host.OutputFile, Path: out}
	run := func() host.TaskStats { t.Helper(); return runBounded(t, c, dir, tc) }
	plainWrite(t, plain, 0, "k", 5)
	plainWrite(t, plain, 1, "j", 5)
	run()
	plainWrite(t, plain, 0, "k", 5)
	plainWrite(t, plain, 1, "j", 5)
	deleteRecordsBelow(t, plain, "in", 0, 10)
	if st := run(); st.RetentionLost != 5 {
		t.Errorf("retention_lost = %d, want 5", st.RetentionLost)
	}
	offs, err := kadm.NewClient(plain).FetchOffsets(context.Background(), "wasmstream-c")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := offs.Lookup("in", 0); o.At != 10 {
		t.Errorf("partition 0's committed offset is %d, want 10 (its end)", o.At)
	}
	if st := run(); st.RetentionLost != 0 {
		t.Errorf("the third run: retention_lost = %d, want 0", st.RetentionLost)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n != 15 {
		t.Fatalf("%d outputs, want 15 (5 of each partition, then partition 1's 5 more):\n%s", n, data)
	}
}
