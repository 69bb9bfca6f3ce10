package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
)

const testStream = 7

// readAll runs a Reader over r until it reports the end of the input or an error, and returns
// every chunk it sent; the last one has Done or Err set.
func readAll(t *testing.T, r io.Reader, format Format, offset, pos int64) []Chunk {
	t.Helper()
	out := make(chan Chunk)
	stopped := make(chan struct{})
	rd := NewReader(testStream, r, format, offset, pos)
	go func() {
		defer close(stopped)
		rd.Run(t.Context(), out)
	}()
	var chunks []Chunk
	for {
		c := <-out
		chunks = append(chunks, c)
		if c.Stream != testStream {
			t.Errorf("chunk of stream %d, want %d", c.Stream, testStream)
		}
		if c.Done || c.Err != nil {
			break
		}
	}
	<-stopped
	return chunks
}

func allRecords(chunks []Chunk) []Record {
	var recs []Record
	for _, c := range chunks {
		recs = append(recs, c.Records...)
	}
	return recs
}

// line is what the tests compare of a record.
type line struct {
	Offset, End int64
	Raw         string
}

func lines(recs []Record) []line {
	out := make([]line, len(recs))
	for i, r := range recs {
		out[i] = line{r.Offset, r.End, string(r.Raw)}
	}
	return out
}

