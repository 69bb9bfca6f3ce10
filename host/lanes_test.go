package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// newClusterParts is newCluster with parts partitions per topic.
func newClusterParts(t testing.TB, parts int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// groupAssignment returns, per member of group in a stable state, its group.instance.id ("" for a
// dynamic member) and its partitions; nil while the group is not stable.
func groupAssignment(t *testing.T, c *kfake.Cluster, group string) map[string][]int32 {
	t.Helper()
	gs, err := kadm.NewClient(newClient(t, c)).DescribeGroups(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	g := gs[group]
	if g.Err != nil || g.State != "Stable" {
		return nil
	}
	out := map[string][]int32{}
	for _, m := range g.Members {
		id := ""
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		var parts []int32
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range a.Topics {
				parts = append(parts, tp.Partitions...)
			}
		}
		slices.Sort(parts)
		out[id] = parts
	}
	return out
}

// waitLoopsAssigned waits until group has one member per loop, static members named after the
// task's instance id (loop 0's unchanged, the others with -loop<i>), each with partitions, and
// every partition of the input assigned once.
func waitLoopsAssigned(t *testing.T, c *kfake.Cluster, group, instance string, loops, parts int) map[string][]int32 {
	t.Helper()
	var got map[string][]int32
	hosttest.WaitFor(t, 30*time.Second, "every loop a member of the group with partitions", func() bool {
		got = groupAssignment(t, c, group)
		if len(got) != loops {
			return false
		}
		n := 0
		for id, ps := range got {
			if len(ps) == 0 || !strings.HasPrefix(id, instance) {
				return false
			}
			n += len(ps)
		}
		return n == parts
	})
	for i := range loops {
		id := instance
		if i > 0 {
			id += "-loop" + string(rune('0'+i))
		}
		if _, ok := got[id]; !ok {
			t.Fatalf("group members %v: no member %q", got, id)
		}
	}
	return got
}

// waitPartitionsCommitted is waitCommitted for a task whose figures must list parts partitions
// (each loop lists its own once it checkpointed).
func waitPartitionsCommitted(t *testing.T, h interface{ Stats() []host.TaskStats }, parts int) {
	t.Helper()
	hosttest.WaitFor(t, 60*time.Second, "every partition listed and committed", func() bool {
		s := h.Stats()
		if len(s) == 0 || s[0].Pending != 0 || len(s[0].Inputs) != parts {
			return false
		}
		for _, in := range s[0].Inputs {
			if in.Lag > 0 {
				return false
			}
		}
		return true
	})
}

// waitCommittedThrough waits until h's task lists parts partitions of topic, each committed
// through the partition's end as it is now (nothing is produced to topic any more): every record
// read, processed and checkpointed. A partition's Lag alone does not tell: it is -1, unknown,
// until the partition's first fetch after an assignment, and the records the task read count
// a partition's records again when a loop reads them again after it moved.
func waitCommittedThrough(t *testing.T, c *kfake.Cluster, h interface{ Stats() []host.TaskStats }, topic string, parts int) {
	t.Helper()
	ends, err := kadm.NewClient(newClient(t, c)).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var last []host.TaskStats
	t.Cleanup(func() {
		if t.Failed() && len(last) > 0 {
			t.Logf("%s's ends %v; the task's last figures: pending %d, inputs %+v", topic, ends, last[0].Pending, last[0].Inputs)
		}
	})
	hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("%d partitions committed through their end", parts), func() bool {
		s := h.Stats()
		last = s
		if len(s) == 0 || s[0].Pending != 0 || len(s[0].Inputs) != parts {
			return false
		}
		for _, in := range s[0].Inputs {
			if o, ok := ends.Lookup(topic, in.Partition); !ok || o.Err != nil || in.Committed < o.Offset {
				return false
			}
		}
		return true
	})
}

