package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/wasmstream/wasmstream/host"
)

// loadWith loads a configuration file with the run command's flags parsed from args.
func loadWith(t *testing.T, path string, args ...string) (settings, error) {
	t.Helper()
	var cf configFlags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	addConfigFlags(fs, &cf)
	if err := fs.Parse(append([]string{"--config", path}, args...)); err != nil {
		t.Fatal(err)
	}
	return cf.load(fs)
}

func mustLoad(t *testing.T, path string, args ...string) settings {
	t.Helper()
	s, err := loadWith(t, path, args...)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return s
}

func TestPrecedence(t *testing.T) {
	path := writeConfig(t, `
data_dir: from-file
checkpoint_interval: 3s
sync_writes: false
log:
  format: text
  level: warn
`+validTask)
	dir := filepath.Dir(path)

	t.Run("file", func(t *testing.T) {
		s := mustLoad(t, path)
		if got, want := s.Host.DataDir, filepath.Join(dir, "from-file"); got != want {
			t.Errorf("DataDir = %q, want %q", got, want)
		}
		if s.Host.CheckpointInterval != 3*time.Second || s.Host.SyncWrites || s.Log != (logConfig{"text", "warn"}) {
			t.Errorf("got %+v, log %+v", s.Host, s.Log)
		}
	})

	t.Run("env wins over file", func(t *testing.T) {
		t.Setenv("WASMSTREAM_DATA_DIR", "from-env")
		t.Setenv("WASMSTREAM_CHECKPOINT_INTERVAL", "250ms")
		t.Setenv("WASMSTREAM_SYNC_WRITES", "true")
		t.Setenv("WASMSTREAM_LOG_LEVEL", "debug")
		s := mustLoad(t, path)
		// Relative paths from the environment are relative to the current directory.
		if s.Host.DataDir != "from-env" || s.Host.CheckpointInterval != 250*time.Millisecond ||
			!s.Host.SyncWrites || s.Log.Level != "debug" || s.Log.Format != "text" {
			t.Errorf("got DataDir %q interval %v sync %v log %+v", s.Host.DataDir,
				s.Host.CheckpointInterval, s.Host.SyncWrites, s.Log)
		}
	})

	t.Run("flag wins over env", func(t *testing.T) {
		t.Setenv("WASMSTREAM_DATA_DIR", "from-env")
		t.Setenv("WASMSTREAM_CHECKPOINT_INTERVAL", "250ms")
		t.Setenv("WASMSTREAM_LOG_FORMAT", "text")
		s := mustLoad(t, path, "--data-dir", "from-flag", "--checkpoint-interval", "2m",
			"--log-format", "json", "--sync-writes")
		if s.Host.DataDir != "from-flag" || s.Host.CheckpointInterval != 2*time.Minute ||
			!s.Host.SyncWrites || s.Log.Format != "json" {
			t.Errorf("got DataDir %q interval %v sync %v log %+v", s.Host.DataDir,
				s.Host.CheckpointInterval, s.Host.SyncWrites, s.Log)
		}
	})

	t.Run("empty env is ignored", func(t *testing.T) {
		t.Setenv("WASMSTREAM_DATA_DIR", "")
		s := mustLoad(t, path)
		if got, want := s.Host.DataDir, filepath.Join(dir, "from-file"); got != want {
			t.Errorf("DataDir = %q, want %q", got, want)
		}
	})

	t.Run("env overrides a bad file value", func(t *testing.T) {
		bad := writeConfig(t, "checkpoint_interval: soon\n"+validTask)
		t.Setenv("WASMSTREAM_CHECKPOINT_INTERVAL", "1s")
		if s := mustLoad(t, bad); s.Host.CheckpointInterval != time.Second {
			t.Errorf("CheckpointInterval = %v", s.Host.CheckpointInterval)
		}
	})
}

