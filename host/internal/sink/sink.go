package sink

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/wasmstream/wasmstream/abi"
)

// Writer appends JSON lines to a file or a stream. It is used by one goroutine.
//
// A file Writer holds every line until Flush: a line reaches the file only with the checkpoint
// that covers its record, so a killed process leaves no output of work it must redo, and a
// restart produces again only what the last checkpoint's commit did not finish. A stream Writer
// writes its buffer out whenever it holds 64 KiB.
type Writer struct {
	f    *os.File // nil for a plain stream
	out  io.Writer
	buf  []byte
	auto int // a stream's buffer size; 0: only Flush writes (a file)
	sync bool
	err  error // the first failed write
	n    int64 // lines written
}

// OpenFile opens path for appending, creating it and cutting a torn last line. With sync,
// Flush also fsyncs. Every flush goes to the end of the file as it is then (O_APPEND): two
// writers of one file (two hosts given the same output path) interleave their flushes instead of
// overwriting each other's lines, as writers at their own offsets did.
func OpenFile(path string, sync bool) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err // an *os.PathError: it names the file
	}
	if err := cutTornTail(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Writer{f: f, out: f, sync: sync}, nil
}

// cutTornTail truncates f after its last newline and positions it at the end.
func cutTornTail(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	end := size
	buf := make([]byte, 64<<10)
	for end > 0 {
		n := int64(len(buf))
		if end < n {
			n = end
		}
		if _, err := f.ReadAt(buf[:n], end-n); err != nil {
			return err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			end = end - n + int64(i) + 1
			break
		}
		end -= n
	}
	if end != size {
		if err := f.Truncate(end); err != nil {
			return err
		}
	}
	_, err = f.Seek(end, io.SeekStart)
	return err
}

// NewStream writes to w (e.g. standard output); Flush flushes but cannot fsync.
func NewStream(w io.Writer) *Writer {
	return &Writer{out: w, auto: 64 << 10}
}

// Header is an output header.
type Header struct{ Name, Value []byte }

// WriteOutput appends one output line. A nil value is a null one (a tombstone, ABI 0.5), written
// `"value":null`; an empty value is `"value":""`.
func (w *Writer) WriteOutput(name string, key, value []byte, ts int64, headers []Header) error {
	b := append(w.buf, `{"output":`...)
	b = AppendString(b, name)
	b = AppendKeyField(b, "key", key)
	if value == nil {
		b = append(b, `,"value":null`...)
	} else {
		b = AppendBytesField(b, "value", value)
	}
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, ts, 10)
	if len(headers) > 0 {
		b = append(b, `,"headers":{`...)
		for i, h := range headers {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, string(h.Name))
			b = append(b, ':')
			b = AppendString(b, string(h.Value))
		}
		b = append(b, '}')
	}
	b = append(b, "}\n"...)
	w.buf = b
	w.n++
	return w.wrote()
}

// WriteLine appends one already encoded JSON object and a newline.
func (w *Writer) WriteLine(obj []byte) error {
	w.n++
	w.buf = append(append(w.buf, obj...), '\n')
	return w.wrote()
}

// wrote writes a stream's full buffer out.
func (w *Writer) wrote() error {
	if w.auto > 0 && len(w.buf) >= w.auto {
		return w.write()
	}
	return nil
}

// Pending is the number of bytes written and not yet flushed.
func (w *Writer) Pending() int { return len(w.buf) }

// write hands the buffer to the file or stream.
// A failed write fails every later one: what follows it must not reach the file without it.
func (w *Writer) write() error {
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	if _, err := w.out.Write(w.buf); err != nil {
		w.err = err // an *os.PathError: it names the file
		return w.err
	}
	if cap(w.buf) > 16<<20 {
		w.buf = nil // do not keep a burst's memory
	} else {
		w.buf = w.buf[:0]
	}
	return nil
}

// Lines is the number of lines written since the Writer was created.
func (w *Writer) Lines() int64 { return w.n }

// Flush writes the buffer out and, for a file opened with sync, fsyncs it.
func (w *Writer) Flush() error {
	if err := w.write(); err != nil {
		return err
	}
	if w.f != nil && w.sync {
		if err := w.f.Sync(); err != nil {
			return err // an *os.PathError: it names the file
		}
	}
	return nil
}

// Close flushes and closes a file; a stream is only flushed.
func (w *Writer) Close() error {
	err := w.Flush()
	if w.f != nil {
		if cerr := w.f.Close(); err == nil {
			err = cerr
		}
		w.f = nil
	}
	return err
}

// AppendBytesField appends `,"field":` and v as a JSON string when v is valid UTF-8, and
// otherwise `,"field_b64":` and v in standard base64, so that the bytes are kept exactly.
func AppendBytesField(b []byte, field string, v []byte) []byte {
	if utf8.Valid(v) {
		b = append(b, `,"`...)
		b = append(b, field...)
		b = append(b, `":`...)
		return AppendString(b, string(v))
	}
	b = append(b, `,"`...)
	b = append(b, field...)
	b = append(b, `_b64":"`...)
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// AppendKeyField is AppendBytesField for a record key: the null key (abi.NullKey) is a JSON
// null, `,"key":null`.
func AppendKeyField(b []byte, field string, key []byte) []byte {
	if abi.IsNullKey(key) {
		b = append(b, `,"`...)
		b = append(b, field...)
		return append(b, `":null`...)
	}
	return AppendBytesField(b, field, key)
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r >= 0x80 && r <= 0x9f:
			// C1 controls (U+009B is a terminal's CSI, like ESC [): escaped, never raw.
			b = append(b, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
