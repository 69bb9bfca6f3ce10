package task

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/chain"
	"github.com/wasmstream/wasmstream/host/internal/hist"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/positions"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/host/internal/statecache"
	"github.com/wasmstream/wasmstream/host/internal/stats"
	"github.com/wasmstream/wasmstream/store"
)

// Sequencing policies (S7).
const (
	PolicyKey       = "key"
	PolicyPartition = "partition"
	PolicyNone      = "none"
	PolicyField     = "field"
	PolicyHeader    = "header"
)

// Input is one source of the task, already resolved by the host.
type Input struct {
	Name        string
	Stdin       io.Reader // non-nil: read this stream instead of Path; it cannot be rewound
	Path        string
	Format      source.Format
	HaltOnError bool // a malformed line halts the task instead of going to the dead letters
	// Chain, if set, makes the input read another task's output through its chain log (chain.go).
	Chain *chain.Reader
}

// Processor runs batches of one task: a wasm instance (modrt.Instance) or, for benchmarks and
// for embedding, a native Go handler with the same contract. It is used by one goroutine at a
// time; after a call returned an error, Broken tells whether it must be replaced.
type Processor interface {
	// Run runs a unit of work: records, timer firings, a tick or migrations (modrt.Instance.Run).
	Run(ctx context.Context, u *modrt.Unit, env modrt.Env) (modrt.Effects, error)
	// HasExport reports whether the processor serves a kind of step besides records.
	HasExport(k modrt.StepKind) bool
	// StateVersion is the version of the state format the processor writes (ABI.md §4.16).
	StateVersion() uint32
	Broken() bool
	Close(ctx context.Context) error
}

// Config is everything a Task needs; the host fills it from its own configuration.
type Config struct {
	// AppliedSpan is the most offsets past a stream's Next that a checkpoint's applied set may
	// span (store.Checkpoint.Applied); a checkpoint whose completed offsets reach further gives
	// none and writes every mark. 0: store.MaxAppliedSpan, which it may not exceed. Tests lower
	// it.
	AppliedSpan int64
	Name        string
	Module      *modrt.Module
	// Version is Module's number in the module registry, for logs and Stats (0: none). Module
	// stays the caller's to close; the task may close it earlier, once a version given to
	// Switch replaced it and drained (Module.Close is idempotent).
	Version int64
	// NewProcessor, if set, replaces instances of Module (which may then be nil).
	NewProcessor func(ctx context.Context) (Processor, error)
	GuestConfig  []byte
	OutputNames  []string
	Inputs       []Input
	Output       OutputSink
	DeadLetter   DeadLetterSink
	// ChainOutputs are the chain logs of the output names other tasks read (chain.go): what the
	// task emits to them goes there, not to Output.
	ChainOutputs map[string]*chain.Log
	// Kafka, if set, is the task's Kafka input (besides any file inputs).
	Kafka *KafkaInput
	// Changelog, with Kafka, makes each partition's state follow it to other hosts (changelog.go).
	Changelog *ChangelogConfig
	Store     *store.DB

	Policy, Field, Header string

	Sched           sched.Config // MaxBatches is set from Workers
	Workers         int
	StateCacheBytes int64
	// MaxStateBytesPerKey bounds a key's whole state as the cache holds it (statecache
	// Entry.Size: names, values and statecache.NameOverhead a name): a job whose writes would
	// take a key past it fails (keyStateRoom). 0: no bound.
	MaxStateBytesPerKey int64

	MaxAttempts int
	Backoff     time.Duration
	MaxBackoff  time.Duration
	OnExhausted string // "deadletter", "halt" or "skip"
	// MaxConsecutiveFailures, when positive, halts the task (a *FailureStreakError) instead of
	// sending the next record to the dead letters (or skipping it) when that many records and
	// timer firings in a row failed on every attempt or permanently, with no success between.
	MaxConsecutiveFailures int
	Checkpoint             time.Duration
	ProgressEach           time.Duration // how often a progress line is logged; 0 = 10s

	// Lateness is the allowed lateness: a stream's watermark is its highest record timestamp
	// minus Lateness (S15).
	Lateness time.Duration
	// IdleTimeout, when positive, lets the event-time timers of a stream that had no record for
	// that long fire with processing time minus Lateness; the stream's watermark (late flags, the
	// stamps firings are placed by) does not move.
	IdleTimeout time.Duration
	// TickEvery, when positive, calls the module's partition callback that often per stream (S16).
	TickEvery time.Duration
	// MaxFuture, when positive, makes a record whose timestamp is more than this ahead of the
	// clock when it is read malformed (ErrFutureTimestamp): it never reaches the watermark.
	MaxFuture time.Duration
	// MigrateAtActivation makes Switch queue a migration check for every key with state, so that
	// migrations run as soon as a version is activated instead of as each key is next used.
	MigrateAtActivation bool
	// MaxFiringsPerTurn bounds the timer firings queued per loop turn for the clock, idle
	// streams and ended inputs, so that timers cannot starve records; the firings a record makes
	// due are all queued with it (their place is before the key's next record). 0 = 1000.
	MaxFiringsPerTurn int
	// MaxPendingTimers bounds the task's pending timers, over all its streams: timer_set of a
	// new timer beyond it returns ERR_LIMIT (ABI.md §4.10); 0 = no limit.
	MaxPendingTimers int64
	// ProvenGood, if set, is called by the loop once per module version and run, when the first
	// batch on the version finished successfully: the host records the version as good.
	ProvenGood func(version int64)

	Now    func() time.Time
	Logger *slog.Logger
}

