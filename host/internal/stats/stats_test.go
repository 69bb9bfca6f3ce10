package stats

import (
	"encoding/json"
	"testing"
	"time"
)

// TestWireNames: the JSON names GET /v1/status has always served stay (clients and the
// dashboard read them); new figures only add names.
func TestWireNames(t *testing.T) {
	task := Task{Halted: true, Error: "x", Inputs: []Input{{Topic: "t"}},
		Recent: []RecentError{{Time: time.Unix(1, 0), Key: "k"}}}
	b, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"task", "version", "paused", "halted", "error", "records", "processed",
		"pending", "in_flight", "outputs", "skipped", "dead_letters", "retries", "failures", "checkpoints",
		"inputs", "late", "timers_set", "timers_fired", "timers_pending", "ticks", "restores",
		"restored_records", "restored_bytes", "changelog_records", "standby_records", "txn_commits",
		"txn_aborts", "guest_log_dropped", "recent_errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("task figures lack %q: %s", k, b)
		}
	}
	var inputs []map[string]json.RawMessage
	if err := json.Unmarshal(m["inputs"], &inputs); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "records", "committed", "topic", "partition", "lag", "watermark", "in_flight"} {
		if _, ok := inputs[0][k]; !ok {
			t.Errorf("input figures lack %q: %s", k, m["inputs"])
		}
	}
	var recent []map[string]json.RawMessage
	if err := json.Unmarshal(m["recent_errors"], &recent); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"time", "kind", "where", "key", "error"} {
		if _, ok := recent[0][k]; !ok {
			t.Errorf("recent error lacks %q: %s", k, m["recent_errors"])
		}
	}
}
