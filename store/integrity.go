package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// MarkerFile is the file that marks a directory as a wasmstream store that has been opened
// for writing at least once. Open writes it (atomically, fsynced) after the store's format
// version is durable, and from then on refuses a directory that has the marker but whose
// Badger database is gone or opens empty: that is a lost or damaged MANIFEST, not a new
// store, and opening it would silently start from nothing.
const MarkerFile = "STORE-ID"

// OuterMarker returns the path of the marker kept beside the store's directory dir
// ("state" → "state.STORE-ID"). It is written with MarkerFile and says the same, but it is
// not lost with the directory: a store whose directory was deleted, or emptied of every file,
// is refused rather than started afresh. Moving a store aside moves its outer marker with it.
func OuterMarker(dir string) string { return filepath.Clean(dir) + "." + MarkerFile }

// hasOuterMarker reports whether OuterMarker(dir) exists.
func hasOuterMarker(dir string) (bool, error) {
	_, err := os.Stat(OuterMarker(dir))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("store: %w", err)
	}
}

// markerText is the marker's content.
var markerText = fmt.Sprintf("wasmstream store\nformat %d\n", FormatVersion)

const manifestFile = "MANIFEST"

// corrupt returns an ErrCorrupt naming path.
func corrupt(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
}

// hasMarker reports whether dir holds the marker file.
func hasMarker(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, MarkerFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("store: %w", err)
	}
}

// writeMarker writes the marker file atomically and durably.
func writeMarker(dir string) error {
	return writeMarkerAt(filepath.Join(dir, MarkerFile))
}

// writeMarkerAt writes a marker file at path atomically and durably.
func writeMarkerAt(path string) error {
	dir := filepath.Dir(path)
	tmp := path + ".tmp"
	err := func() error {
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := f.WriteString(markerText); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	}()
	if err != nil {
		return fmt.Errorf("store: write %s: %w", path, err)
	}
	return nil
}

// checkFiles verifies dir's Badger files before Badger opens them, because Badger, given a
// damaged directory, either drops data silently (it starts afresh without a MANIFEST and then
// deletes every table the new one does not list; it skips a table whose checksum fails) or
// panics in a goroutine of its own (a truncated table), which no recover can catch. It checks
// that the MANIFEST exists and parses when the directory is or was a store, that every table
// it lists exists, and the checksum of every block of every table. Every problem is an
// ErrCorrupt naming the file. Its cost is one read of the whole store.
//
// It also mends what a kill leaves, and says what it did in fixes. An empty log file (a
// memtable's write-ahead log, *.mem, or a value log, *.vlog) is removed: Badger creates a log
// file and then sizes it, a kill between the two leaves it empty, and Badger then refuses the
// store (for writing it sizes the file and fails with "Create a new file"; read-only it cannot
// size it), although the file never held a record. Table files the MANIFEST does not list are
// moved into a new directory under orphanDir: Badger would delete them. A crash while Badger
// wrote a table leaves one (its data is also elsewhere), but so does a MANIFEST that lost its
// end, and then they hold the only copy. Then pruneOrphans keeps the newest such directories.
func checkFiles(dir string, marked bool) (fixes fileFixes, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fixes, nil // a new store
		}
		return fixes, fmt.Errorf("store: %w", err)
	}
	var data []string // Badger files that hold data
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".vlog", ".mem":
			empty, err := removeIfEmpty(dir, e)
			if err != nil {
				return fixes, err
			}
			if empty {
				fixes.emptied = append(fixes.emptied, e.Name())
				continue
			}
			data = append(data, e.Name())
		case ".sst":
			data = append(data, e.Name())
		}
	}
	manifest := filepath.Join(dir, manifestFile)
	f, err := os.Open(manifest)
	if errors.Is(err, fs.ErrNotExist) {
		if marked || len(data) > 0 {
			return fixes, corrupt(manifest, "missing, so the store's index of its tables is lost (the directory holds %d data files)", len(data))
		}
		return fixes, nil // a new store
	}
	if err != nil {
		return fixes, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() == 0 && !marked && len(data) == 0 {
		return fixes, nil // Badger was stopped while creating a new store
	}
	bo := badger.DefaultOptions(dir)
	m, _, err := func() (m badger.Manifest, off int64, err error) {
		defer recoverCorrupt(manifest, &err)
		return badger.ReplayManifestFile(f, bo.ExternalMagicVersion, bo)
	}()
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			return fixes, err
		}
		return fixes, corrupt(manifest, "unreadable: %v", err)
	}
	for id, tm := range m.Tables {
		path := table.NewFilename(id, dir)
		if err := checkTable(path, tm, bo); err != nil {
			return fixes, err
		}
	}
	gen := filepath.Join(dir, orphanDir, time.Now().UTC().Format(orphanGenFormat))
	for _, name := range data {
		id, ok := table.ParseFileID(name)
		if _, listed := m.Tables[id]; !ok || listed || !strings.HasSuffix(name, ".sst") {
			continue
		}
		if err := os.MkdirAll(gen, 0o755); err != nil {
			return fixes, fmt.Errorf("store: %w", err)
		}
		err := os.Rename(filepath.Join(dir, name), filepath.Join(gen, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // another reader moved it
			return fixes, fmt.Errorf("store: move aside a table the MANIFEST does not list: %w", err)
		}
		fixes.moved = append(fixes.moved, filepath.Join(filepath.Base(gen), name))
	}
	fixes.pruned, err = pruneOrphans(dir)
	return fixes, err
}