// item is the payload of one scheduled record.
type item struct {
	rec abi.Record
	end int64 // byte position just after the record's line (resume token)

	// stamp orders the item among its key's event-time firings (timers.go, placeFiring): for a
	// record, its stream's watermark as it stood when the record was read, before the record
	// moved it; for an event-time firing, its time.
	stamp int64

	fire      *abi.Firing // a timer firing instead of a record
	cancelled bool        // the firing's timer was set or deleted after it was queued: skip it
	dropped   bool        // the module has no timer callback: the firing's timer is deleted unseen
	migrate   bool        // a migration of the key's state, without a record (activation)
}

// stream is one input of the task as the loop sees it.
type stream struct {
	id      uint32
	in      *Input
	reader  inputReader
	tracker *positions.Tracker
	ends    []endMark // (offset, end) of records added and not yet below a checkpoint
	durable store.Position
	horizon int64 // highest offset whose effects may be in state
	// origin is the offset a Kafka partition's tracker started at: where a partition without a
	// durable position resumes if its first checkpoint's changelog records land only in part.
	origin int64
	replay int64 // records at or below this offset may have been applied before a crash
	// applied is the stream's stored applied set when it opened (store.DB.Applied): a replayed
	// record in it was applied, whatever its key's mark says.
	applied store.AppliedSet
	done    bool // the reader reached the end of its input
	closer  io.Closer
	print   *filePrint // a file input's: the fingerprints of its positions
	records int64      // records read this run
	skipped int64      // records skipped because their key's mark showed them applied
	malform int64      // malformed lines sent to the dead letters
	// keyWarned: a line without the input's key field was logged (once per input and run).
	keyWarned bool
	// unitWarned: a timestamp that looks like seconds (bit 1), or microseconds or nanoseconds
	// (bit 2), not milliseconds, was logged (once per input, run and unit).
	unitWarned uint8

	kafka     bool                 // a Kafka partition; tracker is nil until its first record when its start is unknown
	tp        kafka.TopicPartition // for a Kafka partition
	lastAdded int64                // Kafka: the last offset admitted
	// epochs: Kafka, the leader epochs of the records admitted, one mark per change (noteEpoch);
	// a position keeps the epoch of the last record below its Next (epochBelow).
	epochs    []epochMark
	inflight  int    // records of the stream in batches being processed
	revoking  bool   // Kafka: revoked, draining its batches in flight
	source    []byte // the input name, or for Kafka the topic, as records carry it (shared, read-only)
	highWater int64  // Kafka: the partition's high watermark at its last fetch (-1: none yet)
	boundEnd  int64  // Kafka, bounded run: the offset the partition is read up to (-1: unbounded)
	// lostBelow: Kafka, the offsets below it were counted as lost to retention (lostToRetention),
	// so that a partition read again from below them (an aborted transaction's rewind) does not
	// count them twice.
	lostBelow int64
	// Kafka: the group's committed offset differs from where the partition resumed (the local
	// checkpoint): the next checkpoint commits the resume offset, so that lag tools tell the truth
	// before a record arrives.
	commitStart bool
	// replayRun is the replay a reset started on the stream (store.Replay), until the stream's
	// position reaches its head; nil when none.
	replayRun *store.Replay

	tm streamTime // event time, timers and ticks
}

