package host

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/source"
)

// Config configures a Host. The zero value of every field means its documented default (set by
// WithDefaults, in defaults.go); New copies the Config, so later changes by the caller have no
// effect. Each field's yaml tag is its key in the CLI's configuration file.
type Config struct {
	// DataDir holds the state store and the compilation cache. Default "data".
	DataDir string `yaml:"data_dir"`
	// CacheDir holds compiled modules between runs. Default DataDir/cache. "-" disables it.
	CacheDir string `yaml:"cache_dir"`
	// CheckpointInterval is how often state, marks and positions are committed. Default 1s.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// SyncWrites makes every checkpoint fsync the store and the file sinks. Without it a
	// checkpoint survives a killed process but not a power loss. Default false.
	SyncWrites bool `yaml:"sync_writes"`
	// MinFreeDiskBytes is the free space the data directory's file system must keep for the
	// state store: below it Run does not start, and a running host stops at its next checkpoint
	// with an error wrapping ErrDiskFull (the store writes through memory-mapped files, and a
	// full disk would otherwise kill the process with SIGBUS). Default (0): 64 MiB. -1 turns
	// the check off.
	MinFreeDiskBytes int64 `yaml:"min_free_disk_bytes"`
	// Logger receives the host's structured logs. Default: discard.
	Logger *slog.Logger `yaml:"-"`
	// Now is the processing-time clock. Default time.Now. Tests inject their own.
	Now func() time.Time `yaml:"-"`
	// Stdin is what inputs of type "stdin" read. Default os.Stdin.
	Stdin io.Reader `yaml:"-"`
	// Stdout is where outputs of type "stdout" go. Default os.Stdout.
	Stdout io.Writer `yaml:"-"`
	// Kafka says how to reach the Kafka cluster that "kafka" inputs, outputs and dead letters
	// use.
	Kafka KafkaConfig `yaml:"kafka"`
	// Tasks are the tasks the host runs. At least one.
	Tasks []TaskConfig `yaml:"tasks"`
	// KeepModuleVersions is how many versions of each task's module the data directory keeps
	// for rollback, the active one always among them. Default 10.
	KeepModuleVersions int `yaml:"keep_module_versions"`
	// Admin configures the admin HTTP API (deploy, rollback, pause, status).
	Admin AdminConfig `yaml:"admin"`
	// OnTaskFailure is what a task that cannot start (its module and every fallback version
	// fail to start) or that fails while running takes down: HaltTask (the default) halts that
	// task only — the others go on, the admin API stays up, and Run returns the failures once
	// the others finished — HaltHost stops every task and Run returns at once, and Restart
	// halts that task and restarts it by itself (as RestartTask does) after a back-off of 1 s
	// that doubles with each halt in a row up to 1 min, reset once the task ran 5 min without
	// halting: Run then does not return while a task waits to restart.
	OnTaskFailure TaskFailure `yaml:"on_task_failure"`
	// HostID names this host in the transactional ids of exactly-once tasks and in its
	// consumers' group instance ids (static membership, unless KafkaConfig.DynamicMembership), which
	// must be stable across its restarts and differ from every other host's: a restarted host
	// then fences what its previous run left open and takes its partitions back. Default: the machine's host name and a hash of
	// the data directory's absolute path (several hosts on one machine have their own
	// directories).
	HostID string `yaml:"host_id"`

	// appliedSpan, when positive, replaces store.MaxAppliedSpan as the most offsets a
	// checkpoint's applied set spans past its Next (task.Config.AppliedSpan): tests lower it to
	// cross it with few records (export_test.go).
	appliedSpan int64
	// minRestartDelay, when positive, is the shortest delay before an automatic restart
	// (autorestart.go): tests raise it so that an automatic restart cannot fire while they act.
	minRestartDelay time.Duration
}

// AdminConfig configures the admin HTTP API, which runs while Run runs.
type AdminConfig struct {
	// Addr is the "host:port" the API listens on. Empty (the default): no API. A port alone
	// (":7070") listens on the loopback interface only (127.0.0.1:7070).
	Addr string `yaml:"addr"`
	// Token is the bearer token every request must carry ("Authorization: Bearer <token>").
	// Required when Addr is not a loopback address. Default: none.
	Token string `yaml:"token"`
	// ReadToken is a second bearer token that can read status, versions, metrics and task
	// state but cannot deploy, activate, roll back, pause, resume or reset (403). Needs Token.
	// Default: none.
	ReadToken string `yaml:"read_token"`
	// AdvertiseAddr is the "host:port" at which the other hosts of a group reach this host's
	// admin API, to forward it the state queries of the partitions it owns. Default: Addr,
	// unless it listens on every interface (then no address is advertised).
	AdvertiseAddr string `yaml:"advertise_addr"`
	// MaxModuleBytes bounds the size of an uploaded module. Default 64 MiB.
	MaxModuleBytes int64 `yaml:"max_module_bytes"`
	// Metrics, if set, is served at GET /metrics on the admin listener, with the token
	// required like every admin endpoint (the CLI sets its Prometheus handler). Not a
	// configuration key. GET /healthz and /readyz are always served, without the token.
	Metrics http.Handler `yaml:"-"`
}

