package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wasmstream/wasmstream/host"
)

// metricsConfig is the "metrics" section: where Prometheus can scrape without the admin token.
type metricsConfig struct {
	// Addr, if set, is a "host:port" that serves GET /metrics, /healthz and /readyz without
	// authentication, and nothing else. A port alone (":9090") listens on the loopback
	// interface only. Default: none (/metrics is on the admin listener, behind its token).
	Addr string `yaml:"addr"`
}

// statsCollector turns the host's figures into Prometheus metrics when scraped: it reads
// host.Stats (a copy of counters the tasks keep anyway), so a scrape costs the record path
// nothing. Labels are bounded: task, and per input the input's name, topic and partition.
type statsCollector struct {
	stats func() []host.TaskStats
	// guestMemory, if set, returns the bytes of guest memory the host's instances hold.
	guestMemory func() int64
}

type metricDesc struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	get  func(*host.TaskStats) float64
}

const ns = "wasmstream"

var taskLabels = []string{"task"}

func taskMetric(name, help string, kind prometheus.ValueType, get func(*host.TaskStats) float64) metricDesc {
	return metricDesc{prometheus.NewDesc(ns+"_"+name, help, taskLabels, nil), kind, get}
}

func counter(name, help string, get func(*host.TaskStats) int64) metricDesc {
	return taskMetric(name, help, prometheus.CounterValue, func(s *host.TaskStats) float64 { return float64(get(s)) })
}

func gauge(name, help string, get func(*host.TaskStats) float64) metricDesc {
	return taskMetric(name, help, prometheus.GaugeValue, get)
}