// visibleRecords counts the records of topic's partitions parts, up to their ends as they are
// now, that a read_committed reader sees (neither transaction markers nor aborted records): what
// a standby tailing them applies.
func visibleRecords(t *testing.T, c *kfake.Cluster, topic string, parts []int32) int64 {
	t.Helper()
	ends, err := kadm.NewClient(newClient(t, c)).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	offsets := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for _, p := range parts {
		if o, ok := ends.Lookup(topic, p); ok && o.Offset > 0 {
			offsets[p], left[p] = kgo.NewOffset().AtStart(), o.Offset
		}
	}
	var n int64
	if len(left) == 0 {
		return 0
	}
	cl := newClient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				n++
			}
			if r.Offset == end-1 {
				delete(left, r.Partition)
			}
		})
	}
	return n
}

// A task with loops 4 over 8 partitions: the host's four loops are four static members of the
// task's group with two partitions each; the outputs are each count once, in order, and the
// state is exact. Restarted with loops 2 (the partitions move between loops through the store),
// then loops 1, it goes on from the checkpoints with nothing processed twice.
func TestLoopsCountExactly(t *testing.T) {
	t.Parallel()
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 8, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 3000, 60, 11)
	total := wordTotal(want)
	dir := t.TempDir()
	tc := wordcountKafkaTask(module)
	tc.Loops = 4
	cfg := func(tc host.TaskConfig) host.Config {
		return host.Config{DataDir: dir, HostID: "h1", Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}}
	}
	h := hosttest.Start(t, cfg(tc))
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	members := waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-h1", 4, 8)
	for id, ps := range members {
		if len(ps) != 2 {
			t.Errorf("member %s has partitions %v, want 2 of the 8", id, ps)
		}
	}
	waitPartitionsCommitted(t, h, 8)
	st := h.Stats()[0]
	var parts []int32
	for _, in := range st.Inputs {
		parts = append(parts, in.Partition)
	}
	if !slices.Equal(parts, []int32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("stats list partitions %v, want each of the 8 once", parts)
	}
	if st.Records != 3000 || st.Processed != 3000 || st.Outputs != int64(total) {
		t.Errorf("stats: %d records, %d processed, %d outputs; want 3000, 3000, %d", st.Records, st.Processed, st.Outputs, total)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	checkCountsOutputs(t, got, want)
	sameCounts(t, want, stateOf(t, dir, "wc"))

	for i, loops := range []int{2, 1} {
		total += addCounts(want, produceWords(t, newClient(t, c), "words", 1000, 60, uint64(12+i)))
		tc.Loops = loops
		h := hosttest.Start(t, cfg(tc))
		got := consumeOutputs(t, c, "counts", total, 60*time.Second)
		waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-h1", loops, 8)
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		checkCountsOutputs(t, got, want)
		n := 0
		for _, vs := range got {
			n += len(vs)
		}
		if n != total {
			t.Fatalf("loops %d: %d outputs, want exactly %d", loops, n, total)
		}
		sameCounts(t, want, stateOf(t, dir, "wc"))
	}
}

// wireCounts adds the counts of a state answer to got.
func wireCounts(t *testing.T, got map[string]map[string]int, s wireState) {
	t.Helper()
	for _, ks := range s.States {
		if got[ks.KeyText] == nil {
			got[ks.KeyText] = map[string]int{}
		}
		for _, v := range ks.Values {
			n, err := strconv.Atoi(v.ValueText)
			if err != nil {
				t.Fatalf("key %s name %s: value %q", ks.KeyText, v.NameText, v.ValueText)
			}
			got[ks.KeyText][v.NameText] = n
		}
	}
}

// queryAll reads every key of want through the admin API (each key from the loop that owns its
// partition), then every key again by a scan in pages of 7 (which must cover every loop's
// partitions), and checks both against want.
func queryAll(t *testing.T, addr string, want map[string]map[string]int) {
	t.Helper()
	got := map[string]map[string]int{}
	for user := range want {
		var s wireState
		if code := adminGet(t, "GET", addr, "/v1/tasks/wc/state/"+url.PathEscape(user), "full", &s); code != http.StatusOK {
			t.Fatalf("GET state of %s: HTTP %d", user, code)
		}
		if len(s.States) != 1 || s.States[0].KeyText != user {
			t.Fatalf("GET state of %s: %+v, want the key in one partition", user, s)
		}
		wireCounts(t, got, s)
	}
	sameCounts(t, want, got)
	got = map[string]map[string]int{}
	after := ""
	for pages := 0; ; pages++ {
		var s wireState
		path := "/v1/tasks/wc/state?limit=7"
		if pages > 0 {
			path += "&after_b64=" + url.QueryEscape(after)
		}
		if code := adminGet(t, "GET", addr, path, "full", &s); code != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", path, code)
		}
		wireCounts(t, got, s)
		if s.Next == "" {
			break
		}
		after = s.Next
		if pages > 100 {
			t.Fatal("the scan does not end")
		}
	}
	sameCounts(t, want, got)
}