// TaskConfig describes one task: a module, its inputs, its outputs and its limits.
type TaskConfig struct {
	// Name identifies the task in state, logs and the CLI. Required; letters, digits, '-', '_', '.'.
	Name string `yaml:"name"`
	// Module is the path of the task's .wasm file. Required.
	Module string `yaml:"module"`
	// Config is the task's own configuration, handed to the guest as JSON. Default {}.
	Config map[string]any `yaml:"config"`
	// Inputs are the task's sources. At least one.
	Inputs []InputConfig `yaml:"inputs"`
	// Output is where the task's emitted records go.
	Output OutputConfig `yaml:"output"`
	// DeadLetter is where records that cannot be decoded or keep failing go.
	DeadLetter DeadLetterConfig `yaml:"dead_letter"`
	// Sequencing chooses which records must run in order (S7).
	Sequencing SequencingConfig `yaml:"sequencing"`
	// Workers is the number of wasm instances running batches at once. Default GOMAXPROCS.
	// With Loops above 1 they are split over the loops (each at least 1).
	Workers int `yaml:"workers"`
	// Loops is the number of task loops ("lanes") the host runs for a task with a Kafka input:
	// each is a whole task loop (scheduler, state cache, checkpoints, consumer) and its own
	// member of the task's consumer group, which spreads the partitions over every loop of
	// every host. A host then uses more than the one core a loop and its checkpoint writer
	// carry. Workers and StateCacheBytes are split over the loops. Only for a task whose inputs
	// are one kafka input (not bounded), without changelog.drop_revoked and not read by
	// another task (chains); with changelog.standby the loops share one standby, which tails
	// the partitions no loop of the host owns. Default 1: one loop, as before.
	Loops int `yaml:"loops"`
	// MaxBatchRecords bounds the records of one guest call. Default 256.
	MaxBatchRecords int `yaml:"max_batch_records"`
	// MaxKeyRecords bounds the records one key contributes to one call. Default 64.
	MaxKeyRecords int `yaml:"max_key_records"`
	// MaxInFlight bounds the records of one partition being processed at once. 1 means strictly
	// in partition order. Default 1024.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxQueued bounds the records read ahead per partition; reading pauses above it and resumes
	// at half. Default 8192.
	MaxQueued int `yaml:"max_queued"`
	// MaxQueuedBytes bounds the bytes read ahead per partition, like MaxQueued. Default 32 MiB.
	MaxQueuedBytes int `yaml:"max_queued_bytes"`
	// MaxMemoryPages caps each instance's linear memory in 64 KiB pages. Default 1024 (64 MiB).
	MaxMemoryPages uint32 `yaml:"max_memory_pages"`
	// MaxTableElements caps the elements of each instance's tables together: a module whose
	// tables start larger, or whose element segments hold more elements together, is refused;
	// table.grow past it returns -1. Default 100000.
	MaxTableElements uint32 `yaml:"max_table_elements"`
	// What a module may declare, checked before it is compiled (a module over one is refused
	// with a message naming the key): its functions (default 100000), the locals of all its
	// functions together (default 1000000), the nesting of its blocks, loops and ifs (default
	// 10000), of its loops alone (default 100), and its nesting work, the sum over every
	// instruction of its nesting depth, which compile time follows (default 400000000), and
	// its block work, the sum over its functions of the square of their blocks and branches,
	// which compile time follows too (default 200000000); and the size of each function body
	// (default 1 MiB), which compile time and memory grow faster than.
	MaxFunctions     int   `yaml:"max_functions"`
	MaxLocals        int   `yaml:"max_locals"`
	MaxNestingDepth  int   `yaml:"max_nesting_depth"`
	MaxLoopDepth     int   `yaml:"max_loop_depth"`
	MaxNestingWork   int64 `yaml:"max_nesting_work"`
	MaxBlockWork     int64 `yaml:"max_block_work"`
	MaxFunctionBytes int   `yaml:"max_function_bytes"`
	// MaxValueBytes caps one state value or emitted value. Default 1 MiB.
	MaxValueBytes int `yaml:"max_value_bytes"`
	// MaxOutputsPerCall caps the records one guest call may emit; the emit after the last
	// one fails with ERR_LIMIT. Default 65536.
	MaxOutputsPerCall int `yaml:"max_outputs_per_call"`
	// MaxEmitBytesPerCall bounds the bytes one guest call may emit (keys, values and headers
	// together): the emit that would pass it gets ERR_LIMIT and the call fails with an error
	// naming the budget, then is retried and dead-lettered like any failed call. Default 64 MiB.
	MaxEmitBytesPerCall int `yaml:"max_emit_bytes_per_call"`
	// MaxStateBytesPerCall bounds the state one guest call may write (names and values of its
	// state_put and state_delete, names and payloads of its timer_set and timer_delete), like
	// MaxEmitBytesPerCall. Default 64 MiB.
	MaxStateBytesPerCall int `yaml:"max_state_bytes_per_call"`
	// MaxStateBytesPerKey bounds one key's whole state as the host holds it in memory: its
	// names and values plus 64 bytes a name. The host loads a key's whole state when a record of
	// the key comes, so nothing else bounds it without a changelog. A call whose writes would
	// take a key past it fails with an error naming the limit: retried, then dead-lettered.
	// Default 256 MiB; -1: no bound.
	MaxStateBytesPerKey int64 `yaml:"max_state_bytes_per_key"`
	// MaxLogLinesPerSecond rate-limits the task's guest log lines (log calls and stdout/stderr
	// lines, all instances together), with bursts of LogBurstLines: lines beyond it are dropped,
	// counted and summarised in a warning at most once a second. Default 1000.
	MaxLogLinesPerSecond int `yaml:"max_log_lines_per_second"`
	// LogBurstLines is how many guest log lines may come at once before MaxLogLinesPerSecond
	// applies. Default 10000.
	LogBurstLines int `yaml:"log_burst_lines"`
	// StateCacheBytes bounds the clean state kept in memory. Default 64 MiB.
	StateCacheBytes int64 `yaml:"state_cache_bytes"`
	// FuelPerRecord bounds the CPU time of each guest call: a call over n records may spend
	// n × FuelPerRecord fuel units (about one wasm instruction each, counted as an upper bound;
	// deterministic). A call that spends it is stopped with an error naming the limit and goes
	// through Retry like a trap. Default 100000000 (tens to hundreds of milliseconds of CPU).
	// -1 disables the bound: a guest that loops forever then holds its worker forever.
	FuelPerRecord int64 `yaml:"fuel_per_record"`
	// InitFuel bounds each start-up call of an instance (start function, _initialize, init) in
	// fuel units. Default 1000000000; a standard Go guest's start-up spends about 10^6.
	InitFuel int64 `yaml:"init_fuel"`
	// MaxCallDepth bounds the module's call stack, which the runtime keeps outside its linear
	// memory: in frames, a function's frame counting 1 plus 1 per 16 of its params and locals. A
	// call whose nested calls go deeper is stopped with an error naming the limit and goes
	// through Retry like a trap. Default 20000 (a few MB of stack per worker; unbounded, a
	// recursion without end grew it by about 170 MB). Not enforced with fuel_per_record -1.
	MaxCallDepth int `yaml:"max_call_depth"`
	// Retry says how a failing record is retried.
	Retry RetryConfig `yaml:"retry"`
	// Grants are the capabilities the task's module gets beyond the default of none: no file
	// system, no environment variables, no arguments, a fake clock and deterministic random.
	Grants GrantsConfig `yaml:"grants"`
	// Time configures the task's event time, timers and partition callback (ABI 0.2).
	Time TimeConfig `yaml:"time"`
	// Changelog makes the state of a Kafka input's partitions follow them from host to host
	// (several hosts in one group): see ChangelogConfig.
	Changelog ChangelogConfig `yaml:"changelog"`
	// StateMigration says when a module version whose state version differs from a key's runs
	// its migrate callback for that key: "lazy" (default), as each key is next used; or
	// "activation", for every key with state as soon as the version is activated (lazily too
	// for keys the activation pass has not reached yet).
	StateMigration StateMigration `yaml:"state_migration"`
	// Delivery is "at_least_once" (default) or "exactly_once". Exactly once commits the
	// outputs, dead letters, changelog and input offsets of each checkpoint interval in one
	// Kafka transaction: a read_committed reader of the outputs sees each result once. It needs
	// kafka inputs only, a kafka output (or none), and changelog.enabled; see docs/kafka.md.
	Delivery Delivery `yaml:"delivery"`
}

