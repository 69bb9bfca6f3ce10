package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/wasmstream/wasmstream/host"
	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// tableState reads a table task's state (the ktable guests keep each key's value as "v") through
// the host's read-only state API, as key=value.
func tableState(t *testing.T, dataDir, task string) []string {
	t.Helper()
	r, err := host.OpenState(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	if err := r.Scan(task, nil, false, func(e host.StateEntry) bool {
		out = append(out, fmt.Sprintf("%s/%s=%q", e.Key, e.Name, e.Value))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestKafkaTombstonesThroughBinary (ABI 0.5): the real binary reads Kafka records with null
// values (tombstones) and with empty values from the development broker, in its own process,
// through a table task (Go at least once, Rust exactly once with a changelog): the guest deletes
// a key's state on a tombstone and publishes one, which a franz-go reader gets with a nil value,
// while an empty value's output is empty and not nil; only the keys whose last record has a
// value (the empty value included) keep state.
func TestKafkaTombstonesThroughBinary(t *testing.T) {
	for _, tc := range []struct {
		name, delivery, extra string
		module                func(t *testing.T) string
	}{
		{"go", "at_least_once", "", func(t *testing.T) string { return guestbuild.Go(t, "testguests/ktable") }},
		{"rust_exactly_once", "exactly_once", "    changelog:\n      enabled: true\n",
			func(t *testing.T) string { return guestbuild.Rust(t, "testguests/ktable-rust") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			module := tc.module(t)
			r := newDeliveryRig(t, "rows", "table")
			type kv struct {
				k string
				v []byte // nil: a tombstone
			}
			in := []kv{{"a", []byte("1")}, {"b", []byte{}}, {"c", []byte("3")}, {"d", []byte("4")},
				{"a", nil}, {"c", []byte("33")}, {"d", nil}, {"d", []byte{}}, {"e", nil}}
			var recs []*kgo.Record
			for _, x := range in {
				recs = append(recs, &kgo.Record{Topic: "rows", Key: []byte(x.k), Value: x.v})
			}
			if err := r.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			dataDir := filepath.Join(r.dir, "data")
			r.writeConfig(fmt.Sprintf(`data_dir: %s
checkpoint_interval: 100ms
kafka:
  brokers: [%s]
tasks:
  - name: kt
    module: %s
    delivery: %s
%s    inputs:
      - name: rows
        type: kafka
        topics: [rows]
    output:
      type: kafka
      topic: table
`, dataDir, r.brokers, module, tc.delivery, tc.extra))
			h := r.start()

			rd, err := kgo.NewClient(kgo.SeedBrokers(r.brokers), kgo.ConsumeTopics("table"),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var outs []*kgo.Record
			for len(outs) < len(in) {
				fs := rd.PollFetches(ctx)
				if ctx.Err() != nil {
					t.Fatalf("table: %d of %d outputs; the host's log:\n%s", len(outs), len(in), tail(h.logs.String(), 8000))
				}
				outs = append(outs, fs.Records()...)
			}
			h.stop(t)

			// Per key, in order (a key's records and outputs share a partition): nil is a
			// tombstone, '' an empty value.
			got := map[string][]string{}
			for _, o := range outs {
				v := "nil"
				if o.Value != nil {
					v = "'" + string(o.Value) + "'"
				}
				got[string(o.Key)] = append(got[string(o.Key)], v)
			}
			want := map[string][]string{"a": {"'1'", "nil"}, "b": {"''"}, "c": {"'3'", "'33'"}, "d": {"'4'", "nil", "''"}, "e": {"nil"}}
			if fmt.Sprint(got) != fmt.Sprint(want) || len(outs) != len(in) {
				t.Fatalf("%d outputs, per key %v; want %v", len(outs), got, want)
			}
			st := tableState(t, dataDir, "kt")
			if w := []string{`b/v=""`, `c/v="33"`, `d/v=""`}; !slices.Equal(st, w) {
				t.Fatalf("state %q, want %q (a's deleted by its tombstone, e never had any)", st, w)
			}
		})
	}
}

// TestFileTombstonesThroughBinary (ABI 0.5): a file input line whose value field is null reads
// as a tombstone through the binary, as the file output writes one: the table task deletes the
// key's state and its output line is "value":null, while "" and "null" are values.
func TestFileTombstonesThroughBinary(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/ktable")
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	lines := `{"k":"a","v":"1"}
{"k":"b","v":""}
{"k":"c","v":"null"}
{"k":"a","v":null}
{"k":"c","v":null}
{"k":"c","v":"3"}
{"k":"d","v":null}
`
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.ndjson")
	cfg := filepath.Join(dir, "wasmstream.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`data_dir: %s
tasks:
  - name: kt
    module: %s
    inputs:
      - name: rows
        path: %s
        key_field: k
        value_field: v
    output:
      type: file
      path: %s
`, filepath.Join(dir, "data"), module, input, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-level", "warn"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, o := range parseJSONLines(t, data) {
		v := "nil"
		if s, ok := o["value"].(string); ok {
			v = "'" + s + "'"
		} else if o["value"] != nil {
			t.Fatalf("output %v: value neither a string nor null", o)
		}
		got[o["key"].(string)] = append(got[o["key"].(string)], v)
	}
	want := map[string][]string{"a": {"'1'", "nil"}, "b": {"''"}, "c": {"'null'", "nil", "'3'"}, "d": {"nil"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outputs per key %v, want %v\n%s", got, want, data)
	}
	if n := strings.Count(string(data), `"value":null`); n != 3 {
		t.Errorf("%d lines with \"value\":null, want 3:\n%s", n, data)
	}
	st := tableState(t, filepath.Join(dir, "data"), "kt")
	if w := []string{`b/v=""`, `c/v="3"`}; !slices.Equal(st, w) {
		t.Fatalf("state %q, want %q", st, w)
	}
}
