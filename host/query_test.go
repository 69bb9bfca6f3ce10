package host_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

type wireState struct {
	Task   string `json:"task"`
	Next   string `json:"next"`
	States []struct {
		Stream  string `json:"stream"`
		KeyText string `json:"key_text"`
		Values  []struct {
			NameText  string `json:"name_text"`
			ValueText string `json:"value_text"`
		} `json:"values"`
	} `json:"states"`
}

// adminGet sends an authenticated request to the admin API and decodes a JSON answer into v.
func adminGet(t *testing.T, method, addr, path, token string, v any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, body)
		}
	}
	return resp.StatusCode
}

// The state of a running task through the admin API: every key's state equals the counts of the
// records produced, although no checkpoint ran (the answer is the cache's, with every completed
// call); a scan pages through every key; the read-only token reads but cannot pause.
func TestQueryStateRunning(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	want := produceWords(t, newClient(t, c), "words", 2000, 40, 21)
	total := wordTotal(want)
	h := hosttest.Start(t, host.Config{
		DataDir: t.TempDir(), Logger: testLogger(t), CheckpointInterval: time.Hour,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full", ReadToken: "reader"},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module)},
	})
	consumeOutputs(t, c, "counts", total, 60*time.Second)
	addr := h.AdminAddr()
	if st := h.Stats()[0]; st.Checkpoints != 0 {
		t.Fatalf("%d checkpoints ran: the test must read state no checkpoint covers", st.Checkpoints)
	}

	got := map[string]map[string]int{}
	for user := range want {
		var s wireState
		if code := adminGet(t, "GET", addr, "/v1/tasks/wc/state/"+url.PathEscape(user), "reader", &s); code != http.StatusOK {
			t.Fatalf("GET state of %s: HTTP %d", user, code)
		}
		if len(s.States) != 1 || s.States[0].KeyText != user {
			t.Fatalf("GET state of %s: %+v, want the key in one partition", user, s)
		}
		wireCounts(t, got, s)
	}
	sameCounts(t, want, got)

	// Every key, by pages of 7.
	got = map[string]map[string]int{}
	pages, after := 0, ""
	for {
		var s wireState
		path := "/v1/tasks/wc/state?limit=7"
		if pages > 0 {
			path += "&after_b64=" + url.QueryEscape(after)
		}
		if code := adminGet(t, "GET", addr, path, "reader", &s); code != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", path, code)
		}
		pages++
		wireCounts(t, got, s)
		if s.Next == "" {
			break
		}
		after = s.Next
		if pages > 100 {
			t.Fatal("the scan does not end")
		}
	}
	sameCounts(t, want, got)
	if wantPages := (len(want) + 6) / 7; pages < wantPages || pages > wantPages+1 {
		t.Errorf("%d pages of 7 for %d keys", pages, len(want))
	}

	if code := adminGet(t, "GET", addr, "/v1/tasks/wc/state/no-such-user", "reader", nil); code != http.StatusNotFound {
		t.Errorf("a key without state: HTTP %d, want 404", code)
	}
	if code := adminGet(t, "POST", addr, "/v1/tasks/wc/pause", "reader", nil); code != http.StatusForbidden {
		t.Errorf("pause with the read-only token: HTTP %d, want 403", code)
	}
	if code := adminGet(t, "GET", addr, "/v1/status", "reader", nil); code != http.StatusOK {
		t.Errorf("status with the read-only token: HTTP %d, want 200", code)
	}
	if code := adminGet(t, "POST", addr, "/v1/tasks/wc/pause", "full", nil); code != http.StatusOK {
		t.Errorf("pause with the token: HTTP %d, want 200", code)
	}
	if code := adminGet(t, "GET", addr, "/v1/tasks/wc/state/x", "wrong", nil); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: HTTP %d, want 401", code)
	}
}

// Queries while records are processed: a key is read between two calls on it, so its counts
// only grow, never half-applied; at the end they are exact.
func TestQueryStateUnderLoad(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	h := hosttest.Start(t, host.Config{
		DataDir: t.TempDir(), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Tasks: []host.TaskConfig{wordcountKafkaTask(module)},
	})
	const users = 5
	produced := make(chan map[string]map[string]int, 1)
	go func() {
		cl := newClient(t, c)
		all := map[string]map[string]int{}
		for chunk := range 20 {
			for u, ws := range produceWords(t, cl, "words", 300, users, uint64(100+chunk)) {
				if all[u] == nil {
					all[u] = map[string]int{}
				}
				for w, n := range ws {
					all[u][w] += n
				}
			}
		}
		produced <- all
	}()
	ctx := t.Context()
	query := func() map[string]map[string]int {
		got := map[string]map[string]int{}
		for u := range users {
			user := fmt.Sprintf("u%03d", u)
			ks, err := h.QueryState(ctx, "wc", []byte(user))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range ks {
				for _, v := range s.Values {
					n, err := strconv.Atoi(string(v.Value))
					if err != nil {
						t.Fatalf("%s/%s = %q", user, v.Name, v.Value)
					}
					if got[user] == nil {
						got[user] = map[string]int{}
					}
					got[user][string(v.Name)] = n
				}
			}
		}
		return got
	}
	var want map[string]map[string]int
	last := map[string]map[string]int{}
	queries := 0
	for deadline := time.Now().Add(2 * time.Minute); ; {
		got := query()
		queries++
		for u, ws := range last {
			for w, n := range ws {
				if got[u][w] < n {
					t.Fatalf("%s/%s went from %d to %d", u, w, n, got[u][w])
				}
			}
		}
		last = got
		if want == nil {
			select {
			case want = <-produced:
			default:
			}
		}
		if want != nil && h.Stats()[0].Outputs >= int64(wordTotal(want)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outputs %d after 2 minutes", h.Stats()[0].Outputs)
		}
	}
	sameCounts(t, want, query())
	t.Logf("%d rounds of %d queries while 6000 records were processed", queries, users)
}
