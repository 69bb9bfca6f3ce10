package modrt

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
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
		// Through symlinks already in the grant, as the kernel would resolve them: sub/up is
		// the grant itself, so sub/up/.. is above it.
		{"..", "sub/up", true},
		{"../x", "sub/up/l10", false},
		{"sub/up/../x", "l11", false},
		{"sub/up/sub/b", "l12", true},
		{"premadedir/../x", "l13", false},
	} {
		if errno := r.Symlink(c.target, c.link); (errno == 0) != c.ok {
			t.Errorf("Symlink %q -> %q: %v, want allowed %v", c.link, c.target, errno, c.ok)
		}
	}
	// sub/l3 -> ../a is inside; moved or hard-linked to the top it would point out.
	if errno := r.Rename("sub/l3", "l3"); errno != experimentalsys.EPERM {
		t.Errorf("Rename sub/l3 (-> ../a) to l3: %v, want EPERM", errno)
	}
	if errno := r.Link("sub/l3", "l3"); errno != experimentalsys.EPERM {
		t.Errorf("Link sub/l3 (-> ../a) to l3: %v, want EPERM", errno)
	}
	if errno := r.Rename("sub/l3", "sub/l3b"); errno != 0 {
		t.Errorf("Rename sub/l3 to sub/l3b: %v", errno)
	}
	if errno := r.Link("../secret.txt", "hard"); errno == 0 {
		t.Error("Link ../secret.txt: no error")
	}
	if errno := r.Rename("sub/b", "../stolen"); errno == 0 {
		t.Error("Rename to ../stolen: no error")
	}
}

