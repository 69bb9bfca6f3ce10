package task

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
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
	"github.com/wasmstream/wasmstream/host/internal/sink"
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
	Name   string
	Module *modrt.Module
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

	MaxAttempts  int
	Backoff      time.Duration
	MaxBackoff   time.Duration
	OnExhausted  string // "deadletter", "halt" or "skip"
	Checkpoint   time.Duration
	ProgressEach time.Duration // how often a progress line is logged; 0 = 10s

	// Lateness is the allowed lateness: a stream's watermark is its highest record timestamp
	// minus Lateness (S15).
	Lateness time.Duration
	// IdleTimeout, when positive, lets the event-time timers of a stream that had no record for
	// that long fire with processing time minus Lateness; the stream's watermark (late flags, the
	// stamps firings are placed by) does not move.
	IdleTimeout time.Duration
	// TickEvery, when positive, calls the module's partition callback that often per stream (S16).
	TickEvery time.Duration
	// MigrateAtActivation makes Switch queue a migration check for every key with state, so that
	// migrations run as soon as a version is activated instead of as each key is next used.
	MigrateAtActivation bool
	// MaxFiringsPerTurn bounds the timer firings queued per loop turn for the clock, idle
	// streams and ended inputs, so that timers cannot starve records; the firings a record makes
	// due are all queued with it (their place is before the key's next record). 0 = 1000.
	MaxFiringsPerTurn int
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
	replay  int64 // records at or below this offset may have been applied before a crash
	done    bool  // the reader reached the end of its input
	closer  io.Closer
	records int64 // records read this run
	skipped int64 // records skipped because their key's mark showed them applied
	malform int64 // malformed lines sent to the dead letters

	kafka     bool                 // a Kafka partition; tracker is nil until its first record when its start is unknown
	tp        kafka.TopicPartition // for a Kafka partition
	lastAdded int64                // Kafka: the last offset admitted
	inflight  int                  // records of the stream in batches being processed
	revoking  bool                 // Kafka: revoked, draining its batches in flight
	source    []byte               // the input name, or for Kafka the topic, as records carry it (shared, read-only)
	highWater int64                // Kafka: the partition's high watermark at its last fetch (-1: none yet)
	boundEnd  int64                // Kafka, bounded run: the offset the partition is read up to (-1: unbounded)

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
	pending      int    // records and firings pushed to the scheduler and not completed
	fireSeq      int64  // the last firing's offset: firings count down from -1
	tickSeq      uint64 // the last tick job's number
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

func (t *Task) openStream(in *Input) (*stream, error) {
	if in.Chain != nil {
		return t.openChainStream(in)
	}
	name := "file:" + in.Name + "/0"
	if in.Stdin != nil {
		name = StdinStream(in.Name)
	}
	id, err := t.cfg.Store.StreamID(t.cfg.Name, name)
	if err != nil {
		return nil, err
	}
	pos, ok, err := t.cfg.Store.Position(t.cfg.Name, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		pos = store.Position{Next: 0, Horizon: -1, Resume: 0, Watermark: -1}
	}
	st := &stream{id: id, in: in, durable: pos, horizon: pos.Horizon, replay: pos.Horizon,
		source: []byte(in.Name), tm: newStreamTime(t.cfg.Now(), t.cfg.TickEvery)}
	st.tm.wm = pos.Watermark // restored: monotonic across restarts
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
			return nil, fmt.Errorf("input %s: %s holds %d bytes but %d were already processed: the file was replaced or truncated since the last checkpoint", in.Name, in.Path, fi.Size(), pos.Resume)
		}
		if _, err := f.Seek(pos.Resume, io.SeekStart); err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		r = f
	}
	st.tracker = positions.NewTracker(start)
	st.reader = source.NewReader(id, r, in.Format, start, resume)
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
	return modrt.InstanceConfig{
		Task:          cfg.Name,
		Config:        cfg.GuestConfig,
		Logger:        log,
		Now:           func() int64 { return now().UnixMilli() },
		Outputs:       cfg.OutputNames,
		StatelessOnly: cfg.Policy == PolicyNone,
	}
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

