package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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

// TestKafkaResetGroupThroughBinary: two `wasmstream run` processes share a wordcount's
// partitions (one group, a changelog, each its own data directory and admin address, the same
// admin token). Once both process their partitions and every output of the input is there,
// `wasmstream reset --admin-addr <first host> --task wc --to earliest` resets the group with both
// running: the command names the other host and its backup, and the outputs after it are
// exactly one replay from earliest (every key's counts again from 1, in order, none missing,
// none twice), whichever host owns which partition. Both hosts answer every key with one pass's
// state (an admin state query, routed to the key's owner), and once they stop, every key's state
// in their stores is one pass's. Before the group's reset (reset_group.go), the reset of a task
// whose group had another member was refused (409).
func TestKafkaResetGroupThroughBinary(t *testing.T) {
	t.Parallel() // it mostly waits (group joins, the reset), on a broker, ports and directories of its own
	r := newDeliveryRig(t, "words", "counts")
	module := guestbuild.Go(t, "wordcount")
	type member struct {
		addr string
		data string
		run  *hostRun
	}
	hosts := make([]*member, 2)
	for i := range hosts {
		m := &member{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), data: filepath.Join(r.dir, fmt.Sprintf("data%d", i))}
		r.cfg = filepath.Join(r.dir, fmt.Sprintf("h%d.yaml", i))
		yaml := fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
admin:
  addr: %s
  token: s3cret
  read_token: reader
kafka:
  brokers: [%s]
  session_timeout: 6s
  rebalance_timeout: 10s
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
    changelog:
      enabled: true
`, m.data, m.addr, r.brokers, module)
		if err := os.WriteFile(r.cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		m.run = r.start()
		hosts[i] = m
	}
	logs := func() string {
		var b strings.Builder
		for i, m := range hosts {
			fmt.Fprintf(&b, "--- host %d:\n%s\n", i, tail(m.run.logs.String(), 6000))
		}
		return b.String()
	}
	alive := func() {
		t.Helper()
		for i, m := range hosts {
			select {
			case err := <-m.run.done:
				m.run.done <- err
				t.Fatalf("host %d exited (%v); the logs:\n%s", i, err, logs())
			default:
			}
		}
	}
	owned := func(m *member) int {
		l := m.run.logs.String()
		return strings.Count(l, "partition assigned") - strings.Count(l, "partition revoked") - strings.Count(l, "partition lost")
	}
	// The records are produced once each host owns partitions: the first pass has no
	// rebalance in it (so no output twice), and the reset has a group of two to reset.
	adm := kadm.NewClient(r.cl)
	hosttest.WaitFor(t, time.Minute, "both hosts owning partitions of a stable group", func() bool {
		alive()
		groups, err := adm.DescribeGroups(context.Background(), "wasmstream-wc")
		g := groups["wasmstream-wc"]
		return err == nil && g.State == "Stable" && len(g.Members) == 2 &&
			owned(hosts[0]) > 0 && owned(hosts[1]) > 0 && owned(hosts[0])+owned(hosts[1]) == 4
	})
	want := r.produceWords(1200, time.Time{}, 31)
	total := wordTotalOf(want)
	if _, dups := consumeCounts(t, r.brokers, want, 2*time.Minute, logs, false); dups > 0 {
		t.Fatalf("the first pass produced %d outputs twice", dups)
	}
	ends, err := adm.ListEndOffsets(context.Background(), "counts")
	if err != nil || ends.Error() != nil {
		t.Fatalf("the outputs' end offsets: %v %v", err, ends.Error())
	}
	before := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { before[o.Partition] = kgo.NewOffset().At(o.Offset) })

	began := time.Now()
	code, out, errOut := runBinary(t, r.bin, nil, "reset", "--admin-addr", hosts[0].addr, "--admin-token", "s3cret", "--task", "wc", "--to", "earliest")
	took := time.Since(began)
	if code != 0 || !strings.Contains(out, "the task runs again") || !strings.Contains(out, hosts[1].addr) {
		t.Fatalf("reset through the first host: exit %d, want 0 naming the second host\n%s%s\nthe logs:\n%s", code, out, errOut, logs())
	}
	if backups := regexp.MustCompile(`wc\.reset-[0-9TZ]+`).FindAllString(out, -1); len(backups) < 2 || strings.Contains(out, "not told") || strings.Contains(out, "warning") {
		t.Fatalf("the reset does not name both hosts' backups (%v), or warns:\n%s", backups, out)
	}

	// The outputs after the reset: exactly one pass, counted from 1 again on both hosts.
	replay := readOnePass(t, r.brokers, before, total, "the replay", logs)
	checkCountsFrom1(t, replay, want)

	// Both hosts answer every key with one pass's counts, whichever owns it.
	hosttest.WaitFor(t, time.Minute, "both hosts answering every key with one pass's counts", func() bool {
		alive()
		for _, m := range hosts {
			for user, words := range want {
				got, ok := queryCounts(m.addr, user)
				if !ok {
					return false // 503 while the group settles
				}
				if d := diffState(wordcountExpect{user: words}, wordcountExpect{user: got}); len(d) > 0 {
					t.Fatalf("host %s answers for %s: %s", m.addr, user, strings.Join(d, "; "))
				}
			}
		}
		return true
	})
	for _, m := range hosts {
		m.run.stop(t)
	}
	// Each key's state is in the store of its partition's last owner, one pass's. A host that
	// owned the partition earlier in the replay (the group rebalances on a loaded machine) keeps
	// its last checkpoint of it, a prefix of the same pass: never a count above one pass's.
	exact := map[string]bool{}
	for i, m := range hosts {
		got := readState(t, m.data, "wc")
		for user, words := range got {
			if d := diffState(wordcountExpect{user: want[user]}, wordcountExpect{user: words}); len(d) == 0 {
				exact[user] = true
			}
			for w, n := range words {
				if n > want[user][w] {
					t.Errorf("host %d's store: %s/%s counted %d, above one pass's %d", i, user, w, n, want[user][w])
				}
			}
		}
	}
	if len(exact) != len(want) {
		t.Errorf("the hosts' stores hold one pass's state for %d keys, want %d", len(exact), len(want))
	}
	t.Logf("group reset of two wasmstream processes through the first: answered in %s; %d outputs again, each key counted from 1 in order; state one pass's on both hosts", took.Round(time.Millisecond), total)
}

// queryCounts asks the host at addr (admin API, read token) for user's wordcount state; false
// when it does not answer 200 (its group rebalancing).
func queryCounts(addr, user string) (map[string]int, bool) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/tasks/wc/state/"+url.PathEscape(user), nil)
	req.Header.Set("Authorization", "Bearer reader")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var body struct {
		States []struct {
			KeyText string `json:"key_text"`
			Values  []struct {
				NameText  string `json:"name_text"`
				ValueText string `json:"value_text"`
			} `json:"values"`
		} `json:"states"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || len(body.States) != 1 {
		return nil, false
	}
	got := map[string]int{}
	for _, v := range body.States[0].Values {
		got[v.NameText], _ = strconv.Atoi(v.ValueText)
	}
	return got, true
}