// name names the stream in logs: the input name, or topic/partition.
func (st *stream) name() string {
	if st.kafka {
		return st.tp.Topic + "/" + strconv.Itoa(int(st.tp.Partition))
	}
	return st.in.Name
}

// sourceName is the source field records of the stream carry.
func (st *stream) sourceName() []byte { return st.source }

// where names a record's position for errors: "input x line 42" or "topic t partition 3
// offset 41".
func (st *stream) where(offset int64) string {
	if st.kafka {
		return fmt.Sprintf("topic %s partition %d offset %d", st.tp.Topic, st.tp.Partition, offset)
	}
	return fmt.Sprintf("input %s line %d", st.in.Name, offset+1)
}

type endMark struct{ offset, end int64 }

// Stats are a task's running figures: the one definition all layers share (package stats).
// The task leaves Task, Halted and Error to the host.
type Stats = stats.Task

// InputStats are the figures of one input: a file or stdin input, or one Kafka partition.
type InputStats = stats.Input

// Histogram bounds. Latencies in seconds, sizes in items.
var (
	batchSizeBounds = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}
	secondsBounds   = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
)

// meters are the figures other goroutines than the loop keep, or that must be current
// between checkpoints: atomic, no lock on the record path.
type meters struct {
	fuel, traps       atomic.Int64
	restoring         atomic.Int32
	unreachable       atomic.Bool // the Kafka input's cluster does not answer (kafka.Consumer's Reachable)
	batchSize         *hist.Histogram
	callSeconds       *hist.Histogram
	checkpointSeconds *hist.Histogram
	guest             atomic.Pointer[modrt.Metrics] // the current version's guest metrics
}

