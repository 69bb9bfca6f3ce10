package task

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/sink"
	"github.com/wasmstream/wasmstream/host/internal/source"
)

// OutputSink receives a task's outputs. Flush makes everything written so far durable (a file)
// or acknowledged (Kafka); a checkpoint calls it before committing state (S11). A nil value is a
// null one (a tombstone, ABI 0.5: a Kafka record with a null value, "value":null in a file); an
// empty value is never nil.
type OutputSink interface {
	WriteOutput(name string, key, value []byte, ts int64, headers []sink.Header) error
	Flush() error
}

// DeadLetter is a record that could not be decoded or failed on every attempt.
type DeadLetter struct {
	Task      string
	Input     string // input name, or the topic for Kafka
	Partition int32
	Offset    int64
	Attempts  int
	Err       error
	Key       []byte // nil when the record could not be decoded
	Value     []byte // the record value, or the raw line
	ValueNull bool   // the record's value is null (a Kafka tombstone): Value is empty
	Truncated bool   // Value holds only the start of a line too long to keep whole
}

// DeadLetterSink receives dead letters; Flush as OutputSink.
type DeadLetterSink interface {
	WriteDeadLetter(d *DeadLetter) error
	Flush() error
}

// FileDeadLetters writes dead letters as JSON lines:
//
//	{"task":…,"input":…,"partition":0,"offset":41,"line":42,"attempts":5,"error":…,"key":…,"record":…}
//
// The key and the record (the whole line, or the record value) are kept byte for byte: a JSON
// string when they are valid UTF-8, otherwise "key_b64" / "record_b64" in standard base64.
// A record with many control bytes, which would grow up to six times as a JSON string, is
// written as "record_b64" too. "truncated":true marks a line too long to keep whole (over
// 64 MiB): the record is its start.
type FileDeadLetters struct{ W *sink.Writer }

func (f FileDeadLetters) WriteDeadLetter(d *DeadLetter) error {
	b := []byte(`{"task":`)
	b = sink.AppendString(b, d.Task)
	b = append(b, `,"input":`...)
	b = sink.AppendString(b, d.Input)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(d.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, d.Offset, 10)
	b = append(b, `,"line":`...)
	b = strconv.AppendInt(b, d.Offset+1, 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(d.Attempts), 10)
	b = append(b, `,"error":`...)
	b = sink.AppendString(b, d.Err.Error())
	if d.Key != nil {
		b = sink.AppendKeyField(b, "key", d.Key) // the null key as null
	}
	if d.ValueNull {
		b = append(b, `,"record":null`...) // a tombstone, apart from an empty value
	} else if escapeGrowth(d.Value) > len(d.Value)/3 {
		// A line of control bytes would grow up to six times as a JSON string: base64 grows a third.
		b = append(b, `,"record_b64":"`...)
		b = base64.StdEncoding.AppendEncode(b, d.Value)
		b = append(b, '"')
	} else {
		b = sink.AppendBytesField(b, "record", d.Value)
	}
	if d.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	b = append(b, '}')
	return f.W.WriteLine(b)
}

func (f FileDeadLetters) Flush() error { return f.W.Flush() }

func (f FileDeadLetters) Pending() int { return f.W.Pending() }

// escapeGrowth is how many bytes the control bytes of v add in its JSON string
// (sink.AppendString writes most of them as \u00XX). Quotes and backslashes, which at most
// double, are not counted: a JSON line stays readable.
func escapeGrowth(v []byte) int {
	n := 0
	for _, c := range v {
		if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') || c == 0x7f {
			n += 5
		}
	}
	return n
}

// maxHeldOutputs bounds the bytes the file sinks hold until the next checkpoint (a file sink
// writes its lines only when the checkpoint that covers them flushes it): once they hold that
// much, the loop checkpoints early.
const maxHeldOutputs = 8 << 20

// holdingSink is a sink that holds what it was given until Flush.
type holdingSink interface{ Pending() int }

// sinksFull reports whether the sinks hold maxHeldOutputs bytes or more.
func (t *Task) sinksFull() bool {
	n := 0
	if s, ok := t.cfg.Output.(holdingSink); ok {
		n += s.Pending()
	}
	if s, ok := t.cfg.DeadLetter.(holdingSink); ok {
		n += s.Pending()
	}
	return n >= maxHeldOutputs
}

// KafkaOutput produces outputs to topics: Topics maps an output name to its topic, Topic is
// for every other name.
type KafkaOutput struct {
	P      *kafka.Producer
	Topic  string
	Topics map[string]string
	// Limits, if set, are the topics' record limits: an emit over its topic's fails in the
	// guest (RecordLimit).
	Limits *kafka.TopicLimits
}

// topic is the topic of output name.
func (k KafkaOutput) topic(name []byte) string {
	if t, ok := k.Topics[string(name)]; ok {
		return t
	}
	return k.Topic
}

// RecordLimit is modrt.InstanceConfig.RecordLimit for the outputs: the record limit of the
// output's topic.
func (k KafkaOutput) RecordLimit(name []byte) int { return k.Limits.Get(k.topic(name)) }

func (k KafkaOutput) WriteOutput(name string, key, value []byte, ts int64, headers []sink.Header) error {
	return k.WriteOutputFrom(name, key, value, ts, headers, nil)
}

