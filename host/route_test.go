package host_test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// routedState is a state answer with the fields the group tests look at.
type routedState struct {
	States []struct {
		Stream  string `json:"stream"`
		Host    string `json:"host"`
		KeyText string `json:"key_text"`
		Values  []struct {
			NameText  string `json:"name_text"`
			ValueText string `json:"value_text"`
		} `json:"values"`
	} `json:"states"`
	Error string `json:"error"`
}

// getState asks addr for key's state with token; it returns the status, the answer and, on
// 503, the Retry-After header.
func getState(addr, token, key string) (int, routedState, string, error) {
	req, err := http.NewRequest("GET", "http://"+addr+"/v1/tasks/wc/state/"+url.PathEscape(key), nil)
	if err != nil {
		return 0, routedState{}, "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, routedState{}, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var s routedState
	if err := json.Unmarshal(body, &s); err != nil {
		return resp.StatusCode, s, "", fmt.Errorf("%s: %v", body, err)
	}
	return resp.StatusCode, s, resp.Header.Get("Retry-After"), nil
}

// checkAnswer compares a 200 answer for user with want: one stream, the partition the default
// partitioner maps the key to, the exact counts. It returns whether another host answered.
func checkAnswer(user string, s routedState, want map[string]int) (forwarded bool, err error) {
	if len(s.States) != 1 || s.States[0].KeyText != user {
		return false, fmt.Errorf("key %s: %+v, want the key in one stream", user, s)
	}
	ks := s.States[0]
	p := kgo.StickyKeyPartitioner(nil).ForTopic("words").Partition(&kgo.Record{Key: []byte(user)}, 4)
	if ks.Stream != "kafka:words/"+strconv.Itoa(p) {
		return false, fmt.Errorf("key %s: stream %s, want partition %d", user, ks.Stream, p)
	}
	got := map[string]int{}
	for _, v := range ks.Values {
		n, err := strconv.Atoi(v.ValueText)
		if err != nil {
			return false, fmt.Errorf("key %s name %s: value %q", user, v.NameText, v.ValueText)
		}
		got[v.NameText] = n
	}
	if len(got) != len(want) {
		return false, fmt.Errorf("key %s: %d names, want %d: %v", user, len(got), len(want), got)
	}
	for w, n := range want {
		if got[w] != n {
			return false, fmt.Errorf("key %s word %s: %d, want %d (answered by %q)", user, w, got[w], n, ks.Host)
		}
	}
	return ks.Host != "", nil
}

// logQueryLatency asks every host for every key ten times and logs the p50 and p99 latency of
// the answers the host asked gave itself and of those it forwarded (figures, no thresholds).
func logQueryLatency(t *testing.T, hosts map[int]*hosttest.Running, want map[string]map[string]int) {
	var local, forwarded []time.Duration
	for range 10 {
		for _, r := range hosts {
			for user := range want {
				start := time.Now()
				code, s, _, err := getState(r.Host.AdminAddr(), "reader", user)
				took := time.Since(start)
				if err != nil || code != http.StatusOK || len(s.States) != 1 {
					t.Fatalf("key %s: HTTP %d %v", user, code, err)
				}
				if s.States[0].Host != "" {
					forwarded = append(forwarded, took)
				} else {
					local = append(local, took)
				}
			}
		}
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}
	t.Logf("query latency: local p50 %v p99 %v (%d queries); forwarded p50 %v p99 %v (%d queries)",
		pct(local, 0.50), pct(local, 0.99), len(local), pct(forwarded, 0.50), pct(forwarded, 0.99), len(forwarded))
}

// Three hosts in one group, each owning some of the input's four partitions: every key's
// state, asked of every host, is the exact state, answered by the owner (forwarded when the host
// asked is not). While a host leaves and another joins, every answer is either exact or a 503
// with Retry-After, never another's (a former owner's) state. The read-only token is refused
// deploys, also with the forwarding header.
func TestQueryStateAcrossHosts(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "words", "counts")
	dir := t.TempDir()
	cfgFor := func(m int) host.Config {
		task := wordcountKafkaTask(module)
		task.Changelog = host.ChangelogConfig{Enabled: true} // the state follows a partition that moves
		return host.Config{
			DataDir: filepath.Join(dir, "host"+strconv.Itoa(m)), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
			Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full", ReadToken: "reader"},
			Tasks: []host.TaskConfig{task},
		}
	}
	hosts := map[int]*hosttest.Running{}
	for m := range 3 {
		hosts[m] = hosttest.Start(t, cfgFor(m))
	}
	want := produceWords(t, newClient(t, c), "words", 3000, 40, 26)
	consumeOutputs(t, c, "counts", wordTotal(want), 90*time.Second)

	// all asks every host for every key; it returns the first wrong answer, and counts the
	// exact ones, the forwarded ones among them, and the 503s.
	type tally struct{ exact, forwarded, unavailable int }
	var hostsMu sync.Mutex
	all := func(members []int) (tally, error) {
		var n tally
		for _, m := range members {
			hostsMu.Lock() // the hosts change while the clients below ask
			addr := hosts[m].Host.AdminAddr()
			hostsMu.Unlock()
			for user, words := range want {
				code, s, retry, err := getState(addr, "reader", user)
				switch {
				case err != nil:
					return n, fmt.Errorf("host %d, key %s: HTTP %d: %v", m, user, code, err)
				case code == http.StatusServiceUnavailable && retry != "":
					n.unavailable++
				case code != http.StatusOK:
					return n, fmt.Errorf("host %d, key %s: HTTP %d (Retry-After %q): %s", m, user, code, retry, s.Error)
				default:
					fwd, err := checkAnswer(user, s, words)
					if err != nil {
						return n, fmt.Errorf("host %d: %v", m, err)
					}
					n.exact++
					if fwd {
						n.forwarded++
					}
				}
			}
		}
		return n, nil
	}
	settled := func(members []int) {
		t.Helper()
		hosttest.WaitFor(t, 60*time.Second, "every host answering every key", func() bool {
			n, err := all(members)
			if err != nil {
				t.Fatal(err)
			}
			return n.unavailable == 0
		})
	}
	settled([]int{0, 1, 2})
	n, err := all([]int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	// Each host owns at most two of the four partitions: about half the keys are another's.
	if n.exact != 3*len(want) || n.forwarded < len(want) {
		t.Fatalf("%+v of %d keys through 3 hosts: want all exact, at least %d forwarded", n, len(want), len(want))
	}
	t.Logf("3 hosts: %d answers, %d forwarded", n.exact, n.forwarded)
	logQueryLatency(t, hosts, want)

	// A scan through any host pages through every key of the group, every partition covered.
	for m, r := range hosts {
		got := map[string]map[string]int{}
		pages, after := 0, ""
		for {
			var s struct {
				wireState
				Streams []string `json:"streams"`
			}
			path := "/v1/tasks/wc/state?limit=7"
			if pages > 0 {
				path += "&after_b64=" + url.QueryEscape(after)
			}
			if code := adminGet(t, "GET", r.Host.AdminAddr(), path, "reader", &s); code != http.StatusOK {
				t.Fatalf("host %d: GET %s: HTTP %d", m, path, code)
			}
			if want := []string{"kafka:words/0", "kafka:words/1", "kafka:words/2", "kafka:words/3"}; !slices.Equal(s.Streams, want) {
				t.Fatalf("host %d: a scan covers %v, want %v", m, s.Streams, want)
			}
			pages++
			for _, ks := range s.States {
				if got[ks.KeyText] != nil {
					t.Fatalf("host %d: key %s on two pages (or in two streams)", m, ks.KeyText)
				}
				got[ks.KeyText] = map[string]int{}
				for _, v := range ks.Values {
					got[ks.KeyText][v.NameText], _ = strconv.Atoi(v.ValueText)
				}
			}
			if s.Next == "" {
				break
			}
			after = s.Next
		}
		sameCounts(t, want, got)
		if pages != (len(want)+6)/7 {
			t.Fatalf("host %d: %d pages of 7 for %d keys", m, pages, len(want))
		}
	}

	// The read-only token: refused deploys on every host, with or without the forwarding header;
	// a wrong token is refused before anything is forwarded.
	for m, r := range hosts {
		for _, fwd := range []bool{false, true} {
			req, _ := http.NewRequest("POST", "http://"+r.Host.AdminAddr()+"/v1/tasks/wc/versions", strings.NewReader("\x00asm"))
			req.Header.Set("Authorization", "Bearer reader")
			if fwd {
				req.Header.Set("X-Wasmstream-Forwarded", "127.0.0.1:1")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("host %d: deploy with the read-only token (forwarded %v): HTTP %d, want 403", m, fwd, resp.StatusCode)
			}
		}
		for user := range want {
			if code, _, _, _ := getState(r.Host.AdminAddr(), "wrong", user); code != http.StatusUnauthorized {
				t.Fatalf("host %d: a wrong token: HTTP %d, want 401", m, code)
			}
			// The full token queries too (the owner is asked with the read-only one).
			if code, s, _, err := getState(r.Host.AdminAddr(), "full", user); code != http.StatusOK || err != nil {
				t.Fatalf("host %d: the full token: HTTP %d %v %s", m, code, err, s.Error)
			}
		}
	}

	// A host leaves and another joins while clients ask: each answer is exact or a 503.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	var during tally
	var bad error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := all([]int{0, 1})
			mu.Lock()
			during.exact += n.exact
			during.forwarded += n.forwarded
			during.unavailable += n.unavailable
			if err != nil && bad == nil {
				bad = err
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	if err := hosts[2].Stop(); err != nil {
		t.Fatal(err)
	}
	hostsMu.Lock()
	delete(hosts, 2)
	hostsMu.Unlock()
	settled([]int{0, 1})
	h3 := hosttest.Start(t, cfgFor(3))
	hostsMu.Lock()
	hosts[3] = h3
	hostsMu.Unlock()
	settled([]int{0, 1, 3})
	close(stop)
	wg.Wait()
	if bad != nil {
		t.Fatal(bad)
	}
	t.Logf("during the leave and the join: %d exact answers (%d forwarded), %d answered 503", during.exact, during.forwarded, during.unavailable)
	n, err = all([]int{0, 1, 3})
	if err != nil {
		t.Fatal(err)
	}
	if n.exact != 3*len(want) {
		t.Fatalf("after the join: %+v, want %d exact answers", n, 3*len(want))
	}

	// More records after the moves: every host's answers follow them (the copies a former
	// owner kept of a partition that moved are never answered).
	more := produceWords(t, newClient(t, c), "words", 1000, 40, 27)
	for u, ws := range more {
		if want[u] == nil {
			want[u] = map[string]int{}
		}
		for w, k := range ws {
			want[u][w] += k
		}
	}
	hosttest.WaitFor(t, 60*time.Second, "every host answering the new counts", func() bool {
		n, err := all([]int{0, 1, 3})
		return err == nil && n.exact == 3*len(want)
	})
}

// ?decode= decodes the SDKs' typed state (a Counter, a List's length and items, a Map's
// entries) by name pattern, in the API's JSON; a bad rule is a 400.
func TestQueryStateDecode(t *testing.T) {
	module := guestbuild.Go(t, "testguests/conform")
	c := newCluster(t, "cmds", "results")
	h := hosttest.Start(t, host.Config{
		DataDir: t.TempDir(), Logger: testLogger(t), CheckpointInterval: time.Hour,
		Kafka: host.KafkaConfig{Brokers: c.ListenAddrs()},
		Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full"},
		Tasks: []host.TaskConfig{{
			Name: "wc", Module: module,
			Inputs: []host.InputConfig{{Name: "cmds", Type: "kafka", Topics: []string{"cmds"}}},
			Output: host.OutputConfig{Type: "kafka", Topic: "results", Names: []string{"result"}},
		}},
	})
	var recs []*kgo.Record
	for _, cmd := range []string{"count hits 5", "count hits 2", "append l x", "append l y", "mput m k v", "put raw \xff"} {
		recs = append(recs, &kgo.Record{Topic: "cmds", Key: []byte("k1"), Value: []byte(cmd)})
	}
	if err := newClient(t, c).ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	consumeOutputs(t, c, "results", len(recs), 60*time.Second)
	rules := url.Values{"decode": {"hits=i64", "l=u64", "l/*=string", "m/*=string", "raw=i64"}}
	type decoded struct {
		States []struct {
			Values []struct {
				NameText string          `json:"name_text"`
				Decoded  json.RawMessage `json:"decoded"`
			} `json:"values"`
		} `json:"states"`
	}
	var d decoded
	got := map[string]string{}
	hosttest.WaitFor(t, 60*time.Second, "the raw value stored", func() bool {
		if code := adminGet(t, "GET", h.AdminAddr(), "/v1/tasks/wc/state/k1?"+rules.Encode(), "full", &d); code != http.StatusOK {
			t.Fatalf("GET state with decode: HTTP %d", code)
		}
		clear(got)
		for _, ks := range d.States {
			for _, v := range ks.Values {
				got[v.NameText] = string(v.Decoded)
			}
		}
		_, ok := got["raw"]
		return ok
	})
	want := map[string]string{"hits": "7", "l": "2", "l/0000000000000000": `"x"`, "l/0000000000000001": `"y"`, "m/k": `"v"`,
		"raw": ""} // one byte is no i64: shown as bytes only
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s decoded %q, want %q (all: %v)", n, got[n], w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if code := adminGet(t, "GET", h.AdminAddr(), "/v1/tasks/wc/state/k1?decode=hits=int", "full", nil); code != http.StatusBadRequest {
		t.Errorf("decode=hits=int: HTTP %d, want 400", code)
	}
	if code := adminGet(t, "GET", h.AdminAddr(), "/v1/tasks/wc/state?decode=hits=i64", "full", &d); code != http.StatusOK || len(d.States) != 1 || string(d.States[0].Values[0].Decoded) != "7" {
		t.Errorf("a scan with decode: HTTP %d, %+v", code, d)
	}
}

// A task with two input topics has a key's state in each topic's partition: any host's answer
// merges both streams, whichever hosts own them, each with its own topic's counts.
func TestQueryStateTwoTopics(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	c := newCluster(t, "ta", "tb", "counts")
	dir := t.TempDir()
	var hosts []*hosttest.Running
	for m := range 2 {
		task := wordcountKafkaTask(module)
		task.Inputs[0].Topics = []string{"ta", "tb"}
		hosts = append(hosts, hosttest.Start(t, host.Config{
			DataDir: filepath.Join(dir, "host"+strconv.Itoa(m)), Logger: testLogger(t), CheckpointInterval: 50 * time.Millisecond,
			Kafka: host.KafkaConfig{Brokers: c.ListenAddrs(), SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second},
			Admin: host.AdminConfig{Addr: "127.0.0.1:0", Token: "full"},
			Tasks: []host.TaskConfig{task},
		}))
	}
	// Both hosts in the group before any record: no partition moves once records flow (no
	// changelog here).
	hosttest.WaitFor(t, 60*time.Second, "both hosts holding partitions", func() bool {
		st0, st1 := hosts[0].Host.Stats()[0], hosts[1].Host.Stats()[0]
		return len(st0.Inputs) > 0 && len(st1.Inputs) > 0 && len(st0.Inputs)+len(st1.Inputs) == 8
	})
	cl := newClient(t, c)
	wantA := produceWords(t, cl, "ta", 600, 12, 31)
	wantB := produceWords(t, cl, "tb", 600, 12, 32)
	consumeOutputs(t, c, "counts", wordTotal(wantA)+wordTotal(wantB), 60*time.Second)
	hosttest.WaitFor(t, 60*time.Second, "both topics' state through both hosts", func() bool {
		for _, r := range hosts {
			for user := range wantA {
				code, s, _, err := getState(r.Host.AdminAddr(), "full", user)
				if err != nil || code != http.StatusOK {
					return false
				}
				got := map[string]map[string]int{}
				for _, ks := range s.States {
					got[ks.Stream] = map[string]int{}
					for _, v := range ks.Values {
						got[ks.Stream][v.NameText], _ = strconv.Atoi(v.ValueText)
					}
				}
				p := kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(user)}, 4)
				a, b := got["kafka:ta/"+strconv.Itoa(p)], got["kafka:tb/"+strconv.Itoa(p)]
				if len(s.States) != 2 || !maps.Equal(a, wantA[user]) || !maps.Equal(b, wantB[user]) {
					if len(s.States) > 2 {
						t.Fatalf("key %s: %d streams: %+v", user, len(s.States), s.States)
					}
					return false
				}
			}
		}
		return true
	})
}
