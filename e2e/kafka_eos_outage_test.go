package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// eosChangelog is the task setting exactly-once delivery needs, for wordcountYAML's task.
const eosChangelog = "    changelog:\n      enabled: true\n"

// TestKafkaExactlyOnceBrokerRestart: with exactly-once delivery, the broker is killed while the
// host produces outputs in transactions and restarted on its directory 5 s later, within
// kafka.unreachable_timeout: the host reports not ready meanwhile; after the restart it is
// either ready again or halted with the cause (the development broker loses the transactions'
// state when it restarts, so the client is fenced: the task halts, at once or after it was ready
// again). The host is then stopped (a graceful stop whose transaction cannot commit exits
// cleanly) and started again: a read_committed reader gets every output exactly once and the
// state is exact. What happened is logged. Riding a restart out without a halt is not asserted:
// the development broker cannot show it (a Kafka cluster keeps transaction state).
func TestKafkaExactlyOnceBrokerRestart(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(20_000, time.Time{}, 31)
	admin := freePort(t)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "exactly_once",
		"  unreachable_timeout: 60s\n  delivery_timeout: 60s\n") + eosChangelog + fmt.Sprintf("admin:\n  addr: 127.0.0.1:%d\n", admin))
	h := r.start()
	if !waitNewOutputs(r.brokers, 2*time.Minute) {
		t.Fatalf("no outputs; the host's log:\n%s", tail(h.logs.String(), 8000))
	}
	b.kill() // while transactions are open
	down := time.Now()
	h.await(t, "/readyz 503 with the broker gone", 2*time.Minute, func() bool { return readyz(admin) == 503 })
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
	outcome := fmt.Sprintf("ready again %s after the kill", time.Since(down).Round(time.Millisecond))
	if halted != "" {
		outcome = fmt.Sprintf("halted %s after the kill", time.Since(down).Round(time.Millisecond))
	}
	if halted == "" {
		// Ready again: stop it. It may halt (fenced) before the stop reaches it; either exit is
		// fine as long as a halt says why.
		h.cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-h.done:
			h.done <- err
			if err != nil {
				halted = h.logs.String()
				outcome += ", then halted"
			}
		case <-time.After(time.Minute):
			t.Fatalf("the host did not stop; its log:\n%s", tail(h.logs.String(), 8000))
		}
	}
	if halted != "" {
		if !strings.Contains(halted, "fenced") && !strings.Contains(halted, "did not end the transaction") &&
			!strings.Contains(halted, "PRODUCER_EPOCH") {
			t.Fatalf("the task halted without saying why; the log:\n%s", tail(halted, 8000))
		}
		outcome += ": the restarted broker had lost the transaction's state and fenced the producer"
	}
	h = r.start()
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
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(20_000, time.Time{}, 32)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "exactly_once",
		"  unreachable_timeout: 3s\n  delivery_timeout: 3s\n") + eosChangelog)
	h := r.start()
	if !waitNewOutputs(r.brokers, 2*time.Minute) {
		t.Fatalf("no outputs; the host's log:\n%s", tail(h.logs.String(), 8000))
	}
	b.kill()
	log := h.awaitHalt(t, 2*time.Minute)
	if !strings.Contains(log, "unreachable for") && !strings.Contains(log, "not acknowledged within") &&
		!strings.Contains(log, "did not end the transaction within") && !strings.Contains(log, "unreachable when the transaction was to end") {
		t.Fatalf("the halt does not say why; the log:\n%s", tail(log, 8000))
	}
	b.start()
	t.Logf("the broker restarted: %s", b.line) // says whether the kill left a transaction open
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

// TestKafkaExactlyOnceBrokerGoneRestarts is TestKafkaExactlyOnceBrokerGone with
// on_task_failure: restart: the broker is SIGKILLed mid-run and started again only once the task
// halted (past kafka.unreachable_timeout); meanwhile /readyz is 503 and `wasmstream status`
// shows the task halted and when it restarts. The same host process restarts the task by itself
// once the broker is back, without any operator action: a read_committed reader gets every output
// exactly once, and the state is exact. Before, the host exited once its task halted and had to
// be started again.
func TestKafkaExactlyOnceBrokerGoneRestarts(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, sessions, outages), on a broker, port and directory of its own
	r, b := newBlipRig(t, "words", "counts")
	want := r.produceWords(20_000, time.Time{}, 33)
	admin := freePort(t)
	r.writeConfig(r.wordcountYAML(guestbuild.Go(t, "wordcount"), "exactly_once",
		"  unreachable_timeout: 3s\n  delivery_timeout: 3s\n  connect_timeout: 2s\n") + eosChangelog +
		fmt.Sprintf("admin:\n  addr: 127.0.0.1:%d\non_task_failure: restart\n", admin))
	h := r.start()
	if !waitNewOutputs(r.brokers, 2*time.Minute) {
		t.Fatalf("no outputs; the host's log:\n%s", tail(h.logs.String(), 8000))
	}
	b.kill()
	down := time.Now()
	h.await(t, "the task halted, its restart scheduled", 2*time.Minute, func() bool {
		return strings.Contains(h.logs.String(), "task halted; restarting it")
	})
	halted := time.Since(down)
	// A restart while the broker is away starts the task, which halts again at once (its
	// clients start without the cluster): status is polled for the wait between.
	var status []byte
	h.await(t, "wasmstream status saying HALTED and when the task restarts, /readyz 503", time.Minute, func() bool {
		status, _ = exec.Command(r.bin, "status", "--admin-addr", fmt.Sprintf("127.0.0.1:%d", admin)).CombinedOutput()
		return strings.Contains(string(status), "HALTED (") && strings.Contains(string(status), "restarting at ") && readyz(admin) == 503
	})
	t.Logf("wasmstream status while the task waits: %s", strings.TrimSpace(string(status)))
	b.start()
	t.Logf("the broker restarted: %s", b.line) // says whether the kill left a transaction open
	outputs, dups := consumeCounts(t, r.brokers, want, 3*time.Minute, h.logs.String, true)
	h.await(t, "/readyz 200 again", 2*time.Minute, func() bool { return readyz(admin) == 200 })
	log := h.logs.String()
	if !strings.Contains(log, "task restarted automatically") {
		t.Fatalf("the task runs again, but no automatic restart was logged; the log:\n%s", tail(log, 8000))
	}
	h.stop(t)
	if dups != 0 {
		t.Fatalf("%d duplicate outputs for a read_committed reader (the broker's start said: %s)", dups, b.line)
	}
	if diffs := diffState(want, readState(t, filepath.Join(r.dir, "data"), "wc")); len(diffs) > 0 {
		t.Fatalf("state differs:\n%s", strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	t.Logf("exactly once, broker SIGKILLed mid-run and started again after the halt (%s after the kill): restarted in the same process by itself (%d automatic restarts logged); %d outputs read_committed, 0 duplicates, state exact",
		halted.Round(time.Millisecond), strings.Count(log, "task restarted automatically"), outputs)
}