// What a guest does inside a writable grant still works through rootFS: the operations WASI
// maps to, with the errnos wazero's own directory mount gives.
func TestRootFSOperations(t *testing.T) {
	_, grant := escapeLayout(t)
	r, err := openRootFS(grant, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	ok := func(what string, errno experimentalsys.Errno) {
		t.Helper()
		if errno != 0 {
			t.Fatalf("%s: %v", what, errno)
		}
	}
	is := func(what string, errno, want experimentalsys.Errno) {
		t.Helper()
		if errno != want {
			t.Errorf("%s: %v, want %v", what, errno, want)
		}
	}
	ok("Mkdir d", r.Mkdir("d", 0o755))
	is("Mkdir d again", r.Mkdir("d", 0o755), experimentalsys.EEXIST)
	is("Mkdir missing/d", r.Mkdir("missing/d", 0o755), experimentalsys.ENOENT)
	f, errno := r.OpenFile("d/f", experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_EXCL, 0o644)
	ok("create d/f", errno)
	if n, errno := f.Write([]byte("hello world")); errno != 0 || n != 11 {
		t.Fatalf("Write: %d, %v", n, errno)
	}
	if n, errno := f.Pwrite([]byte("W"), 6); errno != 0 || n != 1 {
		t.Fatalf("Pwrite: %d, %v", n, errno)
	}
	buf := make([]byte, 5)
	if n, errno := f.Pread(buf, 6); errno != 0 || string(buf[:n]) != "World" {
		t.Fatalf("Pread: %q, %v", buf[:n], errno)
	}
	if off, errno := f.Seek(0, 0); errno != 0 || off != 0 {
		t.Fatalf("Seek: %d, %v", off, errno)
	}
	if n, errno := f.Read(buf); errno != 0 || string(buf[:n]) != "hello" {
		t.Fatalf("Read: %q, %v", buf[:n], errno)
	}
	ok("Truncate", f.Truncate(5))
	ok("Sync", f.Sync())
	ok("Datasync", f.Datasync())
	ok("Utimens", f.Utimens(1e9, 2e9))
	if st, errno := f.Stat(); errno != 0 || st.Size != 5 || st.Mtim != 2e9 || st.Ino == 0 {
		t.Errorf("Stat: %+v, %v", st, errno)
	}
	is("SetAppend(false) when off", f.SetAppend(false), 0)
	ok("Close", f.Close())
	is("Read after Close", func() experimentalsys.Errno { _, e := f.Read(buf); return e }(), experimentalsys.EBADF)
	is("Truncate after Close", f.Truncate(0), experimentalsys.EBADF)
	is("create d/f O_EXCL", func() experimentalsys.Errno {
		_, e := r.OpenFile("d/f", experimentalsys.O_RDWR|experimentalsys.O_CREAT|experimentalsys.O_EXCL, 0o644)
		return e
	}(), experimentalsys.EEXIST)

	a, errno := r.OpenFile("d/f", experimentalsys.O_WRONLY|experimentalsys.O_APPEND, 0)
	ok("open append", errno)
	if !a.IsAppend() {
		t.Error("IsAppend: false")
	}
	if _, errno := a.Write([]byte("!")); errno != 0 {
		t.Fatal(errno)
	}
	a.Close()
	if b, _ := os.ReadFile(filepath.Join(grant, "d", "f")); string(b) != "hello!" {
		t.Errorf("d/f: %q", b)
	}
	// Append mode switched on an open file (fd_fdstat_set_flags), then off again.
	a, errno = r.OpenFile("d/f", experimentalsys.O_RDWR, 0)
	ok("open read-write", errno)
	ok("SetAppend(true)", a.SetAppend(true))
	a.Seek(0, 0)
	a.Write([]byte("?"))
	ok("SetAppend(false)", a.SetAppend(false))
	if a.IsAppend() {
		t.Error("IsAppend after SetAppend(false): true")
	}
	a.Seek(0, 0)
	a.Write([]byte("H"))
	a.Close()
	if b, _ := os.ReadFile(filepath.Join(grant, "d", "f")); string(b) != "Hello!?" {
		t.Errorf("d/f after append on and off: %q, want Hello!?", b)
	}

	// A directory lists its entries, rewinds on Seek(0) and then sees new ones.
	d, errno := r.OpenFile("d", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
	ok("open d", errno)
	names := func() []string {
		t.Helper()
		ds, errno := d.Readdir(-1)
		ok("Readdir", errno)
		var out []string
		for _, e := range ds {
			if e.Ino == 0 {
				t.Errorf("Readdir %s: no inode", e.Name)
			}
			out = append(out, e.Name)
		}
		return out
	}
	if got := names(); strings.Join(got, ",") != "f" {
		t.Errorf("Readdir: %q", got)
	}
	ok("Symlink d/l -> f", r.Symlink("f", "d/l"))
	if _, errno := d.Seek(0, 0); errno != 0 {
		t.Fatal(errno)
	}
	if got := names(); len(got) != 2 {
		t.Errorf("Readdir after Seek(0): %q, want f and l", got)
	}
	is("Write to a directory", func() experimentalsys.Errno { _, e := d.Write([]byte("x")); return e }(), experimentalsys.EISDIR)
	ok("Sync a directory", d.Sync())
	d.Close()

	if dst, errno := r.Readlink("d/l"); errno != 0 || dst != "f" {
		t.Errorf("Readlink: %q, %v", dst, errno)
	}
	if st, errno := r.Lstat("d/l"); errno != 0 || st.Mode&fs.ModeSymlink == 0 {
		t.Errorf("Lstat d/l: %v, %v", st.Mode, errno)
	}
	if st, errno := r.Stat("d/l"); errno != 0 || st.Size != 7 {
		t.Errorf("Stat d/l: %+v, %v", st, errno)
	}
	is("open d/l O_NOFOLLOW", func() experimentalsys.Errno {
		_, e := r.OpenFile("d/l", experimentalsys.O_RDONLY|experimentalsys.O_NOFOLLOW, 0)
		return e
	}(), experimentalsys.ELOOP)
	is("open d/f O_DIRECTORY", func() experimentalsys.Errno {
		_, e := r.OpenFile("d/f", experimentalsys.O_RDONLY|experimentalsys.O_DIRECTORY, 0)
		return e
	}(), experimentalsys.ENOTDIR)
	is("open missing", func() experimentalsys.Errno { _, e := r.OpenFile("nope", experimentalsys.O_RDONLY, 0); return e }(), experimentalsys.ENOENT)
	ok("Chmod", r.Chmod("d/f", 0o600))
	ok("Utimens", r.Utimens("d/f", experimentalsys.UTIME_OMIT, 3e9))
	if st, _ := r.Stat("d/f"); st.Mode.Perm() != 0o600 || st.Mtim != 3e9 {
		t.Errorf("after Chmod and Utimens: %v %d", st.Mode, st.Mtim)
	}
	ok("Link d/f d/h", r.Link("d/f", "d/h"))
	ok("Rename d/h d/g", r.Rename("d/h", "d/g"))
	is("Rmdir d/g", r.Rmdir("d/g"), experimentalsys.ENOTDIR)
	is("Unlink d", r.Unlink("d"), experimentalsys.EISDIR)
	is("Rmdir d (not empty)", r.Rmdir("d"), experimentalsys.ENOTEMPTY)
	for _, p := range []string{"d/g", "d/f", "d/l"} {
		ok("Unlink "+p, r.Unlink(p))
	}
	ok("Rmdir d", r.Rmdir("d"))
	is("Stat d", func() experimentalsys.Errno { _, e := r.Stat("d"); return e }(), experimentalsys.ENOENT)

	// Read-only: every change is EROFS, reads work.
	ro, err := openRootFS(grant, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.close()
	for what, errno := range map[string]experimentalsys.Errno{
		"Mkdir":   ro.Mkdir("d", 0o755),
		"Chmod":   ro.Chmod("sub/b", 0o600),
		"Rename":  ro.Rename("sub/b", "c"),
		"Rmdir":   ro.Rmdir("sub"),
		"Unlink":  ro.Unlink("sub/b"),
		"Link":    ro.Link("sub/b", "c"),
		"Symlink": ro.Symlink("sub/b", "c"),
		"Utimens": ro.Utimens("sub/b", 0, 0),
		"open for write": func() experimentalsys.Errno {
			_, e := ro.OpenFile("sub/b", experimentalsys.O_WRONLY, 0)
			return e
		}(),
		"create read-only": func() experimentalsys.Errno {
			_, e := ro.OpenFile("new", experimentalsys.O_RDONLY|experimentalsys.O_CREAT, 0o644)
			return e
		}(),
	} {
		is(what+" on a read-only grant", errno, experimentalsys.EROFS)
	}
	rf, errno := ro.OpenFile("a", experimentalsys.O_RDONLY, 0)
	ok("open a read-only", errno)
	defer rf.Close()
	if n, errno := rf.Read(buf); errno != 0 || string(buf[:n]) != "insid" {
		t.Errorf("Read: %q, %v", buf[:n], errno)
	}
	is("Utimens on a read-only file", rf.Utimens(0, 0), experimentalsys.EROFS)
	is("Write on a read-only file", func() experimentalsys.Errno { _, e := rf.Write([]byte("x")); return e }(), experimentalsys.EBADF)
	if _, err := os.Stat(filepath.Join(grant, "new")); !os.IsNotExist(err) {
		t.Errorf("a read-only grant created a file: %v", err)
	}
}

// BenchmarkGrantFS compares rootFS with wazero's own directory mount, which it replaced: opening,
// reading and closing a file two directories down, and reading an open file.
func BenchmarkGrantFS(b *testing.B) {
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "b", "f"), make([]byte, 4096), 0o644); err != nil {
		b.Fatal(err)
	}
	r, err := openRootFS(dir, true)
	if err != nil {
		b.Fatal(err)
	}
	defer r.close()
	buf := make([]byte, 64)
	for _, c := range []struct {
		name string
		fs   experimentalsys.FS
	}{{"wazero-dirfs", sysfs.DirFS(dir)}, {"rootfs", r}} {
		b.Run(c.name+"/open-read-close", func(b *testing.B) {
			for b.Loop() {
				f, errno := c.fs.OpenFile("a/b/f", experimentalsys.O_RDONLY, 0)
				if errno != 0 {
					b.Fatal(errno)
				}
				f.Read(buf)
				f.Close()
			}
		})
		b.Run(c.name+"/pread", func(b *testing.B) {
			f, errno := c.fs.OpenFile("a/b/f", experimentalsys.O_RDONLY, 0)
			if errno != 0 {
				b.Fatal(errno)
			}
			defer f.Close()
			for b.Loop() {
				f.Pread(buf, 128)
			}
		})
	}
}

// Each instance opens its granted directories and closes them with itself; a directory gone
// since Compile fails the instance, naming it.
func TestGrantDirsClosedWithInstance(t *testing.T) {
	_, grant := escapeLayout(t)
	r := newRuntime(t, RuntimeConfig{})
	m := compile(t, r, "fsescape", Limits{Grants: Grants{Dirs: []DirGrant{{Host: grant, Guest: "/data"}}}})
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd to count open files")
		}
		return len(ents)
	}
	before := fds()
	for range 20 {
		i, err := m.Instantiate(ctx, InstanceConfig{Task: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := i.Process(ctx, []abi.Record{rec("k", []byte("rsub/b"))}, nil); err != nil {
			t.Fatal(err)
		}
		if err := i.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if after := fds(); after > before+2 {
		t.Errorf("%d open files after 20 instances came and went, %d before", after, before)
	}
	moved := grant + ".moved"
	if err := os.Rename(grant, moved); err != nil {
		t.Fatal(err)
	}
	_, err := m.Instantiate(ctx, InstanceConfig{Task: "t"})
	if err == nil || !strings.Contains(err.Error(), `task "t": granted directory `+grant+" cannot be opened") {
		t.Errorf("Instantiate with the granted directory gone: %v", err)
	}
}

// A symlink checked alone when it is made can be made to point out by a symlink made after it:
// l -> nx/../secret.txt resolves inside while nx does not exist, and nx -> . is inside too, but
// together l is ../secret.txt for the kernel. No order of symlinks the guest makes may leave one
// that a program outside the sandbox would follow out of the grant.
func TestRootFSSymlinkOrderCannotPointOut(t *testing.T) {
	_, grant := escapeLayout(t)
	r, err := openRootFS(grant, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if errno := r.Mkdir("d", 0o755); errno != 0 {
		t.Fatal(errno)
	}
	for _, l := range [][2]string{
		{"nx/../secret.txt", "l1"}, // nx does not exist yet
		{"d/../secret.txt", "l2"},  // d is a directory, replaced below by a link
		{"nx/./../outdir/f", "l3"},
	} {
		r.Symlink(l[0], l[1])
	}
	// Now make nx and d the grant itself (d's directory goes first).
	if errno := r.Symlink(".", "nx"); errno != 0 {
		t.Fatalf("Symlink nx -> .: %v", errno)
	}
	if errno := r.Rmdir("d"); errno != 0 {
		t.Fatal(errno)
	}
	if errno := r.Symlink(".", "d"); errno != 0 {
		t.Fatalf("Symlink d -> .: %v", errno)
	}
	for _, l := range []string{"l1", "l2", "l3"} {
		if _, err := os.Lstat(filepath.Join(grant, l)); err != nil {
			continue // refused when made: good
		}
		real, err := filepath.EvalSymlinks(filepath.Join(grant, l))
		if err != nil {
			t.Fatal(err)
		}
		if rel, err := filepath.Rel(grant, real); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			t.Errorf("the guest left %s pointing out of the grant, at %s", l, real)
		}
	}
	// Leading ".." stays allowed where it stays inside.
	if errno := r.Symlink("../sub/b", "sub/ok"); errno != 0 {
		t.Errorf("Symlink sub/ok -> ../sub/b: %v", errno)
	}
}