func (t *Task) ingest(c source.Chunk) error {
	st := t.streams[c.Stream]
	if c.Err != nil {
		return fmt.Errorf("input %s: %w", st.in.Name, c.Err)
	}
	now := t.cfg.Now()
	for i := range c.Records {
		if err := t.admit(st, &c.Records[i], now); err != nil {
			return err
		}
	}
	if q := t.sched.Stats().QueuedItems; q > t.stats.PeakQueued {
		t.stats.PeakQueued = q
	}
	if c.Done {
		st.done = true
		t.log.Debug("input exhausted", "input", st.in.Name, "records", st.records)
	}
	t.applyFlow()
	return nil
}

// admit routes one record: to the dead letters if malformed, past the guest if a replay of
// already applied work, and otherwise into its key's queue. now is when its chunk or fetch
// arrived: the clock is read once for all of them.
func (t *Task) admit(st *stream, r *source.Record, now time.Time) error {
	st.records++
	t.stats.Records++
	if err := st.tracker.Add(r.Offset); err != nil {
		return fmt.Errorf("input %s: %w", st.in.Name, err)
	}
	if !st.kafka {
		st.ends = append(st.ends, endMark{r.Offset, r.End})
	}
	if r.Err != nil {
		if st.in.HaltOnError {
			return fmt.Errorf("%s: %w", st.where(r.Offset), r.Err)
		}
		st.malform++
		if err := t.deadLetterLine(st, r); err != nil {
			return err
		}
		st.tracker.Complete(r.Offset)
		return nil
	}
	key, seq, err := t.sequence(st, r)
	if err != nil {
		if st.in.HaltOnError {
			return fmt.Errorf("%s: %w", st.where(r.Offset), err)
		}
		st.malform++
		if err := t.deadLetter(st, r.Offset, nil, r.Raw, err, 0); err != nil {
			return err
		}
		st.tracker.Complete(r.Offset)
		return nil
	}
	if room := store.StateKeyRoom(t.cfg.Name); len(key) > room {
		// The key could not even hold its mark in the store: refused here, not at a checkpoint.
		err := fmt.Errorf("%w: %d bytes, over the store's limit of %d bytes for a key in task %q (a key and each of its state names together)",
			ErrKeyTooLarge, len(key), room, t.cfg.Name)
		if st.in.HaltOnError {
			return fmt.Errorf("%s: %w", st.where(r.Offset), err)
		}
		if err := t.deadLetter(st, r.Offset, key, r.Value, err, 0); err != nil {
			return err
		}
		st.tracker.Complete(r.Offset)
		return nil
	}
	stamp := st.tm.wm
	late := st.tm.observe(r.Offset, r.Timestamp, t.cfg.Lateness, now)
	if late {
		t.stats.Late++
	}
	if r.Offset <= st.replay && t.cfg.Policy != PolicyNone {
		mark, ok, err := t.cfg.Store.Mark(t.cfg.Name, st.id, key)
		if err != nil {
			return err
		}
		if ok && r.Offset <= mark {
			st.skipped++
			t.stats.Skipped++
			st.tracker.Complete(r.Offset)
			return nil
		}
	}
	return t.enqueue(st, r, key, seq, late, stamp)
}

