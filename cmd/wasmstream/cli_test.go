package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/abi"
)

// runCLI runs the command line in process and returns its exit status and outputs.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// writeConfig writes a configuration file in a new temporary directory and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "wasmstream.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// validTask is a task that passes host.Config.Validate (its files need not exist).
const validTask = `
tasks:
  - name: t
    module: m.wasm
    inputs:
      - path: in.ndjson
`

func TestVersion(t *testing.T) {
	code, stdout, stderr := runCLI(t, "version")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"wasmstream dev\n",
		"abi " + abi.VersionString(abi.Version) + " (" + abi.ModuleName + ")\n",
		"go " + runtime.Version(),
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("version output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no command", nil, "no command given"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"misspelt command", []string{"stat"}, "did you mean state or status?"},
		{"unknown flag", []string{"run", "--frobnicate"}, "unknown flag: --frobnicate"},
		{"positional argument", []string{"version", "extra"}, `unknown command "extra" for "wasmstream version"` + "\nrun 'wasmstream version --help' for usage"},
		{"bad duration flag", []string{"run", "--checkpoint-interval", "soon"}, "--checkpoint-interval"},
		{"input without module", []string{"run", "--input", "in.ndjson"}, "--input needs --module"},
		{"module without input", []string{"run", "--module", "m.wasm"}, "--module needs at least one --input"},
		{"module and config", []string{"run", "--module", "m.wasm", "--input", "x", "-c", "c.yaml"}, "--module and --config"},
		{"task config not JSON", []string{"run", "--module", "m.wasm", "--input", "x", "--task-config", "min_len=2"}, "--task-config must be a JSON object"},
		{"task config not an object", []string{"run", "--module", "m.wasm", "--input", "x", "--task-config", "[1]"}, "--task-config must be a JSON object"},
		{"continue-stdin without stdin", []string{"run", "--module", "m.wasm", "--input", "in.ndjson", "--continue-stdin"}, "--continue-stdin needs --input -"},
		{"key and prefix", []string{"state", "--task", "t", "--key", "a", "--prefix", "b"}, "--key and --prefix"},
		{"key without task", []string{"state", "--key", "a"}, "need --task"},
		{"bad escape", []string{"state", "--task", "t", "--key", `a\q`}, "bad escape"},
		{"state format", []string{"state", "--format", "xml"}, "--format must be text or json"},
		// Before, the broker created "a b" (which clients then failed on) and a port beyond
		// 65535 exited 1 as a runtime failure.
		{"dev broker topic", []string{"dev", "--broker-only", "--topic", "ok", "--topic", "a b"}, `--topic: "a b" is not a valid Kafka topic name`},
		{"dev broker port", []string{"dev", "--broker-only", "--port", "99999"}, "--port: must be a port from 1 to 65535"},
		{"dev broker partitions", []string{"dev", "--broker-only", "--partitions", "-2"}, "--partitions: must be positive"},
		{"dev topic without broker-only", []string{"dev", "-c", "kafka.yaml", "--topic", "words"}, "--topic needs --broker-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help", "run"}, {"state", "--help"}} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 0 || !strings.Contains(stdout, "Usage:") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
	}
}

func TestMissingConfig(t *testing.T) {
	t.Chdir(t.TempDir()) // no wasmstream.yaml here
	for _, cmd := range []string{"run", "check"} {
		code, _, stderr := runCLI(t, cmd)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d", cmd, code, exitUsage)
		}
		for _, want := range []string{"no configuration", "--config FILE", defaultConfigFile, "--module"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, stderr)
			}
		}
	}

	code, _, stderr := runCLI(t, "run", "--config", "nope.yaml")
	if code != exitUsage || !strings.Contains(stderr, "nope.yaml") {
		t.Errorf("missing --config file: exit %d, stderr:\n%s", code, stderr)
	}
}

