package task

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
)

// A file input's committed position carries a fingerprint of the file it was read from, in
// store.Position.TopicID (which only Kafka partitions use otherwise): a SHA-256 of the file's
// first min(Resume, printBytes) bytes and of whether byte Resume-1 is a line ending, cut to 16
// bytes. A restart compares it with the file's own before it resumes at byte Resume, so that a
// file replaced by another one as long or longer (a regenerated export, a rotated log, an edit
// of its first lines, or one whose first 4 KiB are the same but whose line ends moved) is
// refused with a clear error instead of being read from the middle: before, its first Resume
// bytes were skipped silently. A position without a fingerprint (written before it existed, or
// by a reset) is not checked.

// printBytes is how many bytes from the start of a file the fingerprint covers at most.
const printBytes = 4096

// filePrint keeps a file input's start, to fingerprint its positions without reading the file
// for each: once the file has printBytes, every position at or beyond them has the same.
type filePrint struct {
	f *os.File
	// unterminated is the End of the line read without a line ending (0: none): every other
	// position follows a line ending.
	unterminated func() int64
	head         []byte   // the file's first bytes, up to printBytes, as last read
	full         [16]byte // the fingerprint of the whole head, once len(head) == printBytes
	start        []byte   // the file's first bytes, up to printBytes, when it was opened
}

// changedWhileRead says how the file at path is no longer the one p reads, once it was read to
// its end at byte end: removed, replaced by another (renamed over it, as log rotation does),
// truncated below end, or its first bytes rewritten. "" when it is the same file (grown or not),
// or p is nil. Whatever happened, the run read the file it opened up to end; the lines it read
// after a truncation that was written again may be parts of the new lines, and the next run
// refuses a file that does not match its position (checkFile). A file changed the same way
// before it was opened is refused at the open.
func (p *filePrint) changedWhileRead(path string, end int64) string {
	if p == nil {
		return ""
	}
	fi, err := p.f.Stat()
	if err != nil {
		return ""
	}
	pi, err := os.Stat(path)
	switch {
	case err != nil:
		return "was removed or renamed while it was read: the run read what it had opened to its end"
	case !os.SameFile(fi, pi):
		return "was replaced by another file while it was read (renamed over it, as log rotation does): the run read the file it had opened to its end, not the new one"
	case fi.Size() < end:
		return fmt.Sprintf("was truncated while it was read: it holds %d bytes, %d were read; the last line read may be the part of one the reader had when it was cut, and lines written to the file after the truncation are not read", fi.Size(), end)
	}
	if head, err := readHead(p.f, len(p.start)); err == nil && !bytes.Equal(head, p.start) {
		return "was rewritten while it was read (its first bytes changed: truncated and written again?): the lines read after the change may be parts of its new lines"
	}
	return ""
}

// at returns the fingerprint of a position at byte resume of the file; zero for resume 0 or
// when the file cannot be read (the position is then not checked at the next start).
func (p *filePrint) at(resume int64) [16]byte {
	if p == nil || resume <= 0 {
		return [16]byte{}
	}
	fp := p.headPrint(resume)
	if fp != ([16]byte{}) && resume == p.unterminated() {
		fp[15] ^= 1 // byte resume-1 is not a line ending
	}
	return fp
}

// headPrint returns the fingerprint of the file's first min(resume, printBytes) bytes.
func (p *filePrint) headPrint(resume int64) [16]byte {
	n := int(min(resume, printBytes))
	if len(p.head) < n {
		head, err := readHead(p.f, n)
		if err != nil || len(head) < n {
			return [16]byte{}
		}
		p.head = head
		if len(head) == printBytes {
			p.full = fingerprint(head)
		}
	}
	if n == printBytes {
		return p.full
	}
	return fingerprint(p.head[:n])
}

// readHead reads the first n bytes of f (fewer if it is shorter) without moving its offset.
func readHead(f io.ReaderAt, n int) ([]byte, error) {
	b := make([]byte, n)
	m, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:m], nil
}

func fingerprint(b []byte) [16]byte {
	sum := sha256.Sum256(b)
	var fp [16]byte
	copy(fp[:], sum[:])
	if fp == ([16]byte{}) {
		fp[0] = 1 // zero means "none"
	}
	return fp
}

// checkFile refuses to resume input name (path, open as f) at byte resume when the position's
// fingerprint want is not the file's: the file was replaced or rewritten since the checkpoint.
// A resume point that is not at the start of a line (the last line read had no line ending and
// the file has grown since) is logged by the caller: warn is true then.
func checkFile(f *os.File, task, name, path string, resume int64, want [16]byte) (warn bool, err error) {
	if resume <= 0 {
		return false, nil
	}
	var b [2]byte // bytes resume-1 and resume
	m, _ := f.ReadAt(b[:], resume-1)
	if want != ([16]byte{}) {
		head, err := readHead(f, int(min(resume, printBytes)))
		if err != nil {
			return false, fmt.Errorf("input %s: %w", name, err)
		}
		got := fingerprint(head)
		if m >= 1 && b[0] != '\n' {
			got[15] ^= 1
		}
		if got != want {
			return false, fmt.Errorf("input %s: %s is not the file the last checkpoint read %d bytes of: its first %d bytes differ, or a line ending moved (the file was replaced or rewritten); to read it from its first line, reset the task (wasmstream reset -c <config> --task %s --to earliest) or use a new data directory",
				name, path, resume, len(head), task)
		}
	}
	return m == 2 && b[0] != '\n' && !bytes.ContainsAny(b[1:], "\r\n"), nil
}
