package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/wasmstream/wasmstream/host"
)

// defaultConfigFile is read by run and check when no --config is given and it exists in the
// current directory.
const defaultConfigFile = "wasmstream.yaml"

// defaultDataDir is host.Config's default DataDir. The CLI needs it to find the state of a
// stopped host, and to anchor it to the configuration file's directory.
const defaultDataDir = host.DefaultDataDir

// hostDefaults is a one-task, one-input host configuration with every default filled in by
// the host: where the flags' help finds the defaults it shows.
func hostDefaults() host.Config {
	return host.Config{Tasks: []host.TaskConfig{{Inputs: []host.InputConfig{{}}}}}.WithDefaults()
}

// fileConfig is the shape of a configuration file: host.Config's keys (their yaml tags), plus
// the CLI's own log and metrics sections.
type fileConfig struct {
	host.Config `yaml:",inline"`
	Log         logConfig     `yaml:"log"`
	Metrics     metricsConfig `yaml:"metrics"`
}

// logFormat is the CLI's log format (log.format).
type logFormat string

// Values of log.format.
const (
	logText logFormat = "text" // the default
	logJSON logFormat = "json"
)

// logConfig configures the CLI's logger (the "log" section).
type logConfig struct {
	// Format is "text" (default) or "json".
	Format logFormat `yaml:"format"`
	// Level is "debug", "info" (default), "warn" or "error".
	Level string `yaml:"level"`
}

// settings is a loaded configuration.
type settings struct {
	Host    host.Config
	Log     logConfig
	Metrics metricsConfig
	// File is the configuration file read, "" if none.
	File string
}

// override is a top-level key that environment variables and flags can set, through viper.
// Precedence: flag, then environment variable, then the configuration file.
type override struct {
	key  string // as in the file, nested keys joined by "."
	flag string // the flag that sets it, on the commands that have it
}

var overrides = []override{
	{key: "data_dir", flag: "data-dir"},
	{key: "cache_dir", flag: "cache-dir"},
	{key: "checkpoint_interval", flag: "checkpoint-interval"},
	{key: "sync_writes", flag: "sync-writes"},
	{key: "log.format", flag: "log-format"},
	{key: "log.level", flag: "log-level"},
	{key: "admin.addr", flag: "admin-addr"},
	{key: "admin.token", flag: "admin-token"},
	{key: "admin.read_token"}, // no flag: a secret in a command line is visible to every user
	{key: "metrics.addr", flag: "metrics-addr"},
}