// enqueue pushes an admitted record to its key's queue, then queues the event-time timers the
// record's timestamp made due.
func (t *Task) enqueue(st *stream, r *source.Record, key []byte, seq string, late bool, stamp int64) error {
	it := t.carve.item()
	it.stamp = stamp
	it.rec = abi.Record{
		Offset:    r.Offset,
		Timestamp: r.Timestamp,
		Source:    st.source,
		Key:       key,
		Value:     r.Value,
		Headers:   r.Headers,
	}
	it.end = r.End
	if late {
		it.rec.Flags |= abi.FlagLate
	}
	if st.kafka {
		it.rec.Partition = uint32(st.tp.Partition)
	}
	t.pending++
	if err := t.sched.Push(sched.Item[*item]{
		Stream: st.id, Key: seq, Offset: r.Offset,
		Size:  len(r.Raw) + 128,
		Value: it,
	}); err != nil {
		return err
	}
	if late || r.Timestamp < 0 || st.tm.wm < 0 {
		return nil
	}
	// The record may have moved the watermark: event-time timers it passed are queued now,
	// behind this record and before the next one — all of them, whatever MaxFiringsPerTurn says:
	// a firing left for a later turn would come after records of its key read meanwhile. (A
	// timer set later is placed when its set is applied: placeFiring, ABI.md §4.12.)
	budget := math.MaxInt
	return t.collectDue(st, int(abi.DomainEvent), st.tm.watermark(), &budget)
}

// sequence returns a record's key and its sequencing key in the scheduler (S7); an error (the
// record has no field to sequence by) makes it malformed.
func (t *Task) sequence(st *stream, r *source.Record) (key []byte, seq string, err error) {
	key = r.Key
	switch t.cfg.Policy {
	case PolicyPartition:
		return key, "", nil
	case PolicyNone:
		var b [20]byte
		return key, t.carve.string(strconv.AppendInt(b[:0], r.Offset, 10)), nil
	case PolicyField:
		if r.Fields == nil && st.kafka {
			if jerr := json.Unmarshal(r.Value, &r.Fields); jerr != nil || r.Fields == nil {
				return nil, "", fmt.Errorf("%w: sequencing by field %q: the value is not a JSON object", source.ErrMalformed, t.cfg.Field)
			}
		}
		v, err := r.Field(t.cfg.Field)
		if err != nil {
			return nil, "", err
		}
		return v, t.carve.string(v), nil
	case PolicyHeader:
		for _, h := range r.Headers {
			if string(h.Name) == t.cfg.Header {
				return h.Value, t.carve.string(h.Value), nil
			}
		}
		return []byte{}, "", nil // no such header: the empty key
	}
	return key, t.carve.string(key), nil
}

func (t *Task) applyFlow() {
	for _, fc := range t.sched.Flow() {
		st := t.streams[fc.Stream]
		if st == nil {
			continue
		}
		switch {
		case st.kafka && fc.Paused:
			t.stats.Pauses++
			t.pausePartition(st.tp, true)
		case st.kafka && t.eos() && t.paused:
			// Stays paused: a paused exactly-once task reads nothing (pauseFetching).
		case st.kafka:
			t.pausePartition(st.tp, false)
		case fc.Paused:
			t.stats.Pauses++
			st.reader.Pause()
		default:
			st.reader.Resume()
		}
	}
}

// dispatch forms batches for the idle workers (t.out.jobs).
func (t *Task) dispatch() {
	// A barrier runs the queues dry even when paused: the transaction cannot end before.
	for (!t.paused || t.barrier != nil) && len(t.inflight) < t.cfg.Workers {
		b, ok := t.sched.Next(t.cfg.Now())
		if !ok {
			return
		}
		j := t.newJob(b)
		t.meters.batchSize.Observe(float64(len(j.items)))
		t.startJob(j)
	}
}

