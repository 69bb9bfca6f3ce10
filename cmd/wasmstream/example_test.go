package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wasmstream/wasmstream/host"
)

// examplePath is the repository's config.example.yaml, from this package's directory.
var examplePath = filepath.Join("..", "..", "config.example.yaml")

// TestExampleConfig loads config.example.yaml as it is: it must configure the wordcount
// example and pass host.Config.Validate.
func TestExampleConfig(t *testing.T) {
	s := mustLoad(t, examplePath)
	root := filepath.Dir(examplePath)
	want := host.Config{
		DataDir: filepath.Join(root, "data"),
		Tasks: []host.TaskConfig{{
			Name:   "wordcount",
			Module: filepath.Join(root, ".build", "wordcount.wasm"),
			Config: map[string]any{"min_len": 2},
			Inputs: []host.InputConfig{{
				Path:           filepath.Join(root, "examples", "wasm", "wordcount", "input.ndjson"),
				KeyField:       "user",
				ValueField:     "text",
				TimestampField: "ts",
			}},
			Output: host.OutputConfig{Type: "stdout"},
		}},
	}
	if !reflect.DeepEqual(s.Host, want) {
		t.Errorf("config.example.yaml loads as\n%+v\nwant\n%+v", s.Host, want)
	}
	if s.Log != (logConfig{}) {
		t.Errorf("log = %+v, want the defaults", s.Log)
	}

	// The guest settings are those the wordcount example's expected outputs were made with.
	b, err := os.ReadFile(filepath.Join(root, "examples", "wasm", "wordcount", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var guest map[string]any
	if err := json.Unmarshal(b, &guest); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s.Host.Tasks[0].Config)
	wantJSON, _ := json.Marshal(guest)
	if string(got) != string(wantJSON) {
		t.Errorf("tasks[0].config = %s, want the example's config.json %s", got, wantJSON)
	}
}

// commentedKey matches a commented-out key of config.example.yaml ("# key: value" or, nested,
// "#   key: value"); prose comments never start with a lower-case word and a colon.
var commentedKey = regexp.MustCompile(`(?m)^([ \t]*)# ([ \t]*)([a-z_]+:(?:[ \t].*)?)$`)

// uncommentedExample returns config.example.yaml with every commented-out key enabled.
func uncommentedExample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	return commentedKey.ReplaceAll(b, []byte("$1$2$3"))
}

