package chain

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/store"
)

// DefaultMaxBacklog is the default bound on a log's entries that a reader's checkpoint does not
// cover yet: at it the upstream holds.
const DefaultMaxBacklog = 100_000

// trimBatch is how many covered entries a log keeps before trimming them together (a variable:
// tests lower it).
var trimBatch uint64 = 8192

// chunkEntries bounds the entries of one chunk a Reader sends.
const chunkEntries = 256

// Log is one chain log: the records one task emits to one output name, read by other tasks of
// the host. Make it with Open before the tasks start; add every reader then.
type Log struct {
	db           *store.DB
	task, output string
	head         atomic.Uint64 // offset after the last committed entry
	done         atomic.Bool   // the upstream ended its inputs: no entry follows in this run
	readers      []*Reader
	upWake       atomic.Pointer[func()] // wakes the upstream's loop (a blocked upstream)
	trimMu       sync.Mutex             // one trim at a time
	trimmed      uint64                 // under trimMu: entries below it were trimmed by this run
}

// Open returns the log of task's output name in db, numbering new entries after the last one
// stored.
func Open(db *store.DB, task, output string) (*Log, error) {
	h, err := db.ChainHead(task, output)
	if err != nil {
		return nil, fmt.Errorf("chain %s/%s: %w", task, output, err)
	}
	l := &Log{db: db, task: task, output: output}
	l.head.Store(h)
	return l, nil
}

// Task and Output name the log.
func (l *Log) Task() string   { return l.task }
func (l *Log) Output() string { return l.output }

// Head is the offset after the last committed entry: the offset the next entry gets.
func (l *Log) Head() uint64 { return l.head.Load() }

// Committed is called by the upstream's loop once a checkpoint that appended the entries below
// head committed: it wakes the readers.
func (l *Log) Committed(head uint64) {
	l.head.Store(head)
	for _, r := range l.readers {
		r.wakeUp()
	}
}

// SetUpstream sets the function that wakes the upstream's loop when the backlog shrinks.
func (l *Log) SetUpstream(wake func()) { l.upWake.Store(&wake) }

// Ended says whether the upstream ended its inputs in this run (End); Begin undoes it for a
// task that starts again.
func (l *Log) Begin() { l.done.Store(false) }

// End tells the readers that no entry follows in this run, once the upstream took its last
// checkpoint after its inputs ended: a reader that reached the head ends too.
func (l *Log) End() {
	l.done.Store(true)
	for _, r := range l.readers {
		r.wakeUp()
	}
}

// Backlog is the largest number of entries some reader's checkpoint does not cover, and
// whether it reaches that reader's bound.
func (l *Log) Backlog() (n uint64, full bool) {
	h := l.head.Load()
	for _, r := range l.readers {
		c := r.covered.Load()
		if c < h && h-c > n {
			n = h - c
		}
		full = full || (c < h && h-c >= r.maxBacklog)
	}
	return n, full
}

// Blocked reports whether the upstream must hold: some reader's checkpoint leaves at least its
// bound of entries uncovered.
func (l *Log) Blocked() bool {
	_, full := l.Backlog()
	return full
}

// Readers are the log's readers.
func (l *Log) Readers() []*Reader { return l.readers }

// Bound is the smallest of the readers' bounds (max_backlog): the most entries the upstream
// lets wait for a reader, appended or not yet. With no reader there is none.
func (l *Log) Bound() uint64 {
	b := uint64(math.MaxUint64)
	for _, r := range l.readers {
		b = min(b, r.maxBacklog)
	}
	return b
}

// AddReader adds a reader for the input of the downstream task named task; maxBacklog ≤ 0
// means DefaultMaxBacklog. Call it before the tasks start.
func (l *Log) AddReader(task, input string, maxBacklog int) *Reader {
	if maxBacklog <= 0 {
		maxBacklog = DefaultMaxBacklog
	}
	r := &Reader{log: l, task: task, input: input, maxBacklog: uint64(maxBacklog), wake: make(chan struct{}, 1)}
	r.cond = sync.NewCond(&r.mu)
	l.readers = append(l.readers, r)
	return r
}

// trim deletes the entries every reader's checkpoint covers.
func (l *Log) trim() error {
	low := l.head.Load()
	for _, r := range l.readers {
		low = min(low, r.covered.Load())
	}
	l.trimMu.Lock()
	defer l.trimMu.Unlock()
	if low < l.trimmed+trimBatch {
		return nil // trimming in batches: fewer transactions (each one scans and deletes)
	}
	if _, err := l.db.ChainTrim(l.task, l.output, l.trimmed, low); err != nil {
		return fmt.Errorf("chain %s/%s: %w", l.task, l.output, err)
	}
	l.trimmed = low
	return nil
}