// finish applies a finished job: effects on success; retry, dead letter, skip or halt on
// failure.
func (t *Task) finish(j *job) error {
	delete(t.inflight, j.id)
	j.ver.jobs--
	if j.tick != nil {
		j.ver.release(context.Background())
		return t.finishTick(j)
	}
	defer t.release(j)
	gone := 0 // items of streams revoked or lost meanwhile: the scheduler drops them
	for gi := range j.groups {
		g := &j.groups[gi]
		g.st.inflight -= len(g.work)
		if t.streams[g.stream] != g.st || g.st.revoking {
			gone += len(g.work)
		}
	}
	if j.err == nil && gone == 0 && len(j.items) > 1 {
		if keys := dueWithinCall(j); keys != nil {
			// A timer the call set fell due before a later item of its key in the same call:
			// that key's items run again one per call, so that the firing comes between them
			// (placeFiring); the other keys' items run again in batches. The call had no effects
			// yet; a deterministic guest does the same again.
			t.stats.TimerSplits++
			t.log.Debug("a timer set in a batch is due within it; its key's items run again one per call", "items", len(j.items), "keys", len(keys))
			partition := t.cfg.Policy == PolicyPartition
			return t.sched.RetryIsolating(j.id, func(seq string) bool { return partition || keys[seq] })
		}
	}
	if j.err == nil && t.changelog != nil {
		limit, err := t.changelogRoom(j)
		if err != nil {
			return err
		}
		j.err = limit
	}
	if j.err == nil && t.chain != nil {
		j.err = t.chainRoom(j)
	}
	if j.err == nil {
		if j.ver.firstAt.IsZero() && t.cfg.ProvenGood != nil {
			t.cfg.ProvenGood(j.ver.id)
		}
		j.ver.ranBatch(t.cfg.Now())
	}
	j.ver.release(context.Background())
	if j.err == nil {
		return t.succeeded(j)
	}
	t.stats.Failures++
	if len(j.items) > 1 || gone > 0 {
		// Find the failing item: its keys run again, one item per call. Items of partitions no
		// longer ours are dropped, uncompleted.
		t.log.Debug("batch failed; isolating its items", "items", len(j.items), "err", j.err)
		t.pending -= gone
		return t.sched.Retry(j.id, true)
	}
	return t.itemFailed(j)
}

// succeeded applies a job that succeeded and completes its batch.
func (t *Task) succeeded(j *job) error {
	if t.outgrowsTxn(j) || t.chainOutgrows(j) {
		// Commit what the job's keys already hold first: a key's writes are committed in
		// one store transaction, which the job's would otherwise overflow.
		if err := t.checkpoint(); err != nil {
			return err
		}
	}
	if err := t.apply(j); err != nil {
		return err
	}
	t.chainApplied(j)
	if err := t.sched.Complete(j.id); err != nil {
		return err
	}
	dropItems(j)
	t.applyFlow()
	return nil
}

// itemFailed handles a job of one item that failed: the item is retried after a backoff or,
// after its last attempt, dead-lettered, skipped or halts the task (OnExhausted).
func (t *Task) itemFailed(j *job) error {
	it := j.items[0]
	st := t.streams[it.Stream]
	v := it.Value
	key, what := v.rec.Key, "record"
	where := st.where(it.Offset)
	if v.fire != nil {
		key, what = v.fire.Key, "timer firing"
		where = fmt.Sprintf("%s timer %q", st.name(), v.fire.Name)
	}
	if v.migrate {
		what, where = "state migration", st.name()+" state migration"
	}
	ak := attemptKey{it.Stream, it.Offset}
	t.attempts[ak]++
	n := t.attempts[ak]
	recErr := &RecordError{Where: where, Key: key, Attempts: n, Err: j.err}
	if n < t.cfg.MaxAttempts {
		delay := t.backoff(n)
		t.stats.Retries++
		t.noteError("retry", where, key, j.err)
		t.log.Warn(what+" failed; retrying its key", "at", where,
			"key", shortKey(string(key)), "attempt", n, "retry_in", delay, "err", j.err)
		if err := t.sched.Retry(j.id, false); err != nil {
			return err
		}
		return t.sched.Delay(it.Stream, it.Key, t.cfg.Now().Add(delay))
	}
	delete(t.attempts, ak)
	return t.exhausted(j, st, what, recErr)
}

