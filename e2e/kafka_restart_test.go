package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaRestartHaltedTask: a Kafka task whose output topic is missing halts with the cause
// while the host's other task runs on; /readyz answers 503. Once the topic exists, `wasmstream
// restart` (the admin API's POST /v1/tasks/{task}/restart) starts it again in the same process:
// it answers why the task had halted, the task's new clients rejoin the group and resume from
// the last checkpoint, every expected output appears (at least once), /readyz answers 200
// again, and the state is exact once the host stops. A task that has not halted is refused
// (409), and so is the read-only token (403). Before, a halted Kafka task could only be restarted with the whole host (the deploy
// family refused it with "restart the host", and there was no restart command).
func TestKafkaRestartHaltedTask(t *testing.T) {
	t.Parallel() // it mostly waits (a delivery failure, a group join), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "side")
	want := r.produceWords(2000, time.Time{}, 3)
	module := guestbuild.Go(t, "wordcount")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.writeConfig(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
admin:
  addr: %s
  token: s3cret
  read_token: reader
kafka:
  brokers: [%s]
  session_timeout: 6s
  rebalance_timeout: 10s
  delivery_timeout: 5s
tasks:
  - name: wc
    module: %s
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: kafka
      topic: counts
  - name: other
    module: %s
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: kafka
      topic: side
`, filepath.Join(r.dir, "data"), addr, r.brokers, module, module))
	h := r.start()

	status := func() map[string]wireTaskStatus {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var body struct {
			Tasks []wireTaskStatus `json:"tasks"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
			return nil
		}
		out := map[string]wireTaskStatus{}
		for _, ts := range body.Tasks {
			out[ts.Task] = ts
		}
		return out
	}
	ready := func() int {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	alive := func() {
		t.Helper()
		select {
		case err := <-h.done:
			h.done <- err
			t.Fatalf("the host exited (%v); its log:\n%s", err, tail(h.logs.String(), 8000))
		default:
		}
	}

	hosttest.WaitFor(t, 2*time.Minute, "task wc halted on the missing output topic", func() bool {
		alive()
		wc := status()["wc"]
		return wc.Halted && strings.Contains(wc.Error, "UNKNOWN_TOPIC_OR_PARTITION")
	})
	if st := status(); st["other"].Halted {
		t.Fatalf("the other task halted too: %s", st["other"].Error)
	}
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answers %d with a task halted, want 503", code)
	}

	restartWith := func(token, task string) (int, string, string) {
		return runBinary(t, r.bin, nil, "restart", "--admin-addr", addr, "--admin-token", token, "--task", task)
	}
	restart := func(task string) (int, string, string) { return restartWith("s3cret", task) }
	if code, out, errOut := restartWith("reader", "wc"); code != 1 || !strings.Contains(errOut, "403") {
		t.Fatalf("restart with the read-only token: exit %d, want 1 with 403\n%s%s", code, out, errOut)
	}
	if code, out, errOut := restart("other"); code != 1 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "has not halted") {
		t.Fatalf("restart of a running task: exit %d, want 1 with 409\n%s%s", code, out, errOut)
	}

	r.createTopic("counts")
	code, out, errOut := restart("wc")
	if code != 0 || !strings.Contains(out, "restarted on version 1") || !strings.Contains(out, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("restart: exit %d, want 0 and the version and why the task had halted\n%s%s\nthe host's log:\n%s", code, out, errOut, tail(h.logs.String(), 8000))
	}
	outputs, dups := consumeCounts(t, r.brokers, want, 2*time.Minute, h.logs.String, false)
	hosttest.WaitFor(t, time.Minute, "/readyz 200 once the restarted task processes its partitions", func() bool {
		alive()
		return ready() == http.StatusOK
	})
	if wc := status()["wc"]; wc.Halted {
		t.Fatalf("task wc halted again: %s", wc.Error)
	}
	alive()
	h.stop(t)
	if diffs := diffState(want, readState(t, filepath.Join(r.dir, "data"), "wc")); len(diffs) > 0 {
		t.Fatalf("task wc's state after the restart differs:\n%s", strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	if diffs := diffState(want, readState(t, filepath.Join(r.dir, "data"), "other")); len(diffs) > 0 {
		t.Fatalf("task other's state differs:\n%s", strings.Join(diffs[:min(len(diffs), 20)], "\n"))
	}
	t.Logf("restarted in place: %d outputs (%d duplicates) of the %d expected, state exact; %q", outputs, dups, wordTotalOf(want), strings.TrimSpace(out))
}

// wireTaskStatus is what the test reads of a task in GET /v1/status.
type wireTaskStatus struct {
	Task   string `json:"task"`
	Halted bool   `json:"halted"`
	Error  string `json:"error"`
}