// Reader reads a log for one input of a downstream task. Its task's loop calls Start when it
// opens the input's stream, Covered after each checkpoint, Pause and Resume; Run runs on its
// own goroutine.
type Reader struct {
	log         *Log
	task, input string
	maxBacklog  uint64
	covered     atomic.Uint64 // the reader's durable position: entries below it are applied
	read        atomic.Uint64 // the next entry to read
	stream      uint32
	wake        chan struct{}
	mu          sync.Mutex
	cond        *sync.Cond
	paused      bool
}

// Log is the log the reader reads.
func (r *Reader) Log() *Log { return r.log }

// Task and Input name the reader's task and input.
func (r *Reader) Task() string  { return r.task }
func (r *Reader) Input() string { return r.input }

// Read is the next entry the reader reads; Covered the position its task's checkpoint made
// durable.
func (r *Reader) Read() uint64       { return r.read.Load() }
func (r *Reader) CoveredTo() uint64  { return r.covered.Load() }
func (r *Reader) MaxBacklog() uint64 { return r.maxBacklog }
func (r *Reader) wakeUp() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start makes the reader read stream's records from offset from, which its task's store
// position says were not all applied.
func (r *Reader) Start(stream uint32, from uint64) {
	r.stream = stream
	r.read.Store(from)
	r.setCovered(from)
	r.mu.Lock()
	r.paused = false
	r.mu.Unlock()
}

// Covered is called by the reader's task once a checkpoint made its position next durable:
// the entries below it may be trimmed, and an upstream held by the backlog is woken.
func (r *Reader) Covered(next uint64) error {
	r.setCovered(next)
	return r.log.trim()
}

// setCovered sets the covered position and wakes an upstream the backlog held.
func (r *Reader) setCovered(next uint64) {
	_, wasFull := r.log.Backlog()
	r.covered.Store(next)
	if _, full := r.log.Backlog(); wasFull && !full {
		if w := r.log.upWake.Load(); w != nil {
			(*w)()
		}
	}
}

// Pause stops the reader after the chunk it is reading. Safe from any goroutine.
func (r *Reader) Pause() {
	r.mu.Lock()
	r.paused = true
	r.mu.Unlock()
}

// Resume undoes Pause. Safe from any goroutine.
func (r *Reader) Resume() {
	r.mu.Lock()
	r.paused = false
	r.cond.Broadcast()
	r.mu.Unlock()
}

func (r *Reader) waitResumed(ctx context.Context) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.paused && ctx.Err() == nil {
		r.cond.Wait()
	}
	return ctx.Err() == nil
}

// Run reads the log from the position given to Start until ctx is done, sending chunks to out:
// each entry is a record whose offset is the entry's number. When the upstream ended (End) and
// the reader reached the head, it sends a chunk with Done and returns; a damaged entry ends it
// with a chunk with Err.
func (r *Reader) Run(ctx context.Context, out chan<- source.Chunk) {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	send := func(c source.Chunk) bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	next := r.read.Load()
	for {
		if !r.waitResumed(ctx) {
			return
		}
		done := r.log.done.Load() // before reading: End follows the last entries' commit
		recs := make([]source.Record, 0, chunkEntries)
		var derr error
		err := r.log.db.ChainRead(r.log.task, r.log.output, next, chunkEntries, func(off uint64, v []byte) bool {
			e, err := Decode(v)
			if err != nil {
				derr = fmt.Errorf("chain %s/%s: entry %d: %w", r.log.task, r.log.output, off, err)
				return false
			}
			recs = append(recs, source.Record{Offset: int64(off), End: int64(off) + 1,
				Decoded: source.Decoded{Key: e.Key, Value: e.Value, ValueNull: e.ValueNull, Timestamp: e.Timestamp, Headers: e.Headers}})
			return true
		})
		if err == nil {
			err = derr
		}
		if err != nil {
			send(source.Chunk{Stream: r.stream, Err: err})
			return
		}
		if len(recs) > 0 {
			if !send(source.Chunk{Stream: r.stream, Records: recs}) {
				return
			}
			next = uint64(recs[len(recs)-1].Offset) + 1
			r.read.Store(next)
			continue
		}
		if done && next >= r.log.head.Load() {
			send(source.Chunk{Stream: r.stream, Done: true})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
}
