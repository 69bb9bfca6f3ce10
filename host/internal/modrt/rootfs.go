package modrt

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// rootFS is a granted directory as the guest sees it: a wazero file system over an os.Root, so
// that every path the guest names resolves beneath the grant. wazero's own directory mount
// joins paths to the host directory as strings and lets the kernel follow symlinks, so a guest
// could read and write the whole host through a symlink it made, or one already in the
// directory. os.Root resolves each component itself and refuses a symlink (or "..") that
// leads out, at open time, whoever made the link.
//
// Besides, Symlink refuses a target that is absolute or that leaves the grant when resolved
// from the link's directory (through the links already there), and Rename and Link do not move
// a symlink to where it would point out, so a guest cannot leave links pointing out for the
// host or another program to follow. A read-only rootFS refuses every change with EROFS.
//
// Paths come from wazero already cleaned and relative to the grant ("." is the grant itself);
// a path starting with ".." never reaches here (wazero refuses it with EPERM).
type rootFS struct {
	root     *os.Root
	readOnly bool
	// charge, if set, is called with the size of every read and write of a file's bytes
	// before it is done: the call pays for it (slice.go), like the bytes a host function copies.
	charge func(n int)
	// files, if set, counts the files the instance holds open through all its rootFSs: an
	// OpenFile beyond MaxOpenFiles fails with EAGAIN (wazero's errors have no EMFILE) and
	// calls refused. Before, a guest opening files without closing them took every descriptor
	// of the host process (20,000 here) in a second, and the host could open no more: its
	// store's files, Kafka's sockets, the admin API's connections.
	files   *int
	refused func()
}

// MaxOpenFiles is the most files (directories included) an instance may hold open in its
// granted directories at once, its preopened directories included.
const MaxOpenFiles = 256

var _ experimentalsys.FS = (*rootFS)(nil)

// openRootFS opens the host directory dir as a rootFS.
func openRootFS(dir string, readOnly bool) (*rootFS, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &rootFS{root: r, readOnly: readOnly}, nil
}

func (r *rootFS) String() string { return r.root.Name() }

func (r *rootFS) close() error { return r.root.Close() }

// errnoOf maps err to a WASI errno. os.Root's refusal of a path that leaves the root is not a
// system error: it becomes EPERM, as WASI runtimes answer for a path outside a preopen.
func errnoOf(err error) experimentalsys.Errno {
	if err == nil {
		return 0
	}
	errno := experimentalsys.UnwrapOSError(err)
	var se syscall.Errno
	if errno == experimentalsys.EIO && !errors.As(err, &se) {
		return experimentalsys.EPERM
	}
	return errno
}

// rootName is p as os.Root wants it: "." for the root.
func rootName(p string) string {
	if p == "" || p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

const writeFlags = experimentalsys.O_WRONLY | experimentalsys.O_RDWR | experimentalsys.O_CREAT |
	experimentalsys.O_TRUNC | experimentalsys.O_APPEND

// osFlag converts wazero's open flags to os flags. O_DIRECTORY and O_NOFOLLOW are checked by
// OpenFile, O_DSYNC becomes the stronger O_SYNC, O_NONBLOCK and O_RSYNC have no effect on the
// regular files and directories a grant holds.
func osFlag(f experimentalsys.Oflag) int {
	var o int
	switch f & (experimentalsys.O_RDONLY | experimentalsys.O_WRONLY | experimentalsys.O_RDWR) {
	case experimentalsys.O_WRONLY:
		o = os.O_WRONLY
	case experimentalsys.O_RDWR:
		o = os.O_RDWR
	default:
		o = os.O_RDONLY
	}
	for _, m := range []struct {
		from experimentalsys.Oflag
		to   int
	}{
		{experimentalsys.O_APPEND, os.O_APPEND},
		{experimentalsys.O_CREAT, os.O_CREATE},
		{experimentalsys.O_EXCL, os.O_EXCL},
		{experimentalsys.O_TRUNC, os.O_TRUNC},
		{experimentalsys.O_SYNC, os.O_SYNC},
		{experimentalsys.O_DSYNC, os.O_SYNC},
	} {
		if f&m.from != 0 {
			o |= m.to
		}
	}
	return o
}

// OpenFile implements experimentalsys.FS.
func (r *rootFS) OpenFile(p string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	p = rootName(p)
	isDir := flag&experimentalsys.O_DIRECTORY != 0
	if isDir && flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) != 0 {
		return nil, experimentalsys.EISDIR
	}
	if r.readOnly && flag&writeFlags != 0 {
		return nil, experimentalsys.EROFS
	}
	if flag&experimentalsys.O_NOFOLLOW != 0 {
		// os.Root follows a last-component symlink that stays inside; the guest asked not to.
		if fi, err := r.root.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, experimentalsys.ELOOP
		}
	}
	if r.files != nil && *r.files >= MaxOpenFiles {
		if r.refused != nil {
			r.refused()
		}
		return nil, experimentalsys.EAGAIN
	}
	of, err := r.root.OpenFile(p, osFlag(flag), perm)
	if err != nil {
		return nil, errnoOf(err)
	}
	if isDir {
		if fi, err := of.Stat(); err != nil || !fi.IsDir() {
			_ = of.Close()
			if err != nil {
				return nil, errnoOf(err)
			}
			return nil, experimentalsys.ENOTDIR
		}
	}
	// wazero's own wrapper of an fs.File does reads, writes, seeks, stats and directory
	// listings on the *os.File; rootFile adds what it lacks.
	h := &handle{f: of}
	wf, errno := (&sysfs.AdaptFS{FS: &reopener{root: r.root, path: p, first: h}}).OpenFile(".", experimentalsys.O_RDONLY, 0)
	if errno != 0 {
		_ = of.Close()
		return nil, errno
	}
	if r.files != nil {
		*r.files++
	}
	return &rootFile{File: wf, fs: r, path: p, flag: flag, h: h}, 0
}

