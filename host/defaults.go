package host

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/chain"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/source"
)

// The defaults of the configuration: this file is the one place they are set. A zero field
// means its default (each field's comment says which); WithDefaults fills them in, New and
// Validate start from it, and the CLI reads its defaults from it too.

// DefaultDataDir is Config.DataDir's default, relative to the current directory (the CLI
// anchors it to the configuration file's directory).
const DefaultDataDir = "data"

// Defaults of the host (Config).
const (
	defaultCheckpointInterval = time.Second
	defaultKeepModuleVersions = 10
	defaultMaxModuleBytes     = 64 << 20 // admin.max_module_bytes
	// admin.advertise_addr has no default here: it is the address the API listens on (with
	// admin.addr's port 0, known once it listens), taken at each group join (advertiseAddr).
	// stopGrace is how long a stopping host waits for the guest calls in flight before it
	// interrupts them (Run); not configurable.
	stopGrace = time.Second
)

// Defaults of Config.Kafka.
const (
	defaultKafkaClientID      = "wasmstream"
	defaultConnectTimeout     = kafka.DefaultConnectTimeout
	defaultDrainTimeout       = 30 * time.Second
	defaultTransactionTimeout = 15 * time.Second
	defaultDeliveryTimeout    = kafka.DefaultDeliveryTimeout
	defaultUnreachableTimeout = kafka.DefaultUnreachableTimeout
	defaultEmbeddedPort       = 9092
	defaultEmbeddedPartitions = 4
)

// Defaults of a task (TaskConfig). The limits a module runs under are modrt's, so that a module
// checked or run without a host gets the same ones.
const (
	defaultMaxBatchRecords      = 256
	defaultMaxKeyRecords        = 64
	defaultMaxInFlight          = 1024
	defaultMaxQueued            = 8192
	defaultMaxQueuedBytes       = 32 << 20
	defaultStateCacheBytes      = 64 << 20
	defaultMaxMemoryPages       = modrt.DefaultMaxMemoryPages
	defaultMaxTableElements     = modrt.DefaultMaxTableElements
	defaultMaxFunctions         = modrt.DefaultMaxFunctions
	defaultMaxLocals            = modrt.DefaultMaxLocals
	defaultMaxNestingDepth      = modrt.DefaultMaxNestingDepth
	defaultMaxLoopDepth         = modrt.DefaultMaxLoopDepth
	defaultMaxCallDepth         = modrt.DefaultMaxCallDepth
	defaultMaxNestingWork       = modrt.DefaultMaxNestingWork
	defaultMaxBlockWork         = modrt.DefaultMaxBlockWork
	defaultMaxFunctionBytes     = modrt.DefaultMaxFunctionBytes
	defaultMaxValueBytes        = modrt.DefaultMaxValueBytes
	defaultMaxOutputsPerCall    = modrt.DefaultMaxOutputsPerCall
	defaultMaxEmitBytesPerCall  = modrt.DefaultMaxEmitBytes
	defaultMaxStateBytesPerCall = modrt.DefaultMaxStateBytes
	defaultMaxStateBytesPerKey  = 256 << 20
	defaultMaxLogLinesPerSecond = modrt.DefaultMaxLogLinesPerSec
	defaultLogBurstLines        = modrt.DefaultLogBurstLines
	defaultFuelPerRecord        = modrt.DefaultFuelPerRecord
	defaultInitFuel             = modrt.DefaultInitFuel
	defaultMaxLineBytes         = source.DefaultMaxLineBytes // file and stdin inputs
	defaultMaxBacklog           = chain.DefaultMaxBacklog    // inputs[].max_backlog, for inputs of type task
	defaultMaxAttempts          = 5
	// defaultMaxConsecutiveFailures: a healthy task's failures come between successes (any
	// success starts the count again), and a burst of bad input stays far below it; a module that
	// fails everything reaches it after 1000 dead letters instead of the whole stream.
	defaultMaxConsecutiveFailures = 1000
	defaultBackoff                = time.Second
	defaultMaxBackoff             = 60 * time.Second
	defaultMaxFiringsPerTurn      = 1000
	// A task's pending timers: far above real use (the examples keep one or two per key), low
	// enough that a guest setting a new timer per record stops at a few hundred MB.
	defaultMaxPendingTimers = 1000000
)

