package kafka

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testCluster starts a one-broker kfake cluster, closed when the test ends.
func testCluster(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, Config) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, Config{Brokers: c.ListenAddrs()}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testAdmin(t *testing.T, cfg Config) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func cleanupPolicy(t *testing.T, adm *kadm.Client, topic string) string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatal(err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			return c.MaybeValue()
		}
	}
	return ""
}

// wantErr fails unless err is non-nil and its message holds every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one holding %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not hold %q", err, p)
		}
	}
}

func TestEnsureChangelog(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(2, "plain"))
	ctx := testCtx(t)
	adm := testAdmin(t, cfg)
	if _, err := adm.CreateTopic(ctx, 2, -1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")}, "both"); err != nil {
		t.Fatal(err)
	}

	t.Run("creates compacted", func(t *testing.T) {
		if err := EnsureChangelog(ctx, cfg, "cl", 3, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := PartitionCount(ctx, cfg, "cl"); err != nil || n != 3 {
			t.Fatalf("PartitionCount = %d, %v; want 3", n, err)
		}
		if p := cleanupPolicy(t, adm, "cl"); p != "compact" {
			t.Fatalf("cleanup.policy = %q, want compact", p)
		}
	})
	t.Run("idempotent", func(t *testing.T) {
		if err := EnsureChangelog(ctx, cfg, "cl", 3, 1); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("concurrent creators", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = EnsureChangelog(ctx, cfg, "race", 2, 0) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("input partitions added", func(t *testing.T) {
		// The input topics grew from 3 partitions to 4: the changelog gets the fourth, empty.
		// Before, the start was refused ("has 3 partitions, but 4 are needed") with advice to
		// delete the changelog, and with it the state of every partition.
		if err := EnsureChangelog(ctx, cfg, "cl", 4, 0); err != nil {
			t.Fatal(err)
		}
		if n, err := PartitionCount(ctx, cfg, "cl"); err != nil || n != 4 {
			t.Fatalf("PartitionCount = %d, %v; want 4", n, err)
		}
	})
	t.Run("more partitions than the inputs", func(t *testing.T) {
		err := EnsureChangelog(ctx, cfg, "cl", 2, 0)
		wantErr(t, err, `"cl"`, "has 4 partitions, but 2 are needed", "delete the changelog topic")
	})
	t.Run("not compacted", func(t *testing.T) {
		wantErr(t, EnsureChangelog(ctx, cfg, "plain", 2, 0), `"plain"`, "cleanup.policy=delete", "want compact")
	})
	t.Run("compact and delete", func(t *testing.T) {
		wantErr(t, EnsureChangelog(ctx, cfg, "both", 2, 0), `"both"`, "cleanup.policy=compact,delete", "want compact")
		if err := EnsureChangelog(ctx, cfg, "both", 2, 0); strings.Contains(err.Error(), "removed") {
			t.Errorf("nothing removed yet, but the refusal says %q", err)
		}
	})
	t.Run("compact and delete, records removed", func(t *testing.T) {
		// Retention already removed records: the refusal says which partitions no longer start
		// at 0, and that restoring them from the changelog would give partial state.
		recs := make([]*kgo.Record, 5)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: "both", Partition: 1, Key: []byte{byte(i)}, Value: []byte("v")}
		}
		pcl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer pcl.Close()
		if err := pcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		o := kadm.Offsets{}
		o.Add(kadm.Offset{Topic: "both", Partition: 1, At: 3})
		if rs, err := adm.DeleteRecords(ctx, o); err != nil || rs.Error() != nil {
			t.Fatal(err, rs.Error())
		}
		wantErr(t, EnsureChangelog(ctx, cfg, "both", 2, 0), "cleanup.policy=compact,delete", "records were removed from it already (partition 1 starts at offset 3)",
			"partial state", "from a backup")
	})
	t.Run("no partitions", func(t *testing.T) {
		wantErr(t, EnsureChangelog(ctx, cfg, "zero", 0, 0), `"zero"`, "at least 1")
	})
	t.Run("missing topic", func(t *testing.T) {
		if _, err := PartitionCount(ctx, cfg, "nope"); !errors.Is(err, ErrNoTopic) {
			t.Errorf("PartitionCount: %v, want ErrNoTopic", err)
		}
		if _, err := EndOffset(ctx, cfg, "nope", 0); !errors.Is(err, ErrNoTopic) {
			t.Errorf("EndOffset: %v, want ErrNoTopic", err)
		}
		if _, _, _, err := ReadChangelog(ctx, cfg, "nope", 0, 0, nil, nil); !errors.Is(err, ErrNoTopic) {
			t.Errorf("ReadChangelog: %v, want ErrNoTopic", err)
		}
		if _, err := EndOffset(ctx, cfg, "cl", 7); !errors.Is(err, ErrNoPartition) || !strings.Contains(err.Error(), "no partition 7") {
			t.Errorf("EndOffset of a missing partition: %v", err)
		}
	})
}

type rec struct {
	key, value []byte
	epoch      uint64
	offset     int64
	leader     int32
}

// readAll reads partition p from from and returns what ReadChangelog returned and the records.
func readAll(t *testing.T, cfg Config, topic string, p int32, from int64) (end, n, size int64, got []rec, err error) {
	t.Helper()
	end, n, size, err = ReadChangelog(testCtx(t), cfg, topic, p, from, func(k, v []byte, m RecordMeta, o int64) error {
		got = append(got, rec{bytes.Clone(k), bytes.Clone(v), m.Epoch, o, m.LeaderEpoch})
		return nil
	}, nil)
	return end, n, size, got, err
}

func newWriter(t *testing.T, cfg Config, topic string) *ChangelogWriter {
	t.Helper()
	w, err := NewChangelogWriter(cfg, topic, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func TestChangelogWriterFlush(t *testing.T) {
	_, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 3, 0); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, cfg, "cl")

	// Interleave partitions 0 and 2; reuse one buffer to check that Write copies.
	buf := make([]byte, 8)
	for i := range 5 {
		copy(buf, fmt.Sprintf("k%d-v%04d", 0, i))
		w.Write(0, buf[:2], buf[3:])
		if i < 3 {
			copy(buf, fmt.Sprintf("k%d-v%04d", 2, i))
			w.Write(2, buf[:2], buf[3:])
		}
	}
	next, err := w.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{0: 5, 2: 3}; !maps.Equal(next, want) {
		t.Fatalf("first Flush = %v, want %v", next, want)
	}

	w.WriteEpoch(0, []byte("k0"), []byte("v0005"), 0x100000002)
	w.WriteEpoch(0, []byte("k0"), nil, 3) // tombstone
	next, err = w.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{0: 7}; !maps.Equal(next, want) {
		t.Fatalf("second Flush = %v, want %v (only partitions written since the last Flush)", next, want)
	}
	if next, err = w.Flush(ctx); err != nil || len(next) != 0 {
		t.Fatalf("empty Flush = %v, %v; want nothing", next, err)
	}

	end, n, size, got, err := readAll(t, cfg, "cl", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if end != 7 || n != 7 || size != 6*(2+5)+2 {
		t.Fatalf("ReadChangelog = end %d, %d records, %d bytes; want 7, 7, %d", end, n, size, 6*(2+5)+2)
	}
	for i, r := range got {
		want := fmt.Sprintf("v%04d", i)
		if i == 6 {
			if r.value != nil {
				t.Errorf("offset 6: value %q, want a tombstone (nil)", r.value)
			}
		} else if string(r.value) != want {
			t.Errorf("offset %d: value %q, want %q (order or copy broken)", r.offset, r.value, want)
		}
		if string(r.key) != "k0" || r.offset != int64(i) {
			t.Errorf("record %d: key %q offset %d", i, r.key, r.offset)
		}
		// Write writes no epoch header (epoch 0); WriteEpoch's header reads back.
		if want := map[int]uint64{5: 0x100000002, 6: 3}[i]; r.epoch != want {
			t.Errorf("offset %d: epoch %#x, want %#x", r.offset, r.epoch, want)
		}
	}
}

// TestAdminReadChangelog: an Admin's reads, one consuming client for all of them, each read
// exactly its partition from its offset to the end taken at its start (nothing of an earlier
// read's partition, nothing fetched ahead of an earlier read of its own), and once a read of
// each partition made the client's connections they open no more.
func TestAdminReadChangelog(t *testing.T) {
	c, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 2, 0); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, cfg, "cl")
	write := func(p int32, from, n int) {
		for i := from; i < from+n; i++ {
			w.Write(p, fmt.Appendf(nil, "p%d", p), fmt.Appendf(nil, "v%d", i))
		}
		if _, err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 0, 10)
	write(1, 0, 5)
	adm, err := NewAdmin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	read := func(p int32, from int64) string {
		var got []string
		end, n, _, err := adm.ReadChangelog(ctx, "cl", p, from, func(k, v []byte, _ RecordMeta, o int64) error {
			got = append(got, fmt.Sprintf("%s@%d=%s", k, o, v))
			return nil
		}, nil)
		if err != nil {
			t.Fatalf("partition %d from %d: %v", p, from, err)
		}
		if n != int64(len(got)) {
			t.Errorf("partition %d from %d: %d records counted, %d read", p, from, n, len(got))
		}
		return fmt.Sprintf("end %d: %s", end, strings.Join(got, " "))
	}
	if got, want := read(0, 0), "end 10: p0@0=v0 p0@1=v1 p0@2=v2 p0@3=v3 p0@4=v4 p0@5=v5 p0@6=v6 p0@7=v7 p0@8=v8 p0@9=v9"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got, want := read(1, 0), "end 5: p1@0=v0 p1@1=v1 p1@2=v2 p1@3=v3 p1@4=v4"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	var conns atomic.Int64
	c.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		conns.Add(1)
		return nil, nil, false
	})
	for _, s := range []struct {
		p     int32
		from  int64
		write int // records written to p first
		want  string
	}{
		{0, 7, 0, "end 10: p0@7=v7 p0@8=v8 p0@9=v9"},
		{0, 10, 2, "end 12: p0@10=v10 p0@11=v11"},
		{1, 3, 1, "end 6: p1@3=v3 p1@4=v4 p1@5=v5"},
		{0, 12, 0, "end 12: "},
		{0, 11, 0, "end 12: p0@11=v11"},
	} {
		if s.write > 0 {
			end, err := adm.EndOffset(ctx, "cl", s.p)
			if err != nil {
				t.Fatal(err)
			}
			write(s.p, int(end), s.write)
		}
		if got := read(s.p, s.from); got != s.want {
			t.Errorf("partition %d from %d: got %s, want %s", s.p, s.from, got, s.want)
		}
	}
	// 0 in most runs, 1 in 2 of 10 (a connection of the writer's or the lister's, made late); a
	// client per read makes three per read with records (12 here).
	if n := conns.Load(); n > 2 {
		t.Errorf("%d new connections during 5 reads after the first two: a client per read", n)
	}
}

