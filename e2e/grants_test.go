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
