package source

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Record is one line of an input.
type Record struct {
	Offset  int64 // line number from the start of the input
	End     int64 // byte position just after the line: where to resume after it
	Decoded       // valid when Err is nil
	Raw     []byte
	Err     error // the line could not be decoded (wraps ErrMalformed)
	// Truncated: Raw holds only the first MaxKeptLineBytes of a longer malformed line.
	Truncated bool
}

// Chunk is what a Reader sends to the loop: some records, and at the end of the input Done.
type Chunk struct {
	Stream  uint32
	Records []Record
	Done    bool  // the input is exhausted; no chunk follows
	Err     error // reading failed; no chunk follows
	// End is the byte position after the last line read, blank lines included: with Done, where
	// the input ended.
	End int64
}

// DefaultMaxLineBytes is the longest line a Reader accepts when Format.MaxLineBytes is 0; a
// longer line is a malformed record.
const DefaultMaxLineBytes = 4 << 20

// MaxKeptLineBytes bounds the copy of a line over the limit that its malformed record carries
// (Raw): such a line is kept whole, for the dead letters, up to this many bytes, and cut
// (Truncated) beyond. It is also the highest Format.MaxLineBytes.
const MaxKeptLineBytes = 64 << 20

// keptLineBytes is MaxKeptLineBytes; tests lower it.
var keptLineBytes = MaxKeptLineBytes

// A chunk holds at most chunkRecords records, and is handed over once its lines reach
// chunkBytes: with lines near the limit (or kept whole over it), a chunk must not hold 256 of
// them.
const (
	chunkRecords = 256
	chunkBytes   = 4 << 20
)

// Reader reads one input. Create it with NewReader, start it with Run.
type Reader struct {
	stream uint32
	r      io.Reader
	format Format
	offset int64 // next line number
	pos    int64 // byte position of the next line

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool

	// unterminated is the End of a last line read without its line ending (at the end of the
	// input), 0 if none: only such a line ends without one.
	unterminated atomic.Int64
}

// Unterminated returns the End of the line the reader read without a line ending (the last of
// its input), or 0 if it read none. Safe from any goroutine.
func (rd *Reader) Unterminated() int64 { return rd.unterminated.Load() }

// NewReader reads r, whose first byte is at byte position pos and whose first line is line
// number offset.
func NewReader(stream uint32, r io.Reader, format Format, offset, pos int64) *Reader {
	rd := &Reader{stream: stream, r: r, format: format, offset: offset, pos: pos}
	rd.cond = sync.NewCond(&rd.mu)
	return rd
}

// Pause stops the reader after the chunk it is reading. Safe from any goroutine.
func (rd *Reader) Pause() {
	rd.mu.Lock()
	rd.paused = true
	rd.mu.Unlock()
}

// Resume undoes Pause. Safe from any goroutine.
func (rd *Reader) Resume() {
	rd.mu.Lock()
	rd.paused = false
	rd.cond.Broadcast()
	rd.mu.Unlock()
}

// waitResumed blocks while paused; it returns false when ctx is done.
func (rd *Reader) waitResumed(ctx context.Context) bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	for rd.paused && ctx.Err() == nil {
		rd.cond.Wait()
	}
	return ctx.Err() == nil
}

// Run reads until the end of the input, an error or ctx is done, sending chunks to out. The
// last chunk has Done or Err set (unless ctx ended first).
func (rd *Reader) Run(ctx context.Context, out chan<- Chunk) {
	stop := context.AfterFunc(ctx, func() {
		rd.mu.Lock()
		rd.cond.Broadcast()
		rd.mu.Unlock()
	})
	defer stop()
	br := bufio.NewReaderSize(rd.r, 256<<10)
	send := func(c Chunk) bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		if !rd.waitResumed(ctx) {
			return
		}
		recs, done, err := rd.readChunk(br)
		c := Chunk{Stream: rd.stream, Records: recs, Done: done, Err: err, End: rd.pos}
		if !send(c) || done || err != nil {
			return
		}
	}
}

func (rd *Reader) readChunk(br *bufio.Reader) ([]Record, bool, error) {
	recs := make([]Record, 0, chunkRecords)
	size := 0
	for len(recs) < chunkRecords && size < chunkBytes {
		// Hand over what we have rather than wait for more: a slow stream (a pipe, a terminal)
		// must not hold complete lines back until a whole chunk has arrived.
		if len(recs) > 0 && br.Buffered() == 0 {
			return recs, false, nil
		}
		line, n, ending, err := readLine(br)
		if n > 0 {
			atStart := rd.pos == 0
			rd.pos += int64(n)
			off := rd.offset
			rd.offset++
			if err != nil {
				rd.unterminated.Store(rd.pos)
			}
			content := n - ending // the line's length without its line ending
			body := line
			if len(body) == n { // the whole line is here: drop its line ending
				body = line[:content]
			}
			if (atStart || rd.format.JSON) && bytes.HasPrefix(body, utf8BOM) {
				// A byte order mark (files saved "UTF-8 with BOM") is not the first key's or the
				// first JSON object's: dropped, its bytes still counted in the positions. No JSON
				// object starts with one, so it is dropped from any JSON line too: files saved
				// so, joined with cat, hold one at the start of each file's first line.
				body = body[len(utf8BOM):]
				content -= len(utf8BOM)
			}
			maxLine := rd.format.maxLineBytes()
			long := content > maxLine
			if len(bytes.TrimSpace(body)) > 0 || long {
				rec := Record{Offset: off, End: rd.pos, Raw: body}
				if long {
					rec.Err = fmt.Errorf("%w: line of %d bytes is longer than max_line_bytes (%d)", ErrMalformed, content, maxLine)
					rec.Truncated = len(body) < content
				} else {
					rec.Decoded, rec.Err = rd.format.Decode(body)
				}
				recs = append(recs, rec)
				size += len(rec.Raw)
			}
		}
		if err == io.EOF {
			return recs, true, nil
		}
		if err != nil {
			return recs, false, err
		}
	}
	return recs, false, nil
}

// utf8BOM is the UTF-8 byte order mark, which a Reader drops from the start of its input.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// readLine returns the next line with its line ending (a copy), the number of bytes consumed
// and how many of them are the line ending: "\n" or "\r\n", or at the end of the input
// (err io.EOF) a "\r" or nothing. A line over MaxKeptLineBytes is consumed whole but only its
// first MaxKeptLineBytes bytes returned; ending still counts the bytes that end the whole line.
func readLine(br *bufio.Reader) (line []byte, n, ending int, err error) {
	var last [2]byte // the last two bytes consumed, the latest in last[1]
	for {
		var frag []byte
		frag, err = br.ReadSlice('\n')
		n += len(frag)
		if len(line) < keptLineBytes {
			line = append(line, frag[:min(len(frag), keptLineBytes-len(line))]...)
		}
		switch len(frag) {
		case 0:
		case 1:
			last = [2]byte{last[1], frag[0]}
		default:
			last = [2]byte{frag[len(frag)-2], frag[len(frag)-1]}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if n > 0 && last[1] == '\n' {
			ending = 1
			if n > 1 && last[0] == '\r' {
				ending = 2
			}
		} else if n > 0 && last[1] == '\r' {
			ending = 1
		}
		return line, n, ending, err
	}
}
