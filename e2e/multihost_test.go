package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
	"github.com/wasmstream/wasmstream/store"
)

// hostProc is one wasmstream process of the multi-host test.
type hostProc struct {
	cfg   string
	data  string
	cmd   *exec.Cmd
	logs  *lockedBuffer
	since int // where the current run's log begins in logs
}

// owned is how many partitions the current run holds, from its log.
func (h *hostProc) owned() int {
	if h.cmd == nil {
		return 0
	}
	l := h.logs.String()[h.since:]
	return strings.Count(l, "partition assigned") - strings.Count(l, "partition revoked") - strings.Count(l, "partition lost")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (h *hostProc) start(t testing.TB, bin string) {
	t.Helper()
	h.cmd = exec.Command(bin, "run", "-c", h.cfg, "--log-level", "info")
	if h.logs == nil {
		h.logs = &lockedBuffer{} // every run's log, in order
	}
	h.since = len(h.logs.String())
	h.cmd.Stderr = h.logs
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

// wcHostConfig is the configuration file of a host running the wordcount over a broker: input
// topic "words", output topic "counts", two workers, a checkpoint every 100 ms.
type wcHostConfig struct {
	data, brokers, module string
	session, rebalance    string // the group's timeouts
	txnTimeout            string // kafka.transaction_timeout; "" the default
	changelog, standby    bool
	delivery              string // "" the default
	dynamic               bool   // kafka.dynamic_membership
	loops                 int    // tasks[].loops; 0 leaves it out (1)
}

func (c wcHostConfig) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir: %s\ncheckpoint_interval: 100ms\nkafka:\n  brokers: [%s]\n  session_timeout: %s\n  rebalance_timeout: %s\n",
		c.data, c.brokers, c.session, c.rebalance)
	if c.txnTimeout != "" {
		fmt.Fprintf(&b, "  transaction_timeout: %s\n", c.txnTimeout)
	}
	if c.dynamic {
		b.WriteString("  dynamic_membership: true\n")
	}
	fmt.Fprintf(&b, `tasks:
  - name: wc
    module: %s
    workers: 2
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: kafka
      topic: counts
`, c.module)
	if c.changelog {
		fmt.Fprintf(&b, "    changelog:\n      enabled: true\n      standby: %t\n", c.standby)
	}
	if c.delivery != "" {
		fmt.Fprintf(&b, "    delivery: %s\n", c.delivery)
	}
	if c.loops != 0 {
		fmt.Fprintf(&b, "    loops: %d\n", c.loops)
	}
	return b.String()
}

func (h *hostProc) kill() {
	h.cmd.Process.Signal(syscall.SIGKILL)
	h.cmd.Wait()
	h.cmd = nil
}

// TestMultiHostChangelogExact runs three wasmstream processes in one consumer group with a
// changelog, over a broker in its own process, while records flow; a host that owns partitions is
// killed with SIGKILL at a random moment and restarted, at least 20 times (10 unless
// hosttest.Long; every fifth restart with an empty disk), each time once every partition is
// owned again. The final state of every
// partition — read from the changelog, which a new owner restores from — equals an independent
// computation exactly. It reports the time from each kill until every partition is owned again.
//
// The two multi-host tests run side by side (their brokers, ports and directories are their own):
// the suite's time, not a figure of either, is what that saves.
func TestMultiHostChangelogExact(t *testing.T) {
	t.Parallel()
	multiHostChaos(t, false, 1, hosttest.Scale(10, 20))
}

// TestMultiHostExactlyOnce is the same chaos with delivery: exactly_once: besides the exact
// state, a read_committed reader of the outputs sees every expected count exactly once.
func TestMultiHostExactlyOnce(t *testing.T) {
	t.Parallel()
	multiHostChaos(t, true, 1, hosttest.Scale(10, 20))
}