// exhausted ends a job of one item (what: a record, a timer firing or a state migration of
// stream st) that failed on its last attempt, as OnExhausted says.
func (t *Task) exhausted(j *job, st *stream, what string, re *RecordError) error {
	it := j.items[0]
	v := it.Value
	key, where, n := re.Key, re.Where, re.Attempts
	switch t.cfg.OnExhausted {
	case "halt":
		return re
	case "skip":
		t.stats.Skips++
		t.noteError("skipped", where, key, j.err)
		t.log.Error(what+" failed on every attempt; skipped as configured", "at", where,
			"key", shortKey(string(key)), "attempts", n, "err", j.err)
	default:
		t.log.Error(what+" failed on every attempt; sent to the dead letters", "at", where,
			"key", shortKey(string(key)), "attempts", n, "err", j.err)
		value := v.rec.Value
		if v.fire != nil {
			value = v.fire.Payload
		}
		if err := t.deadLetter(st, it.Offset, key, value, fmt.Errorf("%s: %w", where, j.err), n); err != nil {
			return err
		}
	}
	if v.migrate {
		// Nothing to complete: the key's next use tries its migration again.
	} else if v.fire != nil {
		// The timer is spent: deleted like a fired one, so it does not fire again.
		e := j.groups[0].entries[string(key)]
		if err := e.Load(t.cache.Loader()); err != nil {
			return err
		}
		id := timerID{string(key), string(v.fire.Name)}
		delete(st.tm.queued, id)
		if err := t.applyTimer(st, e, v.fire.Name, dirtyTimer{del: true}); err != nil {
			return err
		}
	} else {
		st.tracker.Complete(it.Offset)
		t.stats.Processed++
	}
	t.pending--
	if err := t.sched.Complete(j.id); err != nil {
		return err
	}
	dropItems(j)
	t.applyFlow()
	return nil
}

func (t *Task) backoff(attempt int) time.Duration {
	d := t.cfg.Backoff
	for i := 1; i < attempt && d < t.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, t.cfg.MaxBackoff)
}

// apply makes a succeeded job's effects part of the task's state and outputs. An error (the
// scheduler refused a firing) is a bug and stops the task.
func (t *Task) apply(j *job) error {
	for gi := range j.groups {
		g := &j.groups[gi]
		st := t.streams[g.stream]
		if st != g.st {
			// The partition was revoked or lost and its stream dropped: its new owner
			// processes these records again; nothing of them is applied here.
			t.pending -= len(g.work)
			continue
		}
		changed := len(g.effects.Writes) > 0 || len(g.effects.Timers) > 0 || len(g.migrated) > 0
		for _, w := range g.effects.Writes {
			e := g.entries[string(w.Key)]
			t.applyWrite(e, w)
			t.cache.SetStateVersion(e, g.stateVer)
		}
		for _, k := range g.migrated {
			t.cache.SetStateVersion(g.entries[k], g.stateVer)
		}
		// A fired timer is deleted before the unit's own timer ops apply: a firing that sets its
		// timer again keeps it.
		for _, it := range g.work {
			if it.fire == nil || it.cancelled {
				continue
			}
			changed = true
			id := timerID{string(it.fire.Key), string(it.fire.Name)}
			delete(st.tm.queued, id)
			if err := t.applyTimer(st, g.entries[id.key], it.fire.Name, dirtyTimer{del: true}); err != nil {
				return err
			}
			if it.dropped {
				t.stats.TimersDropped++
				t.log.Warn("timer dropped: the module has no timer callback (wasmstream_on_timer)",
					"at", st.name(), "key", shortKey(id.key), "timer", id.name)
			} else {
				t.stats.TimersFired++
			}
		}
		for _, op := range g.effects.Timers {
			if err := t.applyTimer(st, g.entries[string(op.Key)], op.Name, dirtyTimer{del: op.Delete, domain: op.Domain, due: op.Due, payload: op.Payload}); err != nil {
				return err
			}
		}
		if changed {
			for _, m := range g.marks {
				t.cache.SetMark(m.e, m.last)
				t.cache.SetFirst(m.e, m.first)
			}
		}
		t.writeOutputs(g.effects.Outputs)
		for _, it := range g.work {
			if it.fire != nil || it.migrate {
				continue
			}
			st.tracker.Complete(it.rec.Offset)
			delete(t.attempts, attemptKey{g.stream, it.rec.Offset})
		}
		t.pending -= len(g.work)
		t.stats.Processed += int64(len(g.recs))
	}
	return nil
}

