package host_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// The timers test guest (examples/wasm/testguests/timers) in exactly-once mode: every record
// emits "rec <key> <offset>" and adds 1 to its key's state "records"; every firing emits
// "fired <key> <name> <time> <payload> wm=<watermark>", adds 1 to "fired" and, with payload
// "again:N", sets the same timer again 1000 ms later; every tick emits
// "tick <partition> keys=<keys with state> wm=<watermark>" to output "ticks".

const eosTimerParts = 4

// eosTimerKey is the generator's view of one key.
type eosTimerKey struct {
	part    int
	records int
	// The event-time timer "e": due at evDue; evPayload is "again:N" (a chain of N+1 firings
	// 1000 ms apart) or "r" (set by a replacement: one firing); evDeleted when deleted.
	evDue     int64
	evPayload string
	evDeleted bool
	procN     int // the processing-time timer "p": due at 1000, again:procN
}

// eosTimerInput generates the input and computes, independently of the host, what it must
// produce: each partition's records in order, event time advancing 10 ms per record. Each new key
// sets an event-time timer 1500 ms of event time ahead that re-arms itself 0–2 times (so its
// firings fall in later batches) and a processing-time timer that is due at once and re-arms
// itself 0–2 times; some keys later replace or delete their event timer before it is due.
type eosTimerInput struct {
	rng     *rand.Rand
	ts      [eosTimerParts]int64
	nkeys   int
	keys    map[string]*eosTimerKey
	order   []string                // keys in creation order
	byPart  [eosTimerParts][]string // keys per partition
	recOuts map[string][]string     // key -> expected "rec <key> <offset>" in offset order
	stamps  [eosTimerParts][]tsKey  // every record of a partition: its timestamp and key
	total   int                     // records produced
	pending [eosTimerParts][]*kgo.Record
}

type tsKey struct {
	ts  int64
	key string
}

func newEOSTimerInput(seed uint64) *eosTimerInput {
	g := &eosTimerInput{rng: rand.New(rand.NewPCG(seed, 17)), keys: map[string]*eosTimerKey{}, recOuts: map[string][]string{}}
	for p := range g.ts {
		g.ts[p] = 1_800_000_000_000
	}
	return g
}

func (g *eosTimerInput) add(p int, key, cmd string) {
	g.ts[p] += 10
	g.keys[key].records++
	g.stamps[p] = append(g.stamps[p], tsKey{g.ts[p], key})
	g.pending[p] = append(g.pending[p], &kgo.Record{Topic: "cmds", Partition: int32(p), Key: []byte(key),
		Value: []byte(cmd), Timestamp: time.UnixMilli(g.ts[p])})
}

func (g *eosTimerInput) newKey(p int, key string) *eosTimerKey {
	k := &eosTimerKey{part: p}
	g.keys[key] = k
	g.order = append(g.order, key)
	g.byPart[p] = append(g.byPart[p], key)
	return k
}

// batch generates n records per partition.
func (g *eosTimerInput) batch(n int) {
	for p := 0; p < eosTimerParts; p++ {
		for i := 0; i < n; {
			if len(g.byPart[p]) == 0 || g.rng.IntN(100) < 30 {
				key := fmt.Sprintf("p%d-k%04d", p, g.nkeys)
				g.nkeys++
				k := g.newKey(p, key)
				k.evDue, k.evPayload = g.ts[p]+10+1500, "again:"+strconv.Itoa(g.rng.IntN(3))
				g.add(p, key, fmt.Sprintf("set e e %d %s", k.evDue, k.evPayload))
				k.procN = g.rng.IntN(3)
				g.add(p, key, fmt.Sprintf("set p p 1000 again:%d", k.procN))
				i += 2
				continue
			}
			key := g.byPart[p][g.rng.IntN(len(g.byPart[p]))]
			k := g.keys[key]
			next := g.ts[p] + 10 // this record's timestamp
			// Replace or delete only while the timer cannot have fired: the partition's
			// watermark (its highest timestamp read) is still below the due time.
			switch r := g.rng.IntN(100); {
			case !k.evDeleted && next < k.evDue && r < 15:
				k.evDue, k.evPayload = next+800, "r"
				g.add(p, key, fmt.Sprintf("set e e %d r", k.evDue))
			case !k.evDeleted && next < k.evDue && r < 25:
				k.evDeleted = true
				g.add(p, key, "del e")
			default:
				g.add(p, key, "count")
			}
			i++
		}
	}
}