// envName is the environment variable that overrides key: WASMSTREAM_ and the key in upper
// case, "." becoming "_" (log.level: WASMSTREAM_LOG_LEVEL).
func envName(key string) string {
	return "WASMSTREAM_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// toolEnv are the WASMSTREAM_ variables of the project's own tools and tests: not settings,
// but not mistakes either.
var toolEnv = map[string]bool{
	"WASMSTREAM_TEST_LONG": true, "WASMSTREAM_SDK": true, "WASMSTREAM_GUEST_DIR": true, "WASMSTREAM_TINYGO": true,
	"WASMSTREAM_DEBUG_LOGS": true, "WASMSTREAM_DEBUG_PANICS": true, "WASMSTREAM_DASHBOARD_SCREENSHOT": true,
}

// unknownEnv returns the variables of environ ("NAME=value") named WASMSTREAM_... that set
// nothing: a misspelt override (WASMSTREAM_CHECKPOINTINTERVAL) or a key the environment cannot
// set (WASMSTREAM_KAFKA_BROKERS) would otherwise be ignored without a word. Sorted.
func unknownEnv(environ []string) []string {
	known := map[string]bool{}
	for _, o := range overrides {
		known[envName(o.key)] = true
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "WASMSTREAM_") && !known[name] && !toolEnv[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// warnUnknownEnv logs each variable unknownEnv finds in the process's environment.
func warnUnknownEnv(log *slog.Logger) {
	names := unknownEnv(os.Environ())
	if len(names) == 0 {
		return
	}
	var settable []string
	for _, o := range overrides {
		settable = append(settable, envName(o.key))
	}
	for _, name := range names {
		log.Warn("environment variable ignored: it is not one of the settings the environment overrides (the other keys go in the configuration file)",
			"name", name, "settings", strings.Join(settable, " "))
	}
}

// tabIndented returns the number (from 1) of the first line of data indented with a tab, 0 if
// none: the usual cause of YAML's "found character that cannot start any token".
func tabIndented(data []byte) int {
	for i, line := range bytes.Split(data, []byte("\n")) {
		if indent := bytes.TrimLeft(line, " "); len(indent) > 0 && indent[0] == '\t' {
			return i + 1
		}
	}
	return 0
}

// configErrors lists every problem of a configuration. It maps to exit status 2.
type configErrors struct {
	file string
	errs []error
}

func (e *configErrors) title() string {
	if e.file == "" {
		return "invalid configuration"
	}
	return "invalid configuration in " + e.file
}

func (e *configErrors) Error() string {
	var b strings.Builder
	b.WriteString(e.title())
	for _, err := range e.errs {
		b.WriteString("\n  ")
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *configErrors) Unwrap() []error { return e.errs }

// loadConfig decodes a configuration file's contents (data may be empty: no file), applies
// the environment and flags overrides (flags may be nil), and resolves relative paths from
// the file against dir. It does not call host.Config.Validate; validate does.
//
// Unknown keys are detected by decoding the YAML document ourselves, case-preserved, against
// host.Config's fields (see decode.go): viper lower-cases every key, including those of the
// free-form tasks[].config maps that belong to the guest, so it only layers the overridable
// top-level keys.
func loadConfig(data []byte, dir string, flags *pflag.FlagSet) (settings, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		if line := tabIndented(data); line > 0 {
			err = fmt.Errorf("%w (line %d is indented with a tab: YAML indents with spaces)", err, line)
		}
		return settings{}, &configErrors{errs: []error{fmt.Errorf("not valid YAML: %w", err)}}
	}
	if n := yamlDocuments(data); n > 1 {
		// yaml.Unmarshal reads the first document alone: the tasks of the others were ignored
		// without a word.
		return settings{}, &configErrors{errs: []error{fmt.Errorf("holds %d YAML documents (separated by ---): a configuration is one document, and the ones after the first would be ignored; list every task under one tasks:", n)}}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	v, skip, err := overridesViper(data, doc, flags)
	if err != nil {
		return settings{}, &configErrors{errs: []error{err}}
	}
	var fc fileConfig
	d := &decoder{skip: skip}
	d.structure("", doc, reflect.ValueOf(&fc).Elem())
	fromFile := d.decodeOverrides(v, flags, &fc)
	d.checkLogAndMetrics(&fc)
	cfg := fc.Config
	if dir != "" {
		resolvePaths(&cfg, dir, fromFile)
	}
	s := settings{Host: cfg, Log: fc.Log, Metrics: fc.Metrics}
	if len(d.errs) > 0 {
		return s, &configErrors{errs: d.errs}
	}
	return s, nil
}

// yamlDocuments counts the documents of data that are not empty (a lone --- or a trailing one
// opens none).
func yamlDocuments(data []byte) int {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return n
		} else if err != nil {
			return n + 1 // a later document that does not parse is one more (the first parsed)
		}
		if doc != nil {
			n++
		}
	}
}

// overridesViper returns a viper that layers the overridable keys (overrides) from the flags,
// the environment and the file (data, decoded as doc), and the set of those keys, which the
// decoder of the file skips.
func overridesViper(data []byte, doc any, flags *pflag.FlagSet) (*viper.Viper, map[string]bool, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if _, ok := doc.(map[string]any); ok && len(data) > 0 {
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return nil, nil, err
		}
	}
	skip := map[string]bool{}
	for _, o := range overrides {
		skip[o.key] = true
		if err := v.BindEnv(o.key, envName(o.key)); err != nil {
			panic(err) // only fails when given no key
		}
		if f := lookupFlag(flags, o.flag); f != nil {
			if err := v.BindPFlag(o.key, f); err != nil {
				panic(err) // only fails on a nil flag
			}
		}
	}
	return v, skip, nil
}

// decodeOverrides decodes the overridable keys into fc: viper picks the flag, the environment or the
// file, in that order, and a problem names the flag or variable it came from. It returns the keys
// whose value came from the file.
func (d *decoder) decodeOverrides(v *viper.Viper, flags *pflag.FlagSet, fc *fileConfig) map[string]bool {
	fromFile := map[string]bool{}
	for _, o := range overrides {
		if !v.IsSet(o.key) {
			continue
		}
		source := ""
		if f := lookupFlag(flags, o.flag); f != nil && f.Changed {
			source = "--" + o.flag
		} else if os.Getenv(envName(o.key)) != "" { // viper ignores empty variables
			source = envName(o.key)
		} else {
			fromFile[o.key] = true
		}
		field, ok := fieldByKey(reflect.ValueOf(fc).Elem(), o.key)
		if !ok {
			panic("wasmstream: override of an unknown key " + o.key)
		}
		n := len(d.errs)
		d.value(o.key, v.Get(o.key), field)
		for _, err := range d.errs[n:] {
			if ce, ok := err.(*host.ConfigError); ok && source != "" {
				ce.Problem += " (from " + source + ")"
			}
		}
	}
	return fromFile
}

// checkLogAndMetrics checks the settings of the command itself: log.format, log.level and
// metrics.addr.
func (d *decoder) checkLogAndMetrics(fc *fileConfig) {
	switch fc.Log.Format {
	case "", logText, logJSON:
	default:
		d.bad("log.format", "%q is not one of text, json", fc.Log.Format)
	}
	if fc.Log.Level != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(fc.Log.Level)); err != nil {
			d.bad("log.level", "%q is not one of debug, info, warn, error", fc.Log.Level)
		}
	}
	if fc.Metrics.Addr != "" {
		if _, err := metricsListenAddr(fc.Metrics.Addr); err != nil {
			d.bad("metrics.addr", "%v; give host:port, or :port for the loopback interface", err)
		}
	}
}