// TestExampleDocumentsEveryKey enables every commented-out key of config.example.yaml: the
// result must name every configuration key there is, each one well-typed, with the values
// host.Config documents as defaults.
func TestExampleDocumentsEveryKey(t *testing.T) {
	data := uncommentedExample(t)

	// Every key of fileConfig appears.
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the uncommented example is not valid YAML: %v\n%s", err, data)
	}
	var fc fileConfig
	d := &decoder{seen: map[string]bool{}}
	d.structure("", doc, reflect.ValueOf(&fc).Elem())
	if len(d.errs) > 0 {
		t.Fatalf("the uncommented example has errors: %v", d.errs)
	}
	var missing []string
	for _, key := range allKeys("", reflect.TypeFor[fileConfig]()) {
		if !d.seen[key] {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		t.Errorf("config.example.yaml does not document %v", missing)
	}

	// The documented defaults are host.Config's.
	path := filepath.Join(t.TempDir(), "example.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The example's grants.dirs entry names a directory, which must exist.
	if err := os.MkdirAll(filepath.Join(filepath.Dir(path), "examples", "wasm", "wordcount"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := mustLoad(t, path)
	dir := filepath.Dir(path)
	want := host.Config{
		DataDir:            filepath.Join(dir, "data"),
		CacheDir:           "", // <data_dir>/cache
		CheckpointInterval: time.Second,
		SyncWrites:         false,
		KeepModuleVersions: 10,
		OnTaskFailure:      "halt_task",
		Kafka: host.KafkaConfig{
			Brokers: []string{}, ClientID: "wasmstream", ConnectTimeout: 30 * time.Second, DrainTimeout: 30 * time.Second, TransactionTimeout: 15 * time.Second, DeliveryTimeout: 2 * time.Minute, UnreachableTimeout: 2 * time.Minute, ExternalOffsetReset: host.ExternalResetReport,
			Embedded: host.EmbeddedBrokerConfig{Port: 9092, Partitions: 4},
		},
		Admin: host.AdminConfig{Addr: "", Token: "", MaxModuleBytes: 64 << 20},
		Tasks: []host.TaskConfig{{
			Name:   "wordcount",
			Module: filepath.Join(dir, ".build", "wordcount.wasm"),
			Config: map[string]any{"min_len": 2},
			Inputs: []host.InputConfig{{
				Name:           "input0",
				Type:           "file",
				Topics:         []string{},
				StartAt:        "earliest",
				Path:           filepath.Join(dir, "examples", "wasm", "wordcount", "input.ndjson"),
				Format:         "json",
				KeyField:       "user",
				ValueField:     "text",
				TimestampField: "ts",
				KeySeparator:   "",
				OnMalformed:    "deadletter",
				MaxLineBytes:   4 << 20,
				Continue:       false,
			}},
			Output:               host.OutputConfig{Type: "stdout", Path: "", Names: []string{}, Topics: map[string]string{}},
			DeadLetter:           host.DeadLetterConfig{Path: ""}, // <data_dir>/<task>.deadletter.ndjson
			Sequencing:           host.SequencingConfig{Policy: "key"},
			Workers:              0, // GOMAXPROCS
			Loops:                1,
			MaxBatchRecords:      256,
			MaxKeyRecords:        64,
			MaxInFlight:          1024,
			MaxQueued:            8192,
			MaxQueuedBytes:       32 << 20,
			MaxMemoryPages:       1024,
			MaxTableElements:     100_000,
			MaxFunctions:         100_000,
			MaxLocals:            1_000_000,
			MaxNestingDepth:      10_000,
			MaxLoopDepth:         100,
			MaxCallDepth:         20_000,
			MaxNestingWork:       400_000_000,
			MaxBlockWork:         200_000_000,
			MaxFunctionBytes:     1 << 20,
			MaxValueBytes:        1 << 20,
			MaxOutputsPerCall:    65536,
			MaxEmitBytesPerCall:  64 << 20,
			MaxStateBytesPerCall: 64 << 20,
			MaxStateBytesPerKey:  256 << 20,
			MaxLogLinesPerSecond: 1000,
			LogBurstLines:        10000,
			FuelPerRecord:        100_000_000,
			InitFuel:             1_000_000_000,
			StateCacheBytes:      64 << 20,
			Retry: host.RetryConfig{
				MaxAttempts:            5,
				Backoff:                time.Second,
				MaxBackoff:             60 * time.Second,
				MaxConsecutiveFailures: 1000,
				OnExhausted:            "deadletter",
			},
			Grants: host.GrantsConfig{ // dirs and http.allow have example entries; the other keys are at their defaults
				Dirs: []host.DirGrantConfig{{Host: filepath.Join(dir, "examples", "wasm", "wordcount"), Guest: "/data"}},
				Env:  []string{},
				HTTP: host.HTTPGrantConfig{
					Allow:   []string{"api.example.com", "*.example.org"},
					Timeout: 10 * time.Second, MaxTimeout: 60 * time.Second, MaxConcurrent: 4,
					MaxRequestBytes: 1 << 20, MaxResponseBytes: 4 << 20,
				},
			},
			Time:           host.TimeConfig{MaxFiringsPerTurn: 1000, MaxPendingTimers: 1_000_000},
			StateMigration: "lazy",
			Delivery:       "at_least_once",
		}},
	}
	if !reflect.DeepEqual(s.Host, want) {
		t.Errorf("the example's documented defaults load as\n%+v\nwant\n%+v", s.Host, want)
	}
	if s.Log != (logConfig{Format: "text", Level: "info"}) {
		t.Errorf("log = %+v", s.Log)
	}
}

// allKeys lists the configuration keys of struct type typ, list elements written "[]".
func allKeys(prefix string, typ reflect.Type) []string {
	var keys []string
	for _, f := range fieldsOf(typ) {
		key := join(prefix, f.key)
		keys = append(keys, key)
		ft := typ.FieldByIndex(f.index).Type
		switch {
		case ft.Kind() == reflect.Struct && ft != durationType:
			keys = append(keys, allKeys(key, ft)...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, allKeys(key+"[]", ft.Elem())...)
		}
	}
	slices.Sort(keys)
	return keys
}