// TestChangelogPositionLeaderEpoch: a position record written with WritePosition carries the
// input's leader epoch in its LeaderEpochHeader, beside the owner epoch, and reads it back
// (RecordMeta); one without it (unknown, or written by WriteEpoch) reads -1.
func TestChangelogPositionLeaderEpoch(t *testing.T) {
	_, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 1, 0); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, cfg, "cl")
	w.WritePosition(0, []byte("p1"), []byte("v1"), 0, 4)
	w.WritePosition(0, []byte("p2"), []byte("v2"), 9, 0)
	w.WritePosition(0, []byte("p3"), []byte("v3"), 9, -1)
	w.WriteEpoch(0, []byte("k"), []byte("v4"), 9)
	// WriteOwned: the key and value from one buffer, kept as they are.
	w.WriteOwned(0, []byte("k5v5"), 2, 9)
	w.WriteOwned(0, []byte("k6v6"), 2, 0)
	w.WriteOwned(0, []byte("v7"), 0, 1<<40)
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, _, got, err := readAll(t, cfg, "cl", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		epoch      uint64
		leader     int32
		key, value string
	}{{0, 4, "p1", "v1"}, {9, 0, "p2", "v2"}, {9, -1, "p3", "v3"}, {9, -1, "k", "v4"}, {9, -1, "k5", "v5"}, {0, -1, "k6", "v6"}, {1 << 40, -1, "", "v7"}}
	if len(got) != len(want) {
		t.Fatalf("%d records read, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.epoch != want[i].epoch || r.leader != want[i].leader || string(r.key) != want[i].key || string(r.value) != want[i].value {
			t.Errorf("record %d: epoch %d, leader epoch %d, key %q, value %q; want %d, %d, %q, %q", i, r.epoch, r.leader, r.key, r.value, want[i].epoch, want[i].leader, want[i].key, want[i].value)
		}
	}
}