func TestRelativePaths(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ws.yaml")
	abs := filepath.Join(root, "abs", "in.ndjson")
	yaml := `
cache_dir: cache
tasks:
  - name: t
    module: mods/t.wasm
    inputs:
      - path: in/a.ndjson
      - path: ` + abs + `
      - type: stdin
    output:
      type: file
      path: out/t.ndjson
    dead_letter:
      path: dl.ndjson
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	s := mustLoad(t, path)
	tk := s.Host.Tasks[0]
	for _, c := range []struct{ got, want string }{
		{s.Host.DataDir, filepath.Join(dir, "data")}, // the default, next to the file
		{s.Host.CacheDir, filepath.Join(dir, "cache")},
		{tk.Module, filepath.Join(dir, "mods/t.wasm")},
		{tk.Inputs[0].Path, filepath.Join(dir, "in/a.ndjson")},
		{tk.Inputs[1].Path, abs},
		{tk.Inputs[2].Path, ""},
		{tk.Output.Path, filepath.Join(dir, "out/t.ndjson")},
		{tk.DeadLetter.Path, filepath.Join(dir, "dl.ndjson")},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}

	// "-" disables the cache and is not a path; flags are relative to the current directory.
	s = mustLoad(t, writeConfig(t, "cache_dir: \"-\"\n"+validTask), "--data-dir", "rel")
	if s.Host.CacheDir != "-" || s.Host.DataDir != "rel" {
		t.Errorf("CacheDir %q DataDir %q", s.Host.CacheDir, s.Host.DataDir)
	}
}

func TestGuestConfigIsFreeForm(t *testing.T) {
	s := mustLoad(t, writeConfig(t, validTask+`
    config:
      min_len: 2
      camelCase: true
      Nested: {Deep: [1, "two", {Three: 3}]}
      7: seven
`))
	got, err := json.Marshal(s.Host.Tasks[0].Config)
	if err != nil {
		t.Fatal(err)
	}
	// Keys keep their case (viper would lower-case them) and are not checked.
	want := `{"7":"seven","Nested":{"Deep":[1,"two",{"Three":3}]},"camelCase":true,"min_len":2}`
	if string(got) != want {
		t.Errorf("config = %s, want %s", got, want)
	}
}

func TestNullKeepsDefault(t *testing.T) {
	s := mustLoad(t, writeConfig(t, "data_dir:\ncheckpoint_interval: ~\n"+validTask+"    workers:\n    retry: {backoff: 0}\n"))
	if s.Host.CheckpointInterval != 0 || s.Host.Tasks[0].Workers != 0 || s.Host.Tasks[0].Retry.Backoff != 0 {
		t.Errorf("got %+v", s.Host)
	}
}

func TestQuickForm(t *testing.T) {
	var cf configFlags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	addConfigFlags(fs, &cf)
	err := fs.Parse([]string{"--module", "dir/word count.wasm", "--input", "a.ndjson", "--input", "-",
		"--key-field", "user", "--value-field", "text", "--timestamp-field", "ts", "--output", "out.ndjson",
		"--data-dir", "d"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cf.load(fs)
	if err != nil {
		t.Fatal(err)
	}
	want := host.TaskConfig{
		Name:   "word-count",
		Module: "dir/word count.wasm",
		Inputs: []host.InputConfig{
			{Path: "a.ndjson", KeyField: "user", ValueField: "text", TimestampField: "ts"},
			{Type: "stdin", KeyField: "user", ValueField: "text", TimestampField: "ts"},
		},
		Output: host.OutputConfig{Type: "file", Path: "out.ndjson"},
	}
	if len(s.Host.Tasks) != 1 || !reflect.DeepEqual(s.Host.Tasks[0], want) {
		t.Errorf("task = %+v\nwant   %+v", s.Host.Tasks, want)
	}
	if s.Host.DataDir != "d" {
		t.Errorf("DataDir = %q", s.Host.DataDir)
	}
}

func TestTaskName(t *testing.T) {
	for in, want := range map[string]string{
		"wordcount.wasm":       "wordcount",
		"/a/b/log-parse.wasm":  "log-parse",
		"x/y z+1.wasm":         "y-z-1",
		"v1.2/mod.v2.wasm":     "mod.v2",
		".wasm":                "task",
		"caf\u00e9.wasm":       "caf-",
		"no-extension":         "no-extension",
		"with_underscore.wasm": "with_underscore",
	} {
		if got := taskName(in); got != want {
			t.Errorf("taskName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConfigKeysTagged walks fileConfig: every exported field names its key with a yaml tag
// (lower-case snake_case, unique in its struct), or is "-" — which fields of function, pointer
// and interface type must be, since they cannot come from a file. Keys never derive from Go
// names, so renaming a field cannot rename a key.
func TestConfigKeysTagged(t *testing.T) {
	keyRE := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map || typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() || seen[typ] {
			return
		}
		seen[typ] = true
		keys := map[string]string{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue
			}
			tag, ok := f.Tag.Lookup("yaml")
			if !ok {
				t.Errorf("%s.%s has no yaml tag", typ, f.Name)
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			switch f.Type.Kind() {
			case reflect.Func, reflect.Pointer, reflect.Interface, reflect.Chan:
				if name != "-" {
					t.Errorf("%s.%s (%s) cannot be configured: want yaml:\"-\", got %q", typ, f.Name, f.Type, tag)
				}
				continue
			}
			switch {
			case name == "-":
				continue
			case f.Anonymous && opts == "inline":
				walk(f.Type)
				continue
			case !keyRE.MatchString(name):
				t.Errorf("%s.%s: key %q is not lower-case snake_case", typ, f.Name, name)
			case keys[name] != "":
				t.Errorf("%s: fields %s and %s share the key %q", typ, keys[name], f.Name, name)
			}
			keys[name] = f.Name
			walk(f.Type)
		}
	}
	walk(reflect.TypeFor[fileConfig]())
	if len(seen) < 10 {
		t.Fatalf("walked only %d struct types", len(seen))
	}
}

// TestEveryFieldIsDecodable walks fileConfig: every configuration key's type must be one the
// decoder handles, so a field added to host.Config is either decodable or noticed here.
func TestEveryFieldIsDecodable(t *testing.T) {
	var walk func(key string, typ reflect.Type)
	walk = func(key string, typ reflect.Type) {
		switch {
		case typ == durationType, typ == freeMapType:
			return
		}
		switch typ.Kind() {
		case reflect.String, reflect.Bool,
			reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		case reflect.Slice:
			walk(key+"[]", typ.Elem())
		case reflect.Struct:
			for _, f := range fieldsOf(typ) {
				walk(join(key, f.key), typ.FieldByIndex(f.index).Type)
			}
		case reflect.Map:
			if typ.Key().Kind() != reflect.String {
				t.Errorf("%s: the configuration decoder cannot decode a %s", key, typ)
				return
			}
			walk(key+".*", typ.Elem())
		default:
			t.Errorf("%s: the configuration decoder cannot decode a %s", key, typ)
		}
	}
	walk("", reflect.TypeFor[fileConfig]())
}

func TestConfigErrorsAreTyped(t *testing.T) {
	_, err := loadWith(t, writeConfig(t, "bogus: 1\n"+validTask))
	var ce *host.ConfigError
	if !errors.As(err, &ce) || ce.Key != "bogus" {
		t.Errorf("error %v: want a *host.ConfigError for key bogus", err)
	}
}

// FuzzLoadConfig feeds arbitrary bytes to the loader: it must never panic, and must return
// either errors or a configuration that passes host.Config.Validate.
func FuzzLoadConfig(f *testing.F) {
	// The example without its comments: the fuzzer stalls on the 6 KB original.
	if b, err := os.ReadFile(examplePath); err == nil {
		var lines []string
		for line := range strings.Lines(string(b)) {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				lines = append(lines, line)
			}
		}
		f.Add([]byte(strings.Join(lines, "")))
	}
	for _, s := range []string{
		validTask,
		"",
		"null",
		"- a",
		"data_dir: {a: 1}",
		"log: json",
		"log:\n  format: [1]",
		"checkpoint_interval: 9999999999999999999h",
		"tasks: [{name: t, module: m, inputs: [{path: p}], max_memory_pages: 1e300}]",
		"tasks: [{config: {a: .inf}}]",
		"a.b: 1\n\"log.format\": x",
		"anchors: &a {x: 1}\ntasks:\n  - <<: *a\n",
		"? [a, b]\n: c",
		"1: 2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := loadConfig(data, "dir", nil)
		if err != nil {
			var ce *configErrors
			if !errors.As(err, &ce) || len(ce.errs) == 0 {
				t.Fatalf("error %v is not a list of configuration problems", err)
			}
			return
		}
		if err := validate(s, nil, nil); err != nil {
			var ce *configErrors
			if !errors.As(err, &ce) {
				t.Fatalf("validate error %v is not a list of configuration problems", err)
			}
			return
		}
		if strings.TrimSpace(s.Host.DataDir) == "" {
			t.Fatalf("valid configuration without a data directory")
		}
	})
}

// A WASMSTREAM_ variable that sets nothing, a misspelt override or a key only the file sets, is
// named (run and check log a warning for each): it was ignored without a word. The overrides and
// the tools' own variables are not.
func TestUnknownEnvNamed(t *testing.T) {
	got := unknownEnv([]string{
		"WASMSTREAM_CHECKPOINTINTERVAL=1s", "WASMSTREAM_CHECKPOINT_INTERVAL=1s", "WASMSTREAM_KAFKA_BROKERS=b:9092",
		"WASMSTREAM_ADMIN_READ_TOKEN=x", "WASMSTREAM_TEST_LONG=1", "HOME=/", "XWASMSTREAM_DATA_DIR=d",
	})
	if want := []string{"WASMSTREAM_CHECKPOINTINTERVAL", "WASMSTREAM_KAFKA_BROKERS"}; !slices.Equal(got, want) {
		t.Fatalf("unknownEnv = %v; want %v", got, want)
	}
}

// A configuration indented with a tab (YAML refuses tabs) says so, with the line: before, only
// YAML's "found character that cannot start any token".
func TestTabIndentNamed(t *testing.T) {
	_, err := loadConfig([]byte("tasks:\n  - name: a\n\t  module: a.wasm\n"), "", nil)
	if err == nil || !strings.Contains(err.Error(), "line 3 is indented with a tab") {
		t.Fatalf("loadConfig with a tab: %v; want the line named", err)
	}
	if tabIndented([]byte("a: 1\nb: \"x\ty\"\n")) != 0 {
		t.Error("a tab inside a value is not indentation")
	}
}