var taskMetrics = []metricDesc{
	counter("records_in_total", "Records read this run.", func(s *host.TaskStats) int64 { return s.Records }),
	counter("records_processed_total", "Records whose processing completed: applied, or dead-lettered or skipped after their last attempt (malformed lines, dead-lettered as read, are not).", func(s *host.TaskStats) int64 { return s.Processed }),
	counter("records_out_total", "Records the guest emitted to the task's output.", func(s *host.TaskStats) int64 { return s.Outputs }),
	counter("records_dead_lettered_total", "Records sent to the dead letters (malformed, or failing on every attempt).", func(s *host.TaskStats) int64 { return s.DeadLetters }),
	counter("records_retried_total", "Retries of failed records and timer firings.", func(s *host.TaskStats) int64 { return s.Retries }),
	counter("records_failed_total", "Records and timer firings skipped after failing on every attempt (on_exhausted: skip).", func(s *host.TaskStats) int64 { return s.Skips }),
	counter("records_replay_skipped_total", "Records replayed after a restart and skipped as already applied.", func(s *host.TaskStats) int64 { return s.Skipped }),
	counter("records_late_total", "Records read with a timestamp below their partition's watermark.", func(s *host.TaskStats) int64 { return s.Late }),
	counter("records_lost_to_retention_total", "Offsets of Kafka input records removed (retention, DeleteRecords) below a partition's position before the task read them; the partition went on from its log start.", func(s *host.TaskStats) int64 { return s.RetentionLost }),
	counter("guest_call_failures_total", "Guest calls that failed (a trap, an error code, fuel or time exhausted).", func(s *host.TaskStats) int64 { return s.Failures }),
	counter("instance_traps_total", "Guest instances discarded after a trap; each is replaced by a fresh one.", func(s *host.TaskStats) int64 { return s.Traps }),
	counter("fuel_used_total", "Fuel the guest calls spent (metered modules only).", func(s *host.TaskStats) int64 { return s.FuelUsed }),
	counter("checkpoints_total", "Checkpoints committed.", func(s *host.TaskStats) int64 { return s.Checkpoints }),
	counter("input_pauses_total", "Times an input was paused because its key queues were full.", func(s *host.TaskStats) int64 { return s.Pauses }),
	counter("timers_set_total", "Timers set.", func(s *host.TaskStats) int64 { return s.TimersSet }),
	counter("timers_deleted_total", "Timers deleted, fired ones included.", func(s *host.TaskStats) int64 { return s.TimersDeleted }),
	counter("timers_fired_total", "Timer firings completed.", func(s *host.TaskStats) int64 { return s.TimersFired }),
	counter("ticks_total", "Partition tick callbacks started.", func(s *host.TaskStats) int64 { return s.Ticks }),
	counter("restores_total", "Kafka partitions restored from the changelog.", func(s *host.TaskStats) int64 { return s.Restores }),
	counter("restores_full_total", "Restores that replayed a partition's whole changelog.", func(s *host.TaskStats) int64 { return s.FullRestores }),
	counter("restore_records_total", "Changelog records the restores read.", func(s *host.TaskStats) int64 { return s.RestoredRecords }),
	counter("restore_bytes_total", "Bytes of the changelog records the restores read.", func(s *host.TaskStats) int64 { return s.RestoredBytes }),
	counter("changelog_records_total", "Key snapshots produced to the changelog.", func(s *host.TaskStats) int64 { return s.ChangelogRecords }),
	counter("standby_records_total", "Changelog records the standby applied for partitions not owned.", func(s *host.TaskStats) int64 { return s.StandbyRecords }),
	counter("standby_bytes_total", "Bytes of the changelog records the standby applied.", func(s *host.TaskStats) int64 { return s.StandbyBytes }),
	counter("timers_dropped_total", "Timer firings dropped because the module has no timer callback.", func(s *host.TaskStats) int64 { return s.TimersDropped }),
	counter("timers_refused_total", "timer_set calls of a new timer refused with ERR_LIMIT: the task's pending timers were at time.max_pending_timers.", func(s *host.TaskStats) int64 { return s.TimersRefused }),
	counter("timer_splits_total", "Batches run again with a key's records one per call because a timer one of their calls set fell due before a later record of its key in that call.", func(s *host.TaskStats) int64 { return s.TimerSplits }),
	counter("log_lines_dropped_total", "Guest log lines the running module version dropped (max_log_lines_per_second).", func(s *host.TaskStats) int64 { return s.LogDropped }),
	gauge("task_halted", "1 while the task is halted (on_task_failure: halt_task; restart: until it is restarted), else 0.", func(s *host.TaskStats) float64 { return boolFloat(s.Halted) }),
	counter("task_restarts_total", "Automatic restarts that started the halted task again (on_task_failure: restart).", func(s *host.TaskStats) int64 { return s.Restarts }),
	counter("partitions_dropped_total", "Lost partitions whose local state was deleted (drop_revoked).", func(s *host.TaskStats) int64 { return s.Dropped }),
	counter("chain_entries_total", "Records the task appended to chain logs: outputs other tasks of the host read as an input.", func(s *host.TaskStats) int64 { return s.ChainEntries }),
	counter("chain_holds_total", "Times the task held because a task reading its output left max_backlog entries uncovered (back-pressure).", func(s *host.TaskStats) int64 { return s.ChainHolds }),
	counter("transactions_committed_total", "Exactly-once transactions committed.", func(s *host.TaskStats) int64 { return s.TxnCommits }),
	counter("transactions_aborted_total", "Exactly-once transactions aborted (their records are processed again).", func(s *host.TaskStats) int64 { return s.TxnAborts }),
	counter("deploys_total", "Module versions switched to this run: deploys, activations and rollbacks.", func(s *host.TaskStats) int64 { return s.Deploys }),
	gauge("module_version", "The module version running.", func(s *host.TaskStats) float64 { return float64(s.Version) }),
	gauge("timers_pending", "Timers set and neither deleted nor fired, as of the last checkpoint.", func(s *host.TaskStats) float64 { return float64(s.PendingTimers) }),
	gauge("paused", "1 while the task is paused (wasmstream pause), else 0.", func(s *host.TaskStats) float64 { return boolFloat(s.Paused) }),
	gauge("records_pending", "Records read and not yet complete (queued or in flight).", func(s *host.TaskStats) float64 { return float64(s.Pending) }),
	gauge("records_in_flight", "Records in batches being processed.", func(s *host.TaskStats) float64 { return float64(s.InFlight) }),
	gauge("key_queue_items", "Records and timer firings read ahead, waiting in their keys' queues.", func(s *host.TaskStats) float64 { return float64(s.Queued) }),
	gauge("state_cached_keys", "Keys whose state the task's cache holds.", func(s *host.TaskStats) float64 { return float64(s.StateKeys) }),
	gauge("state_cached_bytes", "The cache's estimate of the size of that state.", func(s *host.TaskStats) float64 { return float64(s.StateBytes) }),
	counter("state_cache_hits_total", "Keys a batch found in the state cache.", func(s *host.TaskStats) int64 { return s.CacheHits }),
	counter("state_cache_misses_total", "Keys a batch did not find in the state cache: their state was read from the store.", func(s *host.TaskStats) int64 { return s.CacheMisses }),
	gauge("partitions_restoring", "Kafka partitions assigned and being restored from the changelog, not read yet.", func(s *host.TaskStats) float64 { return float64(s.Restoring) }),
}