func TestReadChangelog(t *testing.T) {
	c, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 2, 0); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, cfg, "cl")
	for i := range 10 {
		w.Write(0, fmt.Appendf(nil, "key%d", i%4), fmt.Appendf(nil, "value%d", i)) // 4+6 bytes
	}
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if end, err := EndOffset(ctx, cfg, "cl", 0); err != nil || end != 10 {
		t.Fatalf("EndOffset = %d, %v; want 10", end, err)
	}

	for _, tc := range []struct {
		name      string
		p         int32
		from      int64
		wantFirst int64 // offset of the first record read
		wantN     int64
	}{
		{"from the start", 0, 0, 0, 10},
		{"from the middle", 0, 6, 6, 4},
		{"no local state", 0, -1, 0, 10},
		{"at the end", 0, 10, -1, 0},
		{"empty partition", 1, 0, -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			end, n, size, got, err := readAll(t, cfg, "cl", tc.p, tc.from)
			if err != nil {
				t.Fatal(err)
			}
			wantEnd := int64(10)
			if tc.p == 1 {
				wantEnd = 0
			}
			if end != wantEnd || n != tc.wantN || size != 10*tc.wantN || int64(len(got)) != tc.wantN {
				t.Fatalf("end %d, %d records (%d delivered), %d bytes; want %d, %d, %d", end, n, len(got), size, wantEnd, tc.wantN, 10*tc.wantN)
			}
			for i, r := range got {
				if o := tc.wantFirst + int64(i); r.offset != o || string(r.value) != fmt.Sprint("value", o) {
					t.Errorf("record %d: offset %d value %q, want offset %d", i, r.offset, r.value, o)
				}
			}
		})
	}

	t.Run("beyond the end", func(t *testing.T) {
		_, _, _, err := ReadChangelog(ctx, cfg, "cl", 0, 11, nil, nil)
		if !errors.Is(err, ErrChangelogBehind) {
			t.Fatalf("err = %v, want ErrChangelogBehind", err)
		}
		wantErr(t, err, "cl/0", "ends at offset 10", "up to offset 11")
	})

	t.Run("fn error", func(t *testing.T) {
		boom := errors.New("boom")
		end, n, _, err := ReadChangelog(ctx, cfg, "cl", 0, 2, func(_, _ []byte, _ RecordMeta, o int64) error {
			if o == 5 {
				return boom
			}
			return nil
		}, nil)
		if !errors.Is(err, boom) || end != 5 || n != 3 {
			t.Fatalf("end %d, %d records, %v; want 5, 3, boom", end, n, err)
		}
	})

	t.Run("below the log start", func(t *testing.T) {
		adm := testAdmin(t, cfg)
		o := kadm.Offsets{}
		o.Add(kadm.Offset{Topic: "cl", Partition: 0, At: 4})
		if _, err := adm.DeleteRecords(ctx, o); err != nil {
			t.Fatal(err)
		}
		end, n, _, got, err := readAll(t, cfg, "cl", 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		if end != 10 || n != 6 || got[0].offset != 4 {
			t.Fatalf("end %d, %d records, first offset %d; want 10, 6, 4", end, n, got[0].offset)
		}
	})

	t.Run("compacted", func(t *testing.T) {
		c.Compact() // keeps the last value of each key (the last batch is never compacted)
		end, n, _, got, err := readAll(t, cfg, "cl", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last := map[string]string{}
		for _, r := range got {
			last[string(r.key)] = string(r.value)
		}
		want := map[string]string{"key0": "value8", "key1": "value9", "key2": "value6", "key3": "value7"}
		if end != 10 || n > 6 || !maps.Equal(last, want) {
			t.Fatalf("end %d, %d records, state %v; want 10, <= 6, %v", end, n, last, want)
		}
	})
}

// TestReadChangelogTransactions checks read_committed: an aborted transaction is skipped, a
// commit marker just before the end ends the read, and an open transaction is not read.
func TestReadChangelogTransactions(t *testing.T) {
	_, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 1, 0); err != nil {
		t.Fatal(err)
	}
	tx, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("cl"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	txn := func(commit kgo.TransactionEndTry, vals ...string) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if err := tx.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, "a", "b") // offsets 0, 1; marker 2
	txn(kgo.TryAbort, "x", "y")  // 3, 4 aborted; marker 5
	txn(kgo.TryCommit, "c")      // 6; marker 7: the end (8) follows a marker
	end, n, size, got, err := readAll(t, cfg, "cl", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.value))
	}
	if end != 8 || n != 3 || size != 6 || strings.Join(vals, "") != "abc" {
		t.Fatalf("end %d, %d records, %d bytes, values %q; want 8, 3, 6, abc", end, n, size, vals)
	}

	// An open transaction: its records are past the last stable offset.
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	defer tx.EndTransaction(context.Background(), kgo.TryAbort)
	if end, err := EndOffset(ctx, cfg, "cl", 0); err != nil || end != 8 {
		t.Fatalf("EndOffset with an open transaction = %d, %v; want 8", end, err)
	}
	if end, n, _, _, err := readAll(t, cfg, "cl", 0, 6); err != nil || end != 8 || n != 1 {
		t.Fatalf("read with an open transaction: end %d, %d records, %v; want 8, 1", end, n, err)
	}
}