// A task with loops 3 over 6 partitions through the admin API: a key's state is answered by the
// loop that owns its partition and a scan covers every loop's; pause and resume reach every
// loop; a deploy switches every loop (the figures' version is the lowest a loop runs), its first
// batch is seen, and the counts go on exactly on the new version.
func TestLoopsDeployQueryStats(t *testing.T) {
	t.Parallel()
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 6, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 1500, 40, 31)
	total := wordTotal(want)
	tc := wordcountKafkaTask(module)
	tc.Loops = 3
	h := hosttest.Start(t, host.Config{DataDir: t.TempDir(), HostID: "h1", Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full"},
		Tasks: []host.TaskConfig{tc}})
	consumeOutputs(t, c, "counts", total, 60*time.Second)
	waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-h1", 3, 6)
	waitPartitionsCommitted(t, h, 6)
	addr := h.AdminAddr()
	queryAll(t, addr, want)

	ctx := t.Context()
	if err := h.Pause(ctx, "wc"); err != nil {
		t.Fatal(err)
	}
	if !h.Stats()[0].Paused {
		t.Error("paused: the figures do not say so")
	}
	if err := h.Resume(ctx, "wc"); err != nil {
		t.Fatal(err)
	}

	d, err := h.Deploy(ctx, "wc", withCustomSection(t, module, "v2"))
	if err != nil {
		t.Fatal(err)
	}
	if st := h.Stats()[0]; d.Version.Version != 2 || st.Version != 2 || st.Paused {
		t.Fatalf("after the deploy: deployed version %d, figures' version %d (paused %v); want 2 in every loop, running",
			d.Version.Version, st.Version, st.Paused)
	}
	total += addCounts(want, produceWords(t, newClient(t, c), "words", 600, 40, 32))
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if _, err := d.FirstBatch(fctx); err != nil {
		t.Fatalf("first batch on version 2: %v", err)
	}
	got := consumeOutputs(t, c, "counts", total, 60*time.Second)
	checkCountsOutputs(t, got, want)
	waitPartitionsCommitted(t, h, 6)
	queryAll(t, addr, want)
	// Records counts the records read, a partition's records again after it moved between
	// loops (a deploy that takes long on a loaded machine rebalances the group) included; the
	// outputs, counted when a record's effects are kept, are exact.
	if st := h.Stats()[0]; st.Records < 2100 || st.Outputs != int64(total) {
		t.Errorf("figures: %d records, %d outputs; want at least 2100 and %d", st.Records, st.Outputs, total)
	}
}