var (
	histBatch = prometheus.NewDesc(ns+"_batch_records", "Records and timer firings per batch handed to a worker.", taskLabels, nil)
	histCall  = prometheus.NewDesc(ns+"_guest_call_duration_seconds", "Duration of each guest call (a unit of records or firings, or a tick).", taskLabels, nil)
	histCkpt  = prometheus.NewDesc(ns+"_checkpoint_duration_seconds", "Duration of each checkpoint.", taskLabels, nil)

	inputLabels   = []string{"task", "input", "topic", "partition"}
	inRecords     = prometheus.NewDesc(ns+"_input_records_in_total", "Records read this run, per input or Kafka partition.", inputLabels, nil)
	inCommitted   = prometheus.NewDesc(ns+"_input_committed_position", "The committed position: lines (Kafka: the offset) a restart resumes at.", inputLabels, nil)
	inLag         = prometheus.NewDesc(ns+"_consumer_lag_records", "Kafka: records of the partition beyond the committed position, as of its last fetch.", inputLabels, nil)
	inChainLag    = prometheus.NewDesc(ns+"_chain_lag_records", "A chained input (type task): entries of the upstream task's output beyond the committed position.", append(inputLabels, "chain"), nil)
	inWatermark   = prometheus.NewDesc(ns+"_watermark_timestamp_seconds", "The event-time watermark (absent before there is one).", inputLabels, nil)
	inInFlight    = prometheus.NewDesc(ns+"_input_records_in_flight", "Records of the input in batches being processed.", inputLabels, nil)
	inTimers      = prometheus.NewDesc(ns+"_input_timers_pending", "Timers of the input (Kafka: partition) set and neither deleted nor fired, as of the last checkpoint.", inputLabels, nil)
	inReplay      = prometheus.NewDesc(ns+"_replay_remaining_records", "After a reset: records between the committed position and the head captured at the reset (absent once caught up, or without a reset).", inputLabels, nil)
	inputMetrics  = []*prometheus.Desc{inRecords, inCommitted, inLag, inChainLag, inWatermark, inInFlight, inTimers, inReplay}
	guestMemory   = prometheus.NewDesc(ns+"_guest_memory_bytes", "Linear memory of the guest instances of every task (mapped; only touched pages are resident).", nil, nil)
	histogramDesc = []*prometheus.Desc{histBatch, histCall, histCkpt}
)

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Describe implements prometheus.Collector.
func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range taskMetrics {
		ch <- m.desc
	}
	for _, d := range histogramDesc {
		ch <- d
	}
	for _, d := range inputMetrics {
		ch <- d
	}
	ch <- guestMemory
}

