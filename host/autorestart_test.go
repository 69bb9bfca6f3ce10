package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/host/devkafka"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestAutoRestartAfterClusterGone: with on_task_failure: restart, the development broker of a
// wordcount task is stopped mid-run and stays away past kafka.unreachable_timeout: the task
// halts (not ready, status halted with the cause and the time of its restart), its automatic
// restart fails while the cluster is away (at least once), or starts the task that halts again
// at once (exactly once: its clients start without the cluster), and is tried again after a
// doubled delay (logged 1s, then 2s), and the host does not return. Once the broker is back on its directory and
// port, the task is restarted without any call and every output arrives: at least once each
// count at least once, exactly once each output exactly once for a read_committed reader; the
// state is exact. Before, the host returned once its only task halted.
func TestAutoRestartAfterClusterGone(t *testing.T) {
	t.Parallel() // it mostly waits (timeouts, group joins)
	module := guestbuild.Go(t, "wordcount")
	t.Run("at_least_once", func(t *testing.T) {
		t.Parallel()
		// Without a changelog: a checkpoint whose changelog flush is under way as the cluster
		// goes is not bounded by kafka.delivery_timeout, and the task waited for it past the
		// test's minute once instead of halting.
		testAutoRestart(t, wordcountKafkaTask(module))
	})
	t.Run("exactly_once", func(t *testing.T) {
		t.Parallel()
		testAutoRestart(t, eosTask(module))
	})
}