// resolvePaths resolves cfg's relative paths against dir, a configuration file's directory: a
// file's relative paths are relative to its directory, and so is the default data directory;
// flags' and environment variables' are relative to the current directory (fromFile: the
// overridable keys the file set).
func resolvePaths(cfg *host.Config, dir string, fromFile map[string]bool) {
	switch {
	case cfg.DataDir == "":
		cfg.DataDir = filepath.Join(dir, defaultDataDir)
	case fromFile["data_dir"]:
		cfg.DataDir = resolve(dir, cfg.DataDir)
	}
	if fromFile["cache_dir"] && cfg.CacheDir != "-" {
		cfg.CacheDir = resolve(dir, cfg.CacheDir)
	}
	for i := range cfg.Tasks {
		t := &cfg.Tasks[i]
		t.Module = resolve(dir, t.Module)
		for j := range t.Inputs {
			t.Inputs[j].Path = resolve(dir, t.Inputs[j].Path)
		}
		t.Output.Path = resolve(dir, t.Output.Path)
		t.DeadLetter.Path = resolve(dir, t.DeadLetter.Path)
		for j := range t.Grants.Dirs {
			t.Grants.Dirs[j].Host = resolve(dir, t.Grants.Dirs[j].Host)
		}
	}
}

func lookupFlag(flags *pflag.FlagSet, name string) *pflag.Flag {
	if flags == nil {
		return nil
	}
	return flags.Lookup(name)
}