func TestReaderOffsetsAndEnds(t *testing.T) {
	tests := []struct {
		name        string
		input       string
		offset, pos int64
		want        []line
	}{
		{name: "empty input", input: ""},
		{name: "lines", input: "a\nbb\nccc\n", want: []line{{0, 2, "a"}, {1, 5, "bb"}, {2, 9, "ccc"}}},
		{name: "final line without newline", input: "a\nbb", want: []line{{0, 2, "a"}, {1, 4, "bb"}}},
		{name: "single line without newline", input: "only", want: []line{{0, 4, "only"}}},
		{name: "CRLF", input: "a\r\nbb\r\n", want: []line{{0, 3, "a"}, {1, 7, "bb"}}},
		{name: "CRLF final line without newline", input: "a\r\nb\r", want: []line{{0, 3, "a"}, {1, 5, "b"}}},
		// One "\r" before the "\n" is the line ending's; another is the line's.
		{name: "CR CRLF", input: "a\r\r\nb\n", want: []line{{0, 4, "a\r"}, {1, 6, "b"}}},
		{
			name:  "blank lines skipped but counted",
			input: "a\n\n  \t \r\n\nb\n",
			want:  []line{{0, 2, "a"}, {4, 12, "b"}},
		},
		{name: "only blank lines", input: "\n\n \n"},
		{name: "trailing blank line without newline", input: "a\n   ", want: []line{{0, 2, "a"}}},
		{name: "inner spaces kept", input: " a b \n", want: []line{{0, 6, " a b "}}},
		{
			name: "starts at the given offset and position", input: "x\n\ny\n", offset: 10, pos: 100,
			want: []line{{10, 102, "x"}, {12, 105, "y"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks := readAll(t, strings.NewReader(tt.input), Format{}, tt.offset, tt.pos)
			last := chunks[len(chunks)-1]
			if !last.Done || last.Err != nil {
				t.Fatalf("last chunk Done=%v Err=%v, want Done", last.Done, last.Err)
			}
			recs := allRecords(chunks)
			if got := lines(recs); !slices.Equal(got, tt.want) {
				t.Errorf("records = %v, want %v", got, tt.want)
			}
			for _, r := range recs {
				if r.Err != nil {
					t.Errorf("line %d: %v", r.Offset, r.Err)
				}
				if string(r.Value) != string(r.Raw) {
					t.Errorf("line %d: Value %q, want the raw line %q", r.Offset, r.Value, r.Raw)
				}
			}
		})
	}
}

// TestReaderEndsAreLineLengths checks End against the running sum of the line lengths over many
// chunks, and that every chunk but the last is bounded and not Done.
func TestReaderEndsAreLineLengths(t *testing.T) {
	var input strings.Builder
	var want []line
	pos := int64(0)
	for i := range 3*chunkRecords + 17 {
		l := fmt.Sprintf("%d:%s", i%13, strings.Repeat("v", i%29))
		nl := "\n"
		if i%5 == 0 {
			nl = "\r\n"
		}
		input.WriteString(l + nl)
		pos += int64(len(l) + len(nl))
		want = append(want, line{int64(i), pos, l})
	}
	chunks := readAll(t, strings.NewReader(input.String()), Format{KeySeparator: ":"}, 0, 0)
	if len(chunks) < 4 {
		t.Errorf("%d chunks for %d lines, want at least 4", len(chunks), len(want))
	}
	for i, c := range chunks {
		if len(c.Records) > chunkRecords {
			t.Errorf("chunk %d holds %d records, more than %d", i, len(c.Records), chunkRecords)
		}
		if c.Done != (i == len(chunks)-1) {
			t.Errorf("chunk %d Done = %v", i, c.Done)
		}
	}
	recs := allRecords(chunks)
	if got := lines(recs); !slices.Equal(got, want) {
		t.Fatalf("records differ:\n got %v\nwant %v", got, want)
	}
	for _, r := range recs {
		if want := fmt.Sprint(r.Offset % 13); string(r.Key) != want {
			t.Fatalf("line %d: key %q, want %q", r.Offset, r.Key, want)
		}
	}
}

// TestReaderResume starts a reader just after each line of a file, at that line's End and next
// offset, as a restart from a checkpoint does, and checks it reads exactly the rest.
func TestReaderResume(t *testing.T) {
	input := "first\n\nthird line\r\n  \nfifth\nsixth"
	full := allRecords(readAll(t, strings.NewReader(input), Format{}, 0, 0))
	if len(full) != 4 {
		t.Fatalf("%d records, want 4", len(full))
	}
	for i, r := range full {
		t.Run(fmt.Sprintf("after line %d", r.Offset), func(t *testing.T) {
			rest := allRecords(readAll(t, strings.NewReader(input[r.End:]), Format{}, r.Offset+1, r.End))
			if got, want := lines(rest), lines(full[i+1:]); !slices.Equal(got, want) {
				t.Errorf("resumed records = %v, want %v", got, want)
			}
		})
	}
}

type wantRec struct {
	off, end  int64
	malformed bool
	key       string
}

func TestReaderMalformedLines(t *testing.T) {
	long := strings.Repeat("x", 5<<20)
	tests := []struct {
		name   string
		input  string
		format Format
		want   []wantRec
	}{
		{
			name:   "5 MiB line then a good line",
			input:  long + "\n" + `{"k":"next"}` + "\n",
			format: Format{JSON: true, KeyField: "k"},
			want:   []wantRec{{0, 5<<20 + 1, true, ""}, {1, 5<<20 + 1 + 13, false, "next"}},
		},
		{
			name:   "good line then 5 MiB final line without newline",
			input:  `{"k":"a"}` + "\n\n" + long,
			format: Format{JSON: true, KeyField: "k"},
			want:   []wantRec{{0, 10, false, "a"}, {2, 11 + 5<<20, true, ""}},
		},
		{
			name:   "line of exactly DefaultMaxLineBytes is accepted",
			input:  "k:" + strings.Repeat("y", DefaultMaxLineBytes-2) + "\nk2:z\n",
			format: Format{KeySeparator: ":"},
			want:   []wantRec{{0, DefaultMaxLineBytes + 1, false, "k"}, {1, DefaultMaxLineBytes + 1 + 5, false, "k2"}},
		},
		{
			name:   "line of DefaultMaxLineBytes+1 is malformed",
			input:  strings.Repeat("y", DefaultMaxLineBytes+1) + "\nk2:z\n",
			format: Format{KeySeparator: ":"},
			want:   []wantRec{{0, DefaultMaxLineBytes + 2, true, ""}, {1, DefaultMaxLineBytes + 2 + 5, false, "k2"}},
		},
		{
			name:   "undecodable JSON between good lines",
			input:  `{"k":"a"}` + "\n" + `{"k":` + "\n" + `{"k":{}}` + "\n" + `{"k":"d"}` + "\n",
			format: Format{JSON: true, KeyField: "k"},
			want:   []wantRec{{0, 10, false, "a"}, {1, 16, true, ""}, {2, 25, true, ""}, {3, 35, false, "d"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks := readAll(t, strings.NewReader(tt.input), tt.format, 0, 0)
			if last := chunks[len(chunks)-1]; !last.Done {
				t.Fatalf("last chunk not Done: %v", last.Err)
			}
			recs := allRecords(chunks)
			if len(recs) != len(tt.want) {
				t.Fatalf("%d records, want %d", len(recs), len(tt.want))
			}
			for i, w := range tt.want {
				r := recs[i]
				if r.Offset != w.off || r.End != w.end {
					t.Errorf("record %d: offset %d End %d, want %d %d", i, r.Offset, r.End, w.off, w.end)
				}
				if w.malformed {
					if !errors.Is(r.Err, ErrMalformed) {
						t.Errorf("record %d: Err = %v, want ErrMalformed", i, r.Err)
					}
					// The whole line, for the dead letters.
					if want := strings.Split(tt.input, "\n")[w.off]; string(r.Raw) != want || r.Truncated {
						t.Errorf("record %d: Raw holds %d bytes (truncated %v), want the whole line of %d", i, len(r.Raw), r.Truncated, len(want))
					}
					continue
				}
				if r.Err != nil {
					t.Errorf("record %d: %v", i, r.Err)
				}
				if string(r.Key) != w.key {
					t.Errorf("record %d: key %q, want %q", i, r.Key, w.key)
				}
			}
		})
	}
}

// TestReaderLongLineKeptWhole checks that a line over the limit travels whole to the dead
// letters, and that the limit is the format's.
func TestReaderLongLineKeptWhole(t *testing.T) {
	for _, tt := range []struct {
		name   string
		max    int
		line   int
		ending string // "\n" unless set
		long   bool
		limit  int
	}{
		{name: "default limit, 5 MiB line", max: 0, line: 5 << 20, long: true, limit: DefaultMaxLineBytes},
		{name: "limit 100, line 101", max: 100, line: 101, long: true, limit: 100},
		{name: "limit 100, line 100", max: 100, line: 100, long: false},
		{name: "limit 8 MiB, 5 MiB line", max: 8 << 20, line: 5 << 20, long: false},
		// The limit is on the line without its line ending, "\r\n" as well as "\n": a CRLF line
		// of exactly the limit was malformed ("line of 101 bytes") and flagged truncated.
		{name: "limit 100, CRLF line 100", max: 100, line: 100, ending: "\r\n", long: false},
		{name: "limit 100, CRLF line 101", max: 100, line: 101, ending: "\r\n", long: true, limit: 100},
		{name: "limit 100, last line 100 ending in CR", max: 100, line: 100, ending: "\r", long: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			line := strings.Repeat("z", tt.line)
			input := line + "\nnext\n"
			if tt.ending == "\r" { // the last line, without "\n"
				input = "next\n" + line + "\r"
			} else if tt.ending != "" {
				input = line + tt.ending + "next\n"
			}
			recs := allRecords(readAll(t, strings.NewReader(input), Format{MaxLineBytes: tt.max}, 0, 0))
			if tt.ending == "\r" {
				recs[0], recs[1] = recs[1], recs[0]
			}
			if len(recs) != 2 || string(recs[1].Value) != "next" {
				t.Fatalf("%d records, want the line and the next one", len(recs))
			}
			r := recs[0]
			if !tt.long {
				if r.Err != nil || len(r.Value) != tt.line {
					t.Fatalf("Err %v, value of %d bytes; want the line accepted", r.Err, len(r.Value))
				}
				return
			}
			if !errors.Is(r.Err, ErrMalformed) {
				t.Fatalf("Err = %v, want ErrMalformed", r.Err)
			}
			if string(r.Raw) != line || r.Truncated {
				t.Errorf("Raw holds %d bytes (truncated %v), want the whole line of %d", len(r.Raw), r.Truncated, tt.line)
			}
			if msg := r.Err.Error(); !strings.Contains(msg, fmt.Sprintf("line of %d bytes", tt.line)) || !strings.Contains(msg, fmt.Sprint(tt.limit)) || !strings.Contains(msg, "max_line_bytes") {
				t.Errorf("error %q does not state the limit and its key", msg)
			}
		})
	}
}

// TestReaderChunkBytesBounded checks that long lines are handed over a few at a time: a chunk
// stops growing once it holds chunkBytes of lines, so 256 lines near the limit (or kept whole
// over it) are never in memory at once.
func TestReaderChunkBytesBounded(t *testing.T) {
	line := strings.Repeat("z", 1<<20+1)
	recs := 0
	for _, c := range readAll(t, strings.NewReader(strings.Repeat(line+"\n", 20)), Format{MaxLineBytes: 1 << 20}, 0, 0) {
		size := 0
		for _, r := range c.Records {
			if string(r.Raw) != line {
				t.Fatalf("record %d: Raw of %d bytes, want the whole line", r.Offset, len(r.Raw))
			}
			size += len(r.Raw)
		}
		if n := len(c.Records); n > 0 && size-len(line) >= chunkBytes {
			t.Errorf("a chunk holds %d lines, %d bytes", n, size)
		}
		recs += len(c.Records)
	}
	if recs != 20 {
		t.Errorf("%d records, want 20", recs)
	}
}

// TestReaderHugeLineIsCut checks that a line over MaxKeptLineBytes is cut, and says so, rather
// than held whole in memory.
func TestReaderHugeLineIsCut(t *testing.T) {
	keptLineBytes = 1000
	t.Cleanup(func() { keptLineBytes = MaxKeptLineBytes })
	recs := allRecords(readAll(t, strings.NewReader(strings.Repeat("z", 5000)+"\r\nnext\n"), Format{MaxLineBytes: 100}, 0, 0))
	if len(recs) != 2 || !errors.Is(recs[0].Err, ErrMalformed) || recs[0].End != 5002 {
		t.Fatalf("records = %+v, want a malformed one ending at 5002 and the next", recs)
	}
	if len(recs[0].Raw) != 1000 || !recs[0].Truncated {
		t.Errorf("Raw holds %d bytes (truncated %v), want the first 1000, truncated", len(recs[0].Raw), recs[0].Truncated)
	}
}

var errDisk = errors.New("disk on fire")

func TestReaderReadError(t *testing.T) {
	r := io.MultiReader(strings.NewReader("a\nb\n"), &failingReader{err: errDisk})
	chunks := readAll(t, r, Format{}, 0, 0)
	last := chunks[len(chunks)-1]
	if !errors.Is(last.Err, errDisk) {
		t.Fatalf("last chunk Err = %v, want %v", last.Err, errDisk)
	}
	if last.Done {
		t.Error("a failed chunk is also Done")
	}
	if got := lines(allRecords(chunks)); !slices.Equal(got, []line{{0, 2, "a"}, {1, 4, "b"}}) {
		t.Errorf("records = %v", got)
	}
}

type failingReader struct{ err error }

func (r *failingReader) Read([]byte) (int, error) { return 0, r.err }

// TestReaderDeliversWithoutWaitingForMore checks that records already read are sent while the
// input has nothing more to give (a live standard input), instead of waiting for a full chunk.
func TestReaderDeliversWithoutWaitingForMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() }) // lets the reader stop if the test fails
		out := make(chan Chunk)
		rd := NewReader(testStream, pr, Format{}, 0, 0)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			rd.Run(t.Context(), out)
		}()
		write(pw, "a\nb\n")
		if got := lines((<-out).Records); !slices.Equal(got, []line{{0, 2, "a"}, {1, 4, "b"}}) {
			t.Fatalf("first chunk = %v", got)
		}
		write(pw, "c")
		synctest.Wait()
		if len(out) != 0 {
			t.Fatal("a partial line was sent")
		}
		write(pw, "\n")
		if got := lines((<-out).Records); !slices.Equal(got, []line{{2, 6, "c"}}) {
			t.Fatalf("second chunk = %v", got)
		}
		pw.Close()
		if c := <-out; !c.Done || len(c.Records) != 0 {
			t.Fatalf("last chunk Done=%v with %d records", c.Done, len(c.Records))
		}
		<-stopped
	})
}

