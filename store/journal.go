package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The checkpoint journal: damage that Badger's replay hides.
//
// Badger replays its write-ahead log (the memtable's *.mem file) at open and stops at the first
// entry whose checksum fails, treating everything after it as the torn tail of a crash. A kill
// never tears that log (the kernel keeps what the process wrote), so a bad entry means the file
// was damaged, and every checkpoint written after it is gone without a word: the host would
// resume from an older checkpoint and recompute, and re-emit, everything since.
//
// So every Commit numbers its checkpoint: the number goes into Badger in the commit's last
// transaction, and once the commit returned, into JournalFile beside Badger's files (written to a
// temporary file and renamed over it). Open compares the two. The journal can only be behind
// Badger (a kill between the commit and the rename); when it is ahead, Badger lost committed
// checkpoints, and Open says so loudly with what was lost and where the store resumes (see
// Rollback). A writable Open then rewrites the journal to the store's number, so the warning is
// given once, by the open that resumes from the older checkpoint.

// JournalFile is the name of the checkpoint journal in the store's directory.
const JournalFile = "CHECKPOINT"

// commitSeqKey holds the number of the last checkpoint Commit wrote (a u64), in the table
// tableCommitSeq (added without a format change: see the package doc on adding tables).
var commitSeqKey = []byte{tableCommitSeq}

// Rollback describes checkpoints that the store lost: the journal records a later checkpoint
// than the one Badger holds.
type Rollback struct {
	// Stored is the number of the last checkpoint the store holds (0: none).
	Stored uint64
	// Journaled is the number of the last checkpoint the journal recorded as committed.
	Journaled uint64
	// JournaledAt is when the journaled checkpoint was committed.
	JournaledAt time.Time
}

// Lost is the number of committed checkpoints the store no longer has.
func (r Rollback) Lost() uint64 { return r.Journaled - r.Stored }

// Rollback returns the checkpoints lost before this Open, if the journal found any.
func (db *DB) Rollback() (Rollback, bool) {
	if db.rollback == nil {
		return Rollback{}, false
	}
	return *db.rollback, true
}

// readCommitSeq reads the number of the last checkpoint from Badger (0 if none).
func (db *DB) readCommitSeq() (uint64, error) {
	var seq uint64
	err := db.bdb.View(func(txn *badger.Txn) error {
		item, err := txn.Get(commitSeqKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: checkpoint number of %d bytes", ErrCorrupt, len(v))
			}
			seq = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("store: read checkpoint number: %w", err)
	}
	return seq, nil
}

// journal is what JournalFile holds.
type journal struct {
	seq uint64
	at  time.Time
}

// readJournal reads dir's journal; ok is false when there is none (a new store, or one written
// before the journal existed).
func readJournal(dir string) (j journal, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, JournalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return journal{}, false, nil
	}
	if err != nil {
		return journal{}, false, fmt.Errorf("store: read %s: %w", JournalFile, err)
	}
	// "checkpoint <n> <RFC 3339 time>\n"
	f := strings.Fields(string(b))
	if len(f) != 3 || f[0] != "checkpoint" {
		return journal{}, false, corrupt(filepath.Join(dir, JournalFile), "not a checkpoint journal: %q", firstLine(string(b)))
	}
	if j.seq, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return journal{}, false, corrupt(filepath.Join(dir, JournalFile), "bad checkpoint number %q", f[1])
	}
	if j.at, err = time.Parse(time.RFC3339Nano, f[2]); err != nil {
		return journal{}, false, corrupt(filepath.Join(dir, JournalFile), "bad time %q", f[2])
	}
	return j, true, nil
}

// writeJournal records checkpoint seq as committed at t.
func writeJournal(dir string, seq uint64, t time.Time) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "checkpoint %d %s\n", seq, t.UTC().Format(time.RFC3339Nano))
	tmp := filepath.Join(dir, JournalFile+".tmp")
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, JournalFile))
}

// checkJournal compares Badger's checkpoint number with the journal's at Open; see the comment
// at the top of this file.
func (db *DB) checkJournal() error {
	seq, err := db.readCommitSeq()
	if err != nil {
		return err
	}
	db.seq, db.journaled = seq, seq
	if db.dir == "" {
		return nil
	}
	j, ok, err := readJournal(db.dir)
	if err != nil {
		return err
	}
	if ok && j.seq > seq {
		db.rollback = &Rollback{Stored: seq, Journaled: j.seq, JournaledAt: j.at}
		db.logRollback()
	}
	if !db.opts.ReadOnly && (!ok || j.seq != seq) && seq > 0 {
		if err := writeJournal(db.dir, seq, time.Now()); err != nil {
			return fmt.Errorf("store: write %s: %w", JournalFile, err)
		}
	}
	return nil
}

// logRollback tells, at error level, which checkpoints were lost and where each stream resumes.
func (db *DB) logRollback() {
	r := db.rollback
	var resume []string
	tasks, _ := db.Tasks()
	for _, task := range tasks {
		streams, _ := db.Streams(task)
		for _, s := range streams {
			if p, ok, err := db.Position(task, s.ID); err == nil && ok {
				resume = append(resume, fmt.Sprintf("%s %s at %d", task, s.Name, p.Next))
			}
		}
	}
	const maxListed = 16
	more := ""
	if len(resume) > maxListed {
		more = fmt.Sprintf(" (and %d more)", len(resume)-maxListed)
		resume = resume[:maxListed]
	}
	db.opts.logger().Error(fmt.Sprintf("store: %s: the state store lost its last %d committed checkpoints: "+
		"it holds checkpoint %d, but checkpoint %d was committed at %s (%s says so). Badger's write-ahead log was damaged "+
		"after the last checkpoint it kept; its replay stops at the damage. Processing resumes from the older "+
		"checkpoint: inputs are read again from there, so state is recomputed, and outputs already delivered "+
		"for the lost checkpoints are delivered again",
		db.dir, r.Lost(), r.Stored, r.Journaled, r.JournaledAt.UTC().Format(time.RFC3339), JournalFile),
		slog.Uint64("stored_checkpoint", r.Stored), slog.Uint64("journaled_checkpoint", r.Journaled),
		slog.String("resumes_at", strings.Join(resume, ", ")+more))
}
