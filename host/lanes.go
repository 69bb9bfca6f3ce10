package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/task"
)

// Several loops per task (TaskConfig.Loops; RATIONALE "Several loops per task"). A task with a
// Kafka input may run as N loops ("lanes"), each a whole task.Task (scheduler, state cache,
// checkpoint pipeline, consumer, producer) and its own member of the task's consumer group: the
// group spreads the partitions over every loop of every host, and a partition that moves between
// two loops of one host is a rebalance like any other. The loops share the host's store, whose
// commits of one partition run one after the other (those of different partitions, so of
// different loops, run concurrently: store/locks.go), so a loop assigned a partition resumes from
// the last checkpoint of the loop that had it, as a host does that gets a partition back. Each
// loop checkpoints its own partitions atomically, as a host does.
//
// Identity: loop 0 is the task as it ran before loops (its static group.instance.id and its
// exactly-once transactional.id are unchanged, so an upgrade fences its old transactions); loop
// i > 0 appends "-loop<i>" to both. Everything the host does to a task reaches every loop
// through lanes: its run, version switches, pause and resume, stats, state queries and the
// group view.

// lanes are the loops a task runs as; one for a task with Loops 1 (the default).
type lanes struct {
	ts []*task.Task
	// kafka is loop 0's Kafka input (nil without one): Run removes from its group the static
	// members of loops this host no longer runs (leaveStaleLoops).
	kafka *task.KafkaInput
	log   *slog.Logger

	mu     sync.Mutex
	cancel func() // stops the loops' run (Run)
	failed error  // fail's: Run returns it
}

// newLanes makes a task's loops from their configurations (laneConfigs) on mod, version v. Loop
// 0 takes mod; every other loop a clone of it (modrt.Module.Clone), which add hands to the
// caller to close with mod.
//
// With changelog.standby, the loops share one standby, new for each run (task.SharedStandby):
// loop 0 runs its tailer, which tails only the partitions no loop of the host owns, and every
// loop claims in it the partitions it is assigned before restoring them and releases them
// after its last checkpoint of them. A standby per loop would tail, beside the loop that owns
// a partition, what that loop writes: two writers of one stream in one store.
func newLanes(cfgs []task.Config, mod *modrt.Module, v int64, add func(*modrt.Module)) (*lanes, error) {
	l := &lanes{ts: make([]*task.Task, len(cfgs)), kafka: cfgs[0].Kafka, log: cfgs[0].Logger}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	cfgs = shareStandby(cfgs)
	for i, c := range cfgs {
		m := mod
		if i > 0 {
			m = mod.Clone()
			add(m)
		}
		c.Module, c.Version = m, v
		t, err := task.New(c)
		if err != nil {
			return nil, err
		}
		l.ts[i] = t
	}
	return l, nil
}

// shareStandby returns cfgs, the configurations of a task's loops, with one new standby shared
// by them when they are several and keep one (newLanes), loop 0 running its tailer; cfgs itself
// is left as it is (a restart calls newLanes with it again).
func shareStandby(cfgs []task.Config) []task.Config {
	if len(cfgs) < 2 || cfgs[0].Changelog == nil || !cfgs[0].Changelog.Standby {
		return cfgs
	}
	shared := task.NewSharedStandby()
	out := slices.Clone(cfgs)
	for i := range out {
		cc := *out[i].Changelog
		cc.Shared, cc.Tails = shared, i == 0
		out[i].Changelog = &cc
	}
	return out
}