// write writes s to w from another goroutine, since a pipe write waits for the reader.
func write(w io.Writer, s string) {
	go w.Write([]byte(s))
}

func TestReaderPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() }) // lets the reader stop if the test fails
		// Buffered, so that a chunk sent while paused would show instead of blocking.
		out := make(chan Chunk, 4)
		rd := NewReader(testStream, pr, Format{}, 0, 0)
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			rd.Run(t.Context(), out)
		}()
		write(pw, "0\n")
		if got := lines((<-out).Records); !slices.Equal(got, []line{{0, 2, "0"}}) {
			t.Fatalf("chunk 1 = %v", got)
		}
		synctest.Wait() // the reader waits for input within its next chunk

		rd.Pause()
		write(pw, "1\n")
		synctest.Wait()
		// The chunk being read when Pause came is still sent…
		if len(out) != 1 {
			t.Fatalf("%d chunks after Pause, want the current one", len(out))
		}
		if got := lines((<-out).Records); !slices.Equal(got, []line{{1, 4, "1"}}) {
			t.Fatalf("chunk 2 = %v", got)
		}
		// …but no other, however much input is waiting.
		write(pw, strings.Repeat("2\n", 3))
		synctest.Wait()
		if len(out) != 0 {
			t.Fatalf("a paused reader sent %d more chunks", len(out))
		}
		rd.Pause() // pausing twice is harmless

		rd.Resume()
		var got []line
		for len(got) < 3 {
			got = append(got, lines((<-out).Records)...)
		}
		if want := []line{{2, 6, "2"}, {3, 8, "2"}, {4, 10, "2"}}; !slices.Equal(got, want) {
			t.Fatalf("after Resume = %v, want %v", got, want)
		}
		rd.Resume() // resuming a running reader is harmless
		pw.Close()
		if c := <-out; !c.Done {
			t.Fatalf("last chunk not Done: %v", c.Err)
		}
		<-stopped
	})
}

func TestReaderPausedBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out := make(chan Chunk, 1)
		r := &countingReader{r: strings.NewReader("a\n")}
		rd := NewReader(testStream, r, Format{}, 0, 0)
		rd.Pause()
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			rd.Run(t.Context(), out)
		}()
		synctest.Wait()
		if r.reads != 0 || len(out) != 0 {
			t.Fatalf("a reader paused before Run read %d times and sent %d chunks", r.reads, len(out))
		}
		rd.Resume()
		var got []line
		for c := range out {
			got = append(got, lines(c.Records)...)
			if c.Done {
				break
			}
		}
		if want := []line{{0, 2, "a"}}; !slices.Equal(got, want) {
			t.Fatalf("after Resume = %v, want %v", got, want)
		}
		<-stopped
	})
}

type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// TestReaderStopsOnCancel checks that Run returns when ctx ends wherever the reader waits.
func TestReaderStopsOnCancel(t *testing.T) {
	tests := []struct {
		name  string
		pause bool // paused: waiting for Resume; not paused: waiting for the loop to take a chunk
	}{
		{name: "paused", pause: true},
		{name: "blocked sending", pause: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(t.Context())
				out := make(chan Chunk) // nobody receives
				rd := NewReader(testStream, bytes.NewReader([]byte("a\nb\n")), Format{}, 0, 0)
				if tt.pause {
					rd.Pause()
				}
				stopped := make(chan struct{})
				go func() {
					defer close(stopped)
					rd.Run(ctx, out)
				}()
				synctest.Wait()
				select {
				case <-stopped:
					t.Fatal("Run returned before ctx ended")
				default:
				}
				cancel()
				<-stopped
			})
		})
	}
}