// WriteOutputFrom is WriteOutput for an output that came from from (fromSink; nil: not said):
// a refusal of the record names it.
func (k KafkaOutput) WriteOutputFrom(name string, key, value []byte, ts int64, headers []sink.Header, from fmt.Stringer) error {
	topic := k.topic([]byte(name))
	var hs []kafka.Header
	for _, h := range headers {
		hs = append(hs, kafka.Header{Name: h.Name, Value: h.Value})
	}
	k.P.ProduceFrom(topic, kafkaKey(key), value, hs, ts, from)
	return nil
}

// fromSink is an output sink that can name, when it fails an output, what the output came
// from (KafkaOutput: a record the cluster refuses is only known to fail at a flush, after the
// loop moved on).
type fromSink interface {
	WriteOutputFrom(name string, key, value []byte, ts int64, headers []sink.Header, from fmt.Stringer) error
}

// outputOrigin is what a group's outputs came from: its records' offsets in its stream, its
// timer firings, or a tick of the stream. Made only for a fromSink, once per group; its
// String runs only when an output is refused (on the producer's goroutine: it reads only the
// stream's name, fixed from its start).
type outputOrigin struct {
	st          *stream
	first, last int64 // the offsets of the group's first and last records; first -1: none
	firings     int
	tick        bool
}

func (o *outputOrigin) String() string {
	var parts []string
	if o.first >= 0 {
		at := "input " + o.st.in.Name
		if o.st.kafka {
			at = fmt.Sprintf("input topic %s partition %d", o.st.tp.Topic, o.st.tp.Partition)
		}
		switch {
		case o.first == o.last && o.st.kafka:
			at += fmt.Sprintf(" offset %d", o.first)
		case o.st.kafka:
			at += fmt.Sprintf(" offsets %d to %d", o.first, o.last)
		case o.first == o.last:
			at += fmt.Sprintf(" line %d", o.first+1)
		default:
			at += fmt.Sprintf(" lines %d to %d", o.first+1, o.last+1)
		}
		parts = append(parts, at)
	}
	if o.firings > 0 {
		parts = append(parts, fmt.Sprintf("%d timer firing(s) of %s", o.firings, o.st.name()))
	}
	if o.tick {
		parts = append(parts, "a tick of "+o.st.name())
	}
	return strings.Join(parts, " and ")
}

// kafkaKey is the Kafka key of an output or a dead letter with key key: nil (a null key) for
// abi.NullKey, and an empty key, never null, for an empty one.
func kafkaKey(key []byte) []byte {
	switch {
	case abi.IsNullKey(key):
		return nil
	case key == nil:
		return []byte{}
	}
	return key
}

func (k KafkaOutput) Flush() error { return k.P.Flush(context.Background()) }

// KafkaDeadLetters produces dead letters to a topic with the original key and value, and
// headers naming the error, the task, the source topic (or input), partition, offset and
// attempts.
type KafkaDeadLetters struct {
	P      *kafka.Producer
	Topic  string
	Now    func() int64
	Limits *kafka.TopicLimits // the topic's record limit, if known (nil: MaxRecordBatchBytes)
}

func (k KafkaDeadLetters) WriteDeadLetter(d *DeadLetter) error {
	h := func(n, v string) kafka.Header { return kafka.Header{Name: []byte(n), Value: []byte(v)} }
	hs := []kafka.Header{
		h("wasmstream.error", d.Err.Error()),
		h("wasmstream.task", d.Task),
		h("wasmstream.source", d.Input),
		h("wasmstream.partition", strconv.Itoa(int(d.Partition))),
		h("wasmstream.offset", strconv.FormatInt(d.Offset, 10)),
		h("wasmstream.attempts", strconv.Itoa(d.Attempts)),
	}
	value := d.Value
	if d.ValueNull {
		value = nil // a tombstone stays one
	} else if value == nil {
		value = []byte{}
	}
	key := d.Key // nil: the record had none (a malformed line)
	if key != nil {
		key = kafkaKey(key)
	}
	limit := k.Limits.Get(k.Topic)
	if kafka.RecordBytes(key, value, hs) > limit {
		// Kafka would refuse the whole record at the flush and the task would halt on it at
		// every restart: keep what fits, and say so.
		if len(hs[0].Value) > maxDeadLetterError {
			hs[0].Value = append(hs[0].Value[:maxDeadLetterError:maxDeadLetterError], "…"...)
		}
		hs = append(hs, h("wasmstream.truncated", "true"), h("wasmstream.size", strconv.Itoa(len(d.Value))))
		room := limit - kafka.RecordBytes(key, nil, hs)
		if value != nil {
			value = value[:max(0, min(len(value), room))]
		}
	}
	k.P.Produce(k.Topic, key, value, hs, k.Now())
	return nil
}

// maxDeadLetterError is where the error header of a dead letter cut to fit a Kafka record is
// cut too.
const maxDeadLetterError = 16 << 10

func (k KafkaDeadLetters) Flush() error { return k.P.Flush(context.Background()) }
func (t *Task) deadLetter(st *stream, offset int64, key, value []byte, valueNull bool, cause error, attempts int) error {
	return t.writeDeadLetter(st, &DeadLetter{Offset: offset, Attempts: attempts, Err: cause, Key: key, Value: value, ValueNull: valueNull})
}

// deadLetterLine sends a record that could not be decoded to the dead letters, with its whole line.
func (t *Task) deadLetterLine(st *stream, r *source.Record) error {
	return t.writeDeadLetter(st, &DeadLetter{Offset: r.Offset, Err: r.Err, Value: r.Raw, ValueNull: r.ValueNull, Truncated: r.Truncated})
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
