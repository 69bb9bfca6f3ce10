package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// BenchmarkTakeover measures how long the partitions of a host killed with SIGKILL stay without
// processing: from the kill until a record produced to each of them right after the kill has its
// output on the output topic, processed by the surviving host. That span holds the group session
// timeout (2s here: the broker notices the death), the rebalance, the new owner's restore from the
// changelog and the first batch. It runs the real binary, two hosts (A and B, each with its own
// data directory) in one consumer group, against a broker in its own process, with a sizeable
// state (takeoverUsers distinct keys, takeoverRecords records, over 4 partitions) built before
// the kill, and compares a changelog without warm standbys (B replays the whole changelog of A's
// partitions) with one with standbys (B has tailed it all along and replays only what it had not
// applied yet). Run with -benchtime 1x:
//
//	go test ./e2e -run '^$' -bench Takeover -benchtime 1x
//
// Metrics per sub-benchmark: takeover-s (kill to every marker of A's partitions processed; with
// exactly once, to every marker's output visible to a read_committed reader) and
// restored-records (changelog records B replayed when it took A's partitions over, summed from its
// "partition restored from the changelog" log lines; a standby that had caught up replays nothing
// and logs no such line, hence 0). ns/op times the same span (kill to every marker processed, B's
// own partitions' included); the setup before the kill is not timed.
func BenchmarkTakeover(b *testing.B) {
	bin := guestbuild.Binary(b)
	module := guestbuild.Go(b, "wordcount")
	for _, delivery := range []string{"at_least_once", "exactly_once"} {
		for _, standby := range []bool{false, true} {
			b.Run(fmt.Sprintf("delivery=%s/standby=%t", delivery, standby), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					takeoverOnce(b, bin, module, delivery, standby)
				}
			})
		}
	}
}

const (
	takeoverUsers   = 200_000 // distinct keys of the state
	takeoverRecords = 400_000 // every user twice, one word each: as many outputs
)