// finish adds a record per partition far ahead in event time, so that every event-time timer
// falls due.
func (g *eosTimerInput) finish() {
	for p := 0; p < eosTimerParts; p++ {
		key := fmt.Sprintf("p%d-end", p)
		g.newKey(p, key)
		g.ts[p] += 1_000_000
		g.keys[key].records++
		g.stamps[p] = append(g.stamps[p], tsKey{g.ts[p], key})
		g.pending[p] = append(g.pending[p], &kgo.Record{Topic: "cmds", Partition: int32(p), Key: []byte(key),
			Value: []byte("count"), Timestamp: time.UnixMilli(g.ts[p])})
	}
}

// produce sends what was generated since the last call and notes each record's offset.
func (g *eosTimerInput) produce(t *testing.T, cl *kgo.Client) {
	t.Helper()
	var recs []*kgo.Record
	for p := range g.pending {
		recs = append(recs, g.pending[p]...)
		g.pending[p] = nil
	}
	res := cl.ProduceSync(context.Background(), recs...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		key := string(r.Record.Key)
		g.recOuts[key] = append(g.recOuts[key], fmt.Sprintf("rec %s %d", key, r.Record.Offset))
	}
	g.total += len(recs)
}

// firings returns the key's expected firings as "fired <key> <name> <time> <payload>".
func (g *eosTimerInput) firings(key string) []string {
	k := g.keys[key]
	var out []string
	if strings.HasSuffix(key, "-end") {
		return nil
	}
	if !k.evDeleted {
		if k.evPayload == "r" {
			out = append(out, fmt.Sprintf("fired %s e %d r", key, k.evDue))
		} else {
			n, _ := strconv.Atoi(strings.TrimPrefix(k.evPayload, "again:"))
			for j := 0; j <= n; j++ {
				out = append(out, fmt.Sprintf("fired %s e %d again:%d", key, k.evDue+int64(1000*j), n-j))
			}
		}
	}
	for j := 0; j <= k.procN; j++ {
		out = append(out, fmt.Sprintf("fired %s p %d again:%d", key, 1000+1000*j, k.procN-j))
	}
	return out
}

// expectedState is every key's state: "records" and, if it fired, "fired".
func (g *eosTimerInput) expectedState() map[string]map[string]int {
	want := map[string]map[string]int{}
	for key, k := range g.keys {
		want[key] = map[string]int{"records": k.records}
		if n := len(g.firings(key)); n > 0 {
			want[key]["fired"] = n
		}
	}
	return want
}

// totalOutputs is the number of outputs to "log".
func (g *eosTimerInput) totalOutputs() (records, firings int) {
	for key := range g.keys {
		firings += len(g.firings(key))
	}
	return g.total, firings
}

// keysUpTo is the number of distinct keys of partition p with a record at or before ts.
func (g *eosTimerInput) keysUpTo(p int, ts int64) int {
	seen := map[string]bool{}
	for _, s := range g.stamps[p] {
		if s.ts > ts {
			break
		}
		seen[s.key] = true
	}
	return len(seen)
}

// checkExactly reads "log" read_committed and checks that it holds exactly the records' and the
// firings' outputs, each once (checkLog).
func (g *eosTimerInput) checkExactly(t *testing.T, c *kfake.Cluster, records, firings int) {
	t.Helper()
	got := consumeOutputs(t, c, "log", records+firings, 60*time.Second)
	n := 0
	for _, vs := range got {
		n += len(vs)
	}
	if n != records+firings {
		t.Fatalf("%d outputs, want exactly %d (%d records, %d firings)", n, records+firings, records, firings)
	}
	g.checkLog(t, got)
}

