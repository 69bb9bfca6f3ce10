package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/wasmstream/wasmstream/store"
)

// The module registry of a stopped host: what `wasmstream versions --data-dir` and
// `wasmstream rollback --data-dir` use when no host runs (after a task halted, say).

// ErrHostRunning is returned by OfflineVersions and OfflineRollback when a running host holds
// the data directory.
var ErrHostRunning = errors.New("wasmstream: a running host holds the data directory")

func openOffline(dataDir string, readOnly bool) (*store.DB, error) {
	dir := filepath.Join(dataDir, "state")
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoState, dataDir)
	}
	db, err := store.Open(dir, store.Options{ReadOnly: readOnly})
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("%w %s: stop it first, or use its admin API (without --data-dir)", ErrHostRunning, dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	return db, nil
}

// OfflineVersions lists task name's module versions, oldest first, in the data directory of a
// stopped host. It fails with ErrHostRunning if a host holds the directory, ErrNoState if it
// has no store, and ErrUnknownTask if the task has no version there.
func OfflineVersions(dataDir, name string) (_ []ModuleVersion, err error) {
	db, err := openOffline(dataDir, true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return storedVersions(db, dataDir, name)
}

func storedVersions(db *store.DB, dataDir, name string) ([]ModuleVersion, error) {
	active, _, err := db.ActiveModule(name)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	versions, err := db.ModuleVersions(name)
	if err != nil {
		return nil, fmt.Errorf("wasmstream: %w", err)
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w: %q has no module version in %s", ErrUnknownTask, name, dataDir)
	}
	out := make([]ModuleVersion, len(versions))
	for i, mv := range versions {
		out[i] = publicVersion(name, mv, active)
	}
	return out, nil
}

// OfflineRollback makes version to (0: the highest version below the active one) task name's
// active version in the data directory of a stopped host, recorded as a rollback: the next
// Run starts it (and, should its init fail, falls back as usual). Nothing is validated here;
// the next Run does. Errors are those of OfflineVersions, ErrUnknownVersion and
// ErrNoEarlierVersion.
func OfflineRollback(dataDir, name string, to int64) (_ *Deployment, err error) {
	requested := time.Now()
	db, err := openOffline(dataDir, false)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	versions, err := storedVersions(db, dataDir, name)
	if err != nil {
		return nil, err
	}
	var cur *ModuleVersion
	for i := range versions {
		if versions[i].Active {
			cur = &versions[i]
		}
	}
	var target *ModuleVersion
	for i := range versions {
		v := &versions[i]
		if to > 0 && v.Version == to || to == 0 && cur != nil && v.Version < cur.Version {
			target = v
		}
	}
	switch {
	case to < 0:
		return nil, fmt.Errorf("%w: version %d", ErrUnknownVersion, to)
	case target == nil && to > 0:
		return nil, fmt.Errorf("%w: task %s has no version %d (see its versions)", ErrUnknownVersion, name, to)
	case target == nil && cur == nil:
		return nil, fmt.Errorf("%w: task %s has no active version; pass the version to roll back to", ErrNoEarlierVersion, name)
	case target == nil:
		return nil, fmt.Errorf("%w: task %s runs version %d, the oldest it keeps", ErrNoEarlierVersion, name, cur.Version)
	}
	var prev int64
	if cur != nil {
		prev = cur.Version
		if cur.Version == target.Version {
			return &Deployment{Task: name, Version: *cur, Previous: prev, Unchanged: true, Requested: requested}, nil
		}
	}
	if err := db.SetActiveModule(name, store.ActiveModule{Version: uint64(target.Version), Since: time.Now().UnixMilli(), Origin: OriginRollback}); err != nil {
		return nil, fmt.Errorf("wasmstream: task %s: %w", name, err)
	}
	target.Active, target.ActiveOrigin = true, OriginRollback
	return &Deployment{Task: name, Version: *target, Previous: prev, Requested: requested}, nil
}
