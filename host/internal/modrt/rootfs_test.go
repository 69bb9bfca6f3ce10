package modrt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/wasmstream/wasmstream/abi"
)

// WASI errnos the escape tests expect.
const (
	wasiEPERM = "63"
	wasiEROFS = "69"
)

// escapeLayout makes a directory to grant (holding sub/b, an inside symlink a -> sub/b, and
// symlinks made on the host that point out of it) beside a secret file and a directory the
// guest must not reach. It returns the parent and the granted directory.
func escapeLayout(t *testing.T) (base, grant string) {
	t.Helper()
	base = t.TempDir()
	grant = filepath.Join(base, "grant")
	for _, d := range []string{grant, filepath.Join(grant, "sub"), filepath.Join(base, "outdir")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range map[string]string{
		filepath.Join(base, "secret.txt"):  "the secret",
		filepath.Join(grant, "sub", "b"):   "inside b",
		filepath.Join(base, "outdir", "f"): "outside f",
	} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"premade":    "../secret.txt",
		"premadeabs": filepath.Join(base, "secret.txt"),
		"premadedir": "../outdir",
		"dangling":   "../created.txt",
		"a":          "sub/b",
	} {
		if err := os.Symlink(target, filepath.Join(grant, link)); err != nil {
			t.Fatal(err)
		}
	}
	return base, grant
}

// runEscape runs the fsescape guest with grants over one command per call and returns its
// stdout line for each ("NN data": the WASI errno and what it read).
func runEscape(t *testing.T, g Grants, cmds []string) map[string]string {
	t.Helper()
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "fsescape", Limits{Grants: g})
	logger, logs := newLogger()
	i := instantiate(t, m, InstanceConfig{Logger: logger})
	got := map[string]string{}
	for _, c := range cmds {
		seen := len(logs())
		if _, err := i.Process(ctx, []abi.Record{rec("k", []byte(c))}, nil); err != nil {
			t.Fatalf("%q: %v", c, err)
		}
		var lines []string
		for _, l := range logs()[seen:] {
			lines = append(lines, l.msg)
		}
		got[c] = strings.Join(lines, "\n")
	}
	t.Logf("%+v: %q", g.Dirs, got)
	return got
}

// Issue 13 item 1: with a writable grant, a guest can neither make a symlink that points out of
// the grant nor follow one (its own or one already there) to read, write or create a host file
// outside; ".." is refused; symlinks that stay inside still work.
func TestGrantWritableSymlinkEscape(t *testing.T) {
	base, grant := escapeLayout(t)
	cmds := []string{
		"s../secret.txt\x00up", "s../../../../etc/passwd\x00deep", "s/etc/passwd\x00abs",
		"s../x\x00x", "s../outdir\x00updir", "ssub/../../secret.txt\x00sneaky", "ssub/b\x00mine",
		"rup", "rdeep", "rabs", "rupdir/f", "rsneaky", "rpremade", "rpremadeabs", "rpremadedir/f",
		"r../secret.txt", "rsub/../../secret.txt", "r/etc/passwd",
		"wup", "wpremade", "wpremadeabs", "wpremadedir/f", "w../secret.txt", "wupdir/f",
		"cdangling", "cpremadedir/new", "lpremade",
		"ra", "rmine", "rsub/b", "wa", "csub/new", "cx",
	}
	got := runEscape(t, Grants{Dirs: []DirGrant{{Host: grant, Guest: "/data", Writable: true}}}, cmds)
	for _, c := range cmds[:7] {
		if want := map[bool]string{true: "00 ", false: wasiEPERM + " "}[c == "ssub/b\x00mine"]; got[c] != want {
			t.Errorf("symlink %q: %q, want %q", c[1:], got[c], want)
		}
	}
	for _, c := range cmds[7:27] {
		if strings.HasPrefix(got[c], "00") || strings.Contains(got[c], "secret") || strings.Contains(got[c], "root:") || strings.Contains(got[c], "outside") {
			t.Errorf("%q: %q, want an errno and nothing read", c, got[c])
		}
	}
	for c, want := range map[string]string{"ra": "00 inside b", "rmine": "00 inside b", "rsub/b": "00 inside b", "wa": "00 ", "csub/new": "00 ", "cx": "00 "} {
		if got[c] != want {
			t.Errorf("%q inside the grant: %q, want %q", c, got[c], want)
		}
	}
	for p, want := range map[string]string{
		filepath.Join(base, "secret.txt"):  "the secret",
		filepath.Join(base, "outdir", "f"): "outside f",
		filepath.Join(grant, "sub", "b"):   "PWNEDe b", // written over through a -> sub/b
		filepath.Join(grant, "sub", "new"): "PWNED",
		filepath.Join(grant, "x"):          "PWNED", // a plain file: the link x -> ../x was refused
	} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{filepath.Join(base, "x"), filepath.Join(base, "created.txt"), filepath.Join(base, "outdir", "new")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the guest created %s outside its grant: %v", p, err)
		}
	}
}