// applyWrite applies one write of a succeeded job to e and charges its cost in the key's next
// store transaction (outgrowsTxn): a name written again since the last checkpoint adds no entry.
func (t *Task) applyWrite(e *statecache.Entry, w modrt.Write) {
	n, b := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, len(w.Value))
	if prev := t.cache.Apply(e, w.Name, w.Value, w.Delete); prev >= 0 {
		_, pb := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, prev)
		n, b = 0, b-pb
	}
	t.cache.Charge(e, n, b)
}

// outgrowsTxn reports whether applying j's effects would give one of its keys more uncommitted
// writes than one store transaction takes (store.DB.KeyLimits). A guest call's own writes per key
// are bounded by the same limits (modrt.Limits.KeyTxnEntries), so a checkpoint before applying
// them keeps every key's writes committable. In exactly-once mode the state commits with the
// Kafka transaction and a checkpoint here does nothing.
func (t *Task) outgrowsTxn(j *job) bool {
	if t.eos() {
		return false
	}
	maxEntries, maxBytes := t.cfg.Store.KeyLimits()
	costs := t.txnCosts
	defer clear(costs) // drop the references to the entries
	for gi := range j.groups {
		g := &j.groups[gi]
		if t.streams[g.stream] != g.st || (len(g.effects.Writes) == 0 && len(g.effects.Timers) == 0 && len(g.work) == 0) {
			continue
		}
		clear(costs)
		add := func(key []byte, n, b int) {
			if e := g.entries[string(key)]; e != nil {
				c := costs[e]
				costs[e] = txnCost{c.entries + n, c.bytes + b}
			}
		}
		for _, w := range g.effects.Writes {
			n, b := store.StateWriteCost(t.cfg.Name, w.Key, w.Name, len(w.Value))
			add(w.Key, n, b)
		}
		for _, op := range g.effects.Timers {
			n, b := store.TimerOpCost(t.cfg.Name, op.Key, op.Name, len(op.Payload))
			add(op.Key, n, b)
		}
		for _, it := range g.work {
			if it.fire != nil && !it.cancelled {
				n, b := store.TimerOpCost(t.cfg.Name, it.fire.Key, it.fire.Name, 0)
				add(it.fire.Key, n, b)
			}
		}
		for e, c := range costs {
			pe, pb := e.Pending()
			if pe == 0 {
				continue // nothing to commit first
			}
			me, mb := store.MarkCost(t.cfg.Name, e.Key())
			if pe+c.entries+me > maxEntries || pb+c.bytes+mb > maxBytes {
				return true
			}
		}
	}
	return false
}

// txnCost is what a job adds to a key's next store transaction (outgrowsTxn).
type txnCost struct{ entries, bytes int }

// writeOutputs hands a unit's outputs to the output sink, in order.
func (t *Task) writeOutputs(outs []modrt.Output) {
	for _, o := range outs {
		if t.chainOutput(&o) {
			t.stats.Outputs++
			continue
		}
		var hs []sink.Header
		for _, h := range o.Headers {
			hs = append(hs, sink.Header{Name: h.Name, Value: h.Value})
		}
		t.cfg.Output.WriteOutput(o.Name, o.Key, o.Value, o.Timestamp, hs)
		t.stats.Outputs++
	}
}

// checkpoint makes outputs durable, then commits state, marks and positions in the store (S9).
func (t *Task) checkpoint() error {
	defer func(start time.Time) { t.meters.checkpointSeconds.Observe(time.Since(start).Seconds()) }(time.Now())
	if t.eos() {
		// Exactly once: state commits with the transactions (commitTxn).
		t.publish()
		return nil
	}
	if err := t.cfg.Output.Flush(); err != nil {
		return err
	}
	if err := t.cfg.DeadLetter.Flush(); err != nil {
		return err
	}
	cp := store.Checkpoint{Task: t.cfg.Name}
	t.cache.Collect(&cp)
	t.collectPositions(&cp)
	t.chainCollect(&cp)
	if len(cp.Keys) > 0 || len(cp.Positions) > 0 || len(cp.Chain) > 0 {
		if err := t.cfg.Store.Commit(&cp); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := t.chainCommitted(&cp); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if err := t.produceChangelog(&cp); err != nil {
			return err
		}
		for _, sp := range cp.Positions {
			t.streams[sp.Stream].durable = sp.Position
		}
		t.commitKafka(cp.Positions)
		t.timersCommitted()
		t.stats.Checkpoints++
		t.cache.Evict()
	}
	t.publish()
	return nil
}