// A UTF-8 byte order mark at the start of the input (a file saved "UTF-8 with BOM") is dropped:
// before, the first JSON line was malformed ("invalid character 'ï'") and the first text key was
// "\ufeffa", another key than the "a" of every later line. Its bytes still count in the ends, a
// BOM anywhere else is kept, and a reader resuming past the start strips nothing.
func TestReaderDropsLeadingBOM(t *testing.T) {
	bom := "\xef\xbb\xbf"
	recs := allRecords(readAll(t, strings.NewReader(bom+`{"k":"a"}`+"\n"+`{"k":"a"}`+"\n"), Format{JSON: true, KeyField: "k"}, 0, 0))
	if len(recs) != 2 || recs[0].Err != nil || string(recs[0].Key) != "a" || string(recs[1].Key) != "a" {
		t.Fatalf("JSON after a BOM: %+v; want two records of key a", recs)
	}
	if recs[0].End != int64(len(bom)+10) || recs[1].End != int64(len(bom)+20) {
		t.Errorf("ends %d, %d; want the BOM's 3 bytes counted: %d, %d", recs[0].End, recs[1].End, len(bom)+10, len(bom)+20)
	}
	// Two such files joined (cat a.ndjson b.ndjson): the second one's first line is a record too,
	// also when a run resumes at it (before, "invalid character 'ï'", a dead letter).
	joined := bom + `{"k":"a"}` + "\n" + bom + `{"k":"b"}` + "\n"
	for _, from := range []int{0, len(bom) + 10} {
		recs = allRecords(readAll(t, strings.NewReader(joined[from:]), Format{JSON: true, KeyField: "k"}, 0, int64(from)))
		if last := recs[len(recs)-1]; last.Err != nil || string(last.Key) != "b" || last.End != int64(len(joined)) {
			t.Fatalf("joined files, read from byte %d: %+v; want b's record last, ending at %d", from, recs, len(joined))
		}
	}
	text := bom + "a 1\n" + bom + "a 2\n"
	recs = allRecords(readAll(t, strings.NewReader(text), Format{KeySeparator: " "}, 0, 0))
	if len(recs) != 2 || string(recs[0].Key) != "a" || string(recs[1].Key) != bom+"a" {
		t.Fatalf("text: keys %q, %q; want a, then the second line's BOM kept", recs[0].Key, recs[1].Key)
	}
	// Resumed at the second line (byte 7): its BOM is data.
	recs = allRecords(readAll(t, strings.NewReader(text[7:]), Format{KeySeparator: " "}, 1, 7))
	if len(recs) != 1 || string(recs[0].Key) != bom+"a" || recs[0].End != int64(len(text)) {
		t.Fatalf("resumed: %+v; want the second line whole", recs)
	}
	// A line of only a BOM is blank.
	if recs := allRecords(readAll(t, strings.NewReader(bom+"\nb 1\n"), Format{KeySeparator: " "}, 0, 0)); len(recs) != 1 || string(recs[0].Key) != "b" {
		t.Fatalf("a BOM alone on the first line: %+v; want only b's record", recs)
	}
}