func TestDefaultConfigFileIsRead(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile(defaultConfigFile, []byte("bogus_key: 1\n"+validTask), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "check")
	if code != exitUsage || !strings.Contains(stderr, "bogus_key: unknown key") || !strings.Contains(stderr, defaultConfigFile) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestConfigErrors runs bad configurations through the run command: each exits 2 before
// anything runs, with every problem named by its key on stderr.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown top-level key",
			yaml: "data_dri: x\n" + validTask,
			want: []string{"data_dri: unknown key (did you mean data_dir?)"},
		},
		{
			name: "unknown nested key",
			yaml: `
tasks:
  - name: t
    module: m.wasm
    inputs:
      - path: in.ndjson
        kye_field: user
`,
			want: []string{"tasks[0].inputs[0].kye_field: unknown key (did you mean key_field?)"},
		},
		{
			name: "unknown key in a nested section",
			yaml: "log:\n  colour: red\n" + validTask,
			want: []string{"log.colour: unknown key"},
		},
		{
			name: "keys are case-sensitive",
			yaml: "Data_Dir: x\n" + validTask,
			want: []string{"Data_Dir: unknown key (did you mean data_dir?)"},
		},
		{
			name: "not-configurable fields are not keys",
			yaml: "logger: x\nnow: y\nstdout: z\n" + validTask,
			want: []string{"logger: unknown key", "now: unknown key", "stdout: unknown key"},
		},
		{
			name: "bad duration",
			yaml: "checkpoint_interval: soon\n" + validTask,
			want: []string{`checkpoint_interval: "soon" is not a duration`},
		},
		{
			name: "bare number is not a duration",
			yaml: "checkpoint_interval: 5\n" + validTask,
			want: []string{`checkpoint_interval: must be a duration with a unit`},
		},
		{
			name: "bad nested duration",
			yaml: validTask + "    retry:\n      backoff: 1 second\n",
			want: []string{`tasks[0].retry.backoff: "1 second" is not a duration`},
		},
		{
			// Before, such a task started and waited without a word (0 records, no warning).
			name: "topic names Kafka refuses",
			yaml: `
kafka:
  brokers: [127.0.0.1:9092]
tasks:
  - name: t
    module: m.wasm
    inputs:
      - {name: w, type: kafka, topics: [ok, "bad topic", "a/b", ".."]}
    output:
      type: kafka
      topic: "out*"
      topics: {x: "` + strings.Repeat("x", 250) + `"}
    dead_letter: {topic: "dlq:1"}
    changelog: {enabled: true, topic: "été"}
`,
			want: []string{`tasks[0].inputs[0].topics[1]: "bad topic" is not a valid Kafka topic name: it may hold only ASCII letters, digits, '.', '_' and '-' (not ' ')`,
				`tasks[0].inputs[0].topics[2]: "a/b" is not a valid Kafka topic name`,
				`tasks[0].inputs[0].topics[3]: ".." is not a valid Kafka topic name`,
				`tasks[0].output.topic: "out*" is not a valid Kafka topic name`,
				`tasks[0].output.topics.x: "xxx`, `is 250 characters long: a Kafka topic name has at most 249`,
				`tasks[0].dead_letter.topic: "dlq:1" is not a valid Kafka topic name`,
				`tasks[0].changelog.topic: "été" is not a valid Kafka topic name`},
		},
		{
			// Before, check passed these, and run failed after kafka.connect_timeout (30 s) on a
			// DNS lookup of "PLAINTEXT://b:9092" or of "a:9092,b:9092".
			name: "brokers that are not host:port",
			yaml: `
kafka:
  brokers: [ok:9092, justahost, "PLAINTEXT://b:9092", "a:9092,b:9092", "c:99999", "::1", ":9092", "[::1]:9092"]
` + validTask,
			want: []string{`kafka.brokers[2]: "PLAINTEXT://b:9092": write host:port, without the scheme (b:9092)`,
				`kafka.brokers[3]: "a:9092,b:9092" holds a comma or white space: one broker per list entry`,
				`kafka.brokers[4]: "c:99999": the port must be a number from 1 to 65535`,
				`kafka.brokers[5]: "::1" is not host:port (an IPv6 address goes in brackets: [::1]:9092)`,
				`kafka.brokers[6]: ":9092" has no host`},
		},
		{
			// Before, check passed them, and run failed listening (exit 1) once the tasks had started.
			name: "listen ports out of range",
			yaml: "admin:\n  addr: \":99999\"\nmetrics:\n  addr: \"127.0.0.1:70000\"\n" + validTask,
			want: []string{`admin.addr: ":99999": the port must be a number from 0 to 65535`,
				`metrics.addr: "127.0.0.1:70000": the port must be a number from 0 to 65535`},
		},
		{
			name: "embedded broker port and partitions",
			yaml: "kafka:\n  embedded: {port: 99999, partitions: -1}\n" + validTask,
			want: []string{"kafka.embedded.port: must be a port from 1 to 65535 (0: a free one), got 99999",
				"kafka.embedded.partitions: must be positive, got -1"},
		},
		{
			// Before, the second document's task was ignored without a word.
			name: "two YAML documents",
			yaml: validTask + "---\n" + strings.ReplaceAll(validTask, "name: t", "name: u"),
			want: []string{"holds 2 YAML documents (separated by ---): a configuration is one document, and the ones after the first would be ignored"},
		},
		{
			name: "negative unsigned",
			yaml: validTask + "    max_memory_pages: -1\n",
			want: []string{"tasks[0].max_memory_pages: must not be negative"},
		},
		{
			name: "negative signed, from Validate",
			yaml: validTask + "    max_batch_records: -5\n",
			want: []string{"tasks[0].max_batch_records: must be positive"},
		},
		{
			name: "negative pending-timer limit",
			yaml: validTask + "    time:\n      max_pending_timers: -1\n",
			want: []string{"tasks[0].time.max_pending_timers: must be positive, got -1"},
		},
		{
			name: "a queue bound too small to resume at half of it",
			yaml: validTask + "    max_queued: 1\n    max_queued_bytes: 1\n",
			want: []string{
				"tasks[0].max_queued: must be at least 2 (reading pauses at it and resumes at half of it), got 1",
				"tasks[0].max_queued_bytes: must be at least 2 (reading pauses at it and resumes at half of it), got 1",
			},
		},
		{
			name: "out of range",
			yaml: validTask + "    max_memory_pages: 99999999999\n",
			want: []string{"tasks[0].max_memory_pages: 99999999999 is out of range"},
		},
		{
			name: "wrong types",
			yaml: `
sync_writes: maybe
tasks:
  - name: [a, b]
    module: m.wasm
    workers: four
    max_queued: 1.5
    inputs: in.ndjson
    output:
      names: counts
`,
			want: []string{
				`sync_writes: must be true or false, got "maybe"`,
				"tasks[0].name: must be a string, got a list",
				`tasks[0].workers: must be an integer, got "four"`,
				"tasks[0].max_queued: must be an integer, got number 1.5",
				`tasks[0].inputs: must be a list, got "in.ndjson"`,
				`tasks[0].output.names: must be a list, got "counts"`,
			},
		},
		{
			name: "not a mapping",
			yaml: "- a\n- b\n",
			want: []string{"(top level): must be a mapping of keys, got a list"},
		},
		{
			name: "tasks must be mappings",
			yaml: "tasks:\n  - just-a-string\n",
			want: []string{`tasks[0]: must be a mapping of keys, got "just-a-string"`},
		},
		{
			name: "guest config must be JSON-encodable",
			yaml: validTask + "    config:\n      ratio: .nan\n",
			want: []string{"tasks[0].config: cannot be passed to the guest as JSON"},
		},
		{
			name: "log settings",
			yaml: "log:\n  format: xml\n  level: loud\n" + validTask,
			want: []string{`log.format: "xml" is not one of text, json`, `log.level: "loud" is not one of`},
		},
		{
			name: "Validate problems",
			yaml: `
tasks:
  - name: bad name
    inputs:
      - type: file
`,
			want: []string{
				`tasks[0].name: "bad name" may hold only`,
				"tasks[0].module: is required",
				"tasks[0].inputs[0].path: is required",
			},
		},
		{
			name: "no tasks",
			yaml: "data_dir: x\n",
			want: []string{"tasks: at least one task is required"},
		},
		{
			name: "every problem at once",
			yaml: `
checkpoint_interval: 1x
extra: 1
tasks:
  - name: t
    inputs:
      - path: in.ndjson
        format: csv
        kye_field: user
`,
			want: []string{
				"checkpoint_interval:",
				"extra: unknown key",
				"tasks[0].inputs[0].kye_field: unknown key",
				"tasks[0].module: is required",
				`tasks[0].inputs[0].format: "csv" is not one of json, text`,
			},
		},
		{
			name: "max_line_bytes out of range",
			yaml: `
tasks:
  - name: t
    module: m.wasm
    inputs:
      - path: in.ndjson
        max_line_bytes: -1
      - path: in2.ndjson
        max_line_bytes: 67108865
      - type: kafka
        topics: [t]
        max_line_bytes: 1000
      - path: in3.ndjson
        continue: true
`,
			want: []string{
				"tasks[0].inputs[0].max_line_bytes: must be from 1 to 67108864 (64 MiB), got -1",
				"tasks[0].inputs[1].max_line_bytes: must be from 1 to 67108864 (64 MiB), got 67108865",
				"tasks[0].inputs[2].max_line_bytes: applies to file and stdin inputs, not kafka",
				"tasks[0].inputs[3].continue: applies to stdin inputs only",
			},
		},
		{
			name: "YAML syntax",
			yaml: "tasks: [\n",
			want: []string{"not valid YAML"},
		},
		{
			name: "duplicate key",
			yaml: "data_dir: a\ndata_dir: b\n" + validTask,
			want: []string{`"data_dir" already defined`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.yaml)
			for _, cmd := range []string{"run", "check"} {
				code, _, stderr := runCLI(t, cmd, "--config", path)
				if code != exitUsage {
					t.Errorf("%s: exit %d, want %d; stderr:\n%s", cmd, code, exitUsage, stderr)
				}
				if !strings.Contains(stderr, "invalid configuration in "+path) {
					t.Errorf("%s: stderr does not name the file:\n%s", cmd, stderr)
				}
				for _, want := range tc.want {
					if !strings.Contains(stderr, want) {
						t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, stderr)
					}
				}
			}
		})
	}
}

