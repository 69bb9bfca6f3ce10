package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryRecordFailed: a run whose records all failed on every attempt does not exit 0
// silently: it exits 1 naming the task and where its dead letters are. A run where only some
// failed exits 0 with a warning that counts them.
func TestEveryRecordFailed(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"k":"a","v":"1"}`+"\n"+`{"k":"b","v":"2"}`+"\n"+`{"k":"a","v":"3"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `
data_dir: `+filepath.Join(dir, "data")+`
tasks:
  - name: trapper
    module: `+modrtFixture("trap.wasm")+`
    inputs: [{path: `+input+`, key_field: k, value_field: v}]
    retry: {max_attempts: 1}
`)
	code, _, stderr := runCLI(t, "run", "-c", path)
	want := "task trapper: every record failed: 3 of 3 went to the dead letters (" + filepath.Join(dir, "data", "trapper.deadletter.ndjson") + "), 0 were skipped"
	if code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, want %d and %q:\n%s", code, exitFailure, want, stderr)
	}

	// One malformed line of two: a warning, exit 0.
	if err := os.WriteFile(input, []byte(`{"k":"a","v":"1"}`+"\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path = writeConfig(t, `
data_dir: `+filepath.Join(dir, "data2")+`
tasks:
  - name: fine
    module: `+modrtFixture("asyncify.wasm")+`
    inputs: [{path: `+input+`, key_field: k, value_field: v}]
`)
	code, _, stderr = runCLI(t, "run", "-c", path)
	if code != 0 || !strings.Contains(stderr, `msg="records failed on every attempt" task=fine dead_letters=1 skipped=0 records=2`) {
		t.Errorf("exit %d, want 0 and a warning counting the dead letter:\n%s", code, stderr)
	}
}

// TestKeyRequired: a json line without its key field is a record of the empty key, unless the
// input sets key_required; then it is a dead letter naming the field.
func TestKeyRequired(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"k":"a","v":"1"}`+"\n"+`{"v":"2"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, require := range []bool{false, true} {
		data := filepath.Join(dir, "data-"+map[bool]string{false: "empty", true: "required"}[require])
		path := writeConfig(t, `
data_dir: `+data+`
tasks:
  - name: keyed
    module: `+modrtFixture("asyncify.wasm")+`
    inputs: [{path: `+input+`, key_field: k, value_field: v, key_required: `+map[bool]string{false: "false", true: "true"}[require]+`}]
`)
		code, _, stderr := runCLI(t, "run", "-c", path)
		if code != 0 {
			t.Fatalf("key_required %v: exit %d\n%s", require, code, stderr)
		}
		dead, _ := os.ReadFile(filepath.Join(data, "keyed.deadletter.ndjson"))
		want := ""
		if require {
			want = `key field \"k\" is missing (key_required)`
		}
		if got := string(dead); want == "" && got != "" || want != "" && (strings.Count(got, "\n") != 1 || !strings.Contains(got, want)) {
			t.Errorf("key_required %v: dead letters %q, want %s", require, got, map[bool]string{false: "none", true: "one naming the key field"}[require])
		}
	}
}