// ChangelogConfig configures a task's changelog: every checkpoint of a Kafka partition also goes
// to a compacted topic, partition for partition, before the group offsets it covers are committed,
// and a host assigned a partition restores its state from there before processing it.
type ChangelogConfig struct {
	// Enabled turns the changelog on. It needs a Kafka input whose topics all have the same
	// number of partitions. Default false.
	Enabled bool `yaml:"enabled"`
	// Topic is the changelog topic, created (compacted, one partition per input partition)
	// when missing and checked when present. Default "<task>-changelog".
	Topic string `yaml:"topic"`
	// ReplicationFactor of the topic when the host creates it; 0: the broker's default.
	ReplicationFactor int `yaml:"replication_factor"`
	// Standby keeps a warm copy of the partitions this host does not own: it tails their
	// changelog into its store (about once a second), so that taking one over after a crash
	// replays only the last moments. It costs the reading and the disk. Default false.
	Standby bool `yaml:"standby"`
	// DropRevoked deletes a partition's local state when the host loses the partition (not
	// with Standby, which keeps it warm). Kept by default: a later assignment then replays only
	// the tail. Default false.
	DropRevoked bool `yaml:"drop_revoked"`
}

// TimeConfig configures a task's event time and timers (S14–S16).
type TimeConfig struct {
	// AllowedLateness is subtracted from the highest record timestamp of a partition to give its
	// watermark: records up to that much out of order are not late. Default 0.
	AllowedLateness time.Duration `yaml:"allowed_lateness"`
	// IdleTimeout, when set, lets the event-time timers of a partition that had no record for
	// that long fire as if its watermark followed processing time (minus AllowedLateness); the
	// watermark itself, which late flags come from, stays that of the records. Default 0 (never).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// TickInterval, when set, calls the module's wasmstream_on_tick for every partition that
	// often, while none of the partition's records is being processed. Default 0 (never).
	TickInterval time.Duration `yaml:"tick_interval"`
	// MaxFiringsPerTurn bounds the timer firings the clock, idle partitions and ended inputs
	// queue at once, so that due timers cannot starve records (a record queues every firing it
	// makes due: their place is before its key's next record). Default 1000.
	MaxFiringsPerTurn int `yaml:"max_firings_per_turn"`
	// MaxPendingTimers bounds the timers the task holds set and neither fired nor deleted, over
	// all its partitions on this host: past it, timer_set of a new timer returns ERR_LIMIT
	// (replacing or deleting one is always allowed) and the host logs a warning, at most every
	// 10 s. Each pending timer costs about 380 bytes of host memory until it fires. Default
	// 1000000.
	MaxPendingTimers int `yaml:"max_pending_timers"`
	// MaxFuture, when set, sends a record whose timestamp is more than this ahead of the host's
	// clock when it is read to the dead letters (malformed: it halts the task with on_malformed:
	// halt) instead of letting it move the watermark: one record stamped a year ahead (a device
	// with a wrong clock, a timestamp in microseconds) would otherwise fire every window and
	// timer and make every later record late. Default 0 (no bound).
	MaxFuture time.Duration `yaml:"max_future"`
}