// checkLog checks the read_committed outputs of "log" against the expectation: per key,
// exactly the expected records (in offset order) and firings, each once; an event-time firing
// ran at a watermark at or past its time; no record was late.
func (g *eosTimerInput) checkLog(t *testing.T, got map[string][]string) {
	t.Helper()
	for _, key := range g.order {
		var recs, fired []string
		for _, v := range got[key] {
			switch {
			case strings.HasPrefix(v, "rec "):
				recs = append(recs, v)
			case strings.HasPrefix(v, "fired "):
				line, wm, ok := strings.Cut(v, " wm=")
				if !ok {
					t.Fatalf("key %s: output %q has no watermark", key, v)
				}
				f := strings.Fields(line)
				if f[2] == "e" {
					at, _ := strconv.ParseInt(f[3], 10, 64)
					w, _ := strconv.ParseInt(wm, 10, 64)
					if w < at {
						t.Fatalf("key %s: event-time firing %q ran at watermark %d, before its time", key, v, w)
					}
				}
				fired = append(fired, line)
			default:
				t.Fatalf("key %s: unexpected output %q", key, v)
			}
		}
		if !slices.Equal(recs, g.recOuts[key]) {
			t.Fatalf("key %s: record outputs\n%q\nwant exactly once, in order:\n%q", key, recs, g.recOuts[key])
		}
		want := g.firings(key)
		slices.Sort(fired)
		slices.Sort(want)
		if !slices.Equal(fired, want) {
			t.Fatalf("key %s: firing outputs\n%q\nwant each exactly once:\n%q", key, fired, want)
		}
	}
	for key := range got {
		if _, ok := g.keys[key]; !ok {
			t.Fatalf("outputs for unknown key %q: %q", key, got[key])
		}
	}
}

func eosTimersTask(module string, tick time.Duration) host.TaskConfig {
	return host.TaskConfig{
		Name: "tm", Module: module, Workers: 2, Delivery: "exactly_once",
		Changelog: host.ChangelogConfig{Enabled: true},
		Inputs:    []host.InputConfig{{Name: "cmds", Type: "kafka", Topics: []string{"cmds"}}},
		Output:    host.OutputConfig{Type: "kafka", Topic: "log", Topics: map[string]string{"ticks": "ticks"}},
		Time:      host.TimeConfig{TickInterval: tick},
	}
}

// eosRun is a running host.
type eosRun struct {
	t      *testing.T
	h      *host.Host
	cancel context.CancelFunc
	done   chan error
}