// share splits total over n loops, loop i's part: each at least 1.
func share(total, n, i int) int {
	return max(total/n+btoi(i < total%n), 1)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// laneConfigs returns the configurations of tc's loops: base (loop 0's, as a host without loops
// makes it) for the first, and for each other one its own Kafka identity (kafka.LoopSuffix), its own
// Kafka producer for a kafka output or dead-letter topic (a transactional one under exactly
// once: one per loop), and the task's file and stdout sinks shared under a lock. Workers and
// the state cache are split over the loops. What closes the new producers is appended to
// closers.
func laneConfigs(cfg Config, tc TaskConfig, base task.Config, closers *[]io.Closer) ([]task.Config, error) {
	n := max(tc.Loops, 1)
	if n == 1 {
		return []task.Config{base}, nil
	}
	// The file and stdout sinks are written by every loop: one lock each.
	out, dlq := base.Output, base.DeadLetter
	if _, ok := out.(task.KafkaOutput); !ok {
		out = &lockedOutput{w: out}
	}
	if _, ok := dlq.(task.KafkaDeadLetters); !ok {
		dlq = &lockedDeadLetters{d: dlq}
	}
	cfgs := make([]task.Config, n)
	for i := range n {
		c := base
		c.Workers = share(tc.Workers, n, i)
		if base.StateCacheBytes > 0 {
			c.StateCacheBytes = max(base.StateCacheBytes/int64(n), 1)
		}
		if base.Logger != nil {
			c.Logger = base.Logger.With("loop", i)
		}
		c.Output, c.DeadLetter = out, dlq
		if i > 0 {
			if err := laneProducer(cfg, tc, &c, closers); err != nil {
				return nil, err
			}
		}
		if base.Kafka != nil {
			k := *base.Kafka
			k.TxnProducers = nil
			if k.InstanceID != "" {
				k.InstanceID += kafka.LoopSuffix(i)
			}
			if k.TxnID != "" {
				k.TxnID += kafka.LoopSuffix(i)
			}
			if k.Client.Logger != nil {
				k.Client.Logger = k.Client.Logger.With("loop", i)
			}
			if k.ExactlyOnce {
				if ko, ok := c.Output.(task.KafkaOutput); ok {
					k.TxnProducers = append(k.TxnProducers, ko.P)
				}
				if kd, ok := c.DeadLetter.(task.KafkaDeadLetters); ok && !slices.Contains(k.TxnProducers, kd.P) {
					k.TxnProducers = append(k.TxnProducers, kd.P)
				}
			}
			c.Kafka = &k
		}
		cfgs[i] = c
	}
	return cfgs, nil
}

// laneProducer gives loop c a Kafka producer of its own for its kafka output and dead-letter
// topic, as openSinks makes the task's.
func laneProducer(cfg Config, tc TaskConfig, c *task.Config, closers *[]io.Closer) error {
	ko, kout := c.Output.(task.KafkaOutput)
	kd, kdlq := c.DeadLetter.(task.KafkaDeadLetters)
	if !kout && !kdlq {
		return nil
	}
	kc := cfg.Kafka.client()
	kc.Logger = cfg.Logger.With("task", tc.Name)
	pc := kafka.ProducerConfig{DeliveryTimeout: cfg.Kafka.DeliveryTimeout, Compression: tc.Output.Compression,
		Limits: cmp.Or(ko.Limits, kd.Limits)} // the first loop's, which pingKafka learned
	var p *kafka.Producer
	if tc.Delivery == "exactly_once" {
		p = kafka.NewTxnProducer(kc.Logger, pc)
	} else {
		var err error
		if p, err = kafka.NewProducer(kc, pc); err != nil {
			return err
		}
		*closers = append(*closers, producerCloser{p})
	}
	if kout {
		ko.P = p
		c.Output = ko
	}
	if kdlq {
		kd.P = p
		c.DeadLetter = kd
	}
	return nil
}

// lockedOutput is a file or stdout output that several loops write.
type lockedOutput struct {
	mu sync.Mutex
	w  task.OutputSink
}

func (o *lockedOutput) WriteOutput(name string, key, value []byte, ts int64, headers []sink.Header) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.WriteOutput(name, key, value, ts, headers)
}

func (o *lockedOutput) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w.Flush()
}

// Pending: the task checkpoints early when its sinks hold too much (task's holdingSink).
func (o *lockedOutput) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p, ok := o.w.(interface{ Pending() int }); ok {
		return p.Pending()
	}
	return 0
}

// lockedDeadLetters is a dead-letter file that several loops write.
type lockedDeadLetters struct {
	mu sync.Mutex
	d  task.DeadLetterSink
}

func (o *lockedDeadLetters) WriteDeadLetter(d *task.DeadLetter) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.d.WriteDeadLetter(d)
}

func (o *lockedDeadLetters) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.d.Flush()
}

func (o *lockedDeadLetters) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if p, ok := o.d.(interface{ Pending() int }); ok {
		return p.Pending()
	}
	return 0
}