// GrantsConfig grants a task's module capabilities, each explicitly (see TaskConfig.Grants).
// Sockets are never granted.
type GrantsConfig struct {
	// Dirs are host directories the module sees at a guest path, read-only unless writable.
	Dirs []DirGrantConfig `yaml:"dirs"`
	// Env lists environment variables whose host values the module may read; it sees no other.
	Env []string `yaml:"env"`
	// RealClock gives the module the host's wall and monotonic clocks and a real sleep instead
	// of a fake clock (the record's processing time always comes through the ABI). A sleep
	// costs the call a fuel unit per nanosecond, and ends when the host stops.
	RealClock bool `yaml:"real_clock"`
	// Random gives the module a cryptographic random source instead of a deterministic one.
	Random bool `yaml:"random"`
	// HTTP lets the module make outbound HTTP requests (the http_request host function) to the
	// hosts it allows. Default: none; every request fails with ERR_NOT_ALLOWED.
	HTTP HTTPGrantConfig `yaml:"http"`
}

// HTTPGrantConfig grants a task's module outbound HTTP (see GrantsConfig.HTTP); the grant is on
// when Allow is not empty. Both http:// and https:// URLs are allowed. Requests are not part of a
// call's atomic effects: a call that fails and is retried sends its requests again.
type HTTPGrantConfig struct {
	// Allow lists the hosts a request, and each redirect it follows (at most 5), may go to: a
	// host name or IP address ("api.example.com", "10.0.0.7", "[::1]"), optionally with a port
	// ("api.example.com:8443"; without one, any port), or "*.example.com" for every name under
	// example.com (not example.com itself). Matched exactly, ignoring case. Default: none.
	Allow []string `yaml:"allow"`
	// Timeout bounds a request whose module gives no timeout of its own, from the call to the
	// end of the response, waiting for a slot (MaxConcurrent) included. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// MaxTimeout caps the timeout a module gives a request. Default 60s; at least Timeout.
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// MaxConcurrent bounds the task's requests in flight at once, over all its instances;
	// a request waits for a slot within its timeout. Default 4.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxRequestBytes caps a request's body; a larger one fails with ERR_TOO_LARGE. Default
	// 1 MiB.
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// MaxResponseBytes caps a response's body and header names and values together; a larger
	// one fails with ERR_TOO_LARGE. Default 4 MiB.
	MaxResponseBytes int `yaml:"max_response_bytes"`
}

// DirGrantConfig mounts a host directory into a task's module. Every path the module names
// resolves beneath it: symlinks that lead out are not followed and cannot be made (docs/security.md,
// "Security").
type DirGrantConfig struct {
	// Host is the directory on the host. Required; it must exist.
	Host string `yaml:"host"`
	// Guest is the absolute path the module sees it at. Required.
	Guest string `yaml:"guest"`
	// Writable lets the module create, change and delete files under it. Default false:
	// read-only.
	Writable bool `yaml:"writable"`
}

// InputConfig describes one source of records.
type InputConfig struct {
	// Name identifies the input in positions and in records' source field. Default "input<i>".
	Name string `yaml:"name"`
	// Type is "file", "stdin", "kafka" or "task" (another task's output). Default "file". A task
	// has at most one kafka input (with any number of topics).
	Type InputType `yaml:"type"`
	// Topics are the topics a kafka input consumes.
	Topics []string `yaml:"topics"`
	// Group is the consumer group of a kafka input. Default "wasmstream-<task>".
	Group string `yaml:"group"`
	// StartAt is where a kafka input starts in a partition the group has no committed offset
	// for: "earliest" (default), "latest", or an RFC 3339 time.
	StartAt string `yaml:"start_at"`
	// Bounded makes a kafka input a bounded run (a backfill): each partition is read up to its
	// end offset as it stood when the task started (its last stable offset: a transaction open
	// then is left for the next run), then ends like a file — its watermark goes
	// to the end of time, so every event-time timer fires — and once every partition of the
	// topics has ended the task takes its last checkpoint and ends. One host reads every
	// partition; start_at must be earliest or latest; not with delivery exactly_once.
	Bounded bool `yaml:"bounded"`
	// Path is the file to read (Type "file").
	Path string `yaml:"path"`
	// Format is "json" (one JSON object per line) or "text" (one record per line). Default "json".
	Format Format `yaml:"format"`
	// KeyField is the JSON field holding the record key (json). Empty: no key. A line without
	// the field (or with null) is a record of the empty key, unless KeyRequired.
	KeyField string `yaml:"key_field"`
	// KeyRequired makes a json line without KeyField malformed (see OnMalformed) instead of a
	// record of the empty key. Default false.
	KeyRequired bool `yaml:"key_required"`
	// ValueField is the JSON field holding the record value (json). Empty: the whole line.
	ValueField string `yaml:"value_field"`
	// TimestampField is the JSON field holding the event time in ms since the epoch (json).
	TimestampField string `yaml:"timestamp_field"`
	// KeySeparator splits a text line into key and value at its first occurrence (text).
	// Empty: the key is empty and the value is the whole line.
	KeySeparator string `yaml:"key_separator"`
	// OnMalformed is "deadletter" (default: the line goes to the dead-letter file with the
	// reason and the run goes on) or "halt" (the task stops with an error naming the line).
	OnMalformed OnMalformed `yaml:"on_malformed"`
	// MaxLineBytes is the longest line a file or stdin input accepts, without its line ending;
	// a longer line is malformed (see OnMalformed) and goes to the dead letters whole (up to
	// 64 MiB). Default 4 MiB; at most 64 MiB.
	MaxLineBytes int `yaml:"max_line_bytes"`
	// Task and Output make an input of type "task" read the records another task of this host
	// emits to one of its output names (task chaining, docs/writing-tasks.md): each record
	// keeps the output's key, value, timestamp and headers. That output name then goes to the
	// chain only, not to the other task's output.
	Task   string `yaml:"task"`
	Output string `yaml:"output"`
	// MaxBacklog bounds, for an input of type task, the records of the other task's output
	// that this task's checkpoints do not cover yet: at it the other task holds (back-pressure)
	// until this one catches up. Default 100000.
	MaxBacklog int `yaml:"max_backlog"`
	// Continue lets a stdin input run again on a data directory where an earlier run already
	// read stdin. Standard input cannot be rewound: a new run's lines are new records numbered
	// after the earlier run's, so feeding the same data again would process it twice. Default
	// false: Run refuses with a *ConfigError naming this key. Set it for a live feed that a
	// restart continues.
	Continue bool `yaml:"continue"`
}