func TestCheckConfigErrorExitsTwo(t *testing.T) {
	path := writeConfig(t, "tasks: []\n")
	code, _, stderr := runCLI(t, "check", "-c", path)
	if code != exitUsage || !strings.Contains(stderr, "tasks: at least one task is required") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

func TestEnvErrorNamesItsSource(t *testing.T) {
	t.Setenv("WASMSTREAM_CHECKPOINT_INTERVAL", "often")
	code, _, stderr := runCLI(t, "run", "-c", writeConfig(t, validTask))
	want := `checkpoint_interval: "often" is not a duration (write e.g. "1s", "500ms", "2m") (from WASMSTREAM_CHECKPOINT_INTERVAL)`
	if code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr lacks %q:\n%s", code, want, stderr)
	}
}

func TestQuickFormErrorsNameFlags(t *testing.T) {
	code, _, stderr := runCLI(t, "run", "--module", "m.wasm", "--input", "in.ndjson", "--format", "csv", "--task", "a b",
		"--max-line-bytes", "-5")
	if code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
	for _, want := range []string{`--format: "csv" is not one of json, text`, `--task: "a b" may hold only`,
		"--max-line-bytes: must be from 1 to 67108864"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

// TestConfigErrorsHideSecrets: a secret written with the wrong type (an unquoted numeric
// token, a password as a list) is reported by key and type, never by value, by check and
// run alike, from the file and from the environment.
func TestConfigErrorsHideSecrets(t *testing.T) {
	secrets := []string{"918273645", "hunter2secret", "5550123"}
	yaml := validTask + `
admin:
  token: 918273645
kafka:
  sasl:
    mechanism: plain
    user: u
    password: [hunter2secret]
  tls:
    key_file: 5550123
`
	path := writeConfig(t, yaml)
	for _, cmd := range []string{"check", "run"} {
		code, stdout, stderr := runCLI(t, cmd, "-c", path)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d\n%s", cmd, code, exitUsage, stderr)
		}
		for _, want := range []string{
			"admin.token: must be a string, got a number (quote it)",
			"kafka.sasl.password: must be a string, got a list",
			"kafka.tls.key_file: must be a string, got a number",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", cmd, want, stderr)
			}
		}
		for _, s := range secrets {
			if strings.Contains(stdout+stderr, s) {
				t.Errorf("%s: output shows the secret %q:\n%s%s", cmd, s, stdout, stderr)
			}
		}
	}
}

func TestSecretKeys(t *testing.T) {
	var secret []string
	for _, k := range allKeys("", reflect.TypeFor[fileConfig]()) {
		if secretKey(k) {
			secret = append(secret, k)
		}
	}
	want := []string{"admin.read_token", "admin.token", "kafka.sasl.password"}
	if !slices.Equal(secret, want) {
		t.Errorf("secret keys %q, want %q", secret, want)
	}
	for _, k := range []string{"tasks[0].config.api_key", "x.client_secret", "tasks[2].grants.http.bearer_token", "db.passphrase"} {
		if !secretKey(k) {
			t.Errorf("%s is not taken for a secret", k)
		}
	}
	for _, k := range []string{"tasks[0].max_state_bytes_per_key", "tasks[1].inputs[0].key_field", "x.max_bytes_per_key"} {
		if secretKey(k) {
			t.Errorf("%s is taken for a secret", k)
		}
	}
}
