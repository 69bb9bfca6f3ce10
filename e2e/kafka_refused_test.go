package e2e

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// TestKafkaOutputTopicMaxMessageBytes: an output topic whose max.message.bytes (2,000 here) is
// below the producer's default batch (1,000,012 bytes). The host learns the limit at start: its
// batches of small records stay under it, and the one output over it (a 5,000-byte value the
// guest echoes) fails its emit with ERR_TOO_LARGE, so that record is dead-lettered with its
// input's topic, partition and offset while every other record is delivered, and the bounded
// run ends with exit 0. Before, the broker refused the batch (MESSAGE_TOO_LARGE), the task
// halted (exit 1) naming no record, and a restart replayed it into the same halt: a poison pill.
func TestKafkaOutputTopicMaxMessageBytes(t *testing.T) {
	t.Parallel() // on a broker, port and directory of its own
	r := newDeliveryRig(t, "words")
	limit := "2000"
	resp, err := kadm.NewClient(r.cl).CreateTopics(context.Background(), 2, 1, map[string]*string{"max.message.bytes": &limit}, "table")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	// Values that do not compress, so that the broker measures what the producer batched.
	random := func(n int) string {
		b := make([]byte, n)
		crand.Read(b)
		return base64.StdEncoding.EncodeToString(b)[:n]
	}
	const records, bigAt = 200, 100
	var recs []*kgo.Record
	for i := range records {
		v := fmt.Sprintf("v%03d-%s", i, random(100))
		if i == bigAt {
			v = "big-" + random(5000)
		}
		recs = append(recs, &kgo.Record{Topic: "words", Key: []byte(fmt.Sprintf("k%02d", i%20)), Value: []byte(v)})
	}
	if err := r.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	big := recs[bigAt]
	module := guestbuild.Go(t, "testguests/ktable")
	r.writeConfig(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  brokers: [%s]
  session_timeout: 6s
  rebalance_timeout: 10s
tasks:
  - name: kt
    module: %s
    retry: {max_attempts: 2, backoff: 1ms, max_backoff: 1ms}
    inputs:
      - name: words
        type: kafka
        topics: [words]
        bounded: true
    output:
      type: kafka
      topic: table
`, filepath.Join(r.dir, "data"), r.brokers, module))
	h := r.start()
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatalf("the bounded run failed (%v); its log:\n%s", err, tail(h.logs.String(), 8000))
		}
	case <-time.After(2 * time.Minute): // a failure bound
		t.Fatalf("the bounded run did not end; its log:\n%s", tail(h.logs.String(), 8000))
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "max_message_bytes=2000") {
		t.Errorf("the log does not say the output topic takes at most 2000 bytes:\n%s", tail(logs, 4000))
	}
	got := consumeAll(t, r.brokers, "table", records-1, h.logs.String)
	for _, g := range got {
		if strings.HasPrefix(string(g.Value), "big-") {
			t.Fatalf("the record over the topic's limit reached it (%d bytes)", len(g.Value))
		}
	}
	dead := mustRead(t, filepath.Join(r.dir, "data", "kt.deadletter.ndjson"))
	lines := parseJSONLines(t, []byte(dead))
	if len(lines) != 1 {
		t.Fatalf("%d dead letters, want 1:\n%s", len(lines), dead)
	}
	d := lines[0]
	if d["input"] != "words" || d["partition"] != float64(big.Partition) || d["offset"] != float64(big.Offset) ||
		d["key"] != string(big.Key) || d["record"] != string(big.Value) || !strings.Contains(fmt.Sprint(d["error"]), "ERR_TOO_LARGE") {
		t.Fatalf("dead letter %v, want the big record words/%d@%d with ERR_TOO_LARGE", d, big.Partition, big.Offset)
	}
	t.Logf("%d records delivered to a topic of max.message.bytes 2000, the big one dead-lettered: %s", len(distinctValues(got)), d["error"])
}

// TestKafkaOutputTopicLimitLoweredRestart: the way out of a halt on MESSAGE_TOO_LARGE. An
// output topic's max.message.bytes lowered to 2,000 while the host runs: the host still caps
// its batches at the limit it learned at start, so the broker refuses the next batch and the
// task halts, saying that the topic's limit is below what the task started with and to restart
// it. `wasmstream restart` learns the new limit: every record after the change is delivered
// but the one over the limit, which goes to the dead letters. Before, the halt named no way out
// and a restart halted again on the same batch.
func TestKafkaOutputTopicLimitLoweredRestart(t *testing.T) {
	t.Parallel() // on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "table")
	random := func(n int) string {
		b := make([]byte, n)
		crand.Read(b)
		return base64.StdEncoding.EncodeToString(b)[:n]
	}
	produce := func(from, n, bigAt int) *kgo.Record {
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			v := fmt.Sprintf("v%03d-%s", i, random(100))
			if i == bigAt {
				v = "big-" + random(5000)
			}
			recs = append(recs, &kgo.Record{Topic: "words", Key: []byte(fmt.Sprintf("k%02d", i%20)), Value: []byte(v)})
		}
		if err := r.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if bigAt >= from {
			return recs[bigAt-from]
		}
		return nil
	}
	module := guestbuild.Go(t, "testguests/ktable")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.writeConfig(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
admin:
  addr: %s
  token: s3cret
kafka:
  brokers: [%s]
  session_timeout: 6s
  rebalance_timeout: 10s
tasks:
  - name: kt
    module: %s
    retry: {max_attempts: 2, backoff: 1ms, max_backoff: 1ms}
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: kafka
      topic: table
  - name: other # keeps the host up while kt is halted
    module: %s
    inputs:
      - name: words
        type: kafka
        topics: [words]
    output:
      type: file
      path: %s
`, filepath.Join(r.dir, "data"), addr, r.brokers, module, module, filepath.Join(r.dir, "other.ndjson")))
	produce(0, 100, -1)
	h := r.start()
	consumeAll(t, r.brokers, "table", 100, h.logs.String)

	limit := "2000"
	resp, err := kadm.NewClient(r.cl).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &limit}}, "table")
	if err == nil {
		_, err = resp.On("table", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	big := produce(100, 100, 150)
	var halted string
	hosttest.WaitFor(t, time.Minute, "task kt halted on MESSAGE_TOO_LARGE", func() bool {
		select {
		case err := <-h.done:
			h.done <- err
			t.Fatalf("the host exited (%v); its log:\n%s", err, tail(h.logs.String(), 8000))
		default:
		}
		code, out, _ := runBinary(t, r.bin, nil, "status", "--admin-addr", addr, "--admin-token", "s3cret")
		halted = out
		return code == 0 && strings.Contains(out, "MESSAGE_TOO_LARGE")
	})
	if !strings.Contains(halted, "wasmstream restart") {
		t.Errorf("the halt does not name the way out (wasmstream restart):\n%s", halted)
	}
	// The halt names the input record whose output the broker refused (the big one, within the
	// records whose outputs the host produced together) and the output topic.
	m := regexp.MustCompile(`producing to table \(an output of input topic words partition (\d+) offsets? (\d+)(?: to (\d+))?`).FindStringSubmatch(halted)
	if m == nil {
		t.Errorf("the halt does not name the input record of the refused output:\n%s", halted)
	} else {
		p, _ := strconv.Atoi(m[1])
		first, _ := strconv.ParseInt(m[2], 10, 64)
		last := first
		if m[3] != "" {
			last, _ = strconv.ParseInt(m[3], 10, 64)
		}
		if int32(p) != big.Partition || big.Offset < first || big.Offset > last {
			t.Errorf("the halt names input words partition %d offsets %d to %d; the refused output came from partition %d offset %d:\n%s",
				p, first, last, big.Partition, big.Offset, halted)
		}
	}
	code, out, errOut := runBinary(t, r.bin, nil, "restart", "--admin-addr", addr, "--admin-token", "s3cret", "--task", "kt")
	if code != 0 {
		t.Fatalf("restart: exit %d\n%s%s\nthe host's log:\n%s", code, out, errOut, tail(h.logs.String(), 8000))
	}
	got := consumeAll(t, r.brokers, "table", 199, h.logs.String)
	for _, g := range got {
		if strings.HasPrefix(string(g.Value), "big-") {
			t.Fatalf("the record over the topic's limit reached it (%d bytes)", len(g.Value))
		}
	}
	deadPath := filepath.Join(r.dir, "data", "kt.deadletter.ndjson")
	hosttest.WaitFor(t, time.Minute, "the big record dead-lettered", func() bool {
		b, _ := os.ReadFile(deadPath)
		return strings.Contains(string(b), `"key":"`+string(big.Key)+`"`)
	})
	h.stop(t)
	lines := parseJSONLines(t, []byte(mustRead(t, deadPath)))
	for _, d := range lines {
		if d["partition"] != float64(big.Partition) || d["offset"] != float64(big.Offset) || !strings.Contains(fmt.Sprint(d["error"]), "ERR_TOO_LARGE") {
			t.Errorf("dead letter %v, want only the big record words/%d@%d with ERR_TOO_LARGE", d, big.Partition, big.Offset)
		}
	}
	t.Logf("halted: %q; after the restart %d distinct records, %d dead letters", strings.TrimSpace(halted), len(distinctValues(got)), len(lines))
}