// OutputConfig says where emitted records go.
type OutputConfig struct {
	// Type is "file", "stdout" or "kafka". Default "stdout".
	Type OutputType `yaml:"type"`
	// Topic is the topic a kafka output writes every output name to that Topics does not map.
	Topic string `yaml:"topic"`
	// Topics maps output names to topics (kafka).
	Topics map[string]string `yaml:"topics"`
	// Path is the file to append to (Type "file").
	Path string `yaml:"path"`
	// Names, if set, are the only output names the task may emit to.
	Names []string `yaml:"names"`
	// Compression of the record batches of a kafka output and of the task's dead-letter topic:
	// "none", "gzip", "snappy", "lz4" or "zstd". Empty: snappy. Clients without a snappy codec
	// (kafkajs without a codec package) read "none" or "gzip" only.
	Compression string `yaml:"compression"`
}

// DeadLetterConfig says where dead letters go.
type DeadLetterConfig struct {
	// Path is the file dead letters are appended to. Default DataDir/<task>.deadletter.ndjson.
	Path string `yaml:"path"`
	// Topic, if set, sends dead letters to this Kafka topic instead of the file, with headers
	// naming the error, the task, the source topic, partition, offset and attempts.
	Topic string `yaml:"topic"`
}

// SequencingConfig chooses the sequencing key of a record (S7).
type SequencingConfig struct {
	// Policy is "key" (default: per record key), "partition" (strict partition order), "none"
	// (full concurrency; the task may not use state), "field" (a JSON field) or "header".
	Policy SequencingPolicy `yaml:"policy"`
	// Field is the JSON field for Policy "field".
	Field string `yaml:"field"`
	// Header is the header name for Policy "header".
	Header string `yaml:"header"`
}

// RetryConfig says how a failing record is retried (S17).
type RetryConfig struct {
	// MaxAttempts is how many times a record is tried before OnExhausted applies. Default 5.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is the first retry delay. Default 1s.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps the doubling delay. Default 60s.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// OnExhausted is "deadletter" (default), "halt" or "skip".
	OnExhausted OnExhausted `yaml:"on_exhausted"`
	// MaxConsecutiveFailures halts the task when that many records (and timer firings) in a row
	// failed on every attempt or permanently, with no success between: the one that reaches it
	// is neither dead-lettered nor skipped, and the task stops with an error naming its cause,
	// instead of sending the rest of the stream to the dead letters. Default 1000; -1 turns it
	// off. It does not apply with OnExhausted "halt", which halts at the first.
	MaxConsecutiveFailures int `yaml:"max_consecutive_failures"`
}

// Limits of the sequencing and batching options, used by Validate.
const maxWorkers = 1024

// maxLoops bounds a task's loops (each is a consumer of its group and a goroutine pair).
const maxLoops = 256