func startEOSTimersHost(t *testing.T, c *kfake.Cluster, module, dir string, tick time.Duration) *eosRun {
	t.Helper()
	h, err := host.New(host.Config{CacheDir: hosttest.CompileCache(t),
		DataDir: dir, Logger: testLogger(t), CheckpointInterval: 100 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{eosTimersTask(module, tick)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &eosRun{t: t, h: h, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- h.Run(ctx) }()
	t.Cleanup(func() {
		if r.cancel != nil {
			r.cancel()
			<-r.done
		}
	})
	return r
}

// waitFor polls cond until it holds, failing the test at the deadline or if the host stops.
func (r *eosRun) waitFor(what string, timeout time.Duration, cond func(s host.TaskStats) bool) host.TaskStats {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-r.done:
			r.cancel = nil
			r.t.Fatalf("host stopped while waiting for %s: %v", what, err)
		default:
		}
		if s := r.h.Stats(); len(s) > 0 && cond(s[0]) {
			return s[0]
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s: %+v", what, r.h.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops the host cleanly and returns its figures.
func (r *eosRun) stop() host.TaskStats {
	r.t.Helper()
	r.cancel()
	err := <-r.done
	r.cancel = nil
	if err != nil {
		r.t.Fatal(err)
	}
	return r.h.Stats()[0]
}

func committedRecords(s host.TaskStats) int64 {
	var n int64
	for _, in := range s.Inputs {
		n += in.Committed
	}
	return n
}

// waitFault waits until the fault was hit n times.
func waitFault(t *testing.T, f *kfake.FaultHandle, n int, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); f.Hits() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the fault was hit %d times, want %d", f.Hits(), n)
		}
	}
}

// TestExactlyOnceTimers runs the timers guest in exactly-once mode over batches of records
// that set, re-arm, replace and delete event-time and processing-time timers, while the broker
// fails the first two transaction ends after each batch is produced: those transactions, which
// hold the batch's records and the firings its watermark advance and its processing-time
// timers cause, abort, and the task rolls back its cache, timers and watermark and processes
// them again. A read_committed reader then sees every record's output and every firing's output
// exactly once, the local state ("records" and "fired" per key) is exact, and a host with an
// empty disk restores that state from the changelog with no timer left to fire.
func TestExactlyOnceTimers(t *testing.T) {
	module := guestbuild.Go(t, "testguests/timers")
	c := newCluster(t, "cmds", "log", "ticks")
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	g := newEOSTimerInput(21)
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	a := startEOSTimersHost(t, c, module, dirA, 0)
	a.waitFor("the partitions", 60*time.Second, func(s host.TaskStats) bool { return len(s.Inputs) == eosTimerParts })

	const batches = 5
	var faults []*kfake.FaultHandle
	for b := 0; b <= batches; b++ {
		if b < batches {
			g.batch(50)
		} else {
			g.finish()
		}
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 2})
		faults = append(faults, f)
		g.produce(t, cl)
		waitFault(t, f, 2, 60*time.Second)
		a.waitFor(fmt.Sprintf("batch %d committed", b), 60*time.Second, func(s host.TaskStats) bool {
			return committedRecords(s) >= int64(g.total)
		})
	}
	records, firings := g.totalOutputs()
	// Every output committed (the last firings come in the transactions after the last record's).
	consumeOutputs(t, c, "log", records+firings, 60*time.Second)
	sa := a.stop()

	g.checkExactly(t, c, records, firings)
	want := g.expectedState()
	sameCounts(t, want, stateOf(t, dirA, "tm"))
	hits := 0
	for _, f := range faults {
		hits += f.Hits()
	}
	if hits != 2*len(faults) {
		t.Fatalf("faults hit %d times, want %d", hits, 2*len(faults))
	}
	if sa.TxnAborts < int64(hits) {
		t.Fatalf("%d transactions aborted under %d transaction-end faults", sa.TxnAborts, hits)
	}
	if sa.TxnCommits == 0 {
		t.Fatal("no transaction committed")
	}
	if sa.TimersFired < int64(firings) {
		t.Fatalf("%d firings completed, want at least the %d expected", sa.TimersFired, firings)
	}
	// Aborted transactions held firings: they ran again after the rollback.
	if sa.TimersFired == int64(firings) {
		t.Fatalf("exactly the %d expected firings completed: no aborted transaction held a firing, the test did not exercise the rollback of timers", firings)
	}

	// A host with an empty disk restores the state (timers included: none is left) from the
	// changelog; a record per partition far ahead in event time fires nothing more.
	b := startEOSTimersHost(t, c, module, dirB, 0)
	b.waitFor("the restores", 60*time.Second, func(s host.TaskStats) bool { return s.Restores >= eosTimerParts })
	for p := 0; p < eosTimerParts; p++ {
		key := fmt.Sprintf("p%d-end", p)
		g.ts[p] += 1_000_000
		g.keys[key].records++
		g.stamps[p] = append(g.stamps[p], tsKey{g.ts[p], key})
		g.pending[p] = append(g.pending[p], &kgo.Record{Topic: "cmds", Partition: int32(p), Key: []byte(key),
			Value: []byte("count"), Timestamp: time.UnixMilli(g.ts[p])})
	}
	g.produce(t, cl)
	b.waitFor("the last records committed", 60*time.Second, func(s host.TaskStats) bool {
		return committedRecords(s) >= int64(g.total)
	})
	sb := b.stop()
	if sb.TimersFired != 0 || sb.TimersSet != 0 {
		t.Fatalf("the restored host fired %d timers and set %d; every timer had fired before", sb.TimersFired, sb.TimersSet)
	}
	sameCounts(t, g.expectedState(), stateOf(t, dirB, "tm"))
	g.checkExactly(t, c, records+eosTimerParts, firings)
	t.Logf("%d records, %d firings exactly once; host a: %d transactions committed, %d aborted (%d faults hit), %d firings run (%d again after a rollback); host b restored %d changelog records",
		records, firings, sa.TxnCommits, sa.TxnAborts, hits, sa.TimersFired, sa.TimersFired-int64(firings), sb.RestoredRecords)
}

