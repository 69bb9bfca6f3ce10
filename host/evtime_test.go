package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/evtimetest"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// Event time you can trust (issue 23): for a deterministic guest the outputs per key and the
// final state are a function of the input alone, whatever the read-ahead, batch size, number of
// workers or input speed. The testguests/expire guest counts a key's records and re-arms an
// event-time timer at the record's time plus a gap with every record; the firing emits the count.
// evtimetest.Model computes what it must give, independently of the host.

// evOutputs reads the output file: each key's values in order.
func evOutputs(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string][]string{}
	for _, m := range parseJSONLines(t, data) {
		key, _ := m["key"].(string)
		v, _ := m["value"].(string)
		outs[key] = append(outs[key], v)
	}
	return outs
}

// evState reads the task's final state.
func evState(t *testing.T, dataDir, task string) map[string]map[string]string {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st := map[string]map[string]string{}
	err = r.Scan(task, nil, false, func(e host.StateEntry) bool {
		if st[string(e.Key)] == nil {
			st[string(e.Key)] = map[string]string{}
		}
		st[string(e.Key)][string(e.Name)] = string(e.Value)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// evSetting is one way of running the same input.
type evSetting struct {
	name  string
	stdin bool // fed through stdin one record at a time, each processed before the next is written
	tune  func(*host.TaskConfig)
}

var evSettings = []evSetting{
	{name: "file-defaults"},
	{name: "file-workers4-batch64-queued16", tune: func(tc *host.TaskConfig) {
		tc.Workers, tc.MaxBatchRecords, tc.MaxQueued = 4, 64, 16
	}},
	{name: "file-workers1-batch1-queued2", tune: func(tc *host.TaskConfig) {
		tc.Workers, tc.MaxBatchRecords, tc.MaxKeyRecords, tc.MaxQueued = 1, 1, 1, 2
	}},
	{name: "file-workers2-keyrecords256-queued100000", tune: func(tc *host.TaskConfig) {
		tc.Workers, tc.MaxBatchRecords, tc.MaxKeyRecords, tc.MaxQueued = 2, 1024, 256, 100_000
	}},
	{name: "file-strict-order", tune: func(tc *host.TaskConfig) {
		tc.MaxInFlight = 1
	}},
	{name: "file-partition-sequencing", tune: func(tc *host.TaskConfig) {
		tc.Sequencing.Policy = host.SequenceByPartition
	}},
	{name: "stdin-slow", stdin: true},
}

// evRun runs recs through the expire guest under setting s and returns its outputs and state.
func evRun(t *testing.T, module string, recs []evtimetest.Rec, s evSetting) (map[string][]string, map[string]map[string]string) {
	t.Helper()
	dir := t.TempDir()
	in := host.InputConfig{Name: "in", KeyField: "k", ValueField: "v", TimestampField: "ts"}
	var stdin *io.PipeReader
	var feed *io.PipeWriter
	if s.stdin {
		in.Type = host.InputStdin
		stdin, feed = io.Pipe()
	} else {
		in.Path = filepath.Join(dir, "in.ndjson")
		if err := os.WriteFile(in.Path, evtimetest.Lines(recs, "k", "v", "ts"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tc := host.TaskConfig{
		Name: "ev", Module: module, Workers: 2,
		Inputs: []host.InputConfig{in},
		Output: host.OutputConfig{Type: host.OutputFile, Path: filepath.Join(dir, "out.ndjson")},
		Time:   host.TimeConfig{AllowedLateness: 30 * time.Second},
	}
	if s.tune != nil {
		s.tune(&tc)
	}
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc},
		CheckpointInterval: 20 * time.Millisecond}
	if !s.stdin {
		h := hosttest.New(t, cfg)
		if err := h.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := h.Stats(); len(st) == 1 {
			t.Logf("%d records, %d outputs, %d timer firings, %d batches run again one item per call (timer_splits)",
				st[0].Records, st[0].Outputs, st[0].TimersFired, st[0].TimerSplits)
		}
	} else {
		cfg.Stdin = stdin
		r := hosttest.Start(t, cfg)
		w := bufio.NewWriter(feed)
		for i, line := range strings.SplitAfter(string(evtimetest.Lines(recs, "k", "v", "ts")), "\n") {
			if line == "" {
				continue
			}
			w.WriteString(line)
			w.Flush()
			// The next record is written once this one was processed: the slowest input.
			for evProcessed(r.Host) < int64(i+1) {
				select {
				case <-r.Done():
					t.Fatalf("host stopped after %d records: %v", i, r.Wait())
				case <-time.After(time.Millisecond):
				}
			}
		}
		feed.Close()
		if err := r.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	return evOutputs(t, filepath.Join(dir, "out.ndjson")), evState(t, cfg.DataDir, "ev")
}

func evProcessed(h *host.Host) int64 {
	for _, s := range h.Stats() {
		return s.Processed
	}
	return 0
}

func evCheck(t *testing.T, recs []evtimetest.Rec, settings []evSetting) {
	module := guestbuild.Go(t, "testguests/expire")
	wantOuts, wantState := evtimetest.Model(recs, evtimetest.Gap, evtimetest.Lateness)
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			outs, state := evRun(t, module, recs, s)
			if d := evtimetest.Diff(wantOuts, outs); d != "" {
				t.Errorf("outputs differ from the reference model:\n%s", d)
			}
			if d := evtimetest.StateDiff(wantState, state); d != "" {
				t.Errorf("final state differs from the reference model:\n%s", d)
			}
		})
	}
}

// TestEventTimeMinimal is the minimal case under every setting: A emits 1, then 1.
func TestEventTimeMinimal(t *testing.T) {
	recs := evtimetest.Minimal()
	wantOuts, _ := evtimetest.Model(recs, evtimetest.Gap, evtimetest.Lateness)
	if got := strings.Join(wantOuts["A"], ", "); got != fmt.Sprintf("1 expire 1 %d, 2 expire 1 %d", evtimetest.T0+30*60_000, evtimetest.T0+80*60_000) {
		t.Fatalf("the reference model gives A %s", got)
	}
	evCheck(t, recs, evSettings)
}

// TestEventTimeDifferential runs a generated input of sessions, re-armed timers, deletes and
// late records under every setting: each run's outputs per key and final state must equal the
// reference model's (and so each other's).
func TestEventTimeDifferential(t *testing.T) {
	recs := evtimetest.NewGenerator(23).Next(4000)
	settings := evSettings
	if testing.Short() {
		settings = settings[:3]
	}
	// Through stdin, one record at a time, a shorter prefix of the input: it takes a checkpoint
	// interval per record.
	var slow []evSetting
	for _, s := range settings {
		if s.stdin {
			slow = append(slow, s)
		}
	}
	settings = slices.DeleteFunc(slices.Clone(settings), func(s evSetting) bool { return s.stdin })
	evCheck(t, recs, settings)
	if len(slow) > 0 {
		t.Run("prefix", func(t *testing.T) { evCheck(t, recs[:600], slow) })
	}
}

func parseJSONLines(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// evKafkaRun produces recs to partition 0 of a topic of an in-process Kafka cluster before the
// task starts (a backlog) and runs the expire guest over it as a bounded run: the task reads the
// partition to its end offset, fires every event-time timer and ends.
func evKafkaRun(t *testing.T, module string, recs []evtimetest.Rec, partitions int32, tune func(*host.TaskConfig)) (map[string][]string, map[string]map[string]string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "ev"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Every record goes to partition 0; the others stay empty and must end the run too.
	cl := newClient(t, c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var krecs []*kgo.Record
	for _, r := range recs {
		krecs = append(krecs, &kgo.Record{Topic: "ev", Key: []byte(r.Key), Value: []byte(r.Cmd), Timestamp: time.UnixMilli(r.Ts)})
	}
	if err := cl.ProduceSync(context.Background(), krecs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tc := host.TaskConfig{
		Name: "ev", Module: module, Workers: 2,
		Inputs: []host.InputConfig{{Name: "in", Type: host.InputKafka, Topics: []string{"ev"}, Bounded: true}},
		Output: host.OutputConfig{Type: host.OutputFile, Path: filepath.Join(dir, "out.ndjson")},
		Time:   host.TimeConfig{AllowedLateness: 30 * time.Second},
	}
	if tune != nil {
		tune(&tc)
	}
	cfg := host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc},
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()}}
	hosttest.RunToEnd(t, cfg)
	return evOutputs(t, filepath.Join(dir, "out.ndjson")), evState(t, cfg.DataDir, "ev")
}

// TestEventTimeKafkaBacklog runs the minimal case and the generated input from a Kafka backlog,
// as bounded runs (read to the end offset, then every timer fires and the task ends): the
// outputs and the final state are the reference model's, as over a file.
func TestEventTimeKafkaBacklog(t *testing.T) {
	module := guestbuild.Go(t, "testguests/expire")
	for _, tc := range []struct {
		name       string
		recs       []evtimetest.Rec
		partitions int32
		tune       func(*host.TaskConfig)
	}{
		{"minimal", evtimetest.Minimal(), 1, nil},
		{"minimal-3-empty-partitions", evtimetest.Minimal(), 4, nil},
		{"generated", evtimetest.NewGenerator(23).Next(4000), 1, nil},
		{"generated-queued16-batch8", evtimetest.NewGenerator(23).Next(4000), 1, func(tc *host.TaskConfig) {
			tc.MaxQueued, tc.MaxBatchRecords, tc.Workers = 16, 8, 4
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantOuts, wantState := evtimetest.Model(tc.recs, evtimetest.Gap, evtimetest.Lateness)
			outs, state := evKafkaRun(t, module, tc.recs, tc.partitions, tc.tune)
			if d := evtimetest.Diff(wantOuts, outs); d != "" {
				t.Errorf("outputs differ from the reference model:\n%s", d)
			}
			if d := evtimetest.StateDiff(wantState, state); d != "" {
				t.Errorf("final state differs from the reference model:\n%s", d)
			}
		})
	}
}

// TestBoundedInputRefused: bounded is for kafka inputs starting at earliest or latest, and not
// with exactly-once delivery; each refusal names the setting.
func TestBoundedInputRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		tune func(*host.TaskConfig)
		want string
	}{
		{"file", func(tc *host.TaskConfig) {
			tc.Inputs[0] = host.InputConfig{Name: "in", Path: "in.ndjson", Bounded: true}
		}, "inputs[0].bounded: only a kafka input can be bounded"},
		{"start at a time", func(tc *host.TaskConfig) {
			tc.Inputs[0].StartAt = "2026-01-02T03:04:05Z"
		}, "a bounded kafka input starts at earliest or latest"},
		{"exactly once", func(tc *host.TaskConfig) {
			tc.Delivery = "exactly_once"
			tc.Changelog.Enabled = true
		}, "a bounded kafka input does not run with delivery exactly_once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := host.TaskConfig{Name: "ev", Module: "ev.wasm",
				Inputs: []host.InputConfig{{Name: "in", Type: host.InputKafka, Topics: []string{"ev"}, Bounded: true}},
				Output: host.OutputConfig{Type: host.OutputFile, Path: "out.ndjson"}}
			tc.tune(&task)
			_, err := host.New(host.Config{DataDir: t.TempDir(), Kafka: host.KafkaConfig{Brokers: []string{"127.0.0.1:1"}},
				Tasks: []host.TaskConfig{task}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
