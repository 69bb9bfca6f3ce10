package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// ownership records, from the hosts' logs, when each member held each partition.
type ownership struct {
	mu     sync.Mutex
	events []ownEvent
}

type ownEvent struct {
	member   int
	part     int64
	assigned bool
	at       time.Time
}

type ownHandler struct {
	o      *ownership
	member int
	next   slog.Handler
}

func (h ownHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h ownHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ownHandler{h.o, h.member, h.next.WithAttrs(as)}
}
func (h ownHandler) WithGroup(n string) slog.Handler {
	return ownHandler{h.o, h.member, h.next.WithGroup(n)}
}
func (h ownHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "partition assigned" || r.Message == "partition revoked" || r.Message == "partition lost" {
		var part int64 = -1
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "partition" {
				part = a.Value.Int64()
			}
			return true
		})
		h.o.mu.Lock()
		h.o.events = append(h.o.events, ownEvent{h.member, part, r.Message == "partition assigned", r.Time})
		h.o.mu.Unlock()
	}
	if r.Level >= slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// assignments is how many times a member was assigned a partition so far.
func (o *ownership) assignments() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.events {
		if e.assigned {
			n++
		}
	}
	return n
}

// check asserts that no partition was ever held by two members at once.
func (o *ownership) check(t *testing.T) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	owner := map[int64]int{}
	moves := 0
	for _, e := range o.events {
		cur, held := owner[e.part]
		switch {
		case e.assigned && held && cur != e.member:
			t.Fatalf("partition %d assigned to member %d while member %d still held it", e.part, e.member, cur)
		case e.assigned:
			owner[e.part] = e.member
			moves++
		case held && cur == e.member:
			delete(owner, e.part)
		}
	}
	return moves
}

// Two or three members in one group, members joining and leaving while records flow: no
// output missing (duplicates allowed and counted), per-key order kept, no partition ever
// processed by two members at once.
func TestKafkaRebalanceUnderLoad(t *testing.T) {
	module := guestbuild.Go(t, "testguests/trapper") // echoes each value to "echo" under its key
	c := newCluster(t, "events", "echoes")
	dir := t.TempDir()
	own := &ownership{}
	base := slog.NewTextHandler(testWriter{t}, nil)

	const members, keys, records = 3, 40, 12000
	cfgFor := func(m int) host.Config {
		return host.Config{
			CacheDir:           hosttest.CompileCache(t),
			DataDir:            filepath.Join(dir, "member"+strconv.Itoa(m)),
			Logger:             slog.New(ownHandler{own, m, base}),
			CheckpointInterval: 50 * time.Millisecond,
			Kafka:              host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
			Tasks: []host.TaskConfig{{
				Name: "echo", Module: module, Workers: 2,
				Inputs: []host.InputConfig{{Name: "events", Type: "kafka", Topics: []string{"events"}}},
				Output: host.OutputConfig{Type: "kafka", Topic: "echoes"},
			}},
		}
	}
	type member struct {
		cancel context.CancelFunc
		done   chan error
	}
	running := map[int]*member{}
	start := func(m int) {
		h, err := host.New(cfgFor(m))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		mb := &member{cancel: cancel, done: make(chan error, 1)}
		go func() { mb.done <- h.Run(ctx) }()
		running[m] = mb
	}
	stop := func(m int) {
		mb := running[m]
		mb.cancel()
		if err := <-mb.done; err != nil {
			t.Fatalf("member %d: %v", m, err)
		}
		delete(running, m)
	}

	// The producer: records flow the whole time; each key's values count up from 1.
	producer := newClient(t, c, kgo.ProducerLinger(2*time.Millisecond))
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		seq := map[int]int{}
		rng := rand.New(rand.NewPCG(5, 5))
		for i := 0; i < records; i++ {
			k := rng.IntN(keys)
			seq[k]++
			producer.Produce(context.Background(), &kgo.Record{Topic: "events", Key: []byte("k" + strconv.Itoa(k)),
				Value: []byte(strconv.Itoa(seq[k]))}, nil)
			if i%200 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
		producer.Flush(context.Background())
	}()

	start(0)
	rng := rand.New(rand.NewPCG(9, 9))
	changes := 0
	for changes < 12 {
		time.Sleep(time.Duration(150+rng.IntN(250)) * time.Millisecond)
		m := rng.IntN(members)
		if _, ok := running[m]; ok && len(running) > 1 {
			stop(m)
		} else if !ok {
			start(m)
		} else {
			continue
		}
		changes++
	}
	<-produced
	for m := 0; m < members; m++ {
		if _, ok := running[m]; !ok {
			start(m)
		}
	}
	// Wait for every value of every key; duplicates are allowed.
	got := consumeUntil(t, c, "echoes", records, 90*time.Second)
	// And for partitions to have moved: on a slow machine the churn can end, and the outputs
	// arrive, before the group's rebalances assigned anything beyond the first member's four.
	hosttest.WaitFor(t, 2*time.Minute, "a partition assigned beyond the first four", func() bool { return own.assignments() > 4 })
	for m := range running {
		stop(m)
	}
	outputs, dups := 0, 0
	for k, vs := range got {
		seen := map[int]bool{}
		maxFirst := 0
		for _, v := range vs {
			n, _ := strconv.Atoi(v)
			outputs++
			if seen[n] {
				dups++
				continue
			}
			// Per key, the first appearance of each value comes in order.
			if n != maxFirst+1 {
				t.Fatalf("key %s: value %d first appears after %d", k, n, maxFirst)
			}
			seen[n] = true
			maxFirst = n
		}
	}
	moves := own.check(t)
	t.Logf("%d membership changes, %d partition assignments, %d outputs for %d records, %d duplicates", changes, moves, outputs, records, dups)
	// The first member's start assigns all 4 partitions; anything beyond means they moved
	// (a member may come and go before a rebalance gives it anything).
	if moves <= 4 {
		t.Errorf("only %d partition assignments for %d membership changes: no partition ever moved", moves, changes)
	}
}

// consumeUntil reads topic until it holds want distinct (key, value) pairs.
func consumeUntil(t *testing.T, c interface{ ListenAddrs() []string }, topic string, want int, timeout time.Duration) map[string][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := map[string][]string{}
	distinct := map[string]bool{}
	for len(distinct) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d distinct outputs arrived on %s", len(distinct), want, topic)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
			distinct[fmt.Sprintf("%s/%s", r.Key, r.Value)] = true
		})
	}
	return got
}