// Exactly once with loops 2: each loop is a transactional producer of its own (loop 0 with the
// task's transactional id), transactions that the broker fails to end abort and are processed
// again, and a read_committed reader sees every count once, in order; the state is exact, on
// this disk and restored from the changelog by a host with an empty disk running one loop.
func TestLoopsExactlyOnce(t *testing.T) {
	t.Parallel()
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 3000, 40, 41)
	total := wordTotal(want)
	endFaults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 2})
	run := func(dir string, loops int, done func(st host.TaskStats) bool) host.TaskStats {
		tc := eosTask(module)
		tc.Loops = loops
		h := hosttest.Start(t, host.Config{DataDir: dir, HostID: "h1", Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
		if loops > 1 {
			waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-h1", loops, 4)
		}
		hosttest.WaitFor(t, 90*time.Second, "the run's work done", func() bool { return done(h.Stats()[0]) })
		if err := h.Stop(); err != nil {
			t.Fatal(err)
		}
		return h.Stats()[0]
	}
	committedAll := func(st host.TaskStats) bool {
		var n int64
		for _, in := range st.Inputs {
			n += in.Committed
		}
		return len(st.Inputs) == 4 && n >= 3000
	}
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	a := run(dirA, 2, committedAll)
	if endFaults.Hits() == 0 || a.TxnAborts == 0 || a.TxnCommits == 0 {
		t.Fatalf("transaction-end faults hit %d times: %d transactions aborted, %d committed; want some of each", endFaults.Hits(), a.TxnAborts, a.TxnCommits)
	}
	checkCountsOutputs(t, consumeOutputs(t, c, "counts", total, 60*time.Second), want)
	sameCounts(t, want, stateOf(t, dirA, "wc"))

	b := run(dirB, 1, func(st host.TaskStats) bool { return st.Restores >= 4 })
	sameCounts(t, want, stateOf(t, dirB, "wc"))
	t.Logf("loops 2: %d transactions committed, %d aborted; the host with one loop restored %d changelog records",
		a.TxnCommits, a.TxnAborts, b.RestoredRecords)
}

// Two hosts of loops 2 with a changelog, records flowing: host b joins the group (the partitions
// spread over four loops) and leaves (its partitions go back to a's loops, which restore what b
// wrote from the changelog); then a's state is exact.
func TestLoopsHostJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	testLoopsHostJoinsAndLeaves(t, false)
}

// TestLoopsStandbyHostJoinsAndLeaves is TestLoopsHostJoinsAndLeaves with standbys: a's loops
// share one standby, which tails the partitions b's loops own while b is in the group (and
// none of a's loops' own), and a's loops claim them back from it when b leaves; a's state is
// exact.
func TestLoopsStandbyHostJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	testLoopsHostJoinsAndLeaves(t, true)
}

func testLoopsHostJoinsAndLeaves(t *testing.T, standby bool) {
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 8, "words", "counts")
	stop := flowWords(t, c, 51, 40, 20*time.Millisecond)
	dir := t.TempDir()
	start := func(id string) *hosttest.Running {
		return startLoopsHost(t, c, module, filepath.Join(dir, id), id, standby, host.AdminConfig{})
	}
	processed := func(h *hosttest.Running, n int64) func() bool {
		return func() bool { return h.Stats()[0].Processed >= n }
	}
	a := start("a")
	hosttest.WaitFor(t, 60*time.Second, "host a processing", processed(a, 200))
	b := start("b")
	hosttest.WaitFor(t, 60*time.Second, "four loops in the group", func() bool { return len(groupAssignment(t, c, "wasmstream-wc")) == 4 })
	hosttest.WaitFor(t, 60*time.Second, "host b processing", processed(b, 200))
	if standby {
		// Before b joined, a's loops owned every partition: its standby tailed none.
		hosttest.WaitFor(t, 60*time.Second, "a's standby tailing what b's loops wrote", func() bool { return a.Stats()[0].StandbyRecords > 0 })
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-a", 2, 8)
	p := stop()
	if p.err != nil {
		t.Fatal(p.err)
	}
	waitCommittedThrough(t, c, a, "words", 8)
	sa := a.Stats()[0]
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, p.want, stateOf(t, filepath.Join(dir, "a"), "wc"))
	t.Logf("%d records; host a restored %d partitions (%d changelog records); its standby applied %d", p.records, sa.Restores, sa.RestoredRecords, sa.StandbyRecords)
	if sa.Restores == 0 {
		t.Error("host a restored nothing: no partition came back from host b")
	}
}

// Two hosts of loops 2 with standbys over 8 partitions, records flowing: each host runs one
// standby for its two loops, which tails the changelog of the four partitions the other host's
// loops own. Host a stops; b's loops take a's partitions over replaying only the tail the
// standby had not applied (here about nothing: a had committed everything), records flowing
// again meanwhile, and b's state is exact.
func TestLoopsStandbyTakeover(t *testing.T) {
	t.Parallel()
	testLoopsStandbyTakeover(t, false)
}