// takeoverOnce runs one takeover from a fresh broker and fresh hosts, and reports its figures.
func takeoverOnce(b *testing.B, bin, module, delivery string, standby bool) {
	b.StopTimer() // ns/op is not the figure: the metrics are
	dir := b.TempDir()
	port := freePort(b)
	startBroker(b, bin, filepath.Join(dir, "broker"), port, "words", "counts")
	brokers := "127.0.0.1:" + strconv.Itoa(port)
	eos := delivery == "exactly_once"
	txnTimeout := "15s"
	if eos {
		txnTimeout = "5s"
	}
	hosts := map[string]*hostProc{}
	for _, name := range []string{"A", "B"} {
		h := &hostProc{cfg: filepath.Join(dir, name+".yaml"), data: filepath.Join(dir, name)}
		err := os.WriteFile(h.cfg, []byte(wcHostConfig{data: h.data, brokers: brokers, module: module, session: "2s", rebalance: "5s",
			txnTimeout: txnTimeout, changelog: true, standby: standby, delivery: delivery}.yaml()), 0o644)
		if err != nil {
			b.Fatal(err)
		}
		hosts[name] = h
	}
	a, bh := hosts["A"], hosts["B"]
	defer func() {
		for _, h := range hosts {
			if h.cmd != nil {
				h.kill()
			}
		}
	}()
	logs := func() string {
		return fmt.Sprintf("--- host A:\n%s\n--- host B:\n%s", tail(a.logs.String(), 4000), tail(bh.logs.String(), 4000))
	}

	// A first, then B: the group settles with two partitions each (cooperative-sticky) before
	// any record exists, so that no partition moves while the state is built.
	a.start(b, bin)
	waitFor(b, 30*time.Second, "host A owning the partitions", logs, func() bool { return a.owned() == 4 })
	bh.start(b, bin)
	waitFor(b, 30*time.Second, "the partitions spread over A and B", logs, func() bool {
		return a.owned() > 0 && bh.owned() > 0 && a.owned()+bh.owned() == 4
	})

	// One reader of the outputs for the whole run: it counts them, and notes when the output
	// of each marker (key takeover-p<partition>, value "marker 1") arrives.
	outs := startOutputWatch(b, brokers, eos)
	defer outs.stop()

	// The state: every user twice (two checkpoints apart, so each key's snapshot is written to
	// the changelog about twice), one word per record.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	built := time.Now()
	batch := make([]*kgo.Record, 0, 10_000)
	for i := 0; i < takeoverRecords; i++ {
		user := fmt.Sprintf("user%06d", i%takeoverUsers)
		// The records of a key go to one partition, as a keyed producer would put them.
		p := int32(fnv32(user) % 4)
		batch = append(batch, &kgo.Record{Topic: "words", Partition: p, Key: []byte(user), Value: []byte("alpha")})
		if len(batch) == cap(batch) {
			if err := cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	waitFor(b, 3*time.Minute, fmt.Sprintf("the %d outputs of the state", takeoverRecords), logs, func() bool {
		return outs.count.Load() >= takeoverRecords
	})
	buildTook := time.Since(built)
	// The last checkpoints reach the changelog within a checkpoint interval; a standby tails it
	// about once a second. Both variants wait the same.
	time.Sleep(3 * time.Second)

	victims := ownedPartitions(a.logs.String()[a.since:])
	if len(victims) == 0 {
		b.Fatalf("host A owns no partition at the kill\n%s", logs())
	}
	bSince := len(bh.logs.String())
	b.StartTimer()
	a.kill()
	killed := time.Now()
	// One marker per partition, produced right after the kill: those of A's partitions wait for
	// the takeover, those of B's show that B's own partitions kept running.
	markers := make([]*kgo.Record, 4)
	for p := range markers {
		markers[p] = &kgo.Record{Topic: "words", Partition: int32(p), Key: []byte(fmt.Sprintf("takeover-p%d", p)), Value: []byte("marker")}
	}
	if err := cl.ProduceSync(context.Background(), markers...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	waitFor(b, 2*time.Minute, "the markers' outputs after the kill", logs, func() bool { return outs.markers() == 4 })
	b.StopTimer()

	var takeover, others time.Duration
	seen := outs.markerTimes()
	for p, at := range seen {
		if slices.Contains(victims, p) {
			takeover = max(takeover, at.Sub(killed))
		} else {
			others = max(others, at.Sub(killed))
		}
	}
	restored, restores, took := restoredFromLog(bh.logs.String()[bSince:])
	if restores == 0 && !standby {
		b.Errorf("host B logged no restore after taking over A's partitions %v\n%s", victims, logs())
	}
	b.ReportMetric(takeover.Seconds(), "takeover-s")
	b.ReportMetric(float64(restored), "restored-records")
	b.Logf("takeover (%s, standby %t): state of %d records over %d users built in %s; SIGKILL of host A (partitions %v) to their markers processed by host B: %s (session timeout 2s); B's own partitions' markers: %s; B restored %d changelog records in %d partition restores (%s)",
		delivery, standby, takeoverRecords, takeoverUsers, buildTook.Round(time.Millisecond), victims,
		takeover.Round(time.Millisecond), others.Round(time.Millisecond), restored, restores, took)
}

// waitFor polls cond until it holds, or fails the benchmark with the hosts' logs.
func waitFor(b *testing.B, timeout time.Duration, what string, logs func() string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("waited %s for %s\n%s", timeout, what, logs())
		}
	}
}

// outputWatch reads the output topic from its start in the background.
type outputWatch struct {
	count  atomic.Int64 // outputs read
	mu     sync.Mutex
	marker map[int]time.Time // partition of a marker -> when its output was read
	cancel context.CancelFunc
	done   chan struct{}
}

func startOutputWatch(b *testing.B, brokers string, readCommitted bool) *outputWatch {
	opts := []kgo.Opt{kgo.SeedBrokers(brokers), kgo.ConsumeTopics("counts"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}
	if readCommitted {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &outputWatch{marker: map[int]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				w.count.Add(1)
				k := string(r.Key)
				if p, ok := strings.CutPrefix(k, "takeover-p"); ok && string(r.Value) == "marker 1" {
					n, _ := strconv.Atoi(p)
					w.mu.Lock()
					if _, dup := w.marker[n]; !dup {
						w.marker[n] = now
					}
					w.mu.Unlock()
				}
			})
		}
	}()
	return w
}

func (w *outputWatch) markers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.marker)
}

func (w *outputWatch) markerTimes() map[int]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.marker)
}

func (w *outputWatch) stop() {
	w.cancel()
	<-w.done
}

var (
	logPartition = regexp.MustCompile(`msg="partition (assigned|revoked|lost)".* partition=(\d+)`)
	logRestored  = regexp.MustCompile(`msg="partition restored from the changelog".* changelog_records=(\d+).* took=(\S+)`)
)

// ownedPartitions is the input partitions a host's log says it holds.
func ownedPartitions(log string) []int {
	owned := map[int]bool{}
	for _, m := range logPartition.FindAllStringSubmatch(log, -1) {
		p, _ := strconv.Atoi(m[2])
		owned[p] = m[1] == "assigned"
	}
	var ps []int
	for p, ok := range owned {
		if ok {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	return ps
}

// restoredFromLog sums the changelog records of the restores a host's log reports, and lists
// how long each took.
func restoredFromLog(log string) (records int64, restores int, took []string) {
	for _, m := range logRestored.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		records += n
		restores++
		took = append(took, m[2])
	}
	return records, restores, took
}

// fnv32 is FNV-1a, to spread the users over the partitions.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