func TestChangelogWriterErrors(t *testing.T) {
	c, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 2, 0); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, cfg, "cl")
	w.Write(0, []byte("k"), []byte("ok")) // offset 0
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("produce refused", func(t *testing.T) {
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "cl", Err: kerr.TopicAuthorizationFailed, Count: -1})
		w.Write(1, []byte("k"), []byte("v"))
		next, err := w.Flush(ctx)
		f.Remove()
		if !errors.Is(err, kerr.TopicAuthorizationFailed) || len(next) != 0 {
			t.Fatalf("Flush = %v, %v; want TopicAuthorizationFailed and no offsets", next, err)
		}
		wantErr(t, err, "cl/1")
		// The error is reported once; the writer goes on.
		w.Write(0, []byte("k"), []byte("again"))
		if next, err := w.Flush(ctx); err != nil || next[0] != 2 {
			t.Fatalf("Flush after the fault = %v, %v; want {0: 2}", next, err)
		}
	})
	t.Run("unknown partition", func(t *testing.T) {
		w.Write(5, []byte("k"), []byte("v"))
		_, err := w.Flush(ctx)
		wantErr(t, err, "cl/5")
	})
	t.Run("cluster gone", func(t *testing.T) {
		c.Close()
		w.Write(0, []byte("k"), []byte("lost"))
		fctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		if next, err := w.Flush(fctx); !errors.Is(err, context.DeadlineExceeded) || next != nil {
			t.Fatalf("Flush = %v, %v; want the context's deadline", next, err)
		}
		w.Close()
		w.Close() // idempotent
		if _, err := w.Flush(ctx); err == nil {
			t.Fatal("Flush after Close: no error for the record that was never written")
		}
	})
}

