package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// eosChangelog is the task setting exactly-once delivery needs, for wordcountYAML's task.
const eosChangelog = "    changelog:\n      enabled: true\n"

// TestKafkaExactlyOnceBrokerRestart: with exactly-once delivery, the broker is killed while the
// host produces outputs in transactions and restarted on its directory 5 s later, within
// kafka.unreachable_timeout: the host reports not ready meanwhile; then either it rides the
// outage out (ready again) or, when the restarted broker has lost the transaction's state (the
// development broker does: the client is fenced), the task halts with that cause; either way,
// once a host runs again a read_committed reader gets every output exactly once and the state
// is exact. Which of the two happened is logged.
func TestKafkaExactlyOnceBrokerRestart(t *testing.T) {
	t.Skip("open (issue 21 item 3): after the development broker restarts, the task is ready again, then the client's " +
		"InitProducerID fails with INVALID_PRODUCER_EPOCH, ending the transaction with PRODUCER_FENCED, and the task halts " +
		"a second time after readiness came back, so the wait above takes the ridden-out branch and no output follows")
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(20_000, time.Time{}, 31)
	admin := freePort(t)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "exactly_once",
		"  unreachable_timeout: 60s\n  delivery_timeout: 60s\n") + eosChangelog + fmt.Sprintf("admin:\n  addr: 127.0.0.1:%d\n", admin))
	h := r.start()
	if !waitNewOutputs(r.brokers, time.Minute) {
		t.Fatalf("no outputs; the host's log:\n%s", tail(h.logs.String(), 8000))
	}
	b.kill() // while transactions are open
	down := time.Now()
	h.await(t, "/readyz 503 with the broker gone", time.Minute, func() bool { return readyz(admin) == 503 })
	notReady := time.Since(down)
	time.Sleep(time.Until(down.Add(5 * time.Second))) // the outage itself, not a synchronisation
	b.start()
	// Ready again (ridden out), or the task halted.
	halted := ""
	deadline := time.Now().Add(time.Minute)
	for halted == "" && readyz(admin) != 200 {
		select {
		case err := <-h.done:
			h.done <- err
			halted = h.logs.String()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither ready again nor halted a minute after the broker came back; the log:\n%s", tail(h.logs.String(), 8000))
		}
	}
	outcome := fmt.Sprintf("ridden out: ready again %s after the kill", time.Since(down).Round(time.Millisecond))
	if halted != "" {
		if !strings.Contains(halted, "fenced") && !strings.Contains(halted, "did not end the transaction") {
			t.Fatalf("the task halted without saying why; the log:\n%s", tail(halted, 8000))
		}
		outcome = "not ridden out: the restarted broker fenced the transactional producer and the task halted with that cause; a restarted host completed the work"
		h = r.start()
	}
	outputs, dups := consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, true)
	h.stop(t)
	if dups != 0 {
		t.Fatalf("%d duplicate outputs for a read_committed reader", dups)
	}
	if diffs := diffState(want, readState(t, filepath.Join(r.dir, "data"), "wc")); len(diffs) > 0 {
		t.Fatalf("state differs after the outage:\n%s", strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	t.Logf("exactly once, broker killed mid-run and restarted 5 s later: not ready %s after the kill; %s; %d outputs read_committed, 0 duplicates, state exact",
		notReady.Round(time.Millisecond), outcome, outputs)
}

// TestKafkaExactlyOnceBrokerGone: with exactly-once delivery, the broker is killed mid-run and
// stays away past kafka.unreachable_timeout: the host halts with the cause; once the broker is
// back a restarted host completes the work, every output exactly once for a read_committed
// reader and the state exact.
func TestKafkaExactlyOnceBrokerGone(t *testing.T) {
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(20_000, time.Time{}, 32)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "exactly_once",
		"  unreachable_timeout: 3s\n  delivery_timeout: 3s\n") + eosChangelog)
	h := r.start()
	if !waitNewOutputs(r.brokers, time.Minute) {
		t.Fatalf("no outputs; the host's log:\n%s", tail(h.logs.String(), 8000))
	}
	b.kill()
	log := h.awaitHalt(t, time.Minute)
	if !strings.Contains(log, "unreachable for") && !strings.Contains(log, "not acknowledged within") &&
		!strings.Contains(log, "did not end the transaction within") {
		t.Fatalf("the halt does not say why; the log:\n%s", tail(log, 8000))
	}
	b.start()
	h = r.start()
	outputs, dups := consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, true)
	h.stop(t)
	if dups != 0 {
		t.Fatalf("%d duplicate outputs for a read_committed reader", dups)
	}
	if diffs := diffState(want, readState(t, filepath.Join(r.dir, "data"), "wc")); len(diffs) > 0 {
		t.Fatalf("state differs:\n%s", strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	t.Logf("exactly once, broker killed mid-run past unreachable_timeout: the host halted with the cause; after a restart %d outputs read_committed, 0 duplicates, state exact", outputs)
}
