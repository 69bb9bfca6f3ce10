package host

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/task"
)

// KafkaConfig says how to reach the Kafka cluster.
type KafkaConfig struct {
	// Brokers are the seed brokers ("host:port"). Required for any kafka input, output or dead
	// letter topic, unless Embedded is enabled.
	Brokers []string `yaml:"brokers"`
	// ClientID names the host's clients in the brokers' logs. Default "wasmstream".
	ClientID string `yaml:"client_id"`
	// TLS encrypts the connections.
	TLS KafkaTLSConfig `yaml:"tls"`
	// SASL authenticates the host.
	SASL KafkaSASLConfig `yaml:"sasl"`
	// ConnectTimeout is how long a task waits at start for the cluster to answer before it
	// fails with an error naming the brokers and the last failure (a wrong address, password
	// or certificate looks like this: most brokers just close the connection). Default 30s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// SessionTimeout and RebalanceTimeout of the consumer groups. Default: the client's (45s,
	// 60s).
	SessionTimeout   time.Duration `yaml:"session_timeout"`
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// DrainTimeout bounds how long a revoked partition waits for its batches in flight before
	// its position is committed without them. Default 30s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// TransactionTimeout is the transaction timeout of exactly-once tasks: a transaction left
	// open (by a killed host that does not come back) is aborted by the broker after it, and
	// until then read_committed readers of what it wrote wait. It must exceed the checkpoint
	// interval plus the time to process a full queue. Default 15s.
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// DeliveryTimeout bounds how long an output or dead letter may go unacknowledged, counted
	// from when the task produced it (never from its timestamp, which is event time): the
	// client retries meanwhile (a broker restarting, a leader moving); after it the task halts
	// with the cause, its state and offsets at the last checkpoint whose outputs were all
	// acknowledged. A failure that cannot succeed by retrying (a missing topic, a record too
	// large) halts the task at once. Exactly-once tasks abort the transaction instead and back
	// off; they halt once transactions have aborted for this long. Default 2m.
	DeliveryTimeout time.Duration `yaml:"delivery_timeout"`
	// UnreachableTimeout bounds how long a task rides out a cluster it cannot reach (a broker
	// restarting): its clients retry with back-off and /readyz answers 503 meanwhile; after it
	// the task halts. Default 2m.
	UnreachableTimeout time.Duration `yaml:"unreachable_timeout"`
	// DynamicMembership turns static group membership off. By default each task's consumer is a
	// static member of its group (group.instance.id "wasmstream-<task>-<host_id>"): a host that
	// died (a crash, a kill) and restarts within the session timeout takes its partitions back
	// at once, without a rebalance, where a dynamic member waits for the dead one's session to
	// time out. A host that stops cleanly leaves its group either way. host_id must be stable
	// across a host's restarts and differ from every other host's: a second host started with
	// the same one takes the first one's place, and the first one's task halts saying so.
	// Default false (static).
	DynamicMembership bool `yaml:"dynamic_membership"`
	// ExternalOffsetReset is what a task does at start with a partition whose group offset was
	// set from outside the group (kafka-consumer-groups --reset-offsets, an admin client) to
	// another offset than its local checkpoint's: "report" (default) logs a warning naming the
	// partition, both offsets and the `wasmstream reset` command to run, and resumes at the
	// checkpoint; "follow" restarts the partition at the committed offset as `wasmstream reset`
	// would, its state and timers moved aside and its changelog tombstoned.
	ExternalOffsetReset ExternalOffsetReset `yaml:"external_offset_reset"`
	// Embedded runs an in-process development broker and points the host at it.
	Embedded EmbeddedBrokerConfig `yaml:"embedded"`
}

