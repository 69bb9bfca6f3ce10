package host

import "strings"

// The configuration's enumerations. Each is a string type whose constants are the values the
// configuration file spells; Validate refuses any other value with a *ConfigError that names
// the key and lists the values allowed. The zero value ("") is the documented default.

// TaskFailure is what a failing task takes down (Config.OnTaskFailure).
type TaskFailure string

// Values of Config.OnTaskFailure.
const (
	HaltTask TaskFailure = "halt_task" // the default: halt that task only
	HaltHost TaskFailure = "halt_host" // stop every task
	// Restart halts that task and restarts it on its own after a back-off, as RestartTask
	// does (autorestart.go).
	Restart TaskFailure = "restart"
)

// InputType is the kind of an input (InputConfig.Type).
type InputType string

// Values of InputConfig.Type.
const (
	InputFile  InputType = "file" // the default
	InputStdin InputType = "stdin"
	InputKafka InputType = "kafka"
	InputTask  InputType = "task" // another task's output on this host (chaining)
)

// Format is how a file or stdin input's lines are decoded (InputConfig.Format).
type Format string

// Values of InputConfig.Format.
const (
	FormatJSON Format = "json" // the default: one JSON object per line
	FormatText Format = "text" // one record per line
)

// OnMalformed is what a line that cannot be decoded does (InputConfig.OnMalformed).
type OnMalformed string

// Values of InputConfig.OnMalformed.
const (
	MalformedDeadLetter OnMalformed = "deadletter" // the default: to the dead letters, and on
	MalformedHalt       OnMalformed = "halt"       // the task stops with an error naming the line
)

// OutputType is the kind of a task's output (OutputConfig.Type).
type OutputType string

// Values of OutputConfig.Type.
const (
	OutputStdout OutputType = "stdout" // the default
	OutputFile   OutputType = "file"
	OutputKafka  OutputType = "kafka"
)

// SequencingPolicy chooses the records that must run in order (SequencingConfig.Policy, S7).
type SequencingPolicy string

// Values of SequencingConfig.Policy.
const (
	SequenceByKey       SequencingPolicy = "key" // the default: per record key
	SequenceByPartition SequencingPolicy = "partition"
	SequenceNone        SequencingPolicy = "none" // full concurrency; the task may not use state
	SequenceByField     SequencingPolicy = "field"
	SequenceByHeader    SequencingPolicy = "header"
)

// OnExhausted is what a record or firing that failed on every attempt does
// (RetryConfig.OnExhausted).
type OnExhausted string

// Values of RetryConfig.OnExhausted.
const (
	ExhaustedDeadLetter OnExhausted = "deadletter" // the default
	ExhaustedHalt       OnExhausted = "halt"
	ExhaustedSkip       OnExhausted = "skip"
)

// StateMigration is when a new module version migrates the state of keys written by another
// state version (TaskConfig.StateMigration).
type StateMigration string

// Values of TaskConfig.StateMigration.
const (
	MigrateLazy         StateMigration = "lazy" // the default: as each key is next used
	MigrateOnActivation StateMigration = "activation"
)

// Delivery is a task's delivery guarantee (TaskConfig.Delivery).
type Delivery string

// Values of TaskConfig.Delivery.
const (
	AtLeastOnce Delivery = "at_least_once" // the default
	ExactlyOnce Delivery = "exactly_once"
)

// SASLMechanism is how the host authenticates to Kafka (KafkaSASLConfig.Mechanism).
type SASLMechanism string

// Values of KafkaSASLConfig.Mechanism; the zero value means no SASL.
const (
	SASLPlain       SASLMechanism = "plain"
	SASLScramSHA256 SASLMechanism = "scram-sha-256"
	SASLScramSHA512 SASLMechanism = "scram-sha-512"
)

// ExternalOffsetReset is what a host does with a group offset set from outside the group while
// the task was stopped (KafkaConfig.ExternalOffsetReset).
type ExternalOffsetReset string

// Values of KafkaConfig.ExternalOffsetReset.
const (
	// ExternalResetReport logs a warning naming each partition, both offsets and the
	// `wasmstream reset` command to run; the partition resumes at the local checkpoint.
	ExternalResetReport ExternalOffsetReset = "report"
	// ExternalResetFollow resets the partition to the committed offset as `wasmstream reset`
	// would: its state and timers moved aside, its changelog tombstoned.
	ExternalResetFollow ExternalOffsetReset = "follow"
)

// The values each enumeration allows, in the order errors list them.
var (
	taskFailures    = []TaskFailure{HaltTask, HaltHost, Restart}
	inputTypes      = []InputType{InputFile, InputStdin, InputKafka, InputTask}
	formats         = []Format{FormatJSON, FormatText}
	onMalformed     = []OnMalformed{MalformedDeadLetter, MalformedHalt}
	outputTypes     = []OutputType{OutputFile, OutputStdout, OutputKafka}
	policies        = []SequencingPolicy{SequenceByKey, SequenceByPartition, SequenceNone, SequenceByField, SequenceByHeader}
	onExhausted     = []OnExhausted{ExhaustedDeadLetter, ExhaustedHalt, ExhaustedSkip}
	stateMigrations = []StateMigration{MigrateLazy, MigrateOnActivation}
	deliveries      = []Delivery{AtLeastOnce, ExactlyOnce}
	saslMechanisms  = []SASLMechanism{SASLPlain, SASLScramSHA256, SASLScramSHA512}
	externalResets  = []ExternalOffsetReset{ExternalResetReport, ExternalResetFollow}
)

// oneOf reports key's value v unless it is one of allowed (or "", the default, when
// allowEmpty): "tasks[0].delivery: "exactly-once" is not one of at_least_once, exactly_once".
func oneOf[E ~string](bad func(string, string, ...any), key string, v E, allowed []E) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	bad(key, "%q is not one of %s", v, strings.Join(names, ", "))
}