// TestLoopsStandbyTakeoverExactlyOnce is TestLoopsStandbyTakeover under exactly once, where a
// loop restores an assignment beside the loop (assignAside) and claims it from the shared standby
// there; every count is output once. Before the consumer ended an idle transaction after a revoke
// (kafka's TestTxnConsumerHearsEveryRevoke), it failed in 2 of 3 runs under -race: host a's
// loop 0 never heard the revoke of the partitions b's loops took when b joined (a second revoke
// in one idle transaction), so a went on listing them and the wait for a's 4 partitions timed out.
func TestLoopsStandbyTakeoverExactlyOnce(t *testing.T) {
	t.Parallel()
	testLoopsStandbyTakeover(t, true)
}

func testLoopsStandbyTakeover(t *testing.T, eos bool) {
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 8, "words", "counts")
	dir := t.TempDir()
	start := func(id string) *hosttest.Running {
		if !eos {
			return startLoopsHost(t, c, module, filepath.Join(dir, id), id, true, host.AdminConfig{})
		}
		tc := eosTask(module)
		tc.Loops = 2
		tc.Changelog = host.ChangelogConfig{Enabled: true, Standby: true}
		return hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, id), HostID: id, Logger: testLogger(t).With("host", id),
			CheckpointInterval: 100 * time.Millisecond,
			Kafka:              host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
			Tasks:              []host.TaskConfig{tc}})
	}
	a, b := start("a"), start("b")
	// Every loop of both hosts holds partitions before any record: no standby tails anything
	// before its host's loops own theirs.
	hosttest.WaitFor(t, 60*time.Second, "four loops in the group with two partitions each", func() bool {
		g := groupAssignment(t, c, "wasmstream-wc")
		n := 0
		for _, ps := range g {
			if len(ps) != 2 {
				return false
			}
			n++
		}
		return n == 4
	})
	want := map[string]map[string]int{}
	records := 0
	flow := func(stop func() producedWords) {
		p := stop()
		if p.err != nil {
			t.Fatal(p.err)
		}
		addCounts(want, p.want)
		records += p.records
	}
	stopFlow := flowWords(t, c, 61, 40, 20*time.Millisecond)
	hosttest.WaitFor(t, 60*time.Second, "both hosts processing", func() bool {
		return a.Stats()[0].Processed >= 300 && b.Stats()[0].Processed >= 300
	})
	flow(stopFlow)
	waitCommittedThrough(t, c, a, "words", 4)
	waitCommittedThrough(t, c, b, "words", 4)
	// a's partitions' changelog is complete now; b's standby catches up with it.
	var aParts []int32
	for _, in := range a.Stats()[0].Inputs {
		aParts = append(aParts, in.Partition)
	}
	need := visibleRecords(t, c, "wc-changelog", aParts)
	hosttest.WaitFor(t, 60*time.Second, fmt.Sprintf("b's standby applying a's %d changelog records", need),
		func() bool { return b.Stats()[0].StandbyRecords >= need })
	before := b.Stats()[0]
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	stopFlow = flowWords(t, c, 62, 40, 20*time.Millisecond)
	waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-b", 2, 8)
	hosttest.WaitFor(t, 60*time.Second, "b processing a's partitions", func() bool { return len(b.Stats()[0].Inputs) == 8 })
	flow(stopFlow)
	waitCommittedThrough(t, c, b, "words", 8)
	after := b.Stats()[0]
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, filepath.Join(dir, "b"), "wc"))
	if eos {
		checkCountsOutputs(t, consumeOutputs(t, c, "counts", wordTotal(want), 60*time.Second), want)
	}
	takeover := after.RestoredRecords - before.RestoredRecords
	t.Logf("%d records; b's standby applied %d changelog records of a's partitions; the takeover of a's 4 partitions (%d restores) replayed %d",
		records, before.StandbyRecords, after.Restores-before.Restores, takeover)
	if after.Restores < before.Restores+4 {
		t.Errorf("b restored %d partitions at the takeover, want a's 4", after.Restores-before.Restores)
	}
	if takeover*4 >= need {
		t.Errorf("the takeover replayed %d changelog records of the %d a's partitions hold: a warm standby must leave only a tail", takeover, need)
	}
}