// Run runs every loop until all returned. A loop that fails halts the task: the others are
// stopped as at a host's stop (their last checkpoints commit), and Run returns the failure.
func (l *lanes) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.mu.Lock()
	l.cancel = cancel
	if l.failed != nil {
		cancel()
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	sctx, scancel := context.WithCancel(ctx)
	defer func() { scancel(); wg.Wait() }()
	wg.Go(func() { l.leaveStaleLoops(sctx) })
	if len(l.ts) == 1 {
		if err := l.ts[0].Run(ctx); err != nil {
			return err
		}
		return l.fail(nil)
	}
	errs := make([]error, len(l.ts))
	for i, t := range l.ts {
		wg.Go(func() {
			if err := t.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("loop %d: %w", i, err)
				cancel()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return l.fail(nil)
}

// staleLoopsTimeout bounds leaveStaleLoops: the loops start meanwhile.
const staleLoopsTimeout = 30 * time.Second

// leaveStaleLoops removes from the task's group the static members of loops this host no
// longer runs (kafka.LeaveStaleLoops): a host that ran the task as more loops and crashed, or
// was killed, left them there, and their partitions would sit unread until their session
// timed out. It runs beside the loops' start; a failure is logged (the partitions then move
// when the sessions time out, as before).
func (l *lanes) leaveStaleLoops(ctx context.Context) {
	k := l.kafka
	if k == nil || k.InstanceID == "" {
		return
	}
	tctx, cancel := context.WithTimeout(ctx, staleLoopsTimeout)
	defer cancel()
	left, err := kafka.LeaveStaleLoops(tctx, k.Client, k.Group, k.InstanceID, len(l.ts))
	switch {
	case err != nil && ctx.Err() == nil: // not stopping
		l.log.Warn("kafka: could not remove the group members of loops this host no longer runs; their partitions move when their session times out",
			"group", k.Group, "err", err)
	case len(left) > 0:
		l.log.Info("kafka: removed from the group the static members of loops this host no longer runs (a crash or a restart with fewer loops left them; their partitions would have waited for their session timeout)",
			"group", k.Group, "loops", len(l.ts), "instance_ids", left)
	}
}

// fail stops the loops' run with err, which Run returns (with nil: returns what an earlier fail
// set).
func (l *lanes) fail(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && l.failed == nil {
		l.failed = err
		if l.cancel != nil {
			l.cancel()
		}
	}
	return l.failed
}

// Ready reports whether every loop is ready (task.Task.Ready).
func (l *lanes) Ready() bool {
	for _, t := range l.ts {
		if !t.Ready() {
			return false
		}
	}
	return true
}

// Pause pauses every loop.
func (l *lanes) Pause(ctx context.Context) error {
	return l.each(func(t *task.Task) error { return t.Pause(ctx) })
}

// Resume resumes every loop.
func (l *lanes) Resume(ctx context.Context) error {
	return l.each(func(t *task.Task) error { return t.Resume(ctx) })
}

func (l *lanes) each(fn func(*task.Task) error) error {
	var errs []error
	for _, t := range l.ts {
		errs = append(errs, fn(t))
	}
	return errors.Join(errs...)
}

// errLanesSplit is the halt of a task whose loops could not all switch to a version.
var errLanesSplit = errors.New("the task's loops could not all switch to the new version")

// Switch makes mod (version id) current in every loop: loop 0 takes mod, the others clones of
// it. When a loop other than the first cannot switch (it is stopping), the loops would run
// different versions: Switch stops the task (it halts with errLanesSplit, and a restart runs
// the active version in every loop) and returns the error with the switches made so far, so
// that the caller still records the version active. On an error of loop 0, nothing switched
// and mod remains the caller's.
func (l *lanes) Switch(ctx context.Context, mod *modrt.Module, id int64) ([]task.Switched, error) {
	sws := make([]task.Switched, 0, len(l.ts))
	for i, t := range l.ts {
		m := mod
		if i > 0 {
			m = mod.Clone()
			ctx = context.WithoutCancel(ctx) // once one loop switched, the others must follow
		}
		sw, err := t.Switch(ctx, m, id)
		if err != nil {
			if i == 0 {
				return nil, err
			}
			m.Close(context.WithoutCancel(ctx))
			err = fmt.Errorf("%w: loop %d: %w", errLanesSplit, i, err)
			l.fail(err)
			return sws, err
		}
		sws = append(sws, sw)
	}
	return sws, nil
}

// firstBatch waits for the first batch that ran on the version in any loop (task.Switched).
func firstBatch(ctx context.Context, sws []task.Switched) (time.Time, error) {
	if len(sws) == 1 {
		return sws[0].FirstBatch(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type res struct {
		at  time.Time
		err error
	}
	ch := make(chan res, len(sws))
	for _, sw := range sws {
		go func() {
			at, err := sw.FirstBatch(ctx)
			ch <- res{at, err}
		}()
	}
	var err error
	for range sws {
		r := <-ch
		if r.err == nil {
			return r.at, nil
		}
		err = r.err
	}
	return time.Time{}, err
}

// Stats sums the loops' figures: counters and histograms add up, each input partition is listed
// once (the entry furthest on), the recent errors are merged in time order, and the
// version is the lowest any loop runs.
func (l *lanes) Stats() TaskStats {
	if len(l.ts) == 1 {
		return l.ts[0].Stats()
	}
	all := make([]TaskStats, len(l.ts))
	for i, t := range l.ts {
		all[i] = t.Stats()
	}
	return mergeStats(all)
}

// mergeStats sums the figures of a task's loops (lanes.Stats).
func mergeStats(all []TaskStats) TaskStats {
	out := all[0]
	ov := reflect.ValueOf(&out).Elem()
	for _, s := range all[1:] {
		sv := reflect.ValueOf(s)
		for f := range ov.NumField() {
			switch ov.Type().Field(f).Name {
			case "Version": // the lowest any loop runs: a loop left behind shows
				out.Version = min(out.Version, s.Version)
				continue
			case "Deploys", "LogDropped": // the same in every loop (one module's log limit)
				continue
			}
			o, v := ov.Field(f), sv.Field(f)
			switch o.Kind() {
			case reflect.Int, reflect.Int64:
				o.SetInt(o.Int() + v.Int())
			case reflect.Uint64:
				o.SetUint(o.Uint() + v.Uint())
			case reflect.Float64:
				o.SetFloat(o.Float() + v.Float())
			case reflect.Bool:
				o.SetBool(o.Bool() || v.Bool())
			}
		}
		mergeHist(&out.BatchSize, s.BatchSize)
		mergeHist(&out.CallSeconds, s.CallSeconds)
		mergeHist(&out.CheckpointSeconds, s.CheckpointSeconds)
		out.Inputs = append(out.Inputs, s.Inputs...)
		out.Recent = append(out.Recent, s.Recent...)
		out.GuestMetrics = mergeGuestMetrics(out.GuestMetrics, s.GuestMetrics)
	}
	out.Inputs = slices.Clone(out.Inputs)
	// A loop's figures may still list a partition that moved to another loop since its last
	// checkpoint: the entry furthest on (its committed offset) is the owner's.
	slices.SortStableFunc(out.Inputs, func(a, b InputStats) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition),
			cmp.Compare(b.Committed, a.Committed))
	})
	out.Inputs = slices.CompactFunc(out.Inputs, func(a, b InputStats) bool {
		return a.Name == b.Name && a.Topic == b.Topic && a.Partition == b.Partition
	})
	slices.SortStableFunc(out.Recent, func(a, b RecentError) int { return a.Time.Compare(b.Time) })
	if n := len(out.Recent); n > task.RecentErrors {
		out.Recent = out.Recent[n-task.RecentErrors:]
	}
	return out
}

func mergeHist(h *Histogram, o Histogram) {
	if len(h.Counts) == 0 {
		*h = Histogram{Bounds: o.Bounds, Counts: slices.Clone(o.Counts), Count: o.Count, Sum: o.Sum}
		return
	}
	if !slices.Equal(h.Bounds, o.Bounds) || len(h.Counts) != len(o.Counts) {
		return // not one histogram
	}
	h.Counts = slices.Clone(h.Counts)
	for i := range o.Counts {
		h.Counts[i] += o.Counts[i]
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// mergeGuestMetrics adds the values of the metrics of b to those of a with the same name and
// labels.
func mergeGuestMetrics(a, b []GuestMetric) []GuestMetric {
	a = slices.Clone(a)
	for _, m := range b {
		i := slices.IndexFunc(a, func(x GuestMetric) bool {
			return x.Name == m.Name && x.Counter == m.Counter && slices.Equal(x.Labels, m.Labels)
		})
		if i < 0 {
			if m.Histogram != nil {
				h := *m.Histogram
				h.Counts = slices.Clone(h.Counts)
				m.Histogram = &h
			}
			a = append(a, m)
			continue
		}
		a[i].Value += m.Value
		if m.Histogram != nil && a[i].Histogram != nil {
			h := *a[i].Histogram
			mergeHist(&h, *m.Histogram)
			a[i].Histogram = &h
		}
	}
	return a
}

// Query returns key's state in every loop's streams.
func (l *lanes) Query(ctx context.Context, key []byte) ([]KeyState, error) {
	if len(l.ts) == 1 {
		return l.ts[0].Query(ctx, key)
	}
	var out []KeyState
	for _, t := range l.ts {
		ks, err := t.Query(ctx, key)
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
	}
	slices.SortStableFunc(out, func(a, b KeyState) int { return cmp.Compare(a.Stream, b.Stream) })
	return out, nil
}

// QueryOwned asks each partition of owned of the loop that owns it (task.ErrNotOwned when
// none does: it is moving between loops), and the local streams of loop 0.
func (l *lanes) QueryOwned(ctx context.Context, key []byte, owned []kafka.TopicPartition, local bool) ([]KeyState, error) {
	if len(l.ts) == 1 {
		return l.ts[0].QueryOwned(ctx, key, owned, local)
	}
	out, err := l.ts[0].QueryOwned(ctx, key, nil, local)
	if err != nil {
		return nil, err
	}
	for _, tp := range owned {
		var ks []KeyState
		err := task.ErrNotOwned
		for _, t := range l.ts {
			if ks, err = t.QueryOwned(ctx, key, []kafka.TopicPartition{tp}, false); !errors.Is(err, task.ErrNotOwned) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
	}
	slices.SortStableFunc(out, func(a, b KeyState) int { return cmp.Compare(a.Stream, b.Stream) })
	return out, nil
}

// QueryScan is QueryScanStreams without the streams.
func (l *lanes) QueryScan(ctx context.Context, prefix, after []byte, limit int) ([]KeyState, error) {
	ks, _, err := l.QueryScanStreams(ctx, prefix, after, limit)
	return ks, err
}

// QueryScanStreams merges the loops' pages: the first limit keys of all, in the store's key
// order, and every stream a loop covered.
func (l *lanes) QueryScanStreams(ctx context.Context, prefix, after []byte, limit int) ([]KeyState, []string, error) {
	if len(l.ts) == 1 {
		return l.ts[0].QueryScanStreams(ctx, prefix, after, limit)
	}
	if limit <= 0 || limit > task.MaxQueryKeys {
		limit = task.MaxQueryKeys
	}
	var ks []KeyState
	var streams []string
	for _, t := range l.ts {
		k, s, err := t.QueryScanStreams(ctx, prefix, after, limit)
		if err != nil {
			return nil, nil, err
		}
		ks, streams = append(ks, k...), append(streams, s...)
	}
	ks = firstKeys(ks, func(k *KeyState) ([]byte, string) { return k.Key, k.Stream }, limit)
	slices.Sort(streams)
	return ks, streams, nil
}

// Group is the task's group as loop 0's consumer describes it, with every loop of this host
// shown as one member, Self: the partitions any loop owns are this host's, and the other
// members are other hosts.
func (l *lanes) Group(ctx context.Context) (kafka.GroupView, error) {
	view, err := l.ts[0].Group(ctx)
	if err != nil || len(l.ts) == 1 {
		return view, err
	}
	mine := map[string]bool{}
	for _, t := range l.ts[1:] {
		id, err := t.Member(ctx)
		if err != nil {
			return kafka.GroupView{}, err
		}
		if id != "" {
			mine[id] = true
		}
	}
	for tp, m := range view.Owners {
		if mine[m.ID] {
			m.ID = view.Self
			view.Owners[tp] = m
		}
	}
	view.Members = slices.DeleteFunc(view.Members, func(m kafka.Member) bool { return mine[m.ID] })
	return view, nil
}