// TestChangelogWriterGaps: Gaps names the partitions where another writer's records came before
// one of this writer's (after the offset Expect named, or between two of its own), with the
// first offset of those records, once.
func TestChangelogWriterGaps(t *testing.T) {
	_, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 2, 0); err != nil {
		t.Fatal(err)
	}
	w, other := newWriter(t, cfg, "cl"), newWriter(t, cfg, "cl")
	flush := func(w *ChangelogWriter) {
		t.Helper()
		if _, err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.Expect(0, 0)
	w.Expect(1, 0)
	w.Write(0, []byte("a"), []byte("1"))
	w.Write(1, []byte("a"), []byte("1"))
	flush(w)
	if g := w.Gaps(); len(g) != 0 {
		t.Fatalf("Gaps = %v after writing alone, want none", g)
	}
	other.Write(0, []byte("b"), []byte("2")) // offsets 1 and 2 of partition 0
	other.Write(0, []byte("b"), []byte("3"))
	flush(other)
	w.Write(0, []byte("a"), []byte("4")) // offset 3
	w.Write(1, []byte("a"), []byte("5")) // offset 1: nobody else wrote partition 1
	flush(w)
	if g := w.Gaps(); len(g) != 1 || g[0] != 1 {
		t.Fatalf("Gaps = %v, want partition 0 from offset 1", g)
	}
	if g := w.Gaps(); len(g) != 0 {
		t.Fatalf("Gaps again = %v, want none (it forgets what it returned)", g)
	}
	// After a read up to the end, a record of this writer right there shows no gap.
	other.Write(1, []byte("b"), []byte("6")) // offset 2
	flush(other)
	w.Expect(1, 3)
	w.Write(1, []byte("a"), []byte("7"))
	flush(w)
	if g := w.Gaps(); len(g) != 0 {
		t.Fatalf("Gaps = %v after Expect at the end, want none", g)
	}
}