// Collect implements prometheus.Collector.
func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.guestMemory != nil {
		ch <- prometheus.MustNewConstMetric(guestMemory, prometheus.GaugeValue, float64(c.guestMemory()))
	}
	for _, s := range c.stats() {
		for _, m := range taskMetrics {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.get(&s), s.Task)
		}
		for i, h := range []host.Histogram{s.BatchSize, s.CallSeconds, s.CheckpointSeconds} {
			ch <- constHistogram(histogramDesc[i], h, s.Task)
		}
		for _, in := range s.Inputs {
			part := ""
			if in.Partition >= 0 {
				part = strconv.Itoa(int(in.Partition))
			}
			l := []string{s.Task, in.Name, in.Topic, part}
			ch <- prometheus.MustNewConstMetric(inRecords, prometheus.CounterValue, float64(in.Records), l...)
			ch <- prometheus.MustNewConstMetric(inCommitted, prometheus.GaugeValue, float64(max(in.Committed, 0)), l...)
			ch <- prometheus.MustNewConstMetric(inInFlight, prometheus.GaugeValue, float64(in.InFlight), l...)
			ch <- prometheus.MustNewConstMetric(inTimers, prometheus.GaugeValue, float64(in.PendingTimers), l...)
			switch {
			case in.Chain != "":
				ch <- prometheus.MustNewConstMetric(inChainLag, prometheus.GaugeValue, float64(max(in.Lag, 0)), append(l, in.Chain)...)
			case in.Lag >= 0:
				ch <- prometheus.MustNewConstMetric(inLag, prometheus.GaugeValue, float64(in.Lag), l...)
			}
			if in.ReplayHead > in.ReplayFrom {
				ch <- prometheus.MustNewConstMetric(inReplay, prometheus.GaugeValue, float64(in.ReplayRemaining), l...)
			}
			if in.Watermark >= 0 {
				ch <- prometheus.MustNewConstMetric(inWatermark, prometheus.GaugeValue, float64(in.Watermark)/1000, l...)
			}
		}
	}
}

// constHistogram converts a host histogram (per-bucket counts) to Prometheus's (cumulative).
func constHistogram(d *prometheus.Desc, h host.Histogram, task string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b] = cum
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, task)
}

// newMetricsHandler returns the /metrics handler: the host's figures, plus the Go runtime's and
// the process's, from a registry of its own (no global one).
func newMetricsHandler(c statsCollector, log *slog.Logger) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, guestCollector{stats: c.stats, log: log, warned: &sync.Map{}}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// metricsListenAddr returns the address metrics.addr listens on: a port alone means the
// loopback interface.
func metricsListenAddr(addr string) (string, error) {
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return "", fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	if h == "" {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, port), nil
}