// Task runs one task. It is created by New and run once by Run.
type Task struct {
	cfg     Config
	log     *slog.Logger
	sched   *sched.Scheduler[*item]
	cache   *statecache.Cache
	streams map[uint32]*stream
	order   []*stream
	jobs    chan *job
	results chan *job

	inflight  map[uint64]*job
	chain     *chainSide                    // the chain logs the task's outputs feed, if any (chain.go)
	chainHeld bool                          // dispatch holds for a chain log's backlog (counted once per hold)
	freeBufs  []groupBufs                   // released jobs' buffers, cleared, for the next jobs (loop only)
	owners    uint64                        // the last group's owner number (newJob, PinOnce)
	carve     carver                        // admitted records' items and sequencing keys (loop only)
	txnCosts  map[*statecache.Entry]txnCost // outgrowsTxn's per-key sums, reused (loop only)
	kafka     *kafkaSide                    // the Kafka input, if any
	changelog *changelogSide                // the Kafka input's changelog, if any
	// txnChangelog is the changelog writer of an exactly-once task, attached to its consumer.
	txnChangelog *kafka.ChangelogWriter
	kafkaErr     chan error    // the Kafka poll loop's failure
	cur          *version      // the version new batches run on
	paused       bool          // no new batches (Pause)
	ctl          chan request  // calls from other goroutines (Switch, Pause, Resume, Query)
	queries      []*queryReq   // state queries waiting for a batch to release one of their keys
	out          actions       // what the core asks the driver to do (core.go)
	stopped      chan struct{} // closed when the loop returned
	attempts     map[attemptKey]int
	failStreak   int       // records and firings that failed in a row, since the last that succeeded
	pending      int       // records and firings pushed to the scheduler and not completed
	timers       timerRoom // the pending-timer limit (timerlimit.go)
	fireSeq      int64     // the last firing's offset: firings count down from -1
	tickSeq      uint64    // the last tick job's number
	wakeup       chan struct{}
	passes       []*migrationPass // activation migrations feeding keys into the scheduler
	barrier      *barrierReq      // exactly-once: the transaction ends once everything read is processed
	// committedNow is set while ticks may start in exactly-once mode: right after a commit.
	committedNow bool
	// txnMark holds the output and dead-letter counts at the last transaction's end: a
	// transaction that changed nothing and produced nothing is not ended (nothing is in it).
	txnMark   struct{ outputs, deadLetters int64 }
	stats     Stats
	recent    recentRing // the last errors, for Stats.Recent
	statsMu   sync.Mutex
	published Stats
	meters    meters

	// txnFailingSince is when the first of the transactions that aborted in a row since the last
	// commit aborted; zero when the last one committed (txnFailed).
	txnFailingSince time.Time

	// The checkpoint pipeline (checkpoint.go): flight is the checkpoint collected and handed to
	// the driver's checkpoint goroutine (pipe) and not yet reported back; cpDue says a checkpoint
	// fell due meanwhile and is taken when flight is reported; cpFailed is the error of a
	// checkpoint that failed: nothing is committed after it. pipe is nil where no driver runs
	// one (TestCore, exactly-once mode): checkpoints then commit inline.
	flight   *cpWork
	pipe     *cpPipe
	cpDue    bool
	cpFailed error

	// recommit says a group offset commit failed (commitFailed, on the client's goroutine):
	// commitStarts, after the next checkpoint, commits every partition's durable position again,
	// so that the group's offsets reach the store's even when no later checkpoint moves them.
	recommit atomic.Bool
}

type attemptKey struct {
	stream uint32
	offset int64
}

// New prepares a task; it opens nothing and starts no goroutine.
func New(cfg Config) (*Task, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProgressEach == 0 {
		cfg.ProgressEach = 10 * time.Second
	}
	if cfg.Checkpoint <= 0 {
		cfg.Checkpoint = time.Second
	}
	if cfg.MaxFiringsPerTurn <= 0 {
		cfg.MaxFiringsPerTurn = 1000
	}
	cfg.Sched.MaxBatches = cfg.Workers
	s, err := sched.New[*item](cfg.Sched)
	if err != nil {
		return nil, err
	}
	t := &Task{
		cfg:      cfg,
		log:      cfg.Logger.With("task", cfg.Name),
		sched:    s,
		streams:  map[uint32]*stream{},
		jobs:     make(chan *job, cfg.Workers),
		results:  make(chan *job, cfg.Workers),
		inflight: map[uint64]*job{},
		txnCosts: map[*statecache.Entry]txnCost{},
		attempts: map[attemptKey]int{},
		cur:      newVersion(cfg.Version, cfg.Module, cfg.NewProcessor),
		ctl:      make(chan request),
		stopped:  make(chan struct{}),
		wakeup:   make(chan struct{}, 1),
	}
	t.published.Version = cfg.Version
	t.timers.limit = max(cfg.MaxPendingTimers, 0)
	t.meters.batchSize = hist.New(batchSizeBounds...)
	t.meters.callSeconds = hist.New(secondsBounds...)
	t.meters.checkpointSeconds = hist.New(secondsBounds...)
	t.meters.guest.Store(t.cur.metrics)
	name := cfg.Name
	db := cfg.Store
	t.cache = statecache.New(func(st uint32, key []byte, meta *statecache.Meta, fn func(name, val []byte)) error {
		// Every key with persisted state has an applied mark (written with its state), and a
		// point lookup is far cheaper than a prefix scan: most keys a stream sees for the first
		// time have no state at all.
		mark, sv, ok, err := db.MarkInfo(name, st, key)
		if err != nil || !ok {
			return err
		}
		if meta != nil {
			*meta = statecache.Meta{Found: true, Mark: mark, StateVersion: sv}
		}
		return db.Scan(name, st, key, nil, nil, func(n, v []byte) bool { fn(n, v); return true })
	}, cfg.StateCacheBytes)
	return t, nil
}

