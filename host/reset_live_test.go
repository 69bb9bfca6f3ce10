package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// A reset through the admin API on a running host (POST /v1/tasks/{task}/reset): a file task
// read to its end is reset to earliest and runs again in the same process, its outputs emitted
// once more from the start and its state that of one pass; another task of the host (stdin)
// keeps running and counting throughout; the read-only token gets 403, a dry run changes
// nothing, a stdin task and bad bodies are refused.
func TestAdminResetRunningHost(t *testing.T) {
	module := guestbuild.Go(t, "testguests/counter")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	const records, keys = 30, 3
	var in strings.Builder
	for i := range records {
		fmt.Fprintf(&in, `{"user":"k%d","text":"x"}`+"\n", i%keys)
	}
	if err := os.WriteFile(input, []byte(in.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	filesOut, otherOut := filepath.Join(dir, "files.ndjson"), filepath.Join(dir, "other.ndjson")
	pr, pw := io.Pipe()
	defer pw.Close()
	h := hosttest.Start(t, host.Config{DataDir: filepath.Join(dir, "data"), Stdin: pr, Logger: testLogger(t),
		CheckpointInterval: 20 * time.Millisecond,
		Admin:              host.AdminConfig{Addr: "127.0.0.1:0", Token: "full", ReadToken: "reader"},
		Tasks: []host.TaskConfig{
			{Name: "files", Module: module, Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "user", ValueField: "text"}},
				Output: host.OutputConfig{Type: "file", Path: filesOut}},
			{Name: "other", Module: module, Inputs: []host.InputConfig{{Name: "in", Type: "stdin", KeyField: "k", ValueField: "v"}},
				Output: host.OutputConfig{Type: "file", Path: otherOut}},
		}})
	api := apiClient{t: t, base: "http://" + h.AdminAddr(), token: "full"}
	lines := func(path string) []string {
		b, _ := os.ReadFile(path)
		s := strings.TrimSpace(string(b))
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	feed := func() {
		t.Helper()
		if _, err := io.WriteString(pw, `{"k":"a","v":"1"}`+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	feed()
	hosttest.WaitFor(t, 60*time.Second, "the first pass and the other task's first record", func() bool {
		return len(lines(filesOut)) == records && len(lines(otherOut)) == 1
	})
	firstPass := lines(filesOut)

	// Refusals change nothing.
	reset := func(token, task, query, body string) (int, map[string]any) {
		c := api
		c.token = token
		return c.call("POST", "/v1/tasks/"+task+"/reset"+query, strings.NewReader(body))
	}
	if code, body := reset("reader", "files", "", `{"to":"earliest"}`); code != http.StatusForbidden {
		t.Errorf("reset with the read-only token: %d %v, want 403", code, body)
	}
	for _, c := range []struct{ task, query, body string }{
		{"files", "", `{"to":"yesterday"}`}, {"files", "", `{}`}, {"files", "", `not json`},
		{"files", "?dry_run=maybe", `{"to":"earliest"}`},
	} {
		if code, body := reset("full", c.task, c.query, c.body); code != http.StatusBadRequest {
			t.Errorf("reset %s%s %s: %d %v, want 400", c.task, c.query, c.body, code, body)
		}
	}
	if code, body := reset("full", "nosuch", "", `{"to":"earliest"}`); code != http.StatusNotFound {
		t.Errorf("reset of an unknown task: %d %v, want 404", code, body)
	}
	if code, body := reset("full", "other", "", `{"to":"earliest"}`); code != http.StatusConflict || !strings.Contains(fmt.Sprint(body["error"]), "stdin") {
		t.Errorf("reset of a stdin task: %d %v, want 409 naming stdin", code, body)
	}
	if code, body := reset("full", "files", "", `{"to":"0:3"}`); code != http.StatusConflict || !strings.Contains(fmt.Sprint(body["error"]), "earliest") {
		t.Errorf("reset of a file to an offset: %d %v, want 409", code, body)
	}

	// A dry run says what would move and moves nothing.
	code, dry := reset("full", "files", "?dry_run=1", `{"to":"earliest"}`)
	if code != http.StatusOK || dry["dry_run"] != true {
		t.Fatalf("dry run: %d %v", code, dry)
	}
	if st := dry["streams"].([]any)[0].(map[string]any); st["keys"] != float64(keys) || st["from"] != float64(records) || st["to"] != float64(0) {
		t.Errorf("dry run's stream: %v, want %d keys from %d to 0", st, keys, records)
	}

	code, rep := reset("full", "files", "", `{"to":"earliest"}`)
	if code != http.StatusOK || rep["dry_run"] != false || !strings.HasPrefix(fmt.Sprint(rep["backup"]), "files.reset-") {
		t.Fatalf("reset: %d %v", code, rep)
	}
	if st := rep["streams"].([]any)[0].(map[string]any); st["keys"] != float64(keys) || st["head"] != float64(records) {
		t.Errorf("reset's stream: %v, want %d keys moved, head %d", st, keys, records)
	}
	feed() // the other task still runs, and still counts from where it was
	hosttest.WaitFor(t, 60*time.Second, "the replay and the other task's second record", func() bool {
		return len(lines(filesOut)) >= 2*records && len(lines(otherOut)) == 2
	})
	all := lines(filesOut)
	if len(all) != 2*records {
		t.Fatalf("%d outputs after the reset, want %d: the first pass and one replay", len(all), 2*records)
	}
	// The records carry no timestamp: their event time is when they were read, which differs.
	noTS := regexp.MustCompile(`,"ts":[0-9]+`)
	if g, w := noTS.ReplaceAllString(strings.Join(sortByKeyLines(all[records:]), "\n"), ""), noTS.ReplaceAllString(strings.Join(sortByKeyLines(firstPass), "\n"), ""); g != w {
		t.Errorf("the replay's outputs differ from the first pass's:\n%s\nwant:\n%s", g, w)
	}
	if last := lines(otherOut)[1]; !strings.Contains(last, `"value":"2"`) {
		t.Errorf("the other task's second output is %s: it did not keep its count", last)
	}
	for _, st := range h.Stats() {
		if st.Halted {
			t.Errorf("task %s halted: %s", st.Task, st.Error)
		}
	}
	pw.Close()
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	// The state is that of one pass (the dry run moved nothing either: it would have been
	// replayed twice), and the first pass's is kept in the backup.
	for _, task := range []string{"files", fmt.Sprint(rep["backup"])} {
		st := stateOf(t, filepath.Join(dir, "data"), task)
		for k := range keys {
			if n := st[fmt.Sprintf("k%d", k)]["n"]; n != records/keys {
				t.Errorf("%s: k%d's count %d, want %d (one pass)", task, k, n, records/keys)
			}
		}
	}
}

// sortByKeyLines orders output lines by key, keeping the order within a key.
func sortByKeyLines(lines []string) []string {
	out := append([]string(nil), lines...)
	keyOf := func(l string) string {
		i := strings.Index(l, `"key":`)
		if i < 0 {
			return ""
		}
		return l[i : i+12]
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && keyOf(out[j-1]) > keyOf(out[j]); j-- {
			out[j-1], out[j] = out[j], out[j-1]
		}
	}
	return out
}

// A task with a Kafka input reset through the admin API on a running host: it leaves its group,
// its state moves aside, the group's offsets go to earliest, and it runs again in the same
// process: every output comes once more, counted from 1 (a pass, then a replay), and the state is
// one pass's. While another member is in the group (another host), the reset is refused (409,
// the member named) and the task runs on as it was.
// Exactly once too (with its changelog, which the reset tombstones), without the other member.
func TestAdminResetKafkaTask(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	t.Run("at_least_once", func(t *testing.T) { testAdminResetKafkaTask(t, wordcountKafkaTask(module), true) })
	t.Run("exactly_once", func(t *testing.T) { testAdminResetKafkaTask(t, eosTask(module), false) })
}

func testAdminResetKafkaTask(t *testing.T, tc host.TaskConfig, otherMember bool) {
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 300, 12, 31)
	total := wordTotal(want)
	dataDir := t.TempDir()
	h := hosttest.Start(t, host.Config{DataDir: dataDir, Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full"},
		Tasks: []host.TaskConfig{tc}})
	api := apiClient{t: t, base: "http://" + h.AdminAddr(), token: "full"}
	first := consumeOutputs(t, c, "counts", total, 60*time.Second)
	checkCountsOutputs(t, first, want)

	if otherMember {
		resetRefusedWithOtherMember(t, c, h, api)
	}

	code, dry := api.call("POST", "/v1/tasks/wc/reset?dry_run=1", strings.NewReader(`{"to":"earliest"}`))
	if code != http.StatusOK || dry["dry_run"] != true || dry["group"] != "wasmstream-wc" {
		t.Fatalf("dry run: %d %v", code, dry)
	}
	code, rep := api.call("POST", "/v1/tasks/wc/reset", strings.NewReader(`{"to":"earliest"}`))
	if code != http.StatusOK || rep["group"] != "wasmstream-wc" {
		t.Fatalf("reset: %d %v", code, rep)
	}
	if tc.Changelog.Enabled {
		tombs := 0.0
		for _, st := range rep["streams"].([]any) {
			tombs += st.(map[string]any)["tombstones"].(float64)
		}
		if rep["changelog"] == nil || tombs == 0 {
			t.Errorf("reset with a changelog: changelog %v, %v tombstones", rep["changelog"], tombs)
		}
	}
	got := consumeOutputs(t, c, "counts", 2*total, 60*time.Second)
	n := 0
	firstPass, replay := map[string][]string{}, map[string][]string{}
	for user, ws := range want {
		per := 0
		for _, k := range ws {
			per += k
		}
		if len(got[user]) != 2*per {
			t.Fatalf("key %s: %d outputs, want %d (a pass and a replay)", user, len(got[user]), 2*per)
		}
		firstPass[user], replay[user] = got[user][:per], got[user][per:]
		n += len(got[user])
	}
	checkCountsOutputs(t, firstPass, want)
	checkCountsOutputs(t, replay, want) // counted from 1 again: the state was moved aside
	if n != 2*total {
		t.Fatalf("%d outputs, want %d", n, 2*total)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	sameCounts(t, want, stateOf(t, dataDir, "wc"))
}

// resetRefusedWithOtherMember joins another member to task wc's group: a reset is refused (409,
// naming it) and the task goes on.
func resetRefusedWithOtherMember(t *testing.T, c *kfake.Cluster, h *hosttest.Running, api apiClient) {
	t.Helper()
	// Another member of the group: refused, naming it; the task goes on.
	other := newClient(t, c, kgo.ConsumerGroup("wasmstream-wc"), kgo.ConsumeTopics("words"), kgo.ClientID("other-host"),
		kgo.DisableAutoCommit())
	hosttest.WaitFor(t, 60*time.Second, "the other member joined", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		other.PollFetches(ctx)
		dg, err := kadm.NewClient(newClient(t, c)).DescribeGroups(context.Background(), "wasmstream-wc")
		return err == nil && len(dg["wasmstream-wc"].Members) == 2
	})
	code, body := api.call("POST", "/v1/tasks/wc/reset", strings.NewReader(`{"to":"earliest"}`))
	if msg := fmt.Sprint(body["error"]); code != http.StatusConflict || !strings.Contains(msg, "other-host") {
		t.Fatalf("reset with another member in the group: %d %v, want 409 naming it", code, body)
	}
	if st := h.Stats()[0]; st.Halted {
		t.Fatalf("the task halted after the refused reset: %s", st.Error)
	}
	other.Close()
}