// reopener is the fs.FS that wazero's file wrapper opens a file through: first the file
// rootFS.OpenFile opened, then, to rewind a directory's listing, the same path again through
// the root.
type reopener struct {
	root  *os.Root
	path  string
	first *handle
}

func (o *reopener) Open(string) (fs.File, error) {
	if h := o.first; h != nil {
		o.first = nil
		return h, nil
	}
	f, err := o.root.Open(o.path)
	if err != nil {
		return nil, err
	}
	return &handle{f: f}, nil
}

// handle is the fs.File wazero's wrapper works on: an *os.File that SetAppend can replace with
// the same file opened again.
type handle struct{ f *os.File }

func (h *handle) Stat() (fs.FileInfo, error)                { return h.f.Stat() }
func (h *handle) Read(b []byte) (int, error)                { return h.f.Read(b) }
func (h *handle) ReadAt(b []byte, off int64) (int, error)   { return h.f.ReadAt(b, off) }
func (h *handle) Seek(off int64, whence int) (int64, error) { return h.f.Seek(off, whence) }
func (h *handle) Write(b []byte) (int, error)               { return h.f.Write(b) }
func (h *handle) WriteAt(b []byte, off int64) (int, error)  { return h.f.WriteAt(b, off) }
func (h *handle) Readdir(n int) ([]fs.FileInfo, error)      { return h.f.Readdir(n) }
func (h *handle) Close() error                              { return h.f.Close() }

func (r *rootFS) stat(fi fs.FileInfo, err error) (sys.Stat_t, experimentalsys.Errno) {
	if err != nil {
		return sys.Stat_t{}, errnoOf(err)
	}
	return sys.NewStat_t(fi), 0
}

// Lstat implements experimentalsys.FS.
func (r *rootFS) Lstat(p string) (sys.Stat_t, experimentalsys.Errno) {
	return r.stat(r.root.Lstat(rootName(p)))
}

// Stat implements experimentalsys.FS.
func (r *rootFS) Stat(p string) (sys.Stat_t, experimentalsys.Errno) {
	return r.stat(r.root.Stat(rootName(p)))
}

// Readlink implements experimentalsys.FS.
func (r *rootFS) Readlink(p string) (string, experimentalsys.Errno) {
	dst, err := r.root.Readlink(rootName(p))
	return dst, errnoOf(err)
}

// Mkdir implements experimentalsys.FS.
func (r *rootFS) Mkdir(p string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	errno := errnoOf(r.root.Mkdir(rootName(p), perm))
	if errno == experimentalsys.ENOTDIR {
		errno = experimentalsys.ENOENT
	}
	return errno
}

// Chmod implements experimentalsys.FS.
func (r *rootFS) Chmod(p string, perm fs.FileMode) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(r.root.Chmod(rootName(p), perm))
}

// Rename implements experimentalsys.FS. os.Root keeps both names beneath the grant; a symlink
// is not moved where it would point out.
func (r *rootFS) Rename(from, to string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	from, to = rootName(from), rootName(to)
	if r.movesLinkOut(from, to) {
		return experimentalsys.EPERM
	}
	return errnoOf(r.root.Rename(from, to))
}

// remove removes p when it is (wantDir) or is not a directory.
func (r *rootFS) remove(p string, wantDir bool) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	p = rootName(p)
	fi, err := r.root.Lstat(p)
	if err != nil {
		return errnoOf(err)
	}
	switch {
	case wantDir && !fi.IsDir():
		return experimentalsys.ENOTDIR
	case !wantDir && fi.IsDir():
		return experimentalsys.EISDIR
	}
	return errnoOf(r.root.Remove(p))
}