func resolve(dir, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// validate reports every problem of the loaded configuration s: loadErr, what loadConfig
// reported, and those host.Config.Validate finds, leaving out the latter when loadErr already
// names the same key (a value that failed to decode stays at its default, which Validate may
// complain about too). rename maps a key to how the user spelled it (nil: unchanged).
func validate(s settings, loadErr error, rename func(string) string) error {
	var errs []error
	var ce *configErrors
	if errors.As(loadErr, &ce) {
		for _, e := range ce.errs {
			var c *host.ConfigError
			if !errors.As(e, &c) || c.Key == topLevel {
				// The document as a whole is unusable: Validate would only add noise.
				ce.file = s.File
				return ce
			}
		}
		errs = append(errs, ce.errs...)
	} else if loadErr != nil {
		return loadErr
	}
	reported := func(key string) bool {
		for _, e := range errs {
			var c *host.ConfigError
			if errors.As(e, &c) && (related(c.Key, key) || related(key, c.Key)) {
				return true
			}
		}
		return false
	}
	if err := s.Host.Validate(); err != nil {
		for _, e := range unjoin(err) {
			var c *host.ConfigError
			if errors.As(e, &c) && reported(c.Key) {
				continue
			}
			errs = append(errs, e)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	if rename != nil {
		for i, e := range errs {
			var c *host.ConfigError
			if errors.As(e, &c) {
				errs[i] = &host.ConfigError{Key: rename(c.Key), Problem: c.Problem}
			}
		}
	}
	return &configErrors{file: s.File, errs: errs}
}

// related reports whether key is parent or parent's descendant.
func related(parent, key string) bool {
	if !strings.HasPrefix(key, parent) {
		return false
	}
	rest := key[len(parent):]
	return rest == "" || rest[0] == '.' || rest[0] == '['
}

// configFlags are the flags of the commands that load a configuration.
type configFlags struct {
	file string
	// embedded: the command runs the embedded Kafka broker (wasmstream dev), whatever the file says.
	embedded bool
	// The single-task form, without a configuration file.
	quick quickTask
}

// quickTask is a task given by flags: wasmstream run --module m.wasm --input in.ndjson.
type quickTask struct {
	name           string
	module         string
	inputs         []string
	output         string
	format         string
	keyField       string
	valueField     string
	timestampField string
	keySeparator   string
	maxLineBytes   int
	continueStdin  bool
	config         string // the guest's settings, a JSON object
}

// addConfigFlags defines the flags of run and check on fs.
func addConfigFlags(fs *pflag.FlagSet, cf *configFlags) {
	d := hostDefaults()
	fs.StringVarP(&cf.file, "config", "c", "", "configuration file (default "+defaultConfigFile+" if it exists)")
	fs.String("data-dir", "", "directory of the state store (default \""+defaultDataDir+"\"; env WASMSTREAM_DATA_DIR)")
	fs.String("cache-dir", "", "compilation cache directory, \"-\" to disable (default <data-dir>/cache; env WASMSTREAM_CACHE_DIR)")
	fs.Duration("checkpoint-interval", 0, "time between checkpoints (default "+d.CheckpointInterval.String()+"; env WASMSTREAM_CHECKPOINT_INTERVAL)")
	fs.Bool("sync-writes", false, "fsync at every checkpoint (env WASMSTREAM_SYNC_WRITES)")
	fs.String("log-format", "", "log format: text or json (default text; env WASMSTREAM_LOG_FORMAT)")
	fs.String("log-level", "", "log level: debug, info, warn or error (default info; env WASMSTREAM_LOG_LEVEL)")
	fs.String("admin-addr", "", "serve the admin API (deploy, rollback, status) on this host:port; a port alone is loopback (env WASMSTREAM_ADMIN_ADDR)")
	fs.String("admin-token", "", "the admin API's bearer token; required off loopback (env WASMSTREAM_ADMIN_TOKEN)")
	fs.String("metrics-addr", "", "also serve /metrics, /healthz and /readyz on this host:port, without the token; a port alone is loopback (env WASMSTREAM_METRICS_ADDR)")

	q := &cf.quick
	fs.StringVar(&q.module, "module", "", "run one task of this .wasm module, without a configuration file")
	fs.StringArrayVar(&q.inputs, "input", nil, "with --module: an input file, \"-\" for stdin (repeatable)")
	fs.StringVar(&q.output, "output", "", "with --module: the output file (default stdout)")
	fs.StringVar(&q.name, "task", "", "with --module: the task name (default the module's file name)")
	fs.StringVar(&q.format, "format", "", "with --module: the inputs' format, json or text (default json)")
	fs.StringVar(&q.keyField, "key-field", "", "with --module: the JSON field holding the record key")
	fs.StringVar(&q.valueField, "value-field", "", "with --module: the JSON field holding the value (default the whole line)")
	fs.StringVar(&q.timestampField, "timestamp-field", "", "with --module: the JSON field holding the event time in ms")
	fs.StringVar(&q.keySeparator, "key-separator", "", "with --module and --format text: splits a line into key and value")
	fs.IntVar(&q.maxLineBytes, "max-line-bytes", 0, "with --module: the longest input line accepted; longer ones go to the dead letters (default "+strconv.Itoa(d.Tasks[0].Inputs[0].MaxLineBytes)+")")
	fs.BoolVar(&q.continueStdin, "continue-stdin", false, "with --module and --input -: feed stdin to a data directory where an earlier run already read stdin, its lines counting after those")
	fs.StringVar(&q.config, "task-config", "", "with --module: the module's own settings, a JSON object (default {})")
}

// quickFlags are the flags that only make sense with --module.
var quickFlags = []string{"input", "output", "task", "format", "key-field", "value-field", "timestamp-field", "key-separator", "max-line-bytes", "continue-stdin", "task-config"}

// load loads the configuration of run and check: the configuration file (or the task given
// by --module), the environment, the flags; then validates it.
func (cf *configFlags) load(fs *pflag.FlagSet) (settings, error) {
	if cf.quick.module == "" {
		for _, name := range quickFlags {
			if fs.Changed(name) {
				return settings{}, usageError("--%s needs --module (or put the task in a configuration file)", name)
			}
		}
		path, err := configPath(cf.file, true)
		if err != nil {
			return settings{}, err
		}
		if !cf.embedded {
			return loadFile(path, fs, true)
		}
		s, err := loadFile(path, fs, false)
		s.Host.Kafka.Embedded.Enable = true
		return s, validate(s, err, nil)
	}
	if cf.file != "" {
		return settings{}, usageError("--module and --config do not go together: give the task in one or the other")
	}
	if len(cf.quick.inputs) == 0 {
		return settings{}, usageError("--module needs at least one --input (\"-\" for stdin)")
	}
	t, err := cf.quick.task()
	if err != nil {
		return settings{}, err
	}
	s, err := loadConfig(nil, "", fs)
	s.Host.Tasks = []host.TaskConfig{t}
	s.Host.Kafka.Embedded.Enable = s.Host.Kafka.Embedded.Enable || cf.embedded
	return s, validate(s, err, quickKey)
}

// configPath returns the configuration file to read: explicit if set, else the default file
// if it exists. With required, a missing file is an error; without it, "" means none.
func configPath(explicit string, required bool) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	if _, err := os.Stat(defaultConfigFile); err == nil {
		return defaultConfigFile, nil
	}
	if !required {
		return "", nil
	}
	return "", &exitError{
		code: exitUsage,
		err:  errors.New("no configuration: no --config given and no " + defaultConfigFile + " in the current directory"),
		hint: "pass --config FILE, create " + defaultConfigFile + " (see config.example.yaml), or give a single task with --module M.wasm --input IN.ndjson",
	}
}

// loadFile reads and loads the configuration file path ("" for none), validating it if asked.
func loadFile(path string, fs *pflag.FlagSet, check bool) (settings, error) {
	var data []byte
	dir := ""
	if path != "" {
		var err error
		data, err = os.ReadFile(path)
		if err != nil {
			return settings{}, &exitError{code: exitUsage, err: fmt.Errorf("configuration file: %w", err)}
		}
		dir = filepath.Dir(path)
	}
	s, err := loadConfig(data, dir, fs)
	s.File = path
	if check {
		return s, validate(s, err, nil)
	}
	var ce *configErrors
	if errors.As(err, &ce) {
		ce.file = path
	}
	return s, err
}

// task builds the TaskConfig of the single-task form.
func (q *quickTask) task() (host.TaskConfig, error) {
	name := q.name
	if name == "" {
		name = taskName(q.module)
	}
	t := host.TaskConfig{Name: name, Module: q.module}
	if q.config != "" {
		if err := json.Unmarshal([]byte(q.config), &t.Config); err != nil {
			return t, usageError("--task-config must be a JSON object: %v", err)
		}
	}
	for _, path := range q.inputs {
		in := host.InputConfig{
			Path:           path,
			Format:         host.Format(q.format),
			KeyField:       q.keyField,
			ValueField:     q.valueField,
			TimestampField: q.timestampField,
			KeySeparator:   q.keySeparator,
			MaxLineBytes:   q.maxLineBytes,
		}
		if path == "-" {
			in.Type, in.Path, in.Continue = "stdin", "", q.continueStdin
		}
		t.Inputs = append(t.Inputs, in)
	}
	if q.continueStdin && !slices.Contains(q.inputs, "-") {
		return t, usageError("--continue-stdin needs --input - (it is about standard input only)")
	}
	if q.output != "" && q.output != "-" {
		t.Output = host.OutputConfig{Type: "file", Path: q.output}
	}
	return t, nil
}

// taskName derives a task name from a module path: its base name without ".wasm", any
// character a task name may not hold replaced by '-'.
func taskName(module string) string {
	base := strings.TrimSuffix(filepath.Base(module), ".wasm")
	name := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '-'
	}, base)
	if name == "" || name == "." || name == ".." {
		return "task"
	}
	return name
}

