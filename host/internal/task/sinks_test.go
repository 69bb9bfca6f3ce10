package task

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmstream/wasmstream/host/internal/sink"
)

// TestFileDeadLettersKeepBytes checks that a dead letter's key and record come back byte for
// byte: as JSON strings when valid UTF-8, in base64 under key_b64 / record_b64 otherwise (a JSON
// string would turn every invalid byte into U+FFFD).
func TestFileDeadLettersKeepBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dead.ndjson")
	w, err := sink.OpenFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	dl := FileDeadLetters{W: w}
	cases := []struct{ key, record []byte }{
		{[]byte("bin-\xff"), []byte(`{"user":"bin-\xff","ts":"x"}`)},
		{[]byte("bin-\xfe"), []byte("plain \xc3 text")},
		{[]byte("alice"), []byte(`{"user":"alice"}`)},
		{nil, []byte("\xc3")},
		{[]byte("ctl"), bytes.Repeat([]byte{1}, 1000)},   // base64, not 6000 bytes of \u0001
		{[]byte("json"), []byte(`{"k":"a","v":"b\\n"}`)}, // a JSON line stays a string
	}
	for i, c := range cases {
		if err := dl.WriteDeadLetter(&DeadLetter{Task: "t", Input: "in", Offset: int64(i), Err: errors.New("bad"), Key: c.key, Value: c.record}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if len(lines) != len(cases) {
		t.Fatalf("%d lines, want %d", len(lines), len(cases))
	}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		get := func(field string) ([]byte, bool) {
			if s, ok := m[field].(string); ok {
				return []byte(s), true
			}
			if s, ok := m[field+"_b64"].(string); ok {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatalf("line %d: %s_b64: %v", i, field, err)
				}
				return b, true
			}
			return nil, false
		}
		key, hasKey := get("key")
		if hasKey != (cases[i].key != nil) || !bytes.Equal(key, cases[i].key) {
			t.Errorf("line %d: key %q (present %v), want %q", i, key, hasKey, cases[i].key)
		}
		if _, ok := m["record"]; i == len(cases)-1 && !ok {
			t.Errorf("line %d: a JSON line was not written as a string: %s", i, line)
		}
		if rec, _ := get("record"); !bytes.Equal(rec, cases[i].record) {
			t.Errorf("line %d: record %q, want %q", i, rec, cases[i].record)
		}
		if len(line) > 200+len(cases[i].record)*2 {
			t.Errorf("line %d: %d bytes for a record of %d", i, len(line), len(cases[i].record))
		}
	}
}

// TestFileDeadLettersValueNull: a dead letter of a record with a null value (a Kafka tombstone,
// ABI 0.5) has "record":null; one with an empty value has "record":"".
func TestFileDeadLettersValueNull(t *testing.T) {
	var buf bytes.Buffer
	w := sink.NewStream(&buf)
	dl := FileDeadLetters{W: w}
	for _, null := range []bool{true, false} {
		if err := dl.WriteDeadLetter(&DeadLetter{Task: "t", Input: "in", Err: errors.New("bad"), Key: []byte("k"), Value: []byte{}, ValueNull: null}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	if len(lines) != 2 || !bytes.HasSuffix(lines[0], []byte(`,"record":null}`)) || !bytes.HasSuffix(lines[1], []byte(`,"record":""}`)) {
		t.Fatalf("dead letters\n%s\nwant the first with \"record\":null, the second with \"record\":\"\"", buf.Bytes())
	}
	for _, l := range lines {
		if !json.Valid(l) {
			t.Fatalf("not JSON: %s", l)
		}
	}
}