// WithDefaults returns a copy of c with every zero field set to its default, for the host and
// each of its tasks. The tasks' Workers default to GOMAXPROCS, HostID to one derived from the
// machine and the data directory; Logger, Now, Stdin and Stdout to discarding, time.Now,
// os.Stdin and os.Stdout. It does not validate.
func (c Config) WithDefaults() Config {
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.CacheDir == "" {
		c.CacheDir = c.DataDir + "/cache"
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = defaultCheckpointInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Stdin == nil {
		c.Stdin = os.Stdin
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.KeepModuleVersions == 0 {
		c.KeepModuleVersions = defaultKeepModuleVersions
	}
	if c.OnTaskFailure == "" {
		c.OnTaskFailure = HaltTask
	}
	if c.Admin.MaxModuleBytes == 0 {
		c.Admin.MaxModuleBytes = defaultMaxModuleBytes
	}
	c.Kafka = c.Kafka.withDefaults(c.DataDir)
	if c.HostID == "" {
		c.HostID = defaultHostID(c.DataDir)
	}
	tasks := make([]TaskConfig, len(c.Tasks))
	for i, t := range c.Tasks {
		tasks[i] = t.withDefaults(c.DataDir)
	}
	c.Tasks = tasks
	return c
}

func (k KafkaConfig) withDefaults(dataDir string) KafkaConfig {
	if k.ClientID == "" {
		k.ClientID = defaultKafkaClientID
	}
	if k.ConnectTimeout == 0 {
		k.ConnectTimeout = defaultConnectTimeout
	}
	if k.DrainTimeout == 0 {
		k.DrainTimeout = defaultDrainTimeout
	}
	if k.TransactionTimeout == 0 {
		k.TransactionTimeout = defaultTransactionTimeout
	}
	if k.DeliveryTimeout == 0 {
		k.DeliveryTimeout = defaultDeliveryTimeout
	}
	if k.UnreachableTimeout == 0 {
		k.UnreachableTimeout = defaultUnreachableTimeout
	}
	if k.ExternalOffsetReset == "" {
		k.ExternalOffsetReset = ExternalResetReport
	}
	if k.Embedded.Port == 0 {
		k.Embedded.Port = defaultEmbeddedPort
	}
	if k.Embedded.Dir == "" {
		k.Embedded.Dir = filepath.Join(dataDir, "kafka")
	}
	if k.Embedded.Partitions == 0 {
		k.Embedded.Partitions = defaultEmbeddedPartitions
	}
	return k
}

func (t TaskConfig) withDefaults(dataDir string) TaskConfig {
	inputs := make([]InputConfig, len(t.Inputs))
	for i, in := range t.Inputs {
		if in.Name == "" {
			in.Name = fmt.Sprintf("input%d", i)
		}
		if in.Type == "" {
			in.Type = InputFile
		}
		if in.Format == "" {
			in.Format = FormatJSON
		}
		if in.OnMalformed == "" {
			in.OnMalformed = MalformedDeadLetter
		}
		if in.MaxLineBytes == 0 && (in.Type == InputFile || in.Type == InputStdin) {
			in.MaxLineBytes = defaultMaxLineBytes
		}
		if in.MaxBacklog == 0 && in.Type == InputTask {
			in.MaxBacklog = defaultMaxBacklog
		}
		inputs[i] = in
	}
	t.Inputs = inputs
	if t.Output.Type == "" {
		t.Output.Type = OutputStdout
	}
	if t.DeadLetter.Path == "" {
		t.DeadLetter.Path = dataDir + "/" + t.Name + ".deadletter.ndjson"
	}
	if t.Sequencing.Policy == "" {
		t.Sequencing.Policy = SequenceByKey
	}
	if t.Workers == 0 {
		t.Workers = runtime.GOMAXPROCS(0)
	}
	if t.Loops == 0 {
		t.Loops = 1
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&t.MaxBatchRecords, defaultMaxBatchRecords)
	set(&t.MaxKeyRecords, defaultMaxKeyRecords)
	set(&t.MaxInFlight, defaultMaxInFlight)
	set(&t.MaxQueued, defaultMaxQueued)
	set(&t.MaxQueuedBytes, defaultMaxQueuedBytes)
	set(&t.MaxValueBytes, defaultMaxValueBytes)
	set(&t.MaxOutputsPerCall, defaultMaxOutputsPerCall)
	set(&t.MaxEmitBytesPerCall, defaultMaxEmitBytesPerCall)
	set(&t.MaxStateBytesPerCall, defaultMaxStateBytesPerCall)
	if t.MaxStateBytesPerKey == 0 {
		t.MaxStateBytesPerKey = defaultMaxStateBytesPerKey
	}
	set(&t.MaxLogLinesPerSecond, defaultMaxLogLinesPerSecond)
	set(&t.LogBurstLines, defaultLogBurstLines)
	set(&t.Retry.MaxAttempts, defaultMaxAttempts)
	set(&t.Time.MaxFiringsPerTurn, defaultMaxFiringsPerTurn)
	set(&t.Time.MaxPendingTimers, defaultMaxPendingTimers)
	if t.MaxMemoryPages == 0 {
		t.MaxMemoryPages = defaultMaxMemoryPages
	}
	if t.MaxTableElements == 0 {
		t.MaxTableElements = defaultMaxTableElements
	}
	set(&t.MaxFunctions, defaultMaxFunctions)
	set(&t.MaxLocals, defaultMaxLocals)
	set(&t.MaxNestingDepth, defaultMaxNestingDepth)
	set(&t.MaxLoopDepth, defaultMaxLoopDepth)
	set(&t.MaxFunctionBytes, defaultMaxFunctionBytes)
	set(&t.MaxCallDepth, defaultMaxCallDepth)
	set(&t.Retry.MaxConsecutiveFailures, defaultMaxConsecutiveFailures)
	if t.MaxNestingWork == 0 {
		t.MaxNestingWork = defaultMaxNestingWork
	}
	if t.MaxBlockWork == 0 {
		t.MaxBlockWork = defaultMaxBlockWork
	}
	if t.StateCacheBytes == 0 {
		t.StateCacheBytes = defaultStateCacheBytes
	}
	if t.FuelPerRecord == 0 {
		t.FuelPerRecord = defaultFuelPerRecord
	}
	if t.InitFuel == 0 {
		t.InitFuel = defaultInitFuel
	}
	if t.Retry.Backoff == 0 {
		t.Retry.Backoff = defaultBackoff
	}
	if t.Retry.MaxBackoff == 0 {
		t.Retry.MaxBackoff = defaultMaxBackoff
	}
	if t.Retry.OnExhausted == "" {
		t.Retry.OnExhausted = ExhaustedDeadLetter
	}
	if t.StateMigration == "" {
		t.StateMigration = MigrateLazy
	}
	if t.Delivery == "" {
		t.Delivery = AtLeastOnce
	}
	if t.Changelog.Topic == "" && t.Changelog.Enabled {
		t.Changelog.Topic = t.Name + "-changelog"
	}
	return t
}