// quickKey renames a configuration key of the single task given by flags to its flag.
func quickKey(key string) string {
	rest, ok := strings.CutPrefix(key, "tasks[0].")
	if !ok {
		return key
	}
	if i := strings.Index(rest, "]."); strings.HasPrefix(rest, "inputs[") && i > 0 {
		rest = "inputs." + rest[i+2:]
	}
	flags := map[string]string{
		"name":                   "--task",
		"module":                 "--module",
		"inputs":                 "--input",
		"inputs.path":            "--input",
		"inputs.name":            "--input",
		"inputs.format":          "--format",
		"inputs.key_field":       "--key-field",
		"inputs.value_field":     "--value-field",
		"inputs.timestamp_field": "--timestamp-field",
		"inputs.key_separator":   "--key-separator",
		"inputs.max_line_bytes":  "--max-line-bytes",
		"inputs.continue":        "--continue-stdin",
		"output.path":            "--output",
		"output.type":            "--output",
	}
	if f, ok := flags[rest]; ok {
		return f
	}
	return key
}

// newLogger returns the CLI's logger, writing to w.
func newLogger(w io.Writer, lc logConfig) *slog.Logger {
	var level slog.Level
	if lc.Level != "" {
		_ = level.UnmarshalText([]byte(lc.Level)) // loadConfig checked it
	}
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