// TestExactlyOnceTicks runs the timers guest with ticks in exactly-once mode over batches of
// records, with transaction ends failing while the batches are processed and while the task
// is idle (transactions then hold only tick outputs). Each tick reports the number of keys
// with state in its partition and its watermark: since a tick starts only right after a commit,
// when everything read is processed and committed, its key count must be exactly that of the
// records of its partition up to its watermark. The timers' outputs and the state stay exact.
func TestExactlyOnceTicks(t *testing.T) {
	t.Parallel() // it mostly waits (client retries, timeouts): it runs beside the other tests that do
	module := guestbuild.Go(t, "testguests/timers")
	c := newCluster(t, "cmds", "log", "ticks")
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	g := newEOSTimerInput(33)
	dir := filepath.Join(t.TempDir(), "a")
	a := startEOSTimersHost(t, c, module, dir, 150*time.Millisecond)
	a.waitFor("the partitions", 60*time.Second, func(s host.TaskStats) bool { return len(s.Inputs) == eosTimerParts })

	const batches = 4
	hits, idleHits := 0, 0
	for b := 0; b <= batches; b++ {
		if b < batches {
			g.batch(40)
		} else {
			g.finish()
		}
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 1})
		g.produce(t, cl)
		waitFault(t, f, 1, 60*time.Second)
		hits++
		s := a.waitFor(fmt.Sprintf("batch %d committed", b), 60*time.Second, func(s host.TaskStats) bool {
			return committedRecords(s) >= int64(g.total)
		})
		// Ticks over the batch's committed state, then an idle transaction (tick outputs only)
		// aborted.
		a.waitFor("ticks after the batch", 60*time.Second, func(n host.TaskStats) bool { return n.Ticks >= s.Ticks+2*eosTimerParts })
		f = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.UnknownServerError, Count: 1})
		waitFault(t, f, 1, 60*time.Second)
		hits++
		idleHits++
	}
	records, firings := g.totalOutputs()
	consumeOutputs(t, c, "log", records+firings, 60*time.Second)

	// Wait for a committed tick of every partition that sees its final state.
	final := map[int]string{}
	for p := 0; p < eosTimerParts; p++ {
		final[p] = fmt.Sprintf("tick %d keys=%d wm=%d", p, len(g.byPart[p]), g.ts[p])
	}
	tcl := newClient(t, c, kgo.ConsumeTopics("ticks"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ticksSeen []string
	for seen := map[int]bool{}; len(seen) < eosTimerParts; {
		fs := tcl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no committed tick with the final state for partitions other than %v; want %v; ticks committed: %q; stats %+v",
				seen, final, ticksSeen, a.h.Stats())
		}
		fs.EachRecord(func(r *kgo.Record) {
			ticksSeen = append(ticksSeen, string(r.Value))
			for p, v := range final {
				if string(r.Value) == v {
					seen[p] = true
				}
			}
		})
	}
	sa := a.stop()

	got := consumeOutputs(t, c, "log", records+firings, 60*time.Second)
	g.checkLog(t, got)
	sameCounts(t, g.expectedState(), stateOf(t, dir, "tm"))

	tickOuts := 0
	for _, vs := range consumeOutputs(t, c, "ticks", 1, 60*time.Second) {
		for _, v := range vs {
			tickOuts++
			var p int
			var keys, wm int64
			if _, err := fmt.Sscanf(v, "tick %d keys=%d wm=%d", &p, &keys, &wm); err != nil || p < 0 || p >= eosTimerParts {
				t.Fatalf("tick output %q", v)
			}
			if wm >= 0 && !slices.ContainsFunc(g.stamps[p], func(s tsKey) bool { return s.ts == wm }) {
				t.Fatalf("tick output %q: watermark %d is no record's timestamp in partition %d", v, wm, p)
			}
			if want := g.keysUpTo(p, wm); int64(want) != keys {
				t.Fatalf("tick output %q: %d keys with state, but %d keys of partition %d have records up to watermark %d: the tick did not see exactly the committed state",
					v, keys, want, p, wm)
			}
		}
	}
	if sa.Ticks == 0 || tickOuts == 0 {
		t.Fatalf("%d ticks started, %d tick outputs committed", sa.Ticks, tickOuts)
	}
	if int64(tickOuts) > sa.Ticks {
		t.Fatalf("%d tick outputs committed, but only %d ticks started", tickOuts, sa.Ticks)
	}
	if sa.TxnAborts < int64(hits) {
		t.Fatalf("%d transactions aborted under %d transaction-end faults", sa.TxnAborts, hits)
	}
	if sa.TimersFired < int64(firings) {
		t.Fatalf("%d firings completed, want at least %d", sa.TimersFired, firings)
	}
	t.Logf("%d records, %d firings exactly once; %d ticks started, %d tick outputs committed, each exact; %d transactions committed, %d aborted (%d faults hit, %d while idle)",
		records, firings, sa.Ticks, tickOuts, sa.TxnCommits, sa.TxnAborts, hits, idleHits)
}

