package host_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
	"github.com/wasmstream/wasmstream/internal/hosttest"
)

// S7: the sequencing policy decides which key a record's state and order belong to. Wordcount
// counts words per key, so its final state shows the key each record ran under: the record key
// (key, partition), a JSON field's value (field), or a header's, here absent: the empty key
// (header). With partition, one sequence for the whole stream: outputs come in input order
// even with several workers.
func TestSequencingPolicies(t *testing.T) {
	module := guestbuild.Go(t, "wordcount")
	const n = 300
	dir := t.TempDir()
	input := filepath.Join(dir, "input.ndjson")
	f, err := os.Create(input)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	byUser, byTeam, all := map[string]map[string]int{}, map[string]map[string]int{}, map[string]map[string]int{}
	count := func(m map[string]map[string]int, key, word string) {
		if m[key] == nil {
			m[key] = map[string]int{}
		}
		m[key][word]++
	}
	for i := range n {
		user, team := fmt.Sprintf("u%d", i%5), fmt.Sprintf("t%d", i%2)
		w1, w2 := fmt.Sprintf("w%d", i%3), fmt.Sprintf("w%d", (i+1)%3)
		b, _ := json.Marshal(map[string]any{"user": user, "team": team, "text": w1 + " " + w2, "ts": 1000 + i})
		w.Write(append(b, '\n'))
		for _, word := range []string{w1, w2} {
			count(byUser, user, word)
			count(byTeam, team, word)
			count(all, "", word)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, c := range []struct {
		seq  host.SequencingConfig
		want map[string]map[string]int
	}{
		{host.SequencingConfig{Policy: "key"}, byUser},
		{host.SequencingConfig{Policy: "partition"}, byUser},
		{host.SequencingConfig{Policy: "field", Field: "team"}, byTeam},
		{host.SequencingConfig{Policy: "header", Header: "h"}, all},
	} {
		t.Run(string(c.seq.Policy), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.ndjson")
			tc := host.TaskConfig{
				Name: "wc", Module: module, Config: map[string]any{"min_len": 2},
				Workers: 4, MaxBatchRecords: 8, Sequencing: c.seq,
				Inputs: []host.InputConfig{{Name: "in", Path: input, KeyField: "user", ValueField: "text", TimestampField: "ts"}},
				Output: host.OutputConfig{Type: "file", Path: out},
			}
			hosttest.RunToEnd(t, host.Config{DataDir: filepath.Join(dir, "data"), Logger: testLogger(t), Tasks: []host.TaskConfig{tc}})
			if got := stateOf(t, filepath.Join(dir, "data"), "wc"); !reflect.DeepEqual(got, c.want) {
				t.Errorf("state by key %v, want %v", got, c.want)
			}
			outs := readOutputs(t, out)
			if len(outs) != 2*n {
				t.Fatalf("%d outputs, want %d", len(outs), 2*n)
			}
			if c.seq.Policy == "partition" {
				for i, o := range outs {
					if want := int64(1000 + i/2); o.Ts != want {
						t.Fatalf("output %d has timestamp %d, want %d: not in input order", i, o.Ts, want)
					}
				}
			}
		})
	}
}