// serveMetrics listens on addr and serves metrics, /healthz and /readyz (ready reports
// readiness) without authentication until stop is called; stop waits for the server.
func serveMetrics(addr string, metrics http.Handler, ready func() bool, log *slog.Logger) (bound string, stop func(), err error) {
	la, err := metricsListenAddr(addr)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", la)
	if err != nil {
		return "", nil, fmt.Errorf("metrics.addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if ready() {
			fmt.Fprintln(w, `{"status":"ready"}`)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"status":"not ready"}`)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	log.Info("metrics and probes listening without authentication", "addr", ln.Addr().String())
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}, nil
}

// guestCollector exports the counters, gauges and histograms guests declare (ABI 0.3
// metric_declare, metric_declare_histogram) as wasmstream_guest_<name> (counters get a _total
// suffix unless the name has one) with a task
// label beside the guest's own fixed labels. Their names are known only at run time, so it is an
// unchecked collector (Describe sends nothing). The host bounds them: 64 series per task.
type guestCollector struct {
	stats  func() []host.TaskStats
	log    *slog.Logger
	warned *sync.Map // task + "\x00" + name: the clashes already logged
}

// Describe implements prometheus.Collector.
func (guestCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector. Tasks may declare the same name differently (a
// counter here, a gauge there, other labels); one scrape cannot hold both under one name, so the
// first task's declaration keeps wasmstream_guest_<name> and a later task's different one is
// exported in that task's own namespace, wasmstream_guest_<task>_<name> (the task name with
// every character a metric name cannot hold as "_"), with a warning logged once; so is a name
// that would be one of the host's own wasmstream_guest_ metrics (call_failures,
// call_duration_seconds, memory_bytes). A series still clashing there is left out.
func (c guestCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]guestFamily{}
	// The host's own metrics under the same prefix: a guest name that would collide is left out.
	for _, n := range []string{"call_failures_total", "call_duration_seconds", "call_duration_seconds_bucket",
		"call_duration_seconds_sum", "call_duration_seconds_count", "memory_bytes"} {
		seen[ns+"_guest_"+n] = guestFamily{labels: "\x00host"}
	}
	for _, s := range c.stats() {
		for _, g := range s.GuestMetrics {
			var m prometheus.Metric
			if g.Histogram != nil {
				m = c.histogram(seen, s.Task, g)
			} else {
				m = c.value(seen, s.Task, g)
			}
			if m != nil {
				ch <- m
			}
		}
	}
}

// guestFamily is what a metric name stands for in one scrape: every series of a name must have
// the same.
type guestFamily struct {
	kind   prometheus.ValueType
	labels string
}

// guestLabels returns the label names and values of a guest metric of task: task, then the
// guest's own.
func guestLabels(task string, g host.GuestMetric) (labels, values []string) {
	labels, values = []string{"task"}, []string{task}
	for _, l := range g.Labels {
		labels, values = append(labels, l.Name), append(values, l.Value)
	}
	return labels, values
}

// histogram returns the metric of task's guest histogram g, under a name seen does not hold for
// another family (which it then holds), or nil when there is none.
func (c guestCollector) histogram(seen map[string]guestFamily, task string, g host.GuestMetric) prometheus.Metric {
	labels, values := guestLabels(task, g)
	// A histogram is also its _bucket, _sum and _count series: none may be another
	// family's name.
	f := guestFamily{kind: prometheus.UntypedValue, labels: "histogram\x00" + strings.Join(labels, ",")}
	clashes := func(name string) bool {
		for _, n := range []string{name, name + "_bucket", name + "_sum", name + "_count"} {
			if prev, ok := seen[n]; ok && prev != f {
				return true
			}
		}
		return false
	}
	name := ns + "_guest_" + g.Name
	if clashes(name) {
		name = c.own(task, g.Name, "")
		if clashes(name) {
			return nil
		}
	}
	for _, n := range []string{name, name + "_bucket", name + "_sum", name + "_count"} {
		seen[n] = f
	}
	h := g.Histogram
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for k, b := range h.Bounds {
		cum += h.Counts[k]
		buckets[b] = cum
	}
	d := prometheus.NewDesc(name, "Declared by the guest of the task (metric_declare_histogram).", labels, nil)
	m, err := prometheus.NewConstHistogram(d, h.Count, h.Sum, buckets, values...)
	if err != nil {
		return nil // the host validated names, labels and bounds: cannot happen
	}
	return m
}

// value returns the metric of task's guest counter or gauge g, under a name seen does not hold
// for another family (which it then holds), or nil when there is none.
func (c guestCollector) value(seen map[string]guestFamily, task string, g host.GuestMetric) prometheus.Metric {
	name, kind, suffix := ns+"_guest_"+g.Name, prometheus.GaugeValue, ""
	if g.Counter {
		kind = prometheus.CounterValue
		if !strings.HasSuffix(name, "_total") {
			suffix = "_total"
		}
	}
	name += suffix
	labels, values := guestLabels(task, g)
	f := guestFamily{kind, strings.Join(labels, ",")}
	if prev, ok := seen[name]; ok && prev != f {
		name = c.own(task, g.Name, suffix)
		if prev, ok := seen[name]; ok && prev != f {
			return nil
		}
	}
	seen[name] = f
	d := prometheus.NewDesc(name, "Declared by the guest of the task (metric_declare).", labels, nil)
	m, err := prometheus.NewConstMetric(d, kind, float64(g.Value), values...)
	if err != nil {
		return nil // the host validated names and labels: cannot happen
	}
	return m
}

// own returns the name of a task's guest metric in the task's own namespace, for a name another
// task (or the host) declared differently, and logs the move once.
func (c guestCollector) own(task, name, suffix string) string {
	b := []byte(task)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_') {
			b[i] = '_'
		}
	}
	own := ns + "_guest_" + string(b) + "_" + name + suffix
	if c.log != nil && c.warned != nil {
		if _, done := c.warned.LoadOrStore(task+"\x00"+name, true); !done {
			c.log.Warn("guest metric declared differently by another task (or one of the host's): exported in this task's namespace",
				"task", task, "metric", ns+"_guest_"+name+suffix, "exported_as", own)
		}
	}
	return own
}