// TestKafkaResetHaltedRecreatedTopic: the input topic is deleted and recreated while the host is
// down; at the restart the task halts on the topic's changed id (and would halt again at every
// restart), while the host runs on. `wasmstream reset --task wc --to earliest` through the
// running host's admin API resets the halted task and starts it again: the command says why it
// had halted, the task processes the new topic from its start (every count from 1 again, none
// missing, none twice), it no longer shows halted, and once the host stops its state is the new
// topic's alone (the old topic's state moved aside under the backup). Before, the online reset
// refused a halted task (409: restart it first), and a restart halted again: only a reset with
// the whole host stopped got the task going.
func TestKafkaResetHaltedRecreatedTopic(t *testing.T) {
	t.Parallel()                                      // it mostly waits (group joins, sessions), on a broker, port and directory of its own
	r := newDeliveryRig(t, "words", "counts", "side") // task other reads side: the host runs on while wc halts
	old := r.produceWords(200, time.Time{}, 21)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	data := filepath.Join(r.dir, "data")
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
    module: %[4]s
    inputs:
      - name: side
        type: kafka
        topics: [side]
    output: {type: file, path: %[5]s}
`, data, addr, r.brokers, guestbuild.Go(t, "wordcount"), filepath.Join(r.dir, "side.ndjson")))
	h := r.start()
	consumeCounts(t, r.brokers, old, 2*time.Minute, h.logs.String, false)
	h.stop(t)

	adm := kadm.NewClient(r.cl)
	resp, err := adm.DeleteTopics(context.Background(), "words")
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("deleting words: %v", err)
	}
	r.createTopic("words")
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers)) // the rig's client knows the old topic's id
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r.cl = cl
	want := r.produceWords(2000, time.Time{}, 22) // ~500 a partition, against ~50 processed of the old
	total := wordTotalOf(want)

	h = r.start()
	status := func() (halted bool, why string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, ""
		}
		defer resp.Body.Close()
		var body struct {
			Tasks []wireTaskStatus `json:"tasks"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
			return false, ""
		}
		for _, ts := range body.Tasks {
			if ts.Task == "wc" {
				return ts.Halted, ts.Error
			}
		}
		return false, ""
	}
	h.await(t, "task wc halted on the recreated topic", time.Minute, func() bool {
		halted, why := status()
		return halted && strings.Contains(why, "the topic's id changed")
	})
	ends, err := adm.ListEndOffsets(context.Background(), "counts")
	if err != nil || ends.Error() != nil {
		t.Fatalf("the outputs' end offsets: %v %v", err, ends.Error())
	}
	before := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { before[o.Partition] = kgo.NewOffset().At(o.Offset) })

	reset := func(args ...string) (int, string, string) {
		return runBinary(t, r.bin, nil, append([]string{"reset", "--admin-addr", addr, "--admin-token", "s3cret", "--task", "wc", "--to", "earliest"}, args...)...)
	}
	if code, out, errOut := reset("--dry-run"); code != 0 || !strings.Contains(out, "the task has halted") || !strings.Contains(out, "the reset would start it again") {
		t.Fatalf("dry run of the halted task's reset: exit %d\n%s%s", code, out, errOut)
	}
	if halted, _ := status(); !halted {
		t.Fatal("the dry run started the task")
	}
	code, out, errOut := reset()
	if code != 0 || !strings.Contains(out, "the task had halted") || !strings.Contains(out, "the topic's id changed") || !strings.Contains(out, "it was started again") {
		t.Fatalf("reset of the halted task: exit %d, want 0 saying why it had halted\n%s%s\nthe host's log:\n%s", code, out, errOut, tail(h.logs.String(), 8000))
	}
	backup := regexp.MustCompile(`wc\.reset-[0-9TZ]+`).FindString(out)
	if backup == "" {
		t.Fatalf("the reset does not name its backup:\n%s", out)
	}

	// The outputs after the reset: the new topic's, each count from 1.
	got := readOnePass(t, r.brokers, before, total, "the new topic", func() string { return tail(h.logs.String(), 8000) })
	checkCountsFrom1(t, got, want)
	if halted, why := status(); halted {
		t.Fatalf("task wc still halted after the reset: %s", why)
	}
	h.stop(t)
	if d := diffState(want, readState(t, data, "wc")); len(d) > 0 {
		t.Fatalf("the state after the reset is not the new topic's:\n%s", strings.Join(d[:min(len(d), 20)], "\n"))
	}
	if d := diffState(old, readState(t, data, backup)); len(d) > 0 {
		t.Fatalf("the backup %s is not the old topic's state:\n%s", backup, strings.Join(d[:min(len(d), 20)], "\n"))
	}
	t.Logf("halted on the recreated topic, reset online: %d outputs of the new topic, each key counted from 1; %q", total, strings.SplitN(out, "\n", 2)[0])
}

