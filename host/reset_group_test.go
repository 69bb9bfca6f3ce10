package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// A reset through the admin API of one host of a group of several (POST
// /v1/tasks/{task}/reset) resets the task for the whole group with the hosts running. Three
// hosts run a wordcount with a changelog; the third advertises an admin address nobody can
// reach, so a reset through the first is refused (409, naming it and what to do) before anything
// stops: both other tasks run on, no output comes again. Once the third is stopped, a reset to
// earliest through the second host (any host will do) moves the first's state aside too: every
// key's outputs come once more, counted from 1 in order, and the state every host answers for
// every key (routed to its partition's owner, whichever it is now) is exactly one pass's. The
// same with exactly-once delivery and two hosts.
func TestAdminResetGroup(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	t.Run("at_least_once", func(t *testing.T) {
		tc := wordcountKafkaTask(module)
		tc.Changelog = host.ChangelogConfig{Enabled: true}
		testAdminResetGroup(t, tc, true)
	})
	t.Run("exactly_once", func(t *testing.T) { testAdminResetGroup(t, eosTask(module), false) })
}

func testAdminResetGroup(t *testing.T, task host.TaskConfig, unreachable bool) {
	c := newCluster(t, "words", "counts")
	dir := t.TempDir()
	cfgFor := func(m int) host.Config {
		cfg := host.Config{
			DataDir: filepath.Join(dir, "host"+strconv.Itoa(m)), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
			Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full", ReadToken: "reader"},
			Tasks: []host.TaskConfig{task},
		}
		if m == 2 {
			cfg.Admin.AdvertiseAddr = "127.0.0.1:1" // nobody listens there
		}
		return cfg
	}
	hosts := []*hosttest.Running{hosttest.Start(t, cfgFor(0)), hosttest.Start(t, cfgFor(1))}
	if unreachable {
		hosts = append(hosts, hosttest.Start(t, cfgFor(2)))
	}
	api := func(m int) apiClient {
		return apiClient{t: t, base: "http://" + hosts[m].Host.AdminAddr(), token: "full"}
	}
	want := produceWords(t, newClient(t, c), "words", 600, 16, 41)
	total := wordTotal(want)
	consumeOutputs(t, c, "counts", total, 90*time.Second)
	// The third host's partitions cannot be queried through the others (its address is
	// unreachable): the state is checked once it stopped.
	settled := func(members []int) {
		t.Helper()
		hosttest.WaitFor(t, 60*time.Second, "every host answering every key with one pass's counts", func() bool {
			for _, m := range members {
				for user, words := range want {
					code, s, _, err := getState(hosts[m].Host.AdminAddr(), "reader", user)
					if err != nil || code != http.StatusOK {
						return false // 503 while the group rebalances
					}
					if _, err := checkAnswer(user, s, words); err != nil {
						t.Fatalf("host %d: %v", m, err)
					}
				}
			}
			return true
		})
	}

	if unreachable {
		// The third host cannot be reached: refused before anything stopped (its probe failed),
		// nothing reset.
		code, body := api(0).call("POST", "/v1/tasks/wc/reset", strings.NewReader(`{"to":"earliest"}`))
		if msg := fmt.Sprint(body["error"]); code != http.StatusConflict || !strings.Contains(msg, "127.0.0.1:1") ||
			!strings.Contains(msg, "cannot be reached") || !strings.Contains(msg, "nothing was reset") {
			t.Fatalf("reset with an unreachable member: %d %v, want 409 naming it", code, body)
		}
		for m := range 2 {
			if st := hosts[m].Host.Stats()[0]; st.Halted {
				t.Fatalf("host %d: the task halted after the refused reset: %s", m, st.Error)
			}
		}
		if err := hosts[2].Stop(); err != nil {
			t.Fatal(err)
		}
	}
	settled([]int{0, 1})

	// A dry run names the other host it would ask, and stops nothing.
	code, dry := api(1).call("POST", "/v1/tasks/wc/reset?dry_run=1", strings.NewReader(`{"to":"earliest"}`))
	if hs, _ := dry["hosts"].([]any); code != http.StatusOK || len(hs) != 1 || hs[0].(map[string]any)["addr"] != hosts[0].Host.AdminAddr() {
		t.Fatalf("dry run: %d %v, want the first host named", code, dry)
	}

	// Through the second host: both hosts reset, running.
	began := time.Now()
	code, rep := api(1).call("POST", "/v1/tasks/wc/reset", strings.NewReader(`{"to":"earliest"}`))
	if code != http.StatusOK {
		t.Fatalf("reset: %d %v", code, rep)
	}
	t.Logf("the reset of two running hosts answered in %s", time.Since(began).Round(time.Millisecond))
	others, _ := rep["hosts"].([]any)
	if len(others) != 1 {
		t.Fatalf("reset: hosts %v, want the first host", rep["hosts"])
	}
	first := others[0].(map[string]any)
	if first["addr"] != hosts[0].Host.AdminAddr() || !strings.HasPrefix(fmt.Sprint(first["backup"]), "wc.reset-") || first["error"] != nil {
		t.Fatalf("reset: the first host's part %v", first)
	}
	if rep["warnings"] != nil {
		t.Fatalf("reset: warnings %v", rep["warnings"])
	}
	got := consumeOutputs(t, c, "counts", 2*total, 90*time.Second)
	n := 0
	replay := map[string][]string{}
	for user, ws := range want {
		per := 0
		for _, k := range ws {
			per += k
		}
		if len(got[user]) != 2*per {
			t.Fatalf("key %s: %d outputs, want %d (a pass and a replay)", user, len(got[user]), 2*per)
		}
		replay[user] = got[user][per:]
		n += len(got[user])
	}
	checkCountsOutputs(t, replay, want) // counted from 1 again on every host: the state moved aside
	if n != 2*total {
		t.Fatalf("%d outputs, want %d", n, 2*total)
	}
	settled([]int{0, 1})
	for m := range 2 {
		if st := hosts[m].Host.Stats()[0]; st.Halted {
			t.Fatalf("host %d: the task halted: %s", m, st.Error)
		}
	}
}