// Rmdir implements experimentalsys.FS.
func (r *rootFS) Rmdir(p string) experimentalsys.Errno { return r.remove(p, true) }

// Unlink implements experimentalsys.FS.
func (r *rootFS) Unlink(p string) experimentalsys.Errno { return r.remove(p, false) }

// Link implements experimentalsys.FS. os.Root keeps both names beneath the grant; a hard link
// to a symlink is refused where the symlink would point out.
func (r *rootFS) Link(oldPath, newPath string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	oldPath, newPath = rootName(oldPath), rootName(newPath)
	if r.movesLinkOut(oldPath, newPath) {
		return experimentalsys.EPERM
	}
	return errnoOf(r.root.Link(oldPath, newPath))
}

// Symlink implements experimentalsys.FS: the target must stay beneath the grant when resolved
// from the link's directory; an absolute one or one that climbs out is refused with EPERM.
func (r *rootFS) Symlink(target, link string) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	link = rootName(link)
	if !r.symlinkInside(target, link) {
		return experimentalsys.EPERM
	}
	return errnoOf(r.root.Symlink(target, link))
}

// maxSymlinkHops bounds the symlinks followed to resolve one path, as Linux does.
const maxSymlinkHops = 40

// symlinkInside reports whether a symlink at link (relative to the grant) pointing to target
// would resolve beneath the grant: target is relative, has ".." only before its first name
// (dotDotAfterName), and resolving it from the link's
// directory, following the symlinks now in the grant as the kernel would, never climbs above
// the grant. From the first component that does not exist on, the rest is resolved lexically.
//
// This is checked when a link is made, renamed or hard-linked, so that a guest does not leave
// links pointing out for other programs; the guest's own opens are confined by os.Root whatever
// a link says (a directory holding links can still be moved, see docs/security.md).
func (r *rootFS) symlinkInside(target, link string) bool {
	if target == "" || path.IsAbs(target) || strings.ContainsRune(target, 0) || dotDotAfterName(target) {
		return false
	}
	var cur []string // resolved components from the grant
	todo := append(strings.Split(path.Dir(link), "/"), strings.Split(target, "/")...)
	exists, hops := true, 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return false
			}
			cur = cur[:len(cur)-1]
			continue
		}
		cur = append(cur, c)
		if !exists {
			continue
		}
		p := strings.Join(cur, "/")
		fi, err := r.root.Lstat(p)
		if err != nil {
			exists = false
			continue
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if hops++; hops > maxSymlinkHops {
			return false
		}
		t, err := r.root.Readlink(p)
		if err != nil || t == "" || path.IsAbs(t) {
			return false
		}
		cur = cur[:len(cur)-1]
		todo = append(strings.Split(t, "/"), todo...)
	}
	return true
}

// dotDotAfterName reports whether target has a ".." after a name ("nx/../x"). The kernel
// resolves such a ".." from wherever the name leads when the link is followed, and a symlink
// made later can make the name lead elsewhere (nx -> . makes nx/.. the grant's parent): no check
// when the link is made can vouch for it. Leading ".." ("../../x") climbs from the link's own
// directory, which only a rename of a directory holding the link changes.
func dotDotAfterName(target string) bool {
	named := false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return true
			}
		default:
			named = true
		}
	}
	return false
}

// movesLinkOut reports whether from is a symlink that would point out of the grant at to.
func (r *rootFS) movesLinkOut(from, to string) bool {
	fi, err := r.root.Lstat(from)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	t, err := r.root.Readlink(from)
	return err != nil || !r.symlinkInside(t, to)
}

// Utimens implements experimentalsys.FS.
func (r *rootFS) Utimens(p string, atim, mtim int64) experimentalsys.Errno {
	if r.readOnly {
		return experimentalsys.EROFS
	}
	return errnoOf(r.root.Chtimes(rootName(p), timeOf(atim), timeOf(mtim)))
}

