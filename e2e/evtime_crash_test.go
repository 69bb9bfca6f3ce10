package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/evtimetest"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// TestCrashEventTimeDeterministic runs the expire test guest (a per-key session counter whose
// event-time timer every record re-arms) through the binary over a generated input of sessions,
// deletes and late records, and kills it with SIGKILL at random moments until it completes. After
// every restart the host reads again from its last checkpoint: the outputs it repeats must be the
// same as the first time (the same firings in the same places, the same late flags), and each
// key's outputs, taken once, and the final state must equal the reference model's (issue 23).
// When a run finishes before its kill, the file's end fired every timer; the test appends more
// input and the model fires every timer at that point too.
func TestCrashEventTimeDeterministic(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/expire")
	for _, tc := range []struct{ name, settings string }{
		{"queued512", "workers: 2\n    max_queued: 512"},
		{"workers4-keyrecords256-queued100000", "workers: 4\n    max_batch_records: 1024\n    max_key_records: 256\n    max_queued: 100000"},
	} {
		t.Run(tc.name, func(t *testing.T) { crashEventTime(t, bin, module, tc.settings) })
	}
}

// crashEventTime is TestCrashEventTimeDeterministic with the task's settings given as YAML.
func crashEventTime(t *testing.T, bin, module, settings string) {
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	output := filepath.Join(dir, "out.ndjson")
	gen := evtimetest.NewGenerator(2323)
	var segs [][]evtimetest.Rec // a run read the file to its end after each
	records := 0
	write := func(n int) {
		more := gen.Next(n)
		segs = append(segs, more)
		records += n
		f, err := os.OpenFile(input, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Write(evtimetest.Lines(more, "k", "v", "ts")); err != nil {
			t.Fatal(err)
		}
	}
	write(30_000)
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
tasks:
  - name: ev
    module: %s
    %s
    inputs:
      - name: in
        path: %s
        key_field: k
        value_field: v
        timestamp_field: ts
    output:
      type: file
      path: %s
    time:
      allowed_lateness: 30s
`, filepath.Join(dir, "data"), module, settings, input, output)
	cfgPath := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(23, 5))
	kills, runs := killLoop(t, bin, cfgPath, killPlan{
		timeout: 6 * time.Minute,
		live:    randomKills(rng, output, time.Second, 200*time.Millisecond),
		more:    func() { write(10_000) },
	})

	outputs, lines := checkEventTime(t, output, filepath.Join(dir, "data"), segs, kills)
	t.Logf("%d records, %d runs, %d SIGKILLs: %d outputs as the model gives them (%d lines written)", records, runs, kills, outputs, lines)
	fmt.Printf("event-time crash test: %d SIGKILLs, %d runs, %d records, %d outputs as the model's\n", kills, runs, records, outputs)
}

// checkEventTime compares the outputs (taken once: a restart repeats some) and the final state
// of a run of the expire guest with the reference model's over segs.
func checkEventTime(t *testing.T, output, dataDir string, segs [][]evtimetest.Rec, kills int) (outputs, lines int) {
	t.Helper()
	got := map[string][]string{}
	f, err := os.Open(output)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines++
		var o struct{ Output, Key, Value string }
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("output line %d does not parse: %v: %q", lines, err, sc.Text())
		}
		got[o.Key] = append(got[o.Key], o.Value)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	once, err := evtimetest.Dedupe(got)
	if err != nil {
		t.Fatalf("after %d kills: %v", kills, err)
	}
	wantOuts, wantState := evtimetest.ModelSegments(segs, evtimetest.Gap, evtimetest.Lateness)
	if d := evtimetest.Diff(wantOuts, once); d != "" {
		t.Errorf("outputs after %d kills differ from the reference model:\n%s", kills, d)
	}
	state := map[string]map[string]string{}
	for key, names := range readState(t, dataDir, "ev") {
		state[key] = map[string]string{}
		for n, v := range names {
			state[key][n] = strconv.Itoa(v)
		}
	}
	if d := evtimetest.StateDiff(wantState, state); d != "" {
		t.Errorf("final state after %d kills differs from the reference model:\n%s", kills, d)
	}
	for _, vs := range wantOuts {
		outputs += len(vs)
	}
	return outputs, lines
}

// TestCrashEventTimeKafkaBacklog is TestCrashEventTimeDeterministic over a Kafka backlog in a
// broker process, read by a bounded run (each partition up to its end offset, then every timer
// fires and the run ends): 20 SIGKILLs (10 unless hosttest.Long), and the outputs per key and the final state are the
// reference model's. All records go to partition 0; the other partitions stay empty.
func TestCrashEventTimeKafkaBacklog(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/expire")
	dir := t.TempDir()
	port := freePort(t)
	startBroker(t, bin, filepath.Join(dir, "broker"), port, "ev")
	brokers := "127.0.0.1:" + strconv.Itoa(port)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	gen := evtimetest.NewGenerator(4242)
	var segs [][]evtimetest.Rec
	records := 0
	produce := func(n int) {
		more := gen.Next(n)
		segs = append(segs, more)
		records += n
		batch := make([]*kgo.Record, 0, n)
		for _, r := range more {
			batch = append(batch, &kgo.Record{Topic: "ev", Key: []byte(r.Key), Value: []byte(r.Cmd), Timestamp: time.UnixMilli(r.Ts)})
		}
		if err := cl.ProduceSync(context.Background(), batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce(30_000)
	output := filepath.Join(dir, "out.ndjson")
	cfg := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  brokers: [%s]
  session_timeout: 2s
  rebalance_timeout: 5s
tasks:
  - name: ev
    module: %s
    workers: 2
    max_queued: 512
    inputs:
      - name: in
        type: kafka
        topics: [ev]
        bounded: true
    output:
      type: file
      path: %s
    time:
      allowed_lateness: 30s
`, filepath.Join(dir, "data"), brokers, module, output)
	cfgPath := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(42, 5))
	kills, runs := killLoop(t, bin, cfgPath, killPlan{
		timeout: 8 * time.Minute,
		live:    randomKills(rng, output, 3*time.Second, 300*time.Millisecond),
		more:    func() { produce(10_000) },
	})
	outputs, lines := checkEventTime(t, output, filepath.Join(dir, "data"), segs, kills)
	t.Logf("%d records, %d runs, %d SIGKILLs: %d outputs as the model gives them (%d lines written)", records, runs, kills, outputs, lines)
	fmt.Printf("event-time kafka crash test: %d SIGKILLs, %d runs, %d records, %d outputs as the model's\n", kills, runs, records, outputs)
}