// TestLoopsConfig: loops above 1 are refused, naming the key and why, for what assumes one loop
// per task: a file input, a bounded input, dropping revoked state, a task another reads; and a
// count out of range. Standbys run with loops (one shared by the host's loops), exactly once too.
func TestLoopsConfig(t *testing.T) {
	kin := host.InputConfig{Name: "k", Type: "kafka", Topics: []string{"in"}}
	err := host.Config{Kafka: host.KafkaConfig{Brokers: []string{"127.0.0.1:9"}}, Tasks: []host.TaskConfig{{
		Name: "files", Module: "m.wasm", Loops: 2,
		Inputs: []host.InputConfig{kin, {Name: "f", Type: "file", Path: "x"}},
	}, {
		Name: "bounded", Module: "m.wasm", Loops: 2,
		Inputs: []host.InputConfig{{Name: "k", Type: "kafka", Topics: []string{"in"}, Bounded: true}},
	}, {
		Name: "standby", Module: "m.wasm", Loops: 2, Inputs: []host.InputConfig{kin},
		Changelog: host.ChangelogConfig{Enabled: true, Standby: true, DropRevoked: true},
	}, {
		Name: "upstream", Module: "m.wasm", Loops: 3, Inputs: []host.InputConfig{kin}, Output: host.OutputConfig{Names: []string{"o"}},
	}, {
		Name: "downstream", Module: "m.wasm", Inputs: []host.InputConfig{{Name: "up", Type: "task", Task: "upstream", Output: "o"}},
	}, {
		Name: "many", Module: "m.wasm", Loops: 257, Inputs: []host.InputConfig{kin},
	}, {
		Name: "negative", Module: "m.wasm", Loops: -1, Inputs: []host.InputConfig{kin},
	}, {
		Name: "fine", Module: "m.wasm", Loops: 4, Inputs: []host.InputConfig{kin},
	}, {
		Name: "eos", Module: "m.wasm", Loops: 2, Inputs: []host.InputConfig{kin}, Delivery: "exactly_once",
		Changelog: host.ChangelogConfig{Enabled: true, Standby: true},
	}}}.Validate()
	for _, want := range []string{
		"tasks[0].inputs[1].type: loops 2 needs kafka inputs only",
		"tasks[1].inputs[0].bounded: loops 2",
		"tasks[2].changelog.drop_revoked: does not run with loops 2",
		"tasks[3].loops: task downstream reads this task's output",
		"tasks[5].loops: must be at most 256",
		"tasks[6].loops: must be positive",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v\nwant a problem %q", err, want)
		}
	}
	if err != nil && (strings.Contains(err.Error(), "tasks[7]") || strings.Contains(err.Error(), "tasks[8].changelog.standby") ||
		strings.Contains(err.Error(), "tasks[2].changelog.standby")) {
		t.Errorf("Validate() = %v\nwant no problem with tasks[7] nor with tasks[2] or tasks[8].changelog.standby", err)
	}
}

// A live reset of a task with loops 2 (POST /v1/tasks/{task}/reset): the host's other loop is
// no other host to ask (the group view shows the host's loops as one member), every loop stops,
// the group empties, and both loops start again on the reset's positions: every count is
// replayed from 1, once.
func TestLoopsAdminReset(t *testing.T) {
	t.Parallel()
	tc := wordcountKafkaTask(guestbuild.Go(t, "wordcount"))
	tc.Loops = 2
	testAdminResetKafkaTask(t, tc, false)
}