// timeOf converts a Utimens time; UTIME_OMIT becomes the zero time, which Chtimes leaves alone.
func timeOf(ns int64) time.Time {
	if ns == experimentalsys.UTIME_OMIT {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// rootFile is a file or directory opened through a rootFS: wazero's wrapper of the *os.File,
// plus append mode, truncate, sync and times, which the wrapper does not do.
type rootFile struct {
	experimentalsys.File
	fs   *rootFS
	path string // relative to the root
	flag experimentalsys.Oflag
	h    *handle // as opened; a directory's may since have been reopened by the wrapper
	// closed: Close has run (it counts once against rootFS.files)
	closed bool
}

// Read implements experimentalsys.File, charged by the size asked for (rootFS.charge): before,
// a loop of reads of 1 MiB from a granted file cost one unit an iteration.
func (f *rootFile) Read(buf []byte) (int, experimentalsys.Errno) {
	f.fs.pay(len(buf))
	return f.File.Read(buf)
}

// Pread implements experimentalsys.File, charged like Read.
func (f *rootFile) Pread(buf []byte, off int64) (int, experimentalsys.Errno) {
	f.fs.pay(len(buf))
	return f.File.Pread(buf, off)
}

// Write implements experimentalsys.File, charged like Read.
func (f *rootFile) Write(buf []byte) (int, experimentalsys.Errno) {
	f.fs.pay(len(buf))
	return f.File.Write(buf)
}

// Pwrite implements experimentalsys.File, charged like Read.
func (f *rootFile) Pwrite(buf []byte, off int64) (int, experimentalsys.Errno) {
	f.fs.pay(len(buf))
	return f.File.Pwrite(buf, off)
}

func (r *rootFS) pay(n int) {
	if r.charge != nil {
		r.charge(n)
	}
}

// Close implements experimentalsys.File: the file no longer counts against MaxOpenFiles.
func (f *rootFile) Close() experimentalsys.Errno {
	if !f.closed && f.fs.files != nil {
		*f.fs.files--
	}
	f.closed = true
	return f.File.Close()
}

// IsAppend implements experimentalsys.File.
func (f *rootFile) IsAppend() bool { return f.flag&experimentalsys.O_APPEND != 0 }

// SetAppend implements experimentalsys.File. An os.File's append mode is fixed when it is
// opened, so a file open for writing is opened again through the root, at the same offset; one
// open only for reading just notes it.
func (f *rootFile) SetAppend(enable bool) experimentalsys.Errno {
	st, errno := f.Stat()
	if errno != 0 {
		return errno
	}
	if enable == f.IsAppend() {
		return 0
	}
	if st.Mode.IsDir() {
		return experimentalsys.EISDIR
	}
	flag := f.flag &^ experimentalsys.O_APPEND
	if enable {
		flag |= experimentalsys.O_APPEND
	}
	if f.flag&(experimentalsys.O_WRONLY|experimentalsys.O_RDWR) == 0 {
		f.flag = flag
		return 0
	}
	off, err := f.h.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return errnoOf(err)
	}
	nf, err := f.fs.root.OpenFile(f.path, osFlag(flag&^(experimentalsys.O_CREAT|experimentalsys.O_TRUNC|experimentalsys.O_EXCL)), 0)
	if err != nil {
		return errnoOf(err)
	}
	if fi, err := nf.Stat(); err != nil || !os.SameFile(fi, statOrNil(f.h.f)) {
		_ = nf.Close()
		return experimentalsys.ENOENT // renamed or replaced since it was opened
	}
	if _, err := nf.Seek(off, io.SeekStart); err != nil {
		_ = nf.Close()
		return errnoOf(err)
	}
	_ = f.h.f.Close()
	f.h.f, f.flag = nf, flag
	return 0
}

// statOrNil is f's FileInfo, or nil.
func statOrNil(f *os.File) fs.FileInfo {
	fi, _ := f.Stat()
	return fi
}

// Truncate implements experimentalsys.File.
func (f *rootFile) Truncate(size int64) experimentalsys.Errno {
	if st, errno := f.Stat(); errno != 0 { // EBADF once closed
		return errno
	} else if st.Mode.IsDir() {
		return experimentalsys.EISDIR
	}
	if size < 0 {
		return experimentalsys.EINVAL
	}
	return errnoOf(f.h.f.Truncate(size))
}

// Sync implements experimentalsys.File. A directory is synced through a fresh handle, as the
// wrapper may have reopened it.
func (f *rootFile) Sync() experimentalsys.Errno {
	st, errno := f.Stat()
	if errno != 0 {
		return errno
	}
	if !st.Mode.IsDir() {
		return errnoOf(f.h.f.Sync())
	}
	d, err := f.fs.root.Open(f.path)
	if err != nil {
		return errnoOf(err)
	}
	defer d.Close()
	return errnoOf(d.Sync())
}

// Datasync implements experimentalsys.File.
func (f *rootFile) Datasync() experimentalsys.Errno { return f.Sync() }

// Utimens implements experimentalsys.File.
func (f *rootFile) Utimens(atim, mtim int64) experimentalsys.Errno {
	if _, errno := f.Stat(); errno != 0 {
		return errno // closed
	}
	if f.fs.readOnly {
		return experimentalsys.EROFS
	}
	return f.fs.Utimens(f.path, atim, mtim)
}