// Validate reports every problem of the configuration at once, each naming the offending key
// as it is spelled in the configuration file (e.g. "tasks[0].inputs[1].path").
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Problem: fmt.Sprintf(format, args...)})
	}
	if c.CheckpointInterval < 0 {
		bad("checkpoint_interval", "must be positive, got %s", c.CheckpointInterval)
	}
	if len(c.Tasks) == 0 {
		bad("tasks", "at least one task is required")
	}
	if c.KeepModuleVersions < 0 {
		bad("keep_module_versions", "must be positive, got %d", c.KeepModuleVersions)
	}
	oneOf(bad, "on_task_failure", c.OnTaskFailure, taskFailures)
	if c.Kafka.SASL.Mechanism != "" {
		oneOf(bad, "kafka.sasl.mechanism", c.Kafka.SASL.Mechanism, saslMechanisms)
	}
	oneOf(bad, "kafka.external_offset_reset", c.Kafka.ExternalOffsetReset, externalResets)
	for i, b := range c.Kafka.Brokers {
		checkBroker(bad, fmt.Sprintf("kafka.brokers[%d]", i), b)
	}
	if p := c.Kafka.Embedded.Port; p < 0 || p > 65535 {
		bad("kafka.embedded.port", "must be a port from 1 to 65535 (0: a free one), got %d", p)
	}
	if n := c.Kafka.Embedded.Partitions; n < 0 {
		bad("kafka.embedded.partitions", "must be positive, got %d", n)
	}
	if c.MinFreeDiskBytes < -1 {
		bad("min_free_disk_bytes", "must be positive, or -1 to turn the check off, got %d", c.MinFreeDiskBytes)
	}
	validateAdmin(c.Admin, bad)
	validateChains(c, bad)
	validateSharedFiles(c, bad)
	names := map[string]bool{}
	for i, t := range c.Tasks {
		p := fmt.Sprintf("tasks[%d].", i)
		switch {
		case t.Name == "":
			bad(p+"name", "is required")
		case !validName(t.Name):
			bad(p+"name", "%q may hold only letters, digits, '-', '_' and '.'", t.Name)
		case names[t.Name]:
			bad(p+"name", "%q is used by two tasks", t.Name)
		}
		names[t.Name] = true
		if t.Module == "" {
			bad(p+"module", "is required (the path of the task's .wasm file)")
		}
		if len(t.Inputs) == 0 {
			bad(p+"inputs", "at least one input is required")
		}
		validateInputs(t, p, bad)
		validateKafkaTask(c, t, p, bad)
		validateLoops(c, t, p, bad)
		oneOf(bad, p+"output.type", t.Output.Type, outputTypes)
		if t.Output.Type == "file" && t.Output.Path == "" {
			bad(p+"output.path", "is required for a file output")
		}
		oneOf(bad, p+"sequencing.policy", t.Sequencing.Policy, policies)
		if t.Sequencing.Policy == "field" && t.Sequencing.Field == "" {
			bad(p+"sequencing.field", "is required with policy \"field\"")
		}
		if t.Sequencing.Policy == "header" && t.Sequencing.Header == "" {
			bad(p+"sequencing.header", "is required with policy \"header\"")
		}
		validateTaskLimits(t, p, bad)
		oneOf(bad, p+"retry.on_exhausted", t.Retry.OnExhausted, onExhausted)
		oneOf(bad, p+"state_migration", t.StateMigration, stateMigrations)
		validateDelivery(t, p, bad)
		if t.Time.MaxFiringsPerTurn < 0 {
			bad(p+"time.max_firings_per_turn", "must be positive, got %d", t.Time.MaxFiringsPerTurn)
		}
		if t.Time.MaxPendingTimers < 0 {
			bad(p+"time.max_pending_timers", "must be positive, got %d", t.Time.MaxPendingTimers)
		}
		validateTaskGrants(c, t, p, bad)
	}
	return errors.Join(errs...)
}

// validateInputs checks a task's inputs (p is the task's key prefix, "tasks[i].").
func validateInputs(t TaskConfig, p string, bad func(string, string, ...any)) {
	inputNames := map[string]bool{}
	stdin := 0
	for j, in := range t.Inputs {
		q := fmt.Sprintf("%sinputs[%d].", p, j)
		if !validName(in.Name) {
			bad(q+"name", "%q may hold only letters, digits, '-', '_' and '.'", in.Name)
		} else if inputNames[in.Name] {
			bad(q+"name", "%q is used by two inputs", in.Name)
		}
		inputNames[in.Name] = true
		oneOf(bad, q+"type", in.Type, inputTypes)
		oneOf(bad, q+"format", in.Format, formats)
		oneOf(bad, q+"on_malformed", in.OnMalformed, onMalformed)
		if in.Type == "file" && in.Path == "" {
			bad(q+"path", "is required for a file input")
		}
		if in.Type == "stdin" {
			stdin++
		}
		switch {
		case in.MaxLineBytes < 0 || in.MaxLineBytes > source.MaxKeptLineBytes:
			bad(q+"max_line_bytes", "must be from 1 to %d (64 MiB), got %d; leave it out for the default of %d (4 MiB)", source.MaxKeptLineBytes, in.MaxLineBytes, source.DefaultMaxLineBytes)
		case in.MaxLineBytes != 0 && in.Type == "kafka":
			bad(q+"max_line_bytes", "applies to file and stdin inputs, not kafka")
		}
		if in.Continue && in.Type != "stdin" {
			bad(q+"continue", "applies to stdin inputs only (a file or kafka input always resumes where it stopped)")
		}
		if in.KeyRequired && in.KeyField == "" {
			bad(q+"key_required", "needs key_field (the field a line must have)")
		}
		if in.Format == "text" && (in.KeyField != "" || in.ValueField != "" || in.TimestampField != "") {
			bad(q+"format", "text inputs take key_separator, not key_field/value_field/timestamp_field")
		}
		if in.KeySeparator != "" && in.Format != FormatText && in.Type != InputKafka {
			// Ignored, every line of a text file would go to the dead letters as "not a JSON object".
			bad(q+"key_separator", "applies to text inputs only: set format: text (--format text) to split lines at %q, or key_field for JSON lines", in.KeySeparator)
		}
	}
	if stdin > 1 {
		bad(p+"inputs", "stdin can be read by one input only")
	}
}

// validateSharedFiles refuses a file that a sink (the outputs or dead letters of any task) writes
// and a file input reads: the task would read what it writes. Two sinks may share a file: each
// flush is appended whole (sink.OpenFile). Paths are compared cleaned and absolute; links are
// not followed.
func validateSharedFiles(c Config, bad func(key, format string, args ...any)) {
	type use struct {
		key   string
		write bool
	}
	seen := map[string]use{}
	add := func(key, path string, write bool) {
		if path == "" {
			return
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return
		}
		prev, ok := seen[abs]
		switch {
		case !ok:
			seen[abs] = use{key, write}
		case write && prev.write:
			// Two sinks: each flush is appended whole.
		case write || prev.write:
			bad(key, "%s is also the file of %s: a task would read what it writes", path, prev.key)
		}
	}
	for i, t := range c.Tasks {
		for j, in := range t.Inputs {
			if in.Type == "" || in.Type == InputFile {
				add(fmt.Sprintf("tasks[%d].inputs[%d].path", i, j), in.Path, false)
			}
		}
	}
	for i, t := range c.Tasks {
		if t.Output.Type == OutputFile {
			add(fmt.Sprintf("tasks[%d].output.path", i), t.Output.Path, true)
		}
		if t.DeadLetter.Topic == "" {
			add(fmt.Sprintf("tasks[%d].dead_letter.path", i), t.DeadLetter.Path, true)
		}
	}
}