// One loop of two halting halts the task: a record that traps on every attempt (on_exhausted:
// halt) in one loop's partition; the other loop stops as at a host's stop, its last checkpoint
// committing its partitions' offsets (checkpoints are hours apart: only that stop commits);
// nothing is committed past the record that failed.
func TestLoopsOneHaltsAll(t *testing.T) {
	t.Parallel()
	module := guestbuild.Go(t, "testguests/trapper")
	c := newCluster(t, "events", "echoes")
	tc := host.TaskConfig{Name: "echo", Module: module, Workers: 2, Loops: 2,
		Inputs: []host.InputConfig{{Name: "events", Type: "kafka", Topics: []string{"events"}}},
		Output: host.OutputConfig{Type: "kafka", Topic: "echoes"},
		Retry:  host.RetryConfig{MaxAttempts: 1, OnExhausted: host.ExhaustedHalt}}
	h := hosttest.Start(t, host.Config{DataDir: t.TempDir(), HostID: "h1", Logger: testLogger(t), CheckpointInterval: time.Hour,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}, Tasks: []host.TaskConfig{tc}})
	owners := waitLoopsAssigned(t, c, "wasmstream-echo", "wasmstream-echo-h1", 2, 4)
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for p := range int32(4) {
		for i := range 50 {
			recs = append(recs, &kgo.Record{Topic: "events", Partition: p, Key: []byte(strconv.Itoa(i)), Value: []byte("v")})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	consumeOutputs(t, c, "echoes", 200, 60*time.Second)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "events", Partition: 0, Key: []byte("x"), Value: []byte("boom")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, 60*time.Second, "the task halted", func() bool { return h.Stats()[0].Halted })
	if msg := h.Stats()[0].Error; !strings.Contains(msg, "loop ") || !strings.Contains(msg, "boom") {
		t.Errorf("halted with %q, want the loop and the trap named", msg)
	}
	offs, err := kadm.NewClient(newClient(t, c)).FetchOffsets(context.Background(), "wasmstream-echo")
	if err != nil {
		t.Fatal(err)
	}
	for id, parts := range owners {
		halting := slices.Contains(parts, 0)
		for _, p := range parts {
			o, ok := offs.Lookup("events", p)
			switch {
			case !halting && (!ok || o.At != 50):
				t.Errorf("partition %d of %s, the loop that did not fail: committed %v (%v), want 50: its last checkpoint at its stop", p, id, o.At, ok)
			case halting && ok && o.At > 50:
				t.Errorf("partition %d of %s, the failing loop: committed %d, past the record that failed (50)", p, id, o.At)
			}
		}
	}
}

// A task with loops 2 that halted (its output topic missing: every loop's producer fails)
// restarts with RestartTask: new clients for every loop, both loops in the group again, every
// record processed and the state exact.
func TestLoopsRestartHalted(t *testing.T) {
	t.Parallel()
	tc := wordcountKafkaTask(guestbuild.Go(t, "wordcount"))
	tc.Loops = 2
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	testRestartHaltedKafkaTask(t, tc, true, func(h *host.Host) (*host.Deployment, error) {
		return h.RestartTask(context.Background(), "wc")
	})
}

// A reset of a group of two hosts with loops 2 each: the host asked sees the other host's two
// loops as two members at one admin address and asks that host once; both hosts' loops stop,
// reset and start again, every key's count from one pass.
func TestLoopsAdminResetGroup(t *testing.T) {
	t.Parallel()
	tc := wordcountKafkaTask(guestbuild.Go(t, "wordcount"))
	tc.Loops = 2
	tc.Changelog = host.ChangelogConfig{Enabled: true}
	testAdminResetGroup(t, tc, false)
}

// State queries across two hosts with loops 2 each over 8 partitions: every key is answered
// through either host (by its loop, or forwarded once to the other host, whose loops split the
// partitions it was asked for), and a scan covers each partition exactly once.
func TestLoopsQueryAcrossHosts(t *testing.T) {
	t.Parallel()
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 8, "words", "counts")
	dir := t.TempDir()
	start := func(id string) *hosttest.Running {
		return startLoopsHost(t, c, module, filepath.Join(dir, id), id, false, host.AdminConfig{Addr: "127.0.0.1:0", Token: "full"})
	}
	a, b := start("a"), start("b")
	hosttest.WaitFor(t, 60*time.Second, "four loops in the group, each with partitions", func() bool {
		g := groupAssignment(t, c, "wasmstream-wc")
		if len(g) != 4 {
			return false
		}
		for _, ps := range g {
			if len(ps) == 0 {
				return false
			}
		}
		return true
	})
	want := produceWords(t, newClient(t, c), "words", 2000, 40, 61)
	consumeOutputs(t, c, "counts", wordTotal(want), 60*time.Second)
	waitPartitionsCommitted(t, a, 4)
	waitPartitionsCommitted(t, b, 4)
	queryAll(t, a.AdminAddr(), want)
	queryAll(t, b.AdminAddr(), want)
}