// fileFixes is what checkFiles changed in a store's directory.
type fileFixes struct {
	emptied []string // empty log files removed
	moved   []string // unlisted tables moved aside, as set/name
	pruned  []string // older sets of moved tables deleted
}

// log warns of each change, if any.
func (f fileFixes) log(log *slog.Logger, dir string) {
	if len(f.emptied) > 0 {
		log.Warn("removed empty log files left by a crash while Badger created them (they never held a record)",
			"dir", dir, "files", f.emptied)
	}
	if len(f.moved) > 0 {
		log.Warn("moved table files the MANIFEST does not list (left by a crash while Badger wrote a table, or the MANIFEST lost its end) aside instead of letting Badger delete them",
			"dir", dir, "moved_to", filepath.Join(dir, orphanDir), "files", f.moved)
	}
	if len(f.pruned) > 0 {
		log.Warn(fmt.Sprintf("deleted older sets of table files moved aside after crashes (the newest %d are kept)", keepOrphanGens),
			"dir", filepath.Join(dir, orphanDir), "deleted", f.pruned)
	}
}

// orphanGenFormat names the directory, under orphanDir, of the tables one Open moved aside:
// the time, so that names sort as the opens did.
const orphanGenFormat = "20060102T150405.000000000Z"

// keepOrphanGens is how many of the newest sets of moved tables pruneOrphans keeps.
const keepOrphanGens = 8

// pruneOrphans deletes all but the keepOrphanGens newest sets of tables Open moved aside, and
// returns their names. After a kill the moved tables are redundant (Badger had not yet listed
// the table it was writing, and the tables it replaces are still listed), and a host killed
// again and again (an orchestrator restarting it after each out-of-memory kill) would
// otherwise fill its disk with them; the newest sets stay for an operator who finds that the
// MANIFEST lost its end.
func pruneOrphans(dir string) (pruned []string, err error) {
	entries, err := os.ReadDir(filepath.Join(dir, orphanDir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("store: %w", err)
	}
	var gens []string
	for _, e := range entries {
		if _, terr := time.Parse(orphanGenFormat, e.Name()); e.IsDir() && terr == nil {
			gens = append(gens, e.Name())
		}
	}
	slices.Sort(gens)
	for _, g := range gens[:max(0, len(gens)-keepOrphanGens)] {
		if err := os.RemoveAll(filepath.Join(dir, orphanDir, g)); err != nil {
			return pruned, fmt.Errorf("store: delete old tables moved aside: %w", err)
		}
		pruned = append(pruned, g)
	}
	return pruned, nil
}

// removeIfEmpty removes the directory entry e of dir if it is an empty regular file, and
// reports whether it did.
func removeIfEmpty(dir string, e fs.DirEntry) (bool, error) {
	info, err := e.Info()
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	if !info.Mode().IsRegular() || info.Size() != 0 {
		return false, nil
	}
	if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("store: remove an empty log file left by a crash: %w", err)
	}
	return true, nil
}

// orphanDir is where Open moves table files the MANIFEST does not list.
const orphanDir = "unlisted-tables"

// checkTable opens one table read-only and verifies the checksums of all its blocks.
func checkTable(path string, tm badger.TableManifest, bo badger.Options) (err error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return corrupt(path, "missing, but the MANIFEST lists it")
	case err != nil:
		return fmt.Errorf("store: %w", err)
	case st.Size() == 0:
		return corrupt(path, "empty")
	}
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	defer mf.Close(-1)
	defer recoverCorrupt(path, &err)
	t, err := table.OpenTable(mf, table.Options{
		BlockSize:   bo.BlockSize,
		Compression: tm.Compression,
		ChkMode:     0, // verified explicitly below
	})
	if err != nil {
		return corrupt(path, "damaged: %v", err)
	}
	if err := t.VerifyChecksum(); err != nil {
		return corrupt(path, "damaged: %v", err)
	}
	return nil
}

// recoverCorrupt turns a panic of Badger's reading path into an ErrCorrupt naming path. It
// must be deferred directly.
func recoverCorrupt(path string, err *error) {
	if r := recover(); r != nil {
		*err = corrupt(path, "damaged: it fails verification (%v)", firstLine(fmt.Sprint(r)))
		if os.Getenv("WASMSTREAM_DEBUG_PANICS") != "" {
			debug.PrintStack()
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// checkSpace returns ErrDiskFull if dir's file system has less than opts.MinFreeBytes free.
func (db *DB) checkSpace() error {
	if db.dir == "" || db.opts.MinFreeBytes < 0 {
		return nil
	}
	return checkSpace(db.dir, db.opts.MinFreeBytes)
}

func checkSpace(dir string, min int64) error {
	free, err := freeBytes(dir)
	if err != nil || free >= min {
		return nil // a file system that cannot tell is not full for us
	}
	return fmt.Errorf("%w: %s: %d bytes free, at least %d needed", ErrDiskFull, dir, free, min)
}