// readOnePass reads the counts topic from the offsets before, by key in order, until total
// outputs (what's: one pass) arrived, and a second longer: an output twice would show there.
func readOnePass(t *testing.T, brokers string, before map[int32]kgo.Offset, total int, what string, logs func() string) map[string][]string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"counts": before}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string][]string{}
	n := 0
	collect := func(fs kgo.Fetches) {
		fs.EachRecord(func(rec *kgo.Record) {
			got[string(rec.Key)] = append(got[string(rec.Key)], string(rec.Value))
			n++
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for n < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %s's %d outputs arrived; the logs:\n%s", n, what, total, logs())
		}
		collect(fs)
	}
	settle, stop := context.WithTimeout(context.Background(), time.Second)
	for settle.Err() == nil {
		collect(cl.PollFetches(settle))
	}
	stop()
	if n != total {
		t.Fatalf("%s produced %d outputs, want %d (one pass)", what, n, total)
	}
	return got
}

// checkCountsFrom1 checks that got (each key's outputs, in order) counts every word of want from
// 1 up to its count, in order, once.
func checkCountsFrom1(t *testing.T, got map[string][]string, want wordcountExpect) {
	t.Helper()
	for user, words := range want {
		next := map[string]int{}
		for _, v := range got[user] {
			w, c, _ := strings.Cut(v, " ")
			k, _ := strconv.Atoi(c)
			if k != next[w]+1 {
				t.Fatalf("key %s: output %q after count %d (the count did not start again from 1, or went out of order)", user, v, next[w])
			}
			next[w] = k
		}
		for w, k := range words {
			if next[w] != k {
				t.Fatalf("key %s word %s: the last count %d, want %d", user, w, next[w], k)
			}
		}
	}
}
