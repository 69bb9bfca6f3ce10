package kafka

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupHandler counts a consumer's rebalance callbacks.
type groupHandler struct {
	mu             sync.Mutex
	assigned, lost int
}

func (h *groupHandler) Assigned(_ context.Context, committed, _ map[TopicPartition]int64, _ map[string]TopicID, _ map[TopicPartition]bool) (map[TopicPartition]EpochOffset, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.assigned += len(committed)
	return nil, nil
}

func (h *groupHandler) Revoked(context.Context, []TopicPartition) map[TopicPartition]EpochOffset {
	return nil
}

func (h *groupHandler) Lost(_ context.Context, parts []TopicPartition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost += len(parts)
}

func (h *groupHandler) counts() (assigned, lost int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.assigned, h.lost
}

// runConsumer starts a static member of group "g" reading topic "in" and returns it with its
// handler and Run's result; Run ends when the test does.
func runConsumer(t *testing.T, cfg Config, instance string) (*Consumer, *groupHandler, chan error) {
	t.Helper()
	h := &groupHandler{}
	c, err := NewConsumer(cfg, ConsumerConfig{Group: "g", Topics: []string{"in"}, Handler: h, InstanceID: instance,
		SessionTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Fetch)
	go func() {
		for range out {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	t.Cleanup(func() {
		cancel()
		<-done
		done <- nil
		c.Close()
		close(out)
	})
	return c, h, done
}

// waitFor polls cond until it holds, failing the test after a minute or as soon as Run returned.
func waitFor(t *testing.T, what string, done chan error, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for !cond() {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("waiting for %s: Run returned %v", what, err)
		case <-deadline:
			t.Fatalf("waiting for %s: timed out", what)
		case <-tick.C:
		}
	}
}

func groupInstances(t *testing.T, adm *kadm.Client) []string {
	t.Helper()
	groups, err := adm.DescribeGroups(testCtx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range groups["g"].Members {
		id := "<dynamic>"
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		ids = append(ids, id)
	}
	return ids
}

// TestConsumerRejoinsWhenRemoved: a member the coordinator no longer knows (its session expired
// while it was slow to rejoin, or it was removed from outside the group) loses its partitions and
// joins again; Run goes on. Before, Run failed with the group session's UNKNOWN_MEMBER_ID and the
// task halted for good: a host killed and restarted under load could take a live one down with it.
func TestConsumerRejoinsWhenRemoved(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(2, "in"))
	_, h, done := runConsumer(t, cfg, "member-1")
	waitFor(t, "the first assignment", done, func() bool { a, _ := h.counts(); return a == 2 })

	// Removed from outside the group, as kafka-consumer-groups --delete-members does.
	adm := testAdmin(t, cfg)
	resp, err := adm.LeaveGroup(testCtx(t), kadm.LeaveGroup("g").InstanceIDs("member-1"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the partitions lost and assigned again", done, func() bool {
		a, l := h.counts()
		return l == 2 && a == 4
	})
	if ids := groupInstances(t, adm); len(ids) != 1 || ids[0] != "member-1" {
		t.Fatalf("the group's members after the rejoin: %v, want member-1 alone", ids)
	}
}

// TestConsumerFencedByItsInstanceID: a second consumer joining with the same group.instance.id
// (two hosts with one host_id) takes the first one's place; the first's Run fails with an error
// that names the cause, and its Close does not leave the group by the instance id, which would
// throw the second out.
func TestConsumerFencedByItsInstanceID(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(2, "in"))
	first, h1, done1 := runConsumer(t, cfg, "twin")
	waitFor(t, "the first consumer's assignment", done1, func() bool { a, _ := h1.counts(); return a == 2 })
	_, h2, done2 := runConsumer(t, cfg, "twin")
	waitFor(t, "the second consumer's assignment", done2, func() bool { a, _ := h2.counts(); return a == 2 })

	var err error
	select {
	case err = <-done1:
		done1 <- err
	case <-time.After(time.Minute):
		t.Fatal("the fenced consumer's Run did not end")
	}
	wantErr(t, err, `group.instance.id "twin"`, "same host_id", "FENCED_INSTANCE_ID")
	first.Close()

	adm := testAdmin(t, cfg)
	if ids := groupInstances(t, adm); len(ids) != 1 || ids[0] != "twin" {
		t.Fatalf("the group's members after the fenced consumer closed: %v, want the second alone", ids)
	}
	if _, lost := h2.counts(); lost != 0 {
		t.Fatalf("the second consumer lost %d partitions after the first one closed", lost)
	}
}

// TestConsumerPicksUpAddedPartitions: partitions added to an input topic while the consumer
// runs are assigned to it within DefaultMetadataMaxAge, not franz-go's 5 minutes of metadata
// age, during which their records waited unread (the waitFor gives up after a minute).
func TestConsumerPicksUpAddedPartitions(t *testing.T) {
	t.Parallel() // it mostly waits for the metadata age, on a cluster of its own
	_, cfg := testCluster(t, kfake.SeedTopics(2, "in"))
	_, h, done := runConsumer(t, cfg, "member-1")
	waitFor(t, "the first assignment", done, func() bool { a, _ := h.counts(); return a == 2 })

	resp, err := testAdmin(t, cfg).CreatePartitions(testCtx(t), 2, "in")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	waitFor(t, "the added partitions assigned", done, func() bool { a, _ := h.counts(); return a == 4 })
	t.Logf("the added partitions were assigned %v after they were added", time.Since(added).Round(time.Millisecond))
}

// TestConsumerLatestReadsAddedPartitions: with start_at latest, a partition added to the topic
// while the consumer runs is read from its beginning: its records all arrived after the start,
// and they were produced before the group noticed the partition. Before, it started at its end
// and those records were skipped for good.
func TestConsumerLatestReadsAddedPartitions(t *testing.T) {
	t.Parallel() // it mostly waits for the metadata age, on a cluster of its own
	_, cfg := testCluster(t, kfake.SeedTopics(2, "in"))
	produce := func(p int32, v string) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: "in", Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(0, "before the start")

	h := &groupHandler{}
	c, err := NewConsumer(cfg, ConsumerConfig{Group: "g", Topics: []string{"in"}, Handler: h, StartAt: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	read := func(v string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(got, v) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Fetch)
	go func() {
		for f := range out {
			mu.Lock()
			for _, r := range f.Records {
				got = append(got, string(r.Value))
			}
			mu.Unlock()
		}
	}()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	t.Cleanup(func() { cancel(); <-done; c.Close(); close(out) })

	waitFor(t, "the first assignment", done, func() bool { a, _ := h.counts(); return a == 2 })
	produce(1, "after the start")
	waitFor(t, "the record produced after the start", done, read("after the start"))

	resp, err := testAdmin(t, cfg).UpdatePartitions(testCtx(t), 4, "in")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	produce(2, "added 2") // before the group notices the partition (DefaultMetadataMaxAge)
	produce(3, "added 3")
	waitFor(t, "the added partitions assigned", done, func() bool { a, _ := h.counts(); return a == 4 })
	waitFor(t, "the added partitions' records", done, func() bool { return read("added 2")() && read("added 3")() })
	if read("before the start")() {
		t.Error("read the record produced before the start")
	}
}

// TestConsumerInputTopicDeleted: an input topic deleted while the consumer reads it fails Run
// with an error that says so. Before, it said only `UNKNOWN_TOPIC_ID: This server does not
// host this topic ID`.
func TestConsumerInputTopicDeleted(t *testing.T) {
	t.Parallel() // it mostly waits for the client's retries, on a cluster of its own
	_, cfg := testCluster(t, kfake.SeedTopics(2, "in"))
	_, h, done := runConsumer(t, cfg, "member-1")
	waitFor(t, "the first assignment", done, func() bool { a, _ := h.counts(); return a == 2 })
	resp, err := testAdmin(t, cfg).DeleteTopics(testCtx(t), "in")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
		done <- err
	case <-time.After(time.Minute):
		t.Fatal("Run did not end after its topic was deleted")
	}
	wantErr(t, err, "input topic in was deleted", "wasmstream reset", "UNKNOWN_TOPIC_ID")
}

// txnHandler is a groupHandler for a transactional consumer whose commit interval never ends.
type txnHandler struct{ groupHandler }

func (*txnHandler) Commit(context.Context) error { return nil }

// TestTxnConsumerStoppedMidPollAborts: a transactional consumer stopped while handing a poll
// over has polled records the task never got; the client would commit their offsets with the
// transaction, so ending it commits nothing (it aborts), and the group's offset stays where the
// records handed over begin. Before, the final transaction committed offset 10 with only the
// first 5 records handed over: the other 5 were lost to the next owner.
func TestTxnConsumerStoppedMidPollAborts(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(1, "in"))
	adm := testAdmin(t, cfg)
	pr, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "in", Value: []byte{byte(i)}})
	}
	if err := pr.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c, err := NewConsumer(cfg, ConsumerConfig{Group: "g", Topics: []string{"in"}, Handler: &txnHandler{}, MaxPollRecords: 5,
		Txn: &TxnConfig{ID: "txn", Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Fetch) // read once: the second poll's hand-over then waits
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	var first Fetch
	select {
	case first = <-out:
	case err := <-done:
		t.Fatalf("Run returned: %v", err)
	case <-testCtx(t).Done():
		t.Fatal("no records handed over")
	}
	if len(first.Records) != 5 {
		t.Fatalf("first poll handed over %d records, want 5", len(first.Records))
	}
	waitFor(t, "the second poll", done, func() bool {
		return c.cl.UncommittedOffsets()["in"][0].Offset == 10
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !c.Unhanded() {
		t.Fatal("Unhanded: false after Run stopped while handing over a poll")
	}
	outcome, err := c.EndTxn(testCtx(t), true, false)
	if err != nil {
		t.Fatalf("EndTxn: %v", err)
	}
	if outcome.Committed {
		t.Errorf("EndTxn committed a transaction with records polled but not handed over")
	}
	offs, err := adm.FetchOffsets(testCtx(t), "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs.Lookup("in", 0); ok && o.At > first.Records[0].Offset {
		t.Fatalf("the group committed offset %d; only the records from offset %d were handed over, through %d",
			o.At, first.Records[0].Offset, first.Records[len(first.Records)-1].Offset)
	}
}

// stallingTxnHandler produces a record in each transaction and holds it open for stall before
// ending it, as a loop stalled past kafka.transaction_timeout would; it keeps EndTxn's error.
type stallingTxnHandler struct {
	groupHandler
	c     *Consumer
	stall time.Duration
	err   chan error
}

func (h *stallingTxnHandler) Commit(ctx context.Context) error {
	if err := h.c.cl.ProduceSync(ctx, &kgo.Record{Topic: "out", Value: []byte("x")}).FirstErr(); err != nil {
		return err
	}
	time.Sleep(h.stall)
	_, err := h.c.EndTxn(ctx, true, false)
	h.err <- err
	return err
}

// TestTxnConsumerTimedOutSaysSo: a transaction held open past its timeout is aborted by the
// broker, which fences the producer; ending it fails saying that it was open longer than
// kafka.transaction_timeout. Before, the error asked whether another host ran with the same
// host_id, which was not the cause.
func TestTxnConsumerTimedOutSaysSo(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(1, "in"), kfake.SeedTopics(1, "out"))
	const timeout = time.Second
	h := &stallingTxnHandler{stall: timeout + 500*time.Millisecond, err: make(chan error, 1)}
	c, err := NewConsumer(cfg, ConsumerConfig{Group: "g", Topics: []string{"in"}, Handler: h,
		Txn: &TxnConfig{ID: "txn", Timeout: timeout, Interval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	defer c.Close()
	// A record to read: the transaction commits its offset too (the offset commit is what the
	// broker answers PRODUCER_FENCED).
	pr, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if err := pr.ProduceSync(testCtx(t), &kgo.Record{Topic: "in", Value: []byte("r")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan Fetch)
	go func() {
		for range out {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	select {
	case err = <-h.err:
	case <-testCtx(t).Done():
		t.Fatal("no transaction ended")
	}
	if err == nil || !strings.Contains(err.Error(), "longer than kafka.transaction_timeout 1s") {
		t.Fatalf("ending a transaction open past its timeout: %v; want it to say it outlasted kafka.transaction_timeout", err)
	}
	t.Logf("the error: %v", err)
	if runErr := <-done; runErr == nil {
		t.Errorf("Run went on after the transaction could not end")
	}
}

// idleTxnHandler keeps the partitions its transactional consumer was told it owns, and ends
// each transaction idle (nothing produced), as a task with no records to process does.
type idleTxnHandler struct {
	c     *Consumer
	mu    sync.Mutex
	owned map[TopicPartition]bool
}

func (h *idleTxnHandler) Assigned(_ context.Context, committed, _ map[TopicPartition]int64, _ map[string]TopicID, _ map[TopicPartition]bool) (map[TopicPartition]EpochOffset, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for tp := range committed {
		h.owned[tp] = true
	}
	return nil, nil
}

func (h *idleTxnHandler) Revoked(_ context.Context, parts []TopicPartition) map[TopicPartition]EpochOffset {
	h.Lost(context.Background(), parts)
	return nil
}

func (h *idleTxnHandler) Lost(_ context.Context, parts []TopicPartition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tp := range parts {
		delete(h.owned, tp)
	}
}

func (h *idleTxnHandler) Commit(ctx context.Context) error {
	_, err := h.c.EndTxn(ctx, true, true)
	return err
}

func (h *idleTxnHandler) partitions() []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int32
	for tp := range h.owned {
		out = append(out, tp.Partition)
	}
	slices.Sort(out)
	return out
}

// TestTxnConsumerHearsEveryRevoke: an idle transactional consumer (nothing to read, each
// transaction ending empty) gives up partitions in two rebalances in a row, as the first host's
// loops did when the second host's loops joined: its handler hears both revokes, and the
// partitions it believes it owns are those the group assigns it. Before, franz-go's group
// session passed only the first revoke on until its next End, which an empty transaction never
// called: the second revoke went unheard, and the task kept partitions it no longer had (listed
// in its figures, never tailed by its standby).
func TestTxnConsumerHearsEveryRevoke(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(6, "in"))
	adm := testAdmin(t, cfg)
	h := &idleTxnHandler{owned: map[TopicPartition]bool{}}
	c, err := NewConsumer(cfg, ConsumerConfig{Group: "g", Topics: []string{"in"}, Handler: h, InstanceID: "txn",
		SessionTimeout: 6 * time.Second, Txn: &TxnConfig{ID: "txn", Interval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Fetch)
	go func() {
		for range out {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	defer func() {
		cancel()
		<-done
		c.Close()
		close(out)
	}()
	// assigned returns the partitions the group assigns the member with instance id in a stable
	// group of n members; nil until then.
	assigned := func(id string, n int) []int32 {
		gs, err := adm.DescribeGroups(testCtx(t), "g")
		if err != nil {
			t.Fatal(err)
		}
		g := gs["g"]
		if g.State != "Stable" || len(g.Members) != n {
			return nil
		}
		for _, m := range g.Members {
			if a, ok := m.Assigned.AsConsumer(); ok && m.InstanceID != nil && *m.InstanceID == id {
				var ps []int32
				for _, tp := range a.Topics {
					ps = append(ps, tp.Partitions...)
				}
				slices.Sort(ps)
				return ps
			}
		}
		return nil
	}
	var want []int32
	agree := func(n, parts int) func() bool {
		return func() bool {
			want = assigned("txn", n)
			return len(want) == parts && slices.Equal(h.partitions(), want)
		}
	}
	waitFor(t, "all 6 partitions", done, agree(1, 6))
	runConsumer(t, cfg, "b")
	waitFor(t, "3 partitions left after the second member joined", done, agree(2, 3))
	runConsumer(t, cfg, "c")
	defer func() {
		if t.Failed() {
			t.Logf("after the third member joined, the group assigns the consumer %v, its handler believes it owns %v", want, h.partitions())
		}
	}()
	waitFor(t, "the handler to own the 2 partitions the group assigns after the third member joined", done, agree(3, 2))
}

// TestConsumerDataLossHalts: a fetch that reports the partition lost records at the broker
// (kgo.ErrDataLoss: the log was truncated below the consumer's position, same topic id) halts
// the task with the partition, the offset it had read to and the reset to run. Before, the halt
// said only "kafka: fetching in/0: topic in partition 0 lost records; ...".
func TestConsumerDataLossHalts(t *testing.T) {
	c := &Consumer{task: "<task>"}
	loss := &kgo.ErrDataLoss{Topic: "in", Partition: 3, ConsumedTo: 500, ConsumedToEpoch: 1, ResetTo: 0}
	fs := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "in", Partitions: []kgo.FetchPartition{{Partition: 3, Err: loss}}}}}}
	ok, err := c.handOver(context.Background(), fs, make(chan Fetch))
	if !ok || err == nil {
		t.Fatalf("handOver = %v, %v; want a fatal error", ok, err)
	}
	for _, want := range []string{"input topic in partition 3 lost records at the broker", "up to offset 500 (leader epoch 1)",
		"diverged from what it read at offset 0", "from offset 0 to 499 are gone", "wasmstream reset --task <task> --to earliest", "--to in:3:<offset>"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	var got *kgo.ErrDataLoss
	if !errors.As(err, &got) {
		t.Errorf("error %q does not wrap the kgo.ErrDataLoss", err)
	}
}

// startAtHandler starts every partition assigned at a given offset and epoch (as a task does
// from its store's position) and aborts its first transaction, keeping the outcome and where
// the client then stands on partition 0 of "in" (the offset SetOffsets gave it, with the epoch its
// fetches' truncation checks use).
type startAtHandler struct {
	groupHandler
	c       *Consumer
	at      EpochOffset
	aborted chan TxnOutcome
	after   kgo.EpochOffset
	once    sync.Once
}

func (h *startAtHandler) Assigned(_ context.Context, committed, _ map[TopicPartition]int64, _ map[string]TopicID, _ map[TopicPartition]bool) (map[TopicPartition]EpochOffset, error) {
	start := map[TopicPartition]EpochOffset{}
	for tp := range committed {
		start[tp] = h.at
	}
	return start, nil
}

func (h *startAtHandler) Commit(ctx context.Context) error {
	var err error
	h.once.Do(func() {
		var out TxnOutcome
		out, err = h.c.EndTxn(ctx, false, false)
		h.after = h.c.cl.CommittedOffsets()["in"][0]
		h.aborted <- out
	})
	return err
}

// TestTxnAbortRewindCarriesEpoch: why the rewind of a partition without a committed offset
// (Consumer.rewind) needs no leader epoch. An exactly-once partition the group has no offset of,
// started at offset 3 with the leader epoch of the record before it (a store's position: the
// client asks the leader where that epoch's log ends before it reads), has its first
// transaction aborted: the client counts that start as committed, with its epoch, so the
// session rewinds it to offset 3 with epoch 0 (which the client's fetches keep for their
// truncation checks: a log that diverged is then reported as data loss, the halt a start from
// the position gives), and the partition is read again from there. Then a partition started
// where the group starts (start_at earliest) is rewound to its first offset, 0, the log start:
// no record comes before it, so no epoch exists to carry.
func TestTxnAbortRewindCarriesEpoch(t *testing.T) {
	_, cfg := testCluster(t, kfake.SeedTopics(1, "in"))
	pr, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "in", Value: []byte{byte(i)}})
	}
	if err := pr.ProduceSync(testCtx(t), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	h := &startAtHandler{at: EpochOffset{Offset: 3, Epoch: 0}, aborted: make(chan TxnOutcome, 1)}
	c, err := NewConsumer(cfg, ConsumerConfig{Group: "g", Topics: []string{"in"}, Handler: h,
		Txn: &TxnConfig{ID: "txn", Interval: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Fetch, 16)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, out) }()
	defer func() {
		cancel()
		<-done
	}()
	first := <-out
	if first.Records[0].Offset != 3 {
		t.Fatalf("the first record read is at offset %d, want 3 (the start given)", first.Records[0].Offset)
	}
	var outcome TxnOutcome
	select {
	case outcome = <-h.aborted:
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	case <-testCtx(t).Done():
		t.Fatal("the transaction never ended")
	}
	if outcome.Committed || outcome.Rewound[TopicPartition{"in", 0}] != 3 {
		t.Fatalf("the aborted transaction's outcome %+v; want partition 0 rewound to offset 3", outcome)
	}
	if want := (kgo.EpochOffset{Offset: 3, Epoch: 0}); h.after != want {
		t.Errorf("after the abort the client stands at %+v on partition 0, want %+v: the rewind carries the epoch of the record before offset 3", h.after, want)
	}
	for again := false; !again; {
		select {
		case f := <-out:
			again = f.Records[0].Offset == 3
		case err := <-done:
			t.Fatalf("Run returned %v", err)
		case <-testCtx(t).Done():
			t.Fatal("partition 0 was not read again from offset 3")
		}
	}
	cancel()
	<-done
	c.Close()

	// Started where the group starts: the first transaction polls from offset 0.
	h = &startAtHandler{at: EpochOffset{Offset: -1, Epoch: -1}, aborted: make(chan TxnOutcome, 1)}
	if c, err = NewConsumer(cfg, ConsumerConfig{Group: "g2", Topics: []string{"in"}, Handler: h, StartAt: "earliest",
		Txn: &TxnConfig{ID: "txn2", Interval: 100 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	h.c = c
	defer c.Close()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	out2 := make(chan Fetch)
	go func() {
		for {
			select {
			case <-out2:
			case <-ctx2.Done():
				return
			}
		}
	}()
	go func() { done <- c.Run(ctx2, out2) }()
	select {
	case outcome = <-h.aborted:
	case err := <-done:
		t.Fatalf("Run returned %v", err)
	case <-testCtx(t).Done():
		t.Fatal("the second consumer's transaction never ended")
	}
	if outcome.Committed || outcome.Rewound[TopicPartition{"in", 0}] != 0 {
		t.Fatalf("the aborted transaction's outcome %+v; want partition 0 rewound to offset 0, the log start", outcome)
	}
}

// TestConsumerServerErrorRiddenOutThenHalts: a fetch answered UNKNOWN_SERVER_ERROR is fetched
// again (before, the first one halted the task); the same partition answered so for
// kafka.unreachable_timeout in a row halts it, naming the partition and the restart.
func TestConsumerServerErrorRiddenOutThenHalts(t *testing.T) {
	c := &Consumer{task: "wc", unreachableTimeout: time.Nanosecond}
	fs := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "in", Partitions: []kgo.FetchPartition{{Partition: 2, Err: kerr.UnknownServerError}}}}}}
	if ok, err := c.handOver(context.Background(), fs, make(chan Fetch)); !ok || err != nil {
		t.Fatalf("first UNKNOWN_SERVER_ERROR: handOver = %v, %v; want it ridden out", ok, err)
	}
	ok, err := c.handOver(context.Background(), fs, make(chan Fetch))
	if !ok || err == nil {
		t.Fatalf("UNKNOWN_SERVER_ERROR past the bound: handOver = %v, %v; want a fatal error", ok, err)
	}
	for _, want := range []string{"fetching in/2", "kafka.unreachable_timeout", "wasmstream restart --task wc", "UNKNOWN_SERVER_ERROR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