// A member of a group's reset whose initiator is gone after it reset the group's offsets (it
// never says apply or resume) follows them on its own once its hold ends: the test plays the
// initiator, has the host stop the task for its reset, commits the group's offsets to 0 as a
// reset does (metadata "wasmstream reset") and goes. Once the hold ends, the host moves its
// state aside and replays from 0: every output again, counted from 1, and the state of one pass.
// Without followReset the task resumed at its own checkpoint and nothing came again.
func TestAdminResetGroupInitiatorGone(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 300, 12, 43)
	total := wordTotal(want)
	dataDir := t.TempDir()
	h := hosttest.Start(t, host.Config{DataDir: dataDir, Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full"},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module)}})
	consumeOutputs(t, c, "counts", total, 60*time.Second)

	id := "wc.reset-test@127.0.0.1:9"
	step := func(phase string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("POST", "http://"+h.AdminAddr()+"/v1/tasks/wc/reset",
			strings.NewReader(`{"to":"earliest","group":{"phase":"`+phase+`","id":"`+id+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer full")
		req.Header.Set("X-Wasmstream-Forwarded", "127.0.0.1:9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := step("stop"); code != http.StatusOK || !strings.Contains(body, `"held": true`) {
		t.Fatalf("stop: %d %s", code, body)
	}
	adm := kadm.NewClient(newClient(t, c))
	hosttest.WaitFor(t, 30*time.Second, "the group empty", func() bool {
		dg, err := adm.DescribeGroups(context.Background(), "wasmstream-wc")
		return err == nil && len(dg["wasmstream-wc"].Members) == 0
	})
	offs := kadm.Offsets{}
	for p := range int32(4) {
		offs.Add(kadm.Offset{Topic: "words", Partition: p, At: 0, LeaderEpoch: -1, Metadata: "wasmstream reset"})
	}
	if rs, err := adm.CommitOffsets(context.Background(), "wasmstream-wc", offs); err != nil || rs.Error() != nil {
		t.Fatalf("committing the group's offsets: %v %v", err, rs.Error())
	}
	if n := h.Host.ExpireResetHolds(); n != 1 {
		t.Fatalf("%d holds, want 1", n)
	}
	got := consumeOutputs(t, c, "counts", 2*total, 60*time.Second)
	replay := map[string][]string{}
	for user, ws := range want {
		per := 0
		for _, k := range ws {
			per += k
		}
		if len(got[user]) != 2*per {
			t.Fatalf("key %s: %d outputs, want %d (a pass and a replay)", user, len(got[user]), 2*per)
		}
		replay[user] = got[user][per:]
	}
	checkCountsOutputs(t, replay, want)
	if code, body := step("apply"); code != http.StatusConflict || !strings.Contains(body, "not held") && !strings.Contains(body, "ended") {
		t.Fatalf("apply after the hold ended: %d %s, want 409", code, body)
	}
	// A host stopping while it holds the task for a reset stops (the task starts at the next
	// start), its last checkpoint kept.
	id = "wc.reset-test2@127.0.0.1:9"
	if code, body := step("stop"); code != http.StatusOK {
		t.Fatalf("stop: %d %s", code, body)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dataDir, "wc"))
}

// TestAdminResetHaltedInGroup: a reset through a host whose task halted, in a group with
// another host running the task. The first host's wc halts on its missing output topic (its
// other task runs on, so the host does too); the second host's wc processes every partition.
// Once the topic exists, a reset to earliest through the first host's admin API (the halted
// one) answers 200 saying why the task had halted and naming the second host, which it asked to
// stop and follow: the task runs again on both, every key is counted again from 1 (the outputs
// after the reset hold every count of one pass and none past it), and both hosts answer every
// key with one pass's state. Before, the reset of a halted task was refused (409: restart it
// first).
func TestAdminResetHaltedInGroup(t *testing.T) {
	t.Parallel() // it mostly waits (a delivery timeout, group joins)
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts", "side") // no "counts0": the first host's wc cannot produce
	dir := t.TempDir()
	wc := wordcountKafkaTask(module)
	wc.Changelog = host.ChangelogConfig{Enabled: true}
	cfgFor := func(m int, tasks ...host.TaskConfig) host.Config {
		return host.Config{
			DataDir: filepath.Join(dir, "host"+strconv.Itoa(m)), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second,
				DeliveryTimeout: 2 * time.Second},
			Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full", ReadToken: "reader"},
			Tasks: tasks,
		}
	}
	halting := wc
	halting.Output.Topic = "counts0"
	other := wordcountKafkaTask(module)
	other.Name, other.Output.Topic = "other", "side"
	want := produceWords(t, newClient(t, c), "words", 600, 16, 43)
	total := wordTotal(want)
	first := hosttest.Start(t, cfgFor(0, halting, other))
	hosttest.WaitFor(t, time.Minute, "the first host's wc halted on its missing topic", func() bool {
		select {
		case <-first.Done():
			t.Fatalf("the first host stopped: %v", first.Wait())
		default:
		}
		return first.Host.Stats()[0].Halted
	})
	second := hosttest.Start(t, cfgFor(1, wc))
	consumeOutputs(t, c, "counts", total, 90*time.Second) // the second host processed everything
	adm := kadm.NewClient(newClient(t, c))
	if _, err := adm.CreateTopics(context.Background(), 4, 1, nil, "counts0"); err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(context.Background(), "counts")
	if err != nil || ends.Error() != nil {
		t.Fatalf("the outputs' end offsets: %v %v", err, ends.Error())
	}
	before := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) { before[o.Partition] = kgo.NewOffset().At(o.Offset) })

	api := apiClient{t: t, base: "http://" + first.Host.AdminAddr(), token: "full"}
	code, rep := api.call("POST", "/v1/tasks/wc/reset", strings.NewReader(`{"to":"earliest"}`))
	if code != http.StatusOK || !strings.Contains(fmt.Sprint(rep["halted"]), "UNKNOWN_TOPIC_OR_PARTITION") {
		t.Fatalf("reset of the halted task: %d %v, want 200 saying why it had halted", code, rep)
	}
	hs, _ := rep["hosts"].([]any)
	if len(hs) != 1 || hs[0].(map[string]any)["addr"] != second.Host.AdminAddr() || hs[0].(map[string]any)["error"] != nil {
		t.Fatalf("reset: hosts %v, want the second host, told", rep["hosts"])
	}

	// The outputs after the reset, on either host's topic: one pass's counts, from 1 again.
	cl := newClient(t, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"counts": before, "counts0": {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart(), 3: kgo.NewOffset().AtStart()}}))
	seen := map[string]bool{}
	need := map[string]bool{}
	for user, words := range want {
		for w, n := range words {
			for k := 1; k <= n; k++ {
				need[user+"/"+w+" "+strconv.Itoa(k)] = true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for len(seen) < len(need) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of the replay's %d distinct outputs arrived", len(seen), len(need))
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := string(r.Key) + "/" + string(r.Value)
			if !need[k] {
				t.Fatalf("output %s after the reset: not a count of one pass (the state was not moved aside)", k)
			}
			seen[k] = true
		})
	}
	hosttest.WaitFor(t, 60*time.Second, "both hosts answering every key with one pass's counts", func() bool {
		for _, h := range []*hosttest.Running{first, second} {
			for user, words := range want {
				code, s, _, err := getState(h.Host.AdminAddr(), "reader", user)
				if err != nil || code != http.StatusOK {
					return false // 503 while the group rebalances
				}
				if _, err := checkAnswer(user, s, words); err != nil {
					t.Fatalf("%s: %v", h.Host.AdminAddr(), err)
				}
			}
		}
		return true
	})
	if st := first.Host.Stats()[0]; st.Halted {
		t.Fatalf("the first host's wc still halted: %s", st.Error)
	}
}