// TestMultiHostExactlyOnceLoops is TestMultiHostExactlyOnce with each host running the task as
// two loops (tasks[].loops: six group members over four partitions), killed at least 4 times
// (10 with hosttest.Long): the partitions move between hosts and between the loops of a host.
func TestMultiHostExactlyOnceLoops(t *testing.T) {
	t.Parallel()
	multiHostChaos(t, true, 2, hosttest.Scale(4, 10))
}

func multiHostChaos(t *testing.T, eos bool, loops, minKills int) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "wordcount")
	dir := t.TempDir()
	port := freePort(t)
	startBroker(t, bin, filepath.Join(dir, "broker"), port, "words", "counts")
	brokers := "127.0.0.1:" + strconv.Itoa(port)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	want := wordcountExpect{}
	var wantMu sync.Mutex
	records := 0
	produce := func(n int) {
		batch := make([]*kgo.Record, 0, n)
		wantMu.Lock()
		for i := 0; i < n; i++ {
			user := fmt.Sprintf("user%03d", rng.IntN(400))
			text := fmt.Sprintf("w%02d w%02d", rng.IntN(40), rng.IntN(40))
			want.add(user, text)
			batch = append(batch, &kgo.Record{Topic: "words", Key: []byte(user), Value: []byte(text)})
		}
		records += n
		wantMu.Unlock()
		if err := cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
			t.Error(err)
		}
	}

	// Exactly once, a killed host's open transaction blocks read_committed readers of what it
	// wrote until it is fenced (its restart) or times out.
	delivery, txnTimeout := "at_least_once", "15s"
	if eos {
		delivery, txnTimeout = "exactly_once", "5s"
	}
	hosts := make([]*hostProc, 3)
	for i := range hosts {
		h := &hostProc{cfg: filepath.Join(dir, fmt.Sprintf("h%d.yaml", i)), data: filepath.Join(dir, fmt.Sprintf("h%d", i))}
		os.WriteFile(h.cfg, []byte(wcHostConfig{data: h.data, brokers: brokers, module: module, session: "2s", rebalance: "5s",
			txnTimeout: txnTimeout, changelog: true, delivery: delivery, loops: loops}.yaml()), 0o644)
		hosts[i] = h
	}

	// WASMSTREAM_DEBUG_LOGS=prefix keeps each host's whole log in prefix.N.
	if p := os.Getenv("WASMSTREAM_DEBUG_LOGS"); p != "" {
		t.Cleanup(func() {
			for i, h := range hosts {
				if h != nil {
					os.WriteFile(fmt.Sprintf("%s.%d", p, i), []byte(h.logs.String()), 0o644)
				}
			}
		})
	}

	// Records flow during the whole chaos phase.
	stopProducing := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for {
			select {
			case <-stopProducing:
				return
			case <-time.After(200 * time.Millisecond):
				produce(1000)
			}
		}
	}()
	for _, h := range hosts {
		h.start(t, bin)
	}
	kills, wiped := 0, 0
	var recoveries []time.Duration
	owned := func() int {
		n := 0
		for _, h := range hosts {
			n += h.owned()
		}
		return n
	}
	for kills < minKills {
		// The victim is a host that owns partitions, killed while it processes them.
		var victim *hostProc
		for deadline := time.Now().Add(60 * time.Second); victim == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no host owned a partition for 60s after %d kills", kills)
			}
			for _, i := range rng.Perm(len(hosts)) {
				if hosts[i].owned() > 0 {
					victim = hosts[i]
					break
				}
			}
		}
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
		victim.kill()
		killedAt := time.Now()
		kills++
		if kills%5 == 0 {
			// This host comes back with an empty disk: it must restore everything it gets.
			os.RemoveAll(victim.data)
			wiped++
		}
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		victim.start(t, bin)
		// Every partition owned again (by any host, after its restore): the kill's recovery time.
		for deadline := time.Now().Add(60 * time.Second); owned() < 4; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the partitions were not all owned again 60s after kill %d", kills)
			}
		}
		recoveries = append(recoveries, time.Since(killedAt))
	}
	close(stopProducing)
	<-produced

	// Wait until every expected output is there and every input record is checkpointed, then
	// stop the hosts cleanly: each revokes and makes its last checkpoint durable, in the
	// changelog too.
	wantMu.Lock()
	defer wantMu.Unlock()
	logs := func() string {
		var b strings.Builder
		for i, h := range hosts {
			fmt.Fprintf(&b, "--- host %d:\n%s\n", i, tail(h.logs.String(), 4000))
		}
		return b.String()
	}
	outputs, dups := consumeCounts(t, brokers, want, 4*time.Minute, logs, eos)
	if eos && dups > 0 {
		t.Errorf("exactly once: a read_committed reader saw %d duplicate outputs among %d", dups, outputs)
	}
	// The outputs of a killed host's last moments are there before the host that took its
	// partitions processed them again: stopped then, the changelog would lack them.
	waitCaughtUp(t, brokers, "wasmstream-wc", "words", 4*time.Minute, logs)
	for _, h := range hosts {
		h.cmd.Process.Signal(syscall.SIGINT)
	}
	for i, h := range hosts {
		if err := h.cmd.Wait(); err != nil {
			t.Fatalf("host %d: %v\n%s", i, err, tail(h.logs.String(), 4000))
		}
	}

	got := readChangelogState(t, brokers, "wc-changelog", "words")
	if diffs := diffState(want, got); len(diffs) > 0 {
		t.Fatalf("changelog state differs after %d kills: %s\n%s", kills, diffSummary(want, got), strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	restores, full := 0, 0
	for _, h := range hosts {
		l := h.logs.String()
		restores += strings.Count(l, "partition restored from the changelog")
		full += strings.Count(l, "restore=full")
	}
	// Partitions did move: hosts restored from the changelog, some with an empty disk.
	if restores == 0 || full == 0 {
		t.Errorf("%d restores, %d of them full: the chaos did not move partitions between hosts", restores, full)
	}
	slices.Sort(recoveries)
	t.Logf("multi-host test (%s, loops %d): %d records, 3 hosts, %d SIGKILLs of partition owners (%d restarts with an empty disk), state exact over %d users; %d outputs, %d duplicates; %d partition restores from the changelog (%d full); kill to every partition owned again (session timeout 2s): median %s, max %s",
		delivery, loops, records, kills, wiped, len(got), outputs, dups, restores, full,
		recoveries[len(recoveries)/2].Round(time.Millisecond), recoveries[len(recoveries)-1].Round(time.Millisecond))
	fmt.Printf("multi-host test (%s): %d SIGKILLs over 3 hosts, %d records, state exact, %d duplicate outputs\n", delivery, kills, records, dups)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// readChangelogState reads a changelog topic from the start and returns, for the records of
// input topic, the last snapshot of every key as a word count.
func readChangelogState(t *testing.T, brokers, topic, input string) wordcountExpect {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := wordcountExpect{}
	idle := time.Now()
	for time.Since(idle) < 3*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			idle = time.Now()
			if len(r.Key) < 3 || r.Key[0] != 'k' {
				return
			}
			n := int(binary.BigEndian.Uint16(r.Key[1:]))
			if string(r.Key[3:3+n]) != input {
				return
			}
			user := string(r.Key[3+n:])
			s, err := store.DecodeSnapshot(r.Value)
			if err != nil {
				t.Fatalf("changelog record at %d/%d: %v", r.Partition, r.Offset, err)
			}
			m := map[string]int{}
			for _, w := range s.Names {
				c, _ := strconv.Atoi(string(w.Value))
				m[string(w.Name)] = c
			}
			got[user] = m
		})
	}
	for u, m := range got {
		if len(m) == 0 {
			delete(got, u)
		}
	}
	return got
}