func testAutoRestart(t *testing.T, tc host.TaskConfig) {
	dir := t.TempDir()
	brokerDir := filepath.Join(dir, "broker")
	b, err := devkafka.Start(devkafka.Config{Dir: brokerDir, Topics: []string{"words", "counts"}})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addrs()[0]
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	t.Cleanup(func() { b.Close() })

	want := produceWords(t, newClientAt(t, []string{addr}), "words", 300, 10, 51)
	var logs syncBuffer
	dataDir := filepath.Join(dir, "data")
	h := hosttest.Start(t, host.Config{DataDir: dataDir, CheckpointInterval: 50 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, &logs), &slog.HandlerOptions{Level: slog.LevelInfo})),
		OnTaskFailure: host.Restart,
		Kafka: host.KafkaConfig{Brokers: []string{addr}, ConnectTimeout: time.Second, UnreachableTimeout: 2 * time.Second,
			DeliveryTimeout: 2 * time.Second, SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
		Tasks: []host.TaskConfig{tc}})
	notStopped := func() {
		select {
		case <-h.Done():
			t.Fatalf("the host returned: %v", h.Wait())
		default:
		}
	}
	hosttest.WaitFor(t, time.Minute, "the first records committed", func() bool {
		notStopped()
		var sum int64
		for _, in := range h.Stats()[0].Inputs {
			sum += in.Committed
		}
		return sum > 0
	})

	b.Close()
	// A restart with the cluster away fails (its outputs cannot open), or starts the task,
	// which halts again at once: either is a second halt in a row.
	hosttest.WaitFor(t, time.Minute, "a second halt in a row with the cluster away", func() bool {
		notStopped()
		return strings.Contains(logs.String(), "halts_in_row=2")
	})
	var st host.TaskStats
	hosttest.WaitFor(t, time.Minute, "the task halted, its restart time in its status, the host not ready", func() bool {
		notStopped()
		st = h.Stats()[0]
		return st.Halted && !st.RestartAt.IsZero() && st.Error != "" && !h.Processing()
	})
	first := regexp.MustCompile(`(?m)^.*task halted; restarting it.* in=1s halts_in_row=1 .*$`).FindStringIndex(logs.String())
	second := regexp.MustCompile(`(?m)^.*(automatic restart failed|task halted; restarting it).* in=2s halts_in_row=2 .*$`).FindStringIndex(logs.String())
	if first == nil || second == nil || second[0] < first[0] {
		t.Fatalf("want the halt logged with in=1s, then the second halt in a row with in=2s; the log:\n%s", logs.String())
	}

	b, err = devkafka.Start(devkafka.Config{Dir: brokerDir, Port: port, Topics: []string{"words", "counts"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	more := produceWords(t, newClientAt(t, []string{addr}), "words", 300, 10, 52)
	addCounts(want, more)
	hosttest.WaitFor(t, 2*time.Minute, "the task restarted by itself", func() bool {
		notStopped()
		st = h.Stats()[0]
		return !st.Halted && st.Restarts >= 1
	})
	got := consumeOutputsAt(t, []string{addr}, "counts", wordTotal(want), 2*time.Minute)
	hosttest.WaitFor(t, time.Minute, "the host processing everything again", h.Processing)
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if tc.Delivery == host.ExactlyOnce {
		checkOutputsOnce(t, got, want, wordTotal(want))
	} else {
		checkCountsAtLeastOnce(t, got, want)
	}
	sameCounts(t, want, stateOf(t, dataDir, "wc"))
	t.Logf("restarted automatically %d time(s) after the broker came back", h.Stats()[0].Restarts)
}

// TestAutoRestartTaskThatCouldNotStart: with on_task_failure: restart, a Kafka task whose
// cluster is not there when the host starts halts at start; its automatic restarts fail while
// the cluster is away (the status says why and when the next one is), the host does not
// return, and once the cluster is up the task is restarted by itself and processes every
// record. A second host whose task waits the same way stops at once when asked: Run returns
// the halt.
func TestAutoRestartTaskThatCouldNotStart(t *testing.T) {
	t.Parallel() // it mostly waits (connect timeouts)
	module := guestbuild.Go(t, "wordcount")
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg := func(dir string) host.Config {
		return host.Config{DataDir: dir, Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
			OnTaskFailure: host.Restart, Kafka: host.KafkaConfig{Brokers: []string{addr}, ConnectTimeout: time.Second},
			Tasks: []host.TaskConfig{wordcountKafkaTask(module)}}
	}
	failedRestart := func(h *hosttest.Running) host.TaskStats {
		var st host.TaskStats
		hosttest.WaitFor(t, time.Minute, "an automatic restart failed with the cluster away", func() bool {
			select {
			case <-h.Done():
				t.Fatalf("the host returned: %v", h.Wait())
			default:
			}
			st = h.Stats()[0]
			return st.Halted && st.RestartError != "" && !st.RestartAt.IsZero()
		})
		return st
	}

	stopped := hosttest.Start(t, cfg(filepath.Join(t.TempDir(), "data")))
	failedRestart(stopped)
	var te *host.TaskError
	if err := stopped.Stop(); !errors.As(err, &te) || te.Task != "wc" {
		t.Fatalf("Run stopped while a restart was pending: %v, want the task's halt", err)
	}

	dataDir := filepath.Join(t.TempDir(), "data")
	h := hosttest.Start(t, cfg(dataDir))
	st := failedRestart(h)
	if !strings.Contains(st.RestartError, "stays halted") {
		t.Fatalf("restart_error %q, want it to say the task stays halted", st.RestartError)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(4, "words", "counts"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	want := produceWords(t, newClient(t, c), "words", 300, 10, 53)
	consumeOutputs(t, c, "counts", wordTotal(want), 2*time.Minute)
	if st := h.Stats()[0]; st.Halted || st.Restarts != 1 {
		t.Fatalf("after the cluster came up: halted %v (%s), restarts %d; want running, restarted once", st.Halted, st.Error, st.Restarts)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dataDir, "wc"))
}

// TestAutoRestartCanceledByOperator: a task whose input file is missing halts and waits for its
// automatic restart (made to wait an hour); the file created, an operator's restart or deploy
// starts it at once, and the pending automatic restart is dropped: the task reads its input to
// the end and Run returns by itself (a restart still pending would hold it for the hour), with
// every output once and no automatic restart counted.
func TestAutoRestartCanceledByOperator(t *testing.T) {
	const records = 300
	for _, action := range []string{"restart", "deploy"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := filepath.Join(dir, "in.ndjson")
			tc := versionedTask(t, dir, versionedModule(t))
			tc.Inputs = []host.InputConfig{{Name: "in", Path: input, KeyField: "k", ValueField: "v"}}
			cfg := host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), OnTaskFailure: host.Restart,
				Tasks: []host.TaskConfig{tc}}
			host.SetMinRestartDelay(&cfg, time.Hour)
			h := hosttest.Start(t, cfg)
			hosttest.WaitFor(t, time.Minute, "the task halted on its missing input, its restart pending", func() bool {
				st := h.Stats()[0]
				return st.Halted && !st.RestartAt.IsZero()
			})
			var lines strings.Builder
			for i := range records {
				fmt.Fprintf(&lines, `{"k":"k%d","v":"%d"}`+"\n", i%7, i)
			}
			if err := os.WriteFile(input, []byte(lines.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			var d *host.Deployment
			var err error
			if action == "restart" {
				d, err = h.RestartTask(context.Background(), "versioned")
			} else {
				d, err = h.Deploy(context.Background(), "versioned", guestbuild.Retag(t, versionedModule(t), 1))
			}
			if err != nil || !d.Restarted {
				t.Fatalf("%s of the halted task: %+v, %v; want it restarted", action, d, err)
			}
			select {
			case <-h.Done():
			case <-time.After(time.Minute):
				t.Fatalf("Run did not return once the restarted task read its input: status %+v", h.Stats()[0])
			}
			if err := h.Wait(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if st := h.Stats()[0]; st.Halted || st.Restarts != 0 {
				t.Fatalf("after the %s: halted %v, automatic restarts %d; want running, none", action, st.Halted, st.Restarts)
			}
			if n := len(readOutputs(t, tc.Output.Path)); n != records {
				t.Fatalf("%d outputs, want %d", n, records)
			}
		})
	}
}