// startLoopsHost starts host id on dir: the wordcount task over c with loops 2 and a changelog
// (standby as asked), checkpoints every 100 ms and admin as given.
func startLoopsHost(t *testing.T, c *kfake.Cluster, module, dir, id string, standby bool, admin host.AdminConfig) *hosttest.Running {
	t.Helper()
	tc := wordcountKafkaTask(module)
	tc.Loops = 2
	tc.Changelog = host.ChangelogConfig{Enabled: true, Standby: standby}
	return hosttest.Start(t, host.Config{DataDir: dir, HostID: id, Logger: testLogger(t).With("host", id),
		CheckpointInterval: 100 * time.Millisecond,
		Kafka:              host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
		Admin:              admin,
		Tasks:              []host.TaskConfig{tc}})
}

// A host ran the task as loops 4 and died without leaving the group (the broker lost its
// LeaveGroups, as at a kill): its four static members stay in the group, with its 8
// partitions, for their session (2 minutes here). Restarted with loops 1, the host removes the
// members of its loops 1 to 3 at start: its one loop is the group's only member, owns every
// partition and reads each through its end, while the dead members' sessions had minutes to
// run. Before, the group kept the dead loops' members, and 6 partitions unread, until their
// sessions timed out.
func TestLoopsLoweredAfterCrash(t *testing.T) {
	t.Parallel()
	module := guestbuild.Go(t, "wordcount")
	c := newClusterParts(t, 8, "words", "counts")
	dir := t.TempDir()
	var logs syncBuffer
	start := func(loops int) *hosttest.Running {
		tc := wordcountKafkaTask(module)
		tc.Loops = loops
		log := slog.New(slog.NewTextHandler(io.MultiWriter(&logs, testWriter{t}), nil)).With("loops", loops)
		return hosttest.Start(t, host.Config{DataDir: dir, HostID: "a", Logger: log, CheckpointInterval: 100 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 2 * time.Minute, RebalanceTimeout: 2 * time.Minute},
			Tasks: []host.TaskConfig{tc}})
	}
	cl := newClient(t, c)
	want := produceWords(t, cl, "words", 800, 40, 71)
	a := start(4)
	waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-a", 4, 8)
	waitCommittedThrough(t, c, a, "words", 8)

	// The crash: every LeaveGroup is lost until the host is down.
	var crashed atomic.Bool
	crashed.Store(true)
	c.ControlKey(int16(kmsg.LeaveGroup), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if !crashed.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		req := r.(*kmsg.LeaveGroupRequest)
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		for _, m := range req.Members {
			rm := kmsg.NewLeaveGroupResponseMember()
			rm.MemberID, rm.InstanceID = m.MemberID, m.InstanceID
			resp.Members = append(resp.Members, rm)
		}
		return resp, nil, true
	})
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	crashed.Store(false)
	if g := groupAssignment(t, c, "wasmstream-wc"); len(g) != 4 {
		t.Fatalf("after the crash the group's members are %v, want the dead host's four loops", g)
	}

	addCounts(want, produceWords(t, cl, "words", 400, 40, 72))
	before := len(logs.String())
	b := start(1)
	waitLoopsAssigned(t, c, "wasmstream-wc", "wasmstream-wc-a", 1, 8)
	waitCommittedThrough(t, c, b, "words", 8)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dir, "wc"))
	for _, id := range []string{"wasmstream-wc-a-loop1", "wasmstream-wc-a-loop2", "wasmstream-wc-a-loop3"} {
		if !strings.Contains(logs.String()[before:], id) {
			t.Errorf("the restarted host's log does not name the member %s it removed", id)
		}
	}
}