// validateLoops checks that a task with loops above 1 can run them: one kafka input and nothing
// that assumes one writer per task (docs/configuration.md, RATIONALE "Several loops per task").
func validateLoops(c Config, t TaskConfig, p string, bad func(string, string, ...any)) {
	if t.Loops <= 1 {
		return
	}
	for j, in := range t.Inputs {
		switch {
		case in.Type != InputKafka:
			bad(fmt.Sprintf("%sinputs[%d].type", p, j), "loops %d needs kafka inputs only: a %s input is read by one loop (set loops: 1)", t.Loops, in.Type)
		case in.Bounded:
			bad(fmt.Sprintf("%sinputs[%d].bounded", p, j), "loops %d: a bounded kafka input reads every partition in one loop, without a group (set loops: 1)", t.Loops)
		}
	}
	if t.Changelog.DropRevoked {
		bad(p+"changelog.drop_revoked", "does not run with loops %d: a loop could drop the local state of a partition that another loop of the host was just assigned (set loops: 1, or keep revoked state)", t.Loops)
	}
	for _, o := range c.Tasks {
		for _, in := range o.Inputs {
			if in.Type == InputTask && in.Task == t.Name {
				bad(p+"loops", "task %s reads this task's output (a chain), which one loop appends to: set loops: 1", o.Name)
				return
			}
		}
	}
}

// validateTaskLimits checks a task's workers, queues and per-call, CPU and memory bounds.
func validateTaskLimits(t TaskConfig, p string, bad func(string, string, ...any)) {
	positive := func(key string, v int) {
		if v < 0 {
			bad(p+key, "must be positive, got %d", v)
		}
	}
	positive("workers", t.Workers)
	positive("loops", t.Loops)
	if t.Loops > maxLoops {
		bad(p+"loops", "must be at most %d, got %d", maxLoops, t.Loops)
	}
	if t.Workers > maxWorkers {
		bad(p+"workers", "must be at most %d, got %d", maxWorkers, t.Workers)
	}
	positive("max_batch_records", t.MaxBatchRecords)
	positive("max_key_records", t.MaxKeyRecords)
	positive("max_in_flight", t.MaxInFlight)
	// Reading pauses at max_queued and resumes at half of it, which must be below it.
	for _, q := range []struct {
		key string
		v   int
	}{{"max_queued", t.MaxQueued}, {"max_queued_bytes", t.MaxQueuedBytes}} {
		if q.v < 0 || q.v == 1 {
			bad(p+q.key, "must be at least 2 (reading pauses at it and resumes at half of it), got %d", q.v)
		}
	}
	positive("max_value_bytes", t.MaxValueBytes)
	positive("max_outputs_per_call", t.MaxOutputsPerCall)
	positive("max_emit_bytes_per_call", t.MaxEmitBytesPerCall)
	positive("max_state_bytes_per_call", t.MaxStateBytesPerCall)
	if t.MaxStateBytesPerKey < -1 {
		bad(p+"max_state_bytes_per_key", "must be positive or -1 (no bound), got %d", t.MaxStateBytesPerKey)
	}
	positive("max_log_lines_per_second", t.MaxLogLinesPerSecond)
	positive("log_burst_lines", t.LogBurstLines)
	positive("retry.max_attempts", t.Retry.MaxAttempts)
	positive("max_functions", t.MaxFunctions)
	positive("max_locals", t.MaxLocals)
	positive("max_nesting_depth", t.MaxNestingDepth)
	positive("max_loop_depth", t.MaxLoopDepth)
	positive("max_function_bytes", t.MaxFunctionBytes)
	positive("max_call_depth", t.MaxCallDepth)
	if t.Retry.MaxConsecutiveFailures < -1 {
		bad(p+"retry.max_consecutive_failures", "must be positive, or -1 to never halt on failures, got %d", t.Retry.MaxConsecutiveFailures)
	}
	if t.MaxNestingWork < 0 {
		bad(p+"max_nesting_work", "must be positive, got %d", t.MaxNestingWork)
	}
	if t.MaxBlockWork < 0 {
		bad(p+"max_block_work", "must be positive, got %d", t.MaxBlockWork)
	}
	if t.MaxMemoryPages > 65536 {
		bad(p+"max_memory_pages", "must be at most 65536 (4 GiB), got %d", t.MaxMemoryPages)
	}
	if t.StateCacheBytes < 0 {
		bad(p+"state_cache_bytes", "must be positive, got %d", t.StateCacheBytes)
	}
	if t.FuelPerRecord < -1 {
		bad(p+"fuel_per_record", "must be positive, or -1 to disable the CPU bound, got %d", t.FuelPerRecord)
	}
	if t.InitFuel < 0 {
		bad(p+"init_fuel", "must be positive, got %d", t.InitFuel)
	}
	if t.Retry.Backoff < 0 || t.Retry.MaxBackoff < t.Retry.Backoff {
		bad(p+"retry", "need 0 < backoff <= max_backoff, got %s and %s", t.Retry.Backoff, t.Retry.MaxBackoff)
	}
}