// Wake makes the loop look at the clock again: tests that drive Config.Now call it after moving
// the time. Safe from any goroutine.
func (t *Task) Wake() {
	select {
	case t.wakeup <- struct{}{}:
	default:
	}
}

// Stats returns the task's figures as of its last checkpoint (those documented as up to date:
// as of now). Safe from any goroutine.
func (t *Task) Stats() Stats {
	t.statsMu.Lock()
	s := t.published
	t.statsMu.Unlock()
	s.FuelUsed = t.meters.fuel.Load()
	s.Traps = t.meters.traps.Load()
	s.TimersRefused = t.timers.refused.Load()
	s.Restoring = int(t.meters.restoring.Load())
	s.BatchSize = stats.Histogram(t.meters.batchSize.Snapshot())
	s.CallSeconds = stats.Histogram(t.meters.callSeconds.Snapshot())
	s.CheckpointSeconds = stats.Histogram(t.meters.checkpointSeconds.Snapshot())
	s.Recent = t.recent.list()
	s.GuestMetrics = guestMetrics(t.meters.guest.Load().Snapshot())
	return s
}

// guestMetrics converts the guest metrics' values to their Stats form.
func guestMetrics(vs []modrt.MetricValue) []stats.GuestMetric {
	var out []stats.GuestMetric
	for _, v := range vs {
		m := stats.GuestMetric{Counter: v.Counter, Name: v.Name, Value: v.Value}
		if v.Bounds != nil {
			m.Histogram = &stats.Histogram{Bounds: v.Bounds, Counts: v.Counts, Count: v.Count, Sum: v.Sum}
		}
		for _, l := range v.Labels {
			m.Labels = append(m.Labels, stats.GuestLabel{Name: l.Name, Value: l.Value})
		}
		out = append(out, m)
	}
	return out
}

// Ready reports whether the task is processing every input it has: false while a partition it
// was assigned is being restored from the changelog, or while its Kafka cluster does not answer.
// Safe from any goroutine.
func (t *Task) Ready() bool { return t.meters.restoring.Load() == 0 && !t.meters.unreachable.Load() }

// StdinStream is the store's name of the stream of a stdin input.
func StdinStream(input string) string { return "stdin:" + input + "/0" }

// streamPosition is the id of the task's stream name and its committed position (the start of
// the stream when it has none).
func (t *Task) streamPosition(name string) (uint32, store.Position, error) {
	id, err := t.cfg.Store.StreamID(t.cfg.Name, name)
	if err != nil {
		return 0, store.Position{}, err
	}
	pos, ok, err := t.cfg.Store.Position(t.cfg.Name, id)
	if err != nil {
		return 0, store.Position{}, err
	}
	if !ok {
		pos = store.Position{Next: 0, Horizon: -1, Resume: 0, Watermark: -1}
	}
	return id, pos, nil
}

