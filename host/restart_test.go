package host_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestRestartHaltedKafkaTask: a Kafka task halts on its missing output topic while the host's
// other task runs on; once the topic exists it is started again in place, with new clients,
// from its last checkpoint, without the host restarting: exactly once with a changelog and
// standbys through Activate of its active version (the deploy family), at least once with a
// changelog through RestartTask. Every output then arrives (exactly once, in order, for the
// exactly-once task's read_committed reader) and the state is exact. The at-least-once host
// uses static membership: the new consumer takes the halted one's place in the group. Before,
// both were refused with ErrNotRunning ("restart the host").
func TestRestartHaltedKafkaTask(t *testing.T) {
	t.Parallel() // it mostly waits (delivery timeouts, group joins)
	module := guestbuild.Go(t, "wordcount")
	t.Run("exactly_once", func(t *testing.T) {
		t.Parallel()
		tc := eosTask(module)
		tc.Changelog.Standby = true
		testRestartHaltedKafkaTask(t, tc, false, func(h *host.Host) (*host.Deployment, error) {
			return h.Activate(context.Background(), "wc", 1)
		})
	})
	t.Run("at_least_once", func(t *testing.T) {
		t.Parallel()
		tc := wordcountKafkaTask(module)
		tc.Changelog = host.ChangelogConfig{Enabled: true}
		testRestartHaltedKafkaTask(t, tc, true, func(h *host.Host) (*host.Deployment, error) {
			return h.RestartTask(context.Background(), "wc")
		})
	})
}

func testRestartHaltedKafkaTask(t *testing.T, tc host.TaskConfig, static bool, restart func(*host.Host) (*host.Deployment, error)) {
	c := newCluster(t, "words", "side") // no "counts": task wc cannot produce
	want := produceWords(t, newClient(t, c), "words", 400, 12, 41)
	total := wordTotal(want)
	other := wordcountKafkaTask(tc.Module)
	other.Name, other.Output.Topic = "other", "side"
	dataDir := t.TempDir()
	h := hosttest.Start(t, host.Config{DataDir: dataDir, Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		HostID: "h1", Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), DeliveryTimeout: 2 * time.Second, DynamicMembership: !static},
		Tasks: []host.TaskConfig{tc, other}})
	hosttest.WaitFor(t, time.Minute, "task wc halted on the missing topic", func() bool {
		select {
		case <-h.Done():
			t.Fatalf("the host stopped: %v", h.Wait())
		default:
		}
		return h.Stats()[0].Halted
	})
	cause := h.Stats()[0].Error
	if !strings.Contains(cause, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("task wc halted with %q, want the missing topic named", cause)
	}
	if h.Processing() {
		t.Fatal("the host reports processing everything with a task halted")
	}
	if _, err := h.RestartTask(context.Background(), "other"); !errors.Is(err, host.ErrRunning) {
		t.Fatalf("RestartTask of a running task: %v, want ErrRunning", err)
	}

	if _, err := kadm.NewClient(newClient(t, c)).CreateTopics(context.Background(), 4, 1, nil, "counts"); err != nil {
		t.Fatal(err)
	}
	d, err := restart(h.Host)
	if err != nil {
		t.Fatalf("restarting the halted task: %v", err)
	}
	if !d.Restarted || d.Version.Version != 1 || !strings.Contains(d.Halted, "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("restart: %+v, want restarted on version 1, saying why it had halted", d)
	}
	got := consumeOutputs(t, c, "counts", total, time.Minute)
	if tc.Delivery == "exactly_once" {
		checkCountsOutputs(t, got, want) // every count once, in order
	}
	hosttest.WaitFor(t, time.Minute, "the host processing everything again", h.Processing)
	if st := h.Stats()[0]; st.Halted {
		t.Fatalf("task wc halted again: %s", st.Error)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dataDir, "wc"))
	sameCounts(t, want, stateOf(t, dataDir, "other"))
}

// TestRestartTaskWhoseSinksCouldNotOpen: the cluster is not there when the host starts, so a
// Kafka task's producer cannot reach it and the task halts before any module version was
// registered, while a stdin task runs on. A restart while the cluster is still away is refused
// and the task stays halted; once the cluster is up, RestartTask opens its sinks and starts its
// module file as a host start would, and it processes every record. Before, such a task could
// only be started with its host.
func TestRestartTaskWhoseSinksCouldNotOpen(t *testing.T) {
	t.Parallel() // it mostly waits (connect timeouts)
	module := guestbuild.Go(t, "wordcount")
	port := freePort(t)
	dir := t.TempDir()
	stdin, feed := io.Pipe()
	t.Cleanup(func() { feed.Close() })
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		Stdin: stdin,
		Kafka: host.KafkaConfig{Brokers: []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, ConnectTimeout: time.Second},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module), {
			Name: "keep", Module: module,
			Inputs: []host.InputConfig{{Name: "in", Type: "stdin", KeyField: "user", ValueField: "text"}},
			Output: host.OutputConfig{Type: "file", Path: filepath.Join(dir, "keep.ndjson")},
		}}})
	hosttest.WaitFor(t, time.Minute, "task wc halted: its cluster is not there", func() bool {
		select {
		case <-h.Done():
			t.Fatalf("the host stopped: %v", h.Wait())
		default:
		}
		return h.Stats()[0].Halted
	})
	if _, err := h.RestartTask(context.Background(), "wc"); !errors.Is(err, host.ErrNotRunning) || !strings.Contains(err.Error(), "stays halted") {
		t.Fatalf("RestartTask with the cluster still away: %v, want ErrNotRunning saying the task stays halted", err)
	}
	if !h.Stats()[0].Halted {
		t.Fatal("the refused restart left the task not halted")
	}

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(4, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	want := produceWords(t, newClient(t, c), "words", 300, 10, 43)
	d, err := h.RestartTask(context.Background(), "wc")
	if err != nil {
		t.Fatalf("RestartTask once the cluster is up: %v", err)
	}
	if !d.Restarted || d.Version.Version != 1 || d.Halted == "" {
		t.Fatalf("restart: %+v, want restarted on version 1 (the module file), saying why it had halted", d)
	}
	consumeOutputs(t, c, "counts", wordTotal(want), time.Minute)
	if st := h.Stats()[0]; st.Halted {
		t.Fatalf("task wc halted again: %s", st.Error)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, filepath.Join(dir, "data"), "wc"))
}

// freePort returns a loopback port that nothing listens on (a cluster to start there later).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