// validateDelivery checks the delivery mode, retry and time settings, and the changelog.
func validateDelivery(t TaskConfig, p string, bad func(string, string, ...any)) {
	oneOf(bad, p+"delivery", t.Delivery, deliveries)
	if t.Delivery == "exactly_once" {
		for j, in := range t.Inputs {
			if in.Type != "kafka" {
				bad(fmt.Sprintf("%sinputs[%d].type", p, j), "delivery exactly_once needs kafka inputs only: a %s input cannot take part in a Kafka transaction", in.Type)
			}
		}
		if t.Output.Type != "kafka" {
			bad(p+"output.type", "delivery exactly_once needs a kafka output: a %s output cannot take part in a Kafka transaction", t.Output.Type)
		}
		if !t.Changelog.Enabled {
			bad(p+"changelog.enabled", "delivery exactly_once needs the changelog: the state commits in the same transaction as the outputs")
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"time.allowed_lateness", t.Time.AllowedLateness}, {"time.idle_timeout", t.Time.IdleTimeout}, {"time.tick_interval", t.Time.TickInterval}, {"time.max_future", t.Time.MaxFuture}} {
		if d.v < 0 {
			bad(p+d.key, "must not be negative, got %s", d.v)
		}
	}
	if t.Changelog.Enabled {
		hasKafka := false
		for _, in := range t.Inputs {
			hasKafka = hasKafka || in.Type == "kafka"
		}
		if !hasKafka {
			bad(p+"changelog.enabled", "needs a kafka input: a changelog carries the state of Kafka partitions")
		}
		if t.Changelog.Topic != "" {
			checkTopicName(bad, p+"changelog.topic", t.Changelog.Topic)
		}
	}
	if t.Changelog.ReplicationFactor < 0 || t.Changelog.ReplicationFactor > 32767 {
		bad(p+"changelog.replication_factor", "must be between 0 (the broker's default) and 32767, got %d", t.Changelog.ReplicationFactor)
	}
}

// validateTaskGrants checks a task's grants, none of which may reach the host's own directories.
func validateTaskGrants(c Config, t TaskConfig, p string, bad func(string, string, ...any)) {
	validateGrants(t.Grants, p+"grants.", bad)
	for j, d := range t.Grants.Dirs {
		for _, own := range []struct{ key, dir string }{{"data_dir", c.DataDir}, {"cache_dir", c.CacheDir}} {
			if d.Host == "" || own.dir == "-" || !overlaps(d.Host, own.dir) {
				continue
			}
			bad(fmt.Sprintf("%sgrants.dirs[%d].host", p, j),
				"%s holds or is inside the %s (%s): the module could read or change the host's own files (state, module versions, compiled code); grant a directory apart from it",
				d.Host, own.key, own.dir)
			break // the cache is usually inside the data directory: one problem is enough
		}
	}
}

// overlaps reports whether directory a holds b, b holds a, or they are the same, once made
// absolute and their symlinks resolved (as far as they exist).
func overlaps(a, b string) bool {
	a, b = realPath(a), realPath(b)
	within := func(x, y string) bool { // x is y or inside it
		rel, err := filepath.Rel(y, x)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	return within(a, b) || within(b, a)
}

// realPath is p absolute with the symlinks of its longest existing prefix resolved.
func realPath(p string) string {
	p, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	var rest []string
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(append([]string{r}, rest...)...)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(append([]string{p}, rest...)...)
		}
		rest = append([]string{filepath.Base(p)}, rest...)
		p = parent
	}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		ok := r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

func validateGrants(g GrantsConfig, p string, bad func(string, string, ...any)) {
	for j, d := range g.Dirs {
		q := fmt.Sprintf("%sdirs[%d].", p, j)
		if d.Host == "" {
			bad(q+"host", "is required (the host directory to mount)")
		} else if fi, err := os.Stat(d.Host); err != nil {
			bad(q+"host", "%v", err)
		} else if !fi.IsDir() {
			bad(q+"host", "%s is not a directory", d.Host)
		}
		if !path.IsAbs(d.Guest) {
			bad(q+"guest", "must be an absolute path (e.g. /data), got %q", d.Guest)
		}
	}
	for j, name := range g.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			bad(fmt.Sprintf("%senv[%d]", p, j), "%q is not an environment variable name", name)
		}
	}
	h, q := g.HTTP, p+"http."
	for j, a := range h.Allow {
		if err := modrt.CheckHTTPAllow(a); err != nil {
			bad(fmt.Sprintf("%sallow[%d]", q, j), "%v", err)
		}
	}
	if len(h.Allow) == 0 && (h.Timeout != 0 || h.MaxTimeout != 0 || h.MaxConcurrent != 0 ||
		h.MaxRequestBytes != 0 || h.MaxResponseBytes != 0) {
		bad(q+"allow", "is required when the other http keys are set: the hosts requests may go to")
	}
	for _, f := range []struct {
		key string
		v   time.Duration
	}{{"timeout", h.Timeout}, {"max_timeout", h.MaxTimeout}} {
		if f.v < 0 {
			bad(q+f.key, "must be positive, got %s", f.v)
		}
	}
	for _, f := range []struct {
		key string
		v   int
	}{{"max_concurrent", h.MaxConcurrent}, {"max_request_bytes", h.MaxRequestBytes}, {"max_response_bytes", h.MaxResponseBytes}} {
		if f.v < 0 {
			bad(q+f.key, "must be positive, got %d", f.v)
		}
	}
	if t := cmp.Or(h.Timeout, modrt.DefaultHTTPTimeout); h.MaxTimeout > 0 && t > h.MaxTimeout {
		bad(q+"timeout", "must be at most max_timeout, got %s and %s", t, h.MaxTimeout)
	}
}

// defaultHostID is the machine's host name and a hash of the data directory's absolute path.
func defaultHostID(dataDir string) string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "host"
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return name + "-" + hex.EncodeToString(sum[:4])
}