func (t *Task) openStream(in *Input) (*stream, error) {
	if in.Chain != nil {
		return t.openChainStream(in)
	}
	name := "file:" + in.Name + "/0"
	if in.Stdin != nil {
		name = StdinStream(in.Name)
	}
	id, pos, err := t.streamPosition(name)
	if err != nil {
		return nil, err
	}
	st := &stream{id: id, in: in, durable: pos, horizon: pos.Horizon, replay: pos.Horizon,
		source: []byte(in.Name), tm: newStreamTime(t.cfg.Now(), t.cfg.TickEvery)}
	st.tm.wm = pos.Watermark // restored: monotonic across restarts
	if err := t.loadApplied(st); err != nil {
		return nil, err
	}
	var r io.Reader
	start, resume := pos.Next, pos.Resume
	if in.Stdin != nil {
		// Standard input cannot be rewound: its lines continue the numbering after everything
		// ever applied, so no mark can mistake a new line for an old one.
		start = max(pos.Next, pos.Horizon+1)
		resume = 0
		st.replay = -1
		r = in.Stdin
	} else {
		// Checked before the open, which on a named pipe would wait for a writer.
		if fi, err := os.Stat(in.Path); err == nil && fi.IsDir() {
			return nil, fmt.Errorf("input %s: %s is a directory, not a file", in.Name, in.Path)
		} else if err == nil && !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("input %s: %s is not a regular file (a pipe or a device): a file input resumes at a byte position after a restart; feed a stream on stdin instead (type: stdin)", in.Name, in.Path)
		}
		f, err := os.Open(in.Path)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		st.closer = f
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		if fi.Size() < pos.Resume {
			return nil, fmt.Errorf("input %s: %s holds %d bytes but %d were already processed: the file was replaced or truncated since the last checkpoint; to read it from its first line, reset the task (wasmstream reset -c <config> --task %s --to earliest) or use a new data directory", in.Name, in.Path, fi.Size(), pos.Resume, t.cfg.Name)
		}
		midLine, err := checkFile(f, t.cfg.Name, in.Name, in.Path, pos.Resume, pos.TopicID)
		if err != nil {
			return nil, err
		}
		if midLine {
			t.log.Warn("input resumes in the middle of a line: the last line read had no line ending and the file has grown since, so what was appended to it up to the next line ending is read as a line of its own; write whole lines to a file being read",
				"input", in.Name, "path", in.Path, "byte", pos.Resume)
		}
		start, err := readHead(f, int(min(fi.Size(), printBytes)))
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		st.print = &filePrint{f: f, start: start}
		if _, err := f.Seek(pos.Resume, io.SeekStart); err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		r = f
	}
	st.tracker = positions.NewTracker(start)
	if err := t.loadReplay(st); err != nil {
		return nil, err
	}
	rd := source.NewReader(id, r, in.Format, start, resume)
	st.reader = rd
	if st.print != nil {
		st.print.unterminated = rd.Unterminated
	}
	if err := t.countStreamTimers(st); err != nil {
		return nil, err
	}
	t.streams[id] = st
	t.order = append(t.order, st)
	t.sched.AddStream(id)
	if pos.Next > 0 || pos.Horizon >= 0 {
		t.log.Info("resuming input", "input", in.Name, "line", start, "byte", resume, "replay_through", st.replay)
	}
	return st, nil
}

func (t *Task) instantiate(ctx context.Context, v *version) (Processor, error) {
	if v.newProc != nil {
		return v.newProc(ctx)
	}
	ic := instanceConfig(&t.cfg, t.cfg.Logger) // modrt adds the task to its logger
	ic.Metrics = v.metrics
	return v.mod.Instantiate(ctx, ic)
}

// instanceConfig is the configuration of an instance of cfg's module logging to log, a logger
// without the task attribute: modrt adds it.
func instanceConfig(cfg *Config, log *slog.Logger) modrt.InstanceConfig {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	ic := modrt.InstanceConfig{
		Task:          cfg.Name,
		Config:        cfg.GuestConfig,
		Logger:        log,
		Now:           func() int64 { return now().UnixMilli() },
		Outputs:       cfg.OutputNames,
		StatelessOnly: cfg.Policy == PolicyNone,
	}
	if k, ok := cfg.Output.(KafkaOutput); ok && k.Limits != nil {
		chained := cfg.ChainOutputs
		ic.RecordLimit = func(name []byte) int {
			if _, ok := chained[string(name)]; ok {
				return 0 // another task's input on this host: no topic
			}
			return k.RecordLimit(name)
		}
	}
	return ic
}

// TrialInit instantiates mod as a task with cfg would (which runs the guest's init with the
// task's config) and closes the instance: the check a module must pass before a task starts
// with it. cfg.Module is ignored.
func TrialInit(ctx context.Context, cfg Config, mod *modrt.Module) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	inst, err := mod.Instantiate(ctx, instanceConfig(&cfg, log))
	if err != nil {
		return err
	}
	return inst.Close(ctx)
}

var errStopped = errors.New("task stopped")