// TestCheckChangelogStart: a restore that would start below a changelog partition's log start
// is refused (ChangelogLostError, with the offsets lost) when the topic's cleanup.policy is not
// compact alone — retention (here a DeleteRecords) removed state records — and let through on a
// topic compacted alone (compaction removes only superseded records) or when it starts at or
// above the log start. Before, every restore read from the log start without a word.
func TestCheckChangelogStart(t *testing.T) {
	_, cfg := testCluster(t)
	ctx := testCtx(t)
	if err := EnsureChangelog(ctx, cfg, "cl", 1, 0); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, cfg, "cl")
	for i := range 10 {
		w.Write(0, []byte(fmt.Sprintf("k%d", i)), []byte("v"))
	}
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	adm := testAdmin(t, cfg)
	o := kadm.Offsets{}
	o.Add(kadm.Offset{Topic: "cl", Partition: 0, At: 6})
	if rs, err := adm.DeleteRecords(ctx, o); err != nil || rs.Error() != nil {
		t.Fatal(err, rs.Error())
	}
	if err := CheckChangelogStart(ctx, cfg, "cl", 0, 0); err != nil {
		t.Fatalf("compacted alone: %v, want nil (not told apart from compaction)", err)
	}
	both := "compact,delete"
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &both}}, "cl"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	for _, from := range []int64{-1, 0, 4} {
		err := CheckChangelogStart(ctx, cfg, "cl", 0, from)
		var lost *ChangelogLostError
		if !errors.As(err, &lost) || lost.From != max(from, 0) || lost.Start != 6 || lost.Policy != both {
			t.Fatalf("from %d: %v; want a ChangelogLostError from %d, start 6, policy %s", from, err, max(from, 0), both)
		}
		wantErr(t, err, "changelog cl partition 0 lost offsets", fmt.Sprintf("to 5 before this restore read them (its log start is 6, the restore starts at %d", max(from, 0)))
	}
	for _, from := range []int64{6, 9} {
		if err := CheckChangelogStart(ctx, cfg, "cl", 0, from); err != nil {
			t.Fatalf("from %d, at or above the log start: %v, want nil", from, err)
		}
	}
}