// KafkaTLSConfig enables TLS.
type KafkaTLSConfig struct {
	Enable             bool   `yaml:"enable"`
	CAFile             string `yaml:"ca_file"`   // PEM bundle of the CAs to trust. Default: the system's.
	CertFile           string `yaml:"cert_file"` // client certificate for mutual TLS
	KeyFile            string `yaml:"key_file"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// KafkaSASLConfig enables SASL authentication.
type KafkaSASLConfig struct {
	// Mechanism is "plain", "scram-sha-256" or "scram-sha-512". Empty: no SASL.
	Mechanism SASLMechanism `yaml:"mechanism"`
	User      string        `yaml:"user"`
	Password  string        `yaml:"password"`
}

// EmbeddedBrokerConfig configures the development broker (`wasmstream dev`).
type EmbeddedBrokerConfig struct {
	// Enable starts the broker inside the host.
	Enable bool `yaml:"enable"`
	// Port is its loopback port. Default 9092.
	Port int `yaml:"port"`
	// Dir keeps its records and group offsets across restarts. Default DataDir/kafka.
	Dir string `yaml:"dir"`
	// Partitions of the topics it creates (every topic the configuration names). Default 4.
	Partitions int `yaml:"partitions"`
}

func (k KafkaConfig) client() kafka.Config {
	return kafka.Config{
		Brokers:  k.Brokers,
		ClientID: k.ClientID,
		TLS: kafka.TLSConfig{Enable: k.TLS.Enable, CAFile: k.TLS.CAFile, CertFile: k.TLS.CertFile,
			KeyFile: k.TLS.KeyFile, InsecureSkipVerify: k.TLS.InsecureSkipVerify},
		SASL:           kafka.SASLConfig{Mechanism: string(k.SASL.Mechanism), User: k.SASL.User, Password: k.SASL.Password},
		ConnectTimeout: k.ConnectTimeout,
	}
}

// usesKafka reports whether the task reads, writes or dead-letters through Kafka.
func (t TaskConfig) usesKafka() bool {
	for _, in := range t.Inputs {
		if in.Type == "kafka" {
			return true
		}
	}
	return t.Output.Type == "kafka" || t.DeadLetter.Topic != ""
}

// kafkaTopics lists every topic the configuration names, for the embedded broker to create.
func (c Config) kafkaTopics() []string {
	set := map[string]bool{}
	for _, t := range c.Tasks {
		for _, in := range t.Inputs {
			if in.Type == "kafka" {
				for _, tp := range in.Topics {
					set[tp] = true
				}
			}
		}
		if t.Output.Type == "kafka" {
			if t.Output.Topic != "" {
				set[t.Output.Topic] = true
			}
			for _, tp := range t.Output.Topics {
				set[tp] = true
			}
		}
		if t.DeadLetter.Topic != "" {
			set[t.DeadLetter.Topic] = true
		}
	}
	out := make([]string, 0, len(set))
	for tp := range set {
		out = append(out, tp)
	}
	sort.Strings(out)
	return out
}

// checkBroker reports a seed broker that is not host:port (or a host alone: port 9092, as the
// Kafka clients take it). Before, "PLAINTEXT://b:9092", "a:9092,b:9092" or a port beyond 65535
// passed check, and run failed after kafka.connect_timeout with a DNS or dial error.
func checkBroker(bad func(string, string, ...any), key, b string) {
	switch {
	case b == "":
		bad(key, "is empty")
		return
	case strings.Contains(b, "://"):
		bad(key, "%q: write host:port, without the scheme (%s)", b, b[strings.Index(b, "://")+3:])
		return
	case strings.ContainsAny(b, ", \t"):
		bad(key, "%q holds a comma or white space: one broker per list entry (brokers: [a:9092, b:9092])", b)
		return
	case !strings.Contains(b, ":"):
		return // a host alone: port 9092
	}
	host, port, err := net.SplitHostPort(b)
	if err != nil {
		bad(key, "%q is not host:port (an IPv6 address goes in brackets: [::1]:9092)", b)
		return
	}
	if host == "" {
		bad(key, "%q has no host", b)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		bad(key, "%q: the port must be a number from 1 to 65535", b)
	}
}

// CheckTopicName returns an error saying why Kafka would refuse topic as a topic name, or nil.
func CheckTopicName(topic string) error {
	var err error
	checkTopicName(func(_, format string, args ...any) { err = fmt.Errorf(format, args...) }, "", topic)
	return err
}

// checkTopicName reports a topic name Kafka refuses: it holds 1 to 249 ASCII letters, digits,
// '.', '_' and '-', and is neither "." nor "..". Before, a task with such a topic started, and
// waited without a word: a consumer subscribed to no partition, a producer failed only when it
// flushed.
func checkTopicName(bad func(string, string, ...any), key, topic string) {
	switch {
	case topic == "":
		bad(key, "is empty")
	case len(topic) > 249:
		bad(key, "%q is %d characters long: a Kafka topic name has at most 249", topic, len(topic))
	case topic == "." || topic == "..":
		bad(key, "%q is not a valid Kafka topic name", topic)
	default:
		for _, r := range topic {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				bad(key, "%q is not a valid Kafka topic name: it may hold only ASCII letters, digits, '.', '_' and '-' (not %q)", topic, r)
				return
			}
		}
	}
}

func validateKafkaTask(c Config, t TaskConfig, p string, bad func(string, string, ...any)) {
	kafkaInputs := 0
	for j, in := range t.Inputs {
		if in.Type != "kafka" {
			continue
		}
		q := fmt.Sprintf("%sinputs[%d].", p, j)
		kafkaInputs++
		if kafkaInputs == 2 {
			bad(q+"type", "a task has at most one kafka input; list every topic under its topics")
		}
		if len(in.Topics) == 0 {
			bad(q+"topics", "a kafka input needs at least one topic")
		}
		for k, tp := range in.Topics {
			checkTopicName(bad, fmt.Sprintf("%stopics[%d]", q, k), tp)
		}
		if _, err := kafka.StartOffset(in.StartAt); err != nil {
			bad(q+"start_at", "%v", err)
		}
		if in.Bounded && in.StartAt != "" && in.StartAt != "earliest" && in.StartAt != "latest" {
			bad(q+"bounded", "a bounded kafka input starts at earliest or latest, not at a time (start_at %q)", in.StartAt)
		}
		if in.Bounded && t.Delivery == "exactly_once" {
			bad(q+"bounded", "a bounded kafka input does not run with delivery exactly_once yet")
		}
		// A Kafka record has its key, value and timestamp: a kafka input takes them as they
		// are (these keys applied to file and stdin lines only, and were silently ignored).
		for _, f := range []struct{ key, val string }{{"key_field", in.KeyField}, {"value_field", in.ValueField},
			{"timestamp_field", in.TimestampField}, {"key_separator", in.KeySeparator}} {
			if f.val != "" {
				bad(q+f.key, "applies to file and stdin inputs: a kafka input takes each record's key, value and timestamp as they are")
			}
		}
	}
	for j, in := range t.Inputs {
		if in.Bounded && in.Type != "kafka" {
			bad(fmt.Sprintf("%sinputs[%d].bounded", p, j), "only a kafka input can be bounded (a file or stdin input ends by itself)")
		}
	}
	if err := kafka.CheckCompression(t.Output.Compression); err != nil {
		bad(p+"output.compression", "%q is not one of %s", t.Output.Compression, strings.Join(kafka.Compressions, ", "))
	} else if t.Output.Compression != "" && t.Output.Type != "kafka" && t.DeadLetter.Topic == "" {
		bad(p+"output.compression", "applies to a kafka output or dead-letter topic only")
	}
	if t.Output.Type == "kafka" && t.Output.Topic == "" && len(t.Output.Topics) == 0 {
		bad(p+"output.topic", "a kafka output needs a topic (or topics per output name)")
	}
	if t.Output.Type == "kafka" {
		if t.Output.Topic != "" {
			checkTopicName(bad, p+"output.topic", t.Output.Topic)
		}
		for _, name := range slices.Sorted(maps.Keys(t.Output.Topics)) {
			checkTopicName(bad, p+"output.topics."+name, t.Output.Topics[name])
		}
	}
	if t.DeadLetter.Topic != "" {
		checkTopicName(bad, p+"dead_letter.topic", t.DeadLetter.Topic)
	}
	if t.usesKafka() && len(c.Kafka.Brokers) == 0 && !c.Kafka.Embedded.Enable {
		bad("kafka.brokers", "task %s uses Kafka: name the brokers (or enable kafka.embedded)", t.Name)
	}
}

// kafkaInput builds the task's Kafka input.
func kafkaInput(cfg Config, tc TaskConfig, in InputConfig) *task.KafkaInput {
	group := in.Group
	if group == "" {
		group = "wasmstream-" + tc.Name
	}
	kc := cfg.Kafka.client()
	kc.Logger = cfg.Logger.With("task", tc.Name)
	ki := &task.KafkaInput{
		Name: in.Name, Client: kc, Group: group, Topics: in.Topics, StartAt: in.StartAt, Bounded: in.Bounded,
		DrainTimeout: cfg.Kafka.DrainTimeout, UnreachableTimeout: cfg.Kafka.UnreachableTimeout,
		SessionTimeout: cfg.Kafka.SessionTimeout, RebalanceTimeout: cfg.Kafka.RebalanceTimeout,
		DeliveryTimeout: cfg.Kafka.DeliveryTimeout,
	}
	ki.FollowExternalReset = cfg.Kafka.ExternalOffsetReset == ExternalResetFollow
	if !cfg.Kafka.DynamicMembership {
		ki.InstanceID = "wasmstream-" + tc.Name + "-" + cfg.HostID
	}
	if tc.Delivery == "exactly_once" {
		ki.ExactlyOnce = true
		ki.TxnID = "wasmstream-" + tc.Name + "-" + cfg.HostID
		ki.TxnTimeout = cfg.Kafka.TransactionTimeout
		ki.TxnCompression = tc.Output.Compression
	}
	return ki
}

// openSinks opens the task's output and dead-letter destinations.
func openSinks(cfg Config, tc TaskConfig) (task.OutputSink, task.DeadLetterSink, []io.Closer, error) {
	var closers []io.Closer
	var producer *kafka.Producer
	var limits *kafka.TopicLimits
	needProducer := tc.Output.Type == "kafka" || tc.DeadLetter.Topic != ""
	if needProducer {
		kc := cfg.Kafka.client()
		kc.Logger = cfg.Logger.With("task", tc.Name)
		limits = kafka.NewTopicLimits() // learned by pingKafka
		pc := kafka.ProducerConfig{DeliveryTimeout: cfg.Kafka.DeliveryTimeout, Compression: tc.Output.Compression, Limits: limits}
		if tc.Delivery == "exactly_once" {
			// Produces through the task's transactional consumer (KafkaInput.TxnProducers).
			producer = kafka.NewTxnProducer(kc.Logger, pc)
		} else {
			p, err := kafka.NewProducer(kc, pc)
			if err != nil {
				return nil, nil, nil, err
			}
			producer = p
			closers = append(closers, producerCloser{p})
		}
	}
	var out task.OutputSink
	switch tc.Output.Type {
	case "kafka":
		out = task.KafkaOutput{P: producer, Topic: tc.Output.Topic, Topics: tc.Output.Topics, Limits: limits}
	case "file":
		w, err := sink.OpenFile(tc.Output.Path, cfg.SyncWrites)
		if err != nil {
			return nil, nil, closers, fmt.Errorf("output: %w", err)
		}
		closers = append(closers, w)
		out = w
	default:
		w := sink.NewStream(cfg.Stdout)
		closers = append(closers, w)
		out = w
	}
	if tc.DeadLetter.Topic != "" {
		now := cfg.Now
		return out, task.KafkaDeadLetters{P: producer, Topic: tc.DeadLetter.Topic, Limits: limits,
			Now: func() int64 { return now().UnixMilli() }}, closers, nil
	}
	w, err := sink.OpenFile(tc.DeadLetter.Path, cfg.SyncWrites)
	if err != nil {
		return nil, nil, closers, fmt.Errorf("dead letters: %w", err)
	}
	closers = append(closers, w)
	return out, task.FileDeadLetters{W: w}, closers, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// producerCloser closes a task's own producer; abandon drops what it has not delivered when
// the task halted (goTask).
type producerCloser struct{ p *kafka.Producer }

func (c producerCloser) Close() error { c.p.Close(); return nil }
func (c producerCloser) abandon()     { c.p.Abandon() }

// abandonUndelivered drops the records a halted task's producers have not delivered: no
// checkpoint covers them (Producer.Abandon).
func abandonUndelivered(sinks []io.Closer) {
	for _, c := range sinks {
		if pc, ok := c.(producerCloser); ok {
			pc.abandon()
		}
	}
}

// outputNames are the names a task may emit to: the configured ones, or, for a kafka output
// without a default topic, the names its topics map.
func outputNames(oc OutputConfig) []string {
	if len(oc.Names) > 0 || oc.Type != "kafka" || oc.Topic != "" {
		return oc.Names
	}
	names := make([]string, 0, len(oc.Topics))
	for n := range oc.Topics {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// startEmbedded starts the development broker when configured and points cfg at it.
func startEmbedded(cfg *Config) (stop func(), err error) {
	e := cfg.Kafka.Embedded
	if !e.Enable {
		return func() {}, nil
	}
	b, err := kafka.StartDevBroker(kafka.DevBrokerConfig{Dir: e.Dir, Port: e.Port,
		Partitions: int32(e.Partitions), Topics: cfg.kafkaTopics()})
	if err != nil {
		return nil, fmt.Errorf("wasmstream: embedded broker: %w", err)
	}
	cfg.Kafka.Brokers = b.Addrs()
	if n := b.CrashCompletedOffsets(); n > 0 {
		cfg.Logger.Warn("embedded Kafka broker: committed the group offsets of transactions that its last run was committing when it was killed",
			"transactions", n)
	}
	for _, t := range b.CrashEnded() {
		if t.Committed {
			cfg.Logger.Warn("embedded Kafka broker: completed the commit of a transaction that its last run was committing when it was killed",
				"topic", t.Topic, "partition", t.Partition, "producer_id", t.ProducerID, "first_offset", t.FirstOffset)
			continue
		}
		cfg.Logger.Warn("embedded Kafka broker: aborted a transaction that its last run left open when it was killed",
			"topic", t.Topic, "partition", t.Partition, "producer_id", t.ProducerID, "first_offset", t.FirstOffset)
	}
	cfg.Logger.Info("embedded Kafka broker listening", "addrs", b.Addrs(), "dir", e.Dir, "topics", cfg.kafkaTopics())
	return b.Close, nil
}

// pingKafka checks that the cluster the task produces to accepts the host, so that a wrong
// password or certificate is an error at start rather than a silent wait; then it learns the
// max.message.bytes of the topics the task produces to (kafka.TopicLimits), before the task
// produces anything.
func pingKafka(ctx context.Context, cfg Config, tc TaskConfig, out task.OutputSink, dlq task.DeadLetterSink) error {
	var p *kafka.Producer
	var limits *kafka.TopicLimits
	var topics []string
	if k, ok := out.(task.KafkaOutput); ok {
		p, limits = k.P, k.Limits
		topics = append(topics, k.Topic)
		for _, t := range k.Topics {
			topics = append(topics, t)
		}
	}
	if k, ok := dlq.(task.KafkaDeadLetters); ok {
		if p == nil {
			p = k.P
		}
		limits = cmp.Or(limits, k.Limits)
		topics = append(topics, k.Topic)
	}
	if p == nil {
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		return err
	}
	slices.Sort(topics)
	topics = slices.Compact(slices.DeleteFunc(topics, func(t string) bool { return t == "" }))
	kc := cfg.Kafka.client()
	kc.Logger = cfg.Logger.With("task", tc.Name)
	if err := limits.Learn(ctx, kc, topics); err != nil {
		cfg.Logger.Warn("kafka: could not learn the output topics' max.message.bytes; records are capped at the default 1000012 bytes", "task", tc.Name, "err", err)
	}
	for _, t := range topics {
		if n := limits.Get(t); n < kafka.MaxRecordBatchBytes {
			cfg.Logger.Info("kafka: output topic takes smaller records than the default: batches are capped at its max.message.bytes, and an emit of a larger record fails (ERR_TOO_LARGE), which retries and dead-letters that record", "task", tc.Name, "topic", t, "max_message_bytes", n)
		}
	}
	return nil
}
