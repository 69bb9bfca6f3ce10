package host_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/host"
)

// TestEnumProblemsListTheValues: a value outside an enumeration is one problem per key, naming
// the key, the value and every value allowed.
func TestEnumProblemsListTheValues(t *testing.T) {
	err := host.Config{OnTaskFailure: "halt_all", Kafka: host.KafkaConfig{SASL: host.KafkaSASLConfig{Mechanism: "md5"}},
		Tasks: []host.TaskConfig{{Name: "a", Module: "a.wasm", Delivery: "exactly-once", StateMigration: "eager",
			Inputs: []host.InputConfig{{Path: "in", OnMalformed: "drop"}}, Output: host.OutputConfig{Type: "socket"}}}}.Validate()
	want := []string{
		`on_task_failure: "halt_all" is not one of halt_task, halt_host`,
		`kafka.sasl.mechanism: "md5" is not one of plain, scram-sha-256, scram-sha-512`,
		`tasks[0].delivery: "exactly-once" is not one of at_least_once, exactly_once`,
		`tasks[0].state_migration: "eager" is not one of lazy, activation`,
		`tasks[0].inputs[0].on_malformed: "drop" is not one of deadletter, halt`,
		`tasks[0].output.type: "socket" is not one of file, stdout, kafka`,
	}
	for _, w := range want {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %v\nwant the problem %s", err, w)
		}
	}
	var ce *host.ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("Validate() = %T; want *host.ConfigError problems", err)
	}
}

// TestWithDefaults: the zero configuration gets the documented defaults, a set field keeps its
// value, and filling in twice changes nothing.
func TestWithDefaults(t *testing.T) {
	c := host.Config{Tasks: []host.TaskConfig{{Name: "a", MaxInFlight: 1,
		Inputs: []host.InputConfig{{}, {Type: host.InputKafka}}}}}.WithDefaults()
	tk := c.Tasks[0]
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"data_dir", c.DataDir, host.DefaultDataDir},
		{"cache_dir", c.CacheDir, host.DefaultDataDir + "/cache"},
		{"checkpoint_interval", c.CheckpointInterval, time.Second},
		{"on_task_failure", c.OnTaskFailure, host.HaltTask},
		{"kafka.client_id", c.Kafka.ClientID, "wasmstream"},
		{"kafka.delivery_timeout", c.Kafka.DeliveryTimeout, 2 * time.Minute},
		{"kafka.unreachable_timeout", c.Kafka.UnreachableTimeout, 2 * time.Minute},
		{"kafka.external_offset_reset", c.Kafka.ExternalOffsetReset, host.ExternalResetReport},
		{"max_in_flight", tk.MaxInFlight, 1},
		{"max_batch_records", tk.MaxBatchRecords, 256},
		{"max_outputs_per_call", tk.MaxOutputsPerCall, 65536},
		{"fuel_per_record", tk.FuelPerRecord, int64(100_000_000)},
		{"delivery", tk.Delivery, host.AtLeastOnce},
		{"sequencing.policy", tk.Sequencing.Policy, host.SequenceByKey},
		{"retry.on_exhausted", tk.Retry.OnExhausted, host.ExhaustedDeadLetter},
		{"inputs[0].type", tk.Inputs[0].Type, host.InputFile},
		{"inputs[0].format", tk.Inputs[0].Format, host.FormatJSON},
		{"inputs[0].max_line_bytes", tk.Inputs[0].MaxLineBytes, 4 << 20},
		{"inputs[1].max_line_bytes", tk.Inputs[1].MaxLineBytes, 0}, // not a key of kafka inputs
		{"output.type", tk.Output.Type, host.OutputStdout},
		{"dead_letter.path", tk.DeadLetter.Path, host.DefaultDataDir + "/a.deadletter.ndjson"},
	} {
		if f.got != f.want {
			t.Errorf("%s = %v; want %v", f.name, f.got, f.want)
		}
	}
	again := c.WithDefaults().Tasks[0]
	if !reflect.DeepEqual(again, tk) {
		t.Errorf("WithDefaults twice changed the task: %+v, then %+v", tk, again)
	}
}