// collectPositions adds to cp the streams' new positions: their committed prefix as of now.
func (t *Task) collectPositions(cp *store.Checkpoint) {
	for _, st := range t.order {
		if st.tracker == nil {
			continue // a Kafka partition that has not had a record yet
		}
		next := st.tracker.Committable()
		pos := st.durable
		pos.Next = next
		partial := len(cp.Partial)
		if !st.kafka && st.in.Stdin == nil && next > st.durable.Next {
			cp.Partial = partialPositions(cp.Partial, cp.Keys, st, next)
		}
		i := 0
		for i < len(st.ends) && st.ends[i].offset < next {
			pos.Resume = st.ends[i].end
			i++
		}
		st.ends = st.ends[:copy(st.ends, st.ends[i:])]
		if h := st.tracker.Horizon(); h > st.horizon {
			st.horizon = h
		}
		pos.Horizon = st.horizon
		if st.in.Stdin != nil {
			pos.Resume = 0
		}
		if st.kafka && t.changelog != nil {
			// What this store covers of the changelog: a restore here replays only what follows.
			pos.Resume = max(pos.Resume, t.changelog.next[st.tp.Partition])
		}
		pos.Watermark = st.tm.committedWatermark(next, t.cfg.Lateness, pos.Watermark)
		if pos != st.durable {
			cp.Positions = append(cp.Positions, store.StreamPosition{Stream: st.id, Position: pos})
		} else {
			cp.Partial = cp.Partial[:partial]
		}
	}
	if len(cp.Partial) > 0 {
		// Keys in order of their first record: a split commit writes the keys of the earliest
		// records first, so that its partial positions advance with every transaction.
		slices.SortFunc(cp.Keys, func(a, b store.KeyWrites) int { return cmp.Compare(a.First, b.First) })
	}
}

// partialPositions appends to partial the positions of a file stream that a split commit may
// write before its last transaction (store.Checkpoint.Partial): one at the first record of each
// key the checkpoint changes, between the durable position and next, and next itself. The
// stream's ends still hold the records since the durable position.
func partialPositions(partial []store.StreamPosition, keys []store.KeyWrites, st *stream, next int64) []store.StreamPosition {
	var firsts []int64
	for i := range keys {
		if kw := &keys[i]; kw.Stream == st.id && kw.First > st.durable.Next && kw.First < next {
			firsts = append(firsts, kw.First)
		}
	}
	firsts = append(firsts, next)
	slices.Sort(firsts)
	firsts = slices.Compact(firsts)
	for _, f := range firsts {
		pos := st.durable // its watermark is safe at any later Next
		pos.Next = f
		// Resume: the byte after the last line below f.
		if i, _ := slices.BinarySearchFunc(st.ends, f, func(e endMark, f int64) int { return cmp.Compare(e.offset, f) }); i > 0 {
			pos.Resume = st.ends[i-1].end
		}
		partial = append(partial, store.StreamPosition{Stream: st.id, Position: pos})
	}
	return partial
}