// TestExactlyOnceTimersRebalance moves partitions between two exactly-once hosts while timers
// keep firing: a second host joins, takes partitions over and leaves again between batches that
// set self re-arming processing-time and event-time timers. Firings that run between a commit
// and a revoke belong to a transaction the revoke aborts; they must reach neither the outputs
// nor any store. A read_committed reader sees every record's and every firing's output exactly
// once, and the first host, owning everything again at the end, holds the exact state.
func TestExactlyOnceTimersRebalance(t *testing.T) {
	module := guestbuild.Go(t, "testguests/timers")
	c := newCluster(t, "cmds", "log", "ticks")
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	g := newEOSTimerInput(33)
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	a := startEOSTimersHost(t, c, module, dirA, 0)
	owns := func(n int) func(s host.TaskStats) bool {
		return func(s host.TaskStats) bool { return len(s.Inputs) == n }
	}
	a.waitFor("the partitions", 60*time.Second, owns(eosTimerParts))
	committedAll := func(s host.TaskStats) bool { return committedRecords(s) >= int64(g.total) }

	g.batch(50)
	g.produce(t, cl)
	a.waitFor("batch 0", 60*time.Second, committedAll)
	b := startEOSTimersHost(t, c, module, dirB, 0)
	sb := b.waitFor("b's share", 60*time.Second, func(s host.TaskStats) bool { return len(s.Inputs) > 0 && s.Restores > 0 })
	a.waitFor("a giving partitions up", 60*time.Second, func(s host.TaskStats) bool { return len(s.Inputs) < eosTimerParts })
	g.batch(50)
	g.produce(t, cl)
	// Both hosts process their share; b's partitions are committed when its figures say so.
	b.waitFor("b processing", 60*time.Second, func(s host.TaskStats) bool { return s.Records > sb.Records })
	sb = b.stop()
	a.waitFor("a owning everything again", 60*time.Second, owns(eosTimerParts))
	g.batch(50)
	g.finish()
	g.produce(t, cl)
	a.waitFor("every record committed", 60*time.Second, committedAll)
	records, firings := g.totalOutputs()
	consumeOutputs(t, c, "log", records+firings, 60*time.Second)
	sa := a.stop()

	g.checkExactly(t, c, records, firings)
	sameCounts(t, g.expectedState(), stateOf(t, dirA, "tm"))
	if sa.Restores <= eosTimerParts || sb.Restores == 0 {
		t.Fatalf("restores: a %d, b %d; the partitions did not move both ways", sa.Restores, sb.Restores)
	}
	t.Logf("%d records, %d firings exactly once over two moves; a: %d commits, %d aborts, %d firings run; b: %d commits, %d aborts, %d firings run",
		records, firings, sa.TxnCommits, sa.TxnAborts, sa.TimersFired, sb.TxnCommits, sb.TxnAborts, sb.TimersFired)
}
