package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

// Issue 13 item 1: through the real binary, a hostile guest with a writable directory grant
// tries to leave it through symlinks (its own and one already there) and "..": it reads nothing
// outside (and so cannot emit it), and the host file outside stays as it was.
func TestBinaryGrantSymlinkEscape(t *testing.T) {
	bin := guestbuild.Binary(t)
	module := guestbuild.Go(t, "testguests/hostile")
	dir := t.TempDir()
	grant := filepath.Join(dir, "grant")
	secret := filepath.Join(dir, "secret.txt")
	if err := os.Mkdir(grant, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("the secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret.txt", filepath.Join(grant, "premade")); err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "in.ndjson")
	if err := os.WriteFile(input, []byte(`{"user":"k","text":"escape /data"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	output := filepath.Join(dir, "out.ndjson")
	cfg := writeConfig(t, dir, module, input, output, `    grants:
      dirs: [{host: `+grant+`, guest: /data, writable: true}]
`)
	cmd := exec.Command(bin, "run", "-c", cfg, "--log-level", "warn")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, b)
	}

	f, err := os.Open(output)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var o struct{ Output, Key, Value string }
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("output %q: %v", sc.Text(), err)
		}
		if strings.Contains(o.Value, "the secret") || strings.Contains(o.Value, "root:") {
			t.Errorf("the guest emitted a host file outside its grant: %s = %q", o.Key, o.Value)
		}
		got[o.Key] = o.Value
	}
	t.Logf("escape attempts: %q", got)
	for _, k := range []string{"symlink up", "symlink deep", "symlink abs", "symlink x",
		"read up", "read deep", "read abs", "read premade", "read ../secret.txt", "write up", "write premade"} {
		if v, ok := got[k]; !ok || !strings.HasPrefix(v, "error: ") {
			t.Errorf("%s: %q, want an error", k, v)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "the secret" {
		t.Errorf("the host file outside the grant: %q, %v; want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Errorf("the guest created a file outside its grant: %v", err)
	}
	// x -> ../x was refused, so "create x" made a plain file inside the grant.
	if b, err := os.ReadFile(filepath.Join(grant, "x")); got["create x"] != "ok: " || err != nil || string(b) != "PWNED" {
		t.Errorf("create x inside the grant: %q; file %q, %v", got["create x"], b, err)
	}
}

// Issue 16 item 10: through the real binary, a task whose module makes requests its grant does
// not allow runs, the guest gets ERR_NOT_ALLOWED, and the log says why once per module, at warn,
// naming the refused host and the task (once each: a JSON line with a key twice is ambiguous);
// the start warns that the ungranted task's module imports http_request.
func TestBinaryHTTPRefusedHostLogged(t *testing.T) {
	module := guestbuild.Go(t, "testguests/fetch")
	bin := guestbuild.Binary(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.ndjson")
	lines := `{"user":"a","text":"http://blocked.example.com/x"}` + "\n" + `{"user":"b","text":"http://blocked.example.com/y"}` + "\n"
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.ndjson")
	cfg := writeConfig(t, dir, module, input, out, "    grants: {http: {allow: [api.example.com]}}\n"+`
  - name: nogrant
    module: `+module+`
    inputs: [{path: `+input+`, key_field: user, value_field: text}]
    output: {type: file, path: `+filepath.Join(dir, "out2.ndjson")+`}
`)
	code, _, stderr := runBinary(t, bin, nil, "run", "-c", cfg, "--log-format", "json", "--log-level", "warn")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	refused := map[string]string{} // task -> msg
	startWarned := false
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Count(line, `"task":`) > 1 {
			t.Errorf("log line names the task twice: %s", line)
		}
		msg, _ := rec["msg"].(string)
		task, _ := rec["task"].(string)
		switch {
		case strings.HasPrefix(msg, "http_request refused"):
			if rec["level"] != "WARN" || rec["host"] != "blocked.example.com" {
				t.Errorf("refusal line %s, want WARN naming host blocked.example.com", line)
			}
			if _, dup := refused[task]; dup {
				t.Errorf("task %s: a second refusal line within the rate limit: %s", task, line)
			}
			refused[task] = msg
		case strings.HasPrefix(msg, "imports http_request but grants.http is not set") && task == "nogrant":
			startWarned = true
		}
	}
	if !strings.Contains(refused["wc"], "grants.http.allow") || !strings.Contains(refused["nogrant"], "no grants.http") {
		t.Errorf("refusal lines by task %q, want one for wc (allowlist) and nogrant (no grant)\n%s", refused, stderr)
	}
	if !startWarned {
		t.Errorf("no start warning for the module of nogrant importing http_request:\n%s", stderr)
	}
	for _, o := range readJSONLines(t, out) {
		if v, _ := o["value"].(string); !strings.Contains(v, "ERR_NOT_ALLOWED") {
			t.Errorf("output %v, want the guest's ERR_NOT_ALLOWED", o)
		}
	}
}