// publish makes the figures visible to Stats.
func (t *Task) publish() {
	if t.changelog != nil && t.changelog.standby != nil {
		t.stats.StandbyRecords = t.changelog.standby.records.Load()
		t.stats.StandbyBytes = t.changelog.standby.bytes.Load()
	}
	t.stats.Version = t.cur.id
	if t.cur.mod != nil {
		t.stats.LogDropped = t.cur.mod.LogDropped()
	}
	t.stats.Paused = t.paused
	t.stats.Pending = t.pending
	t.stats.InFlight = 0
	for _, j := range t.inflight {
		t.stats.InFlight += len(j.items)
	}
	t.stats.Queued = t.sched.Stats().QueuedItems
	t.stats.StateKeys = t.cache.Len()
	t.stats.StateBytes = t.cache.Size()
	t.stats.CacheHits, t.stats.CacheMisses = t.cache.Lookups()
	t.stats.Inputs = t.stats.Inputs[:0:0]
	t.stats.PendingTimers = 0
	for _, st := range t.order {
		in := InputStats{Name: st.in.Name, Partition: -1, Records: st.records, Committed: st.durable.Next,
			Lag: -1, Watermark: st.tm.wm, InFlight: st.inflight}
		// An error here (a closed or damaged store) is the checkpoint's to report: the figure
		// stays 0.
		if n, err := t.cfg.Store.PendingTimers(t.cfg.Name, st.id); err == nil {
			in.PendingTimers = n
			t.stats.PendingTimers += n
		}
		if st.kafka {
			in.Topic, in.Partition = st.tp.Topic, st.tp.Partition
			if st.highWater >= 0 {
				in.Lag = max(st.highWater-max(st.durable.Next, 0), 0)
			}
		}
		chainInputStats(st, &in)
		t.stats.Inputs = append(t.stats.Inputs, in)
	}
	t.statsMu.Lock()
	t.published = t.stats
	t.statsMu.Unlock()
}

func (t *Task) deadLetter(st *stream, offset int64, key, value []byte, cause error, attempts int) error {
	return t.writeDeadLetter(st, &DeadLetter{Offset: offset, Attempts: attempts, Err: cause, Key: key, Value: value})
}

// deadLetterLine sends a record that could not be decoded to the dead letters, with its whole line.
func (t *Task) deadLetterLine(st *stream, r *source.Record) error {
	return t.writeDeadLetter(st, &DeadLetter{Offset: r.Offset, Err: r.Err, Value: r.Raw, Truncated: r.Truncated})
}

func (t *Task) writeDeadLetter(st *stream, d *DeadLetter) error {
	t.stats.DeadLetters++
	t.noteError("dead letter", st.where(d.Offset), d.Key, d.Err)
	d.Task, d.Input = t.cfg.Name, st.in.Name
	if st.kafka {
		d.Input, d.Partition = st.tp.Topic, st.tp.Partition
	}
	return t.cfg.DeadLetter.WriteDeadLetter(d)
}

func (t *Task) logProgress(msg string) {
	var committed []any
	for _, st := range t.order {
		switch {
		case st.tracker == nil:
		case st.kafka:
			committed = append(committed, st.tp.Topic+"/"+strconv.Itoa(int(st.tp.Partition)), st.tracker.Committable())
		default:
			committed = append(committed, st.in.Name, st.tracker.Committable())
		}
	}
	t.log.Info(msg, "records", t.stats.Records, "processed", t.stats.Processed,
		"outputs", t.stats.Outputs, "skipped_replayed", t.stats.Skipped, "dead_letters", t.stats.DeadLetters,
		"retries", t.stats.Retries, "checkpoints", t.stats.Checkpoints, "state_keys_cached", t.cache.Len(),
		"guest_log_dropped", t.stats.LogDropped, slog.Group("committed_line", committed...))
}

// RecordError is a record or timer firing that failed on every attempt with OnExhausted "halt".
type RecordError struct {
	Where    string // e.g. "input x line 42", "topic t partition 3 offset 41", "x timer \"n\""
	Key      []byte
	Attempts int
	Err      error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("%s key %q failed %d times; halting as configured: %v",
		e.Where, shortKey(string(e.Key)), e.Attempts, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

var errStopped = errors.New("task stopped")

// ErrKeyTooLarge is the dead-letter cause of a record whose key is longer than the store can hold
// for the task (store.StateKeyRoom): refused when it is read.
var ErrKeyTooLarge = errors.New("record key too large")