// Issue 13 item 1: a read-only grant holding symlinks that point out is not followed out, and
// nothing in it can be changed.
func TestGrantReadOnlySymlinkEscape(t *testing.T) {
	base, grant := escapeLayout(t)
	cmds := []string{
		"rpremade", "rpremadeabs", "rpremadedir/f", "rsub/../../secret.txt",
		"wpremade", "wsub/b", "wa", "csub/new", "cdangling", "ssub/b\x00mine",
		"ra", "rsub/b",
	}
	got := runEscape(t, Grants{Dirs: []DirGrant{{Host: grant, Guest: "/data"}}}, cmds)
	for _, c := range cmds[:4] {
		if strings.HasPrefix(got[c], "00") || strings.Contains(got[c], "secret") || strings.Contains(got[c], "outside") {
			t.Errorf("%q: %q, want an errno and nothing read", c, got[c])
		}
	}
	for _, c := range cmds[4:10] {
		if got[c] != wasiEROFS+" " {
			t.Errorf("%q on a read-only grant: %q, want EROFS (%s)", c, got[c], wasiEROFS)
		}
	}
	for _, c := range cmds[10:] {
		if got[c] != "00 inside b" {
			t.Errorf("%q: %q, want the inside file", c, got[c])
		}
	}
	for p, want := range map[string]string{filepath.Join(base, "secret.txt"): "the secret", filepath.Join(grant, "sub", "b"): "inside b"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{filepath.Join(base, "created.txt"), filepath.Join(grant, "sub", "new"), filepath.Join(grant, "mine")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the guest created %s in a read-only grant: %v", p, err)
		}
	}
}

// The file system itself, under what wazero hands it, refuses paths that leave the root: "..",
// absolute paths, and symlinks whose target climbs out, whatever the link's depth.
func TestRootFSRefusesEscapes(t *testing.T) {
	_, grant := escapeLayout(t)
	r, err := openRootFS(grant, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	for _, p := range []string{"../secret.txt", "sub/../../secret.txt", "premade", "premadedir/f"} {
		if f, errno := r.OpenFile(p, experimentalsys.O_RDONLY, 0); errno == 0 {
			f.Close()
			t.Errorf("OpenFile %q: opened", p)
		}
		if _, errno := r.Stat(p); errno == 0 {
			t.Errorf("Stat %q: no error", p)
		}
	}
	for _, c := range []struct {
		target, link string
		ok           bool
	}{
		{"sub/b", "l1", true},
		{"b", "sub/l2", true},
		{"../a", "sub/l3", true},
		{"..", "sub/l4", true},
		{"../..", "sub/l5", false},
		{"../../secret.txt", "sub/l6", false},
		{"..", "l7", false},
		{"/etc/passwd", "l8", false},
		{"", "l9", false},
	} {
		if errno := r.Symlink(c.target, c.link); (errno == 0) != c.ok {
			t.Errorf("Symlink %q -> %q: %v, want allowed %v", c.link, c.target, errno, c.ok)
		}
	}
	if errno := r.Link("../secret.txt", "hard"); errno == 0 {
		t.Error("Link ../secret.txt: no error")
	}
	if errno := r.Rename("sub/b", "../stolen"); errno == 0 {
		t.Error("Rename to ../stolen: no error")
	}
}
