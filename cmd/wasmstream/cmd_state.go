package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host"
)

// stateHelp is state's long help.
const stateHelp = `State reads the state store of a stopped host (a running host holds it locked) and prints
the state of one task, or without --task the names of the tasks that have state. With
--admin-addr it asks a running host instead, through its admin API (GET /v1/tasks/<task>/state,
which admin.read_token, passed as --admin-token, may read): each key's state then includes every
completed guest call, not only the last checkpoint, and is read between two calls on the key. In a
group of hosts any one of them answers for every key (it asks the owners of the partitions). A store left
by a crash is read too (its log's torn tail is cut first, as the next run would); a damaged
store is refused with exit status 1 and nothing printed.

The data directory is --data-dir, else WASMSTREAM_DATA_DIR, else the data_dir of the
configuration file (--config, or ` + defaultConfigFile + ` if it exists), else "` + defaultDataDir + `".

Text output is one line per entry, tab-separated:

  <key>\t<name>\t<value>

where each column shows printable UTF-8 as is, a backslash as \\, and every other byte or
character as the Go escape strconv.Quote would use (\t, \n, \x00, \u200b, ...), without
quotes. Columns therefore never hold a tab or a newline. --key and --prefix accept the same
escapes, so a key can be copied from the output.

JSON output is one object per line:

  {"stream":"file:input0/0","key":"alice","name":"count","value":"3"}

with key, name and value as JSON strings when they are valid UTF-8, and otherwise as
key_base64, name_base64 or value_base64 in standard base64.

--decode NAME=TYPE (repeatable) shows the values of the state names NAME matches (a
path.Match pattern: seen, 'cards/*' for a Map's entries, 'items/*' for a List's items) as the
SDKs' typed state writes them: i64, u64, f64 (8 bytes little-endian), bool (1 byte) or string.
The text output shows the decoded value instead of the bytes, the JSON output adds it as
"decoded"; a value without that type's layout is shown as bytes.`

// stateOptions are state's flags.
type stateOptions struct {
	file, task, key, prefix, format string
	decodes                         []string
}

func newStateCommand(stdout io.Writer) *cobra.Command {
	var o stateOptions
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Print the state of a stopped host, or of a running one through its admin API",
		Long:  stateHelp,
		Example: `  wasmstream state
  wasmstream state --task wordcount
  wasmstream state --task wordcount --key alice --format json
  wasmstream state --task wordcount --prefix 'user\x00' --data-dir state
  wasmstream state --task wordcount --key alice --admin-addr :7070 --admin-token "$READ_TOKEN"
  wasmstream state --task mytask --key alice --decode seen=i64 --decode 'cards/*=i64'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, stdout) },
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *stateOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.file, "config", "c", "", "configuration file to take data_dir from (default "+defaultConfigFile+" if it exists)")
	fs.String("data-dir", "", "the host's data directory (env WASMSTREAM_DATA_DIR)")
	fs.StringVar(&o.task, "task", "", "the task whose state to print; without it, list the tasks that have state")
	fs.StringVar(&o.key, "key", "", "print only this key")
	fs.StringVar(&o.prefix, "prefix", "", "print only the keys starting with this prefix")
	fs.StringVar(&o.format, "format", "text", "output format: text or json")
	fs.StringArrayVar(&o.decodes, "decode", nil, "show the values of the state names matching NAME as TYPE (i64, u64, f64, bool, string), e.g. seen=i64 or 'cards/*=i64' (repeatable)")
	fs.String("admin-addr", "", "ask the running host at this admin API address instead of reading a stopped host's store")
	fs.String("admin-token", "", "the admin API's bearer token, or its read-only token (env WASMSTREAM_ADMIN_TOKEN)")
}

// run checks the flags and prints the state, of a running host (--admin-addr) or of a stopped
// host's store.
func (o *stateOptions) run(cmd *cobra.Command, stdout io.Writer) error {
	if o.format != "text" && o.format != "json" {
		return usageError("--format must be text or json, got %q", o.format)
	}
	if o.key != "" && o.prefix != "" {
		return usageError("--key and --prefix do not go together")
	}
	if o.task == "" && (o.key != "" || o.prefix != "") {
		return usageError("--key and --prefix need --task")
	}
	match, exact := o.prefix, false
	if o.key != "" {
		match, exact = o.key, true
	}
	dec, err := parseStateDecoder(o.decodes)
	if err != nil {
		return usageError("%v", err)
	}
	want, err := unescape(match)
	if err != nil {
		return usageError("--key/--prefix %q: %v", match, err)
	}
	if f := cmd.Flags().Lookup("admin-addr"); f.Changed {
		af := adminFlags{config: o.file}
		c, err := af.client(cmd.Flags(), false)
		if err != nil {
			return err
		}
		return printStateOnline(cmd.Context(), stdout, c, o.task, want, exact, o.format, dec)
	}
	dataDir, err := offlineDataDir(cmd, o.file)
	if err != nil {
		return err
	}
	return printState(stdout, dataDir, o.task, want, exact, o.format, dec)
}

func printState(stdout io.Writer, dataDir, task string, match []byte, exact bool, format string, dec stateDecoder) (err error) {
	r, err := host.OpenState(dataDir)
	if errors.Is(err, host.ErrNoState) {
		return failure(fmt.Errorf("no state store in data directory %s (has a host run with it?)", dataDir))
	}
	if err != nil {
		return failure(err)
	}
	defer func() {
		if cerr := r.Close(); cerr != nil && err == nil {
			err = failure(cerr)
		}
	}()
	tasks, err := r.Tasks()
	if err != nil {
		return failure(err)
	}
	w := bufio.NewWriter(stdout)
	if task == "" {
		for _, t := range tasks {
			fmt.Fprintln(w, t)
		}
		return flush(w)
	}
	if !slices.Contains(tasks, task) {
		have := "none has"
		if len(tasks) > 0 {
			have = "tasks with state: " + strings.Join(tasks, ", ")
		}
		return failure(fmt.Errorf("task %s has no state in %s (%s)", task, dataDir, have))
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var writeErr error
	err = r.Scan(task, match, exact, func(e host.StateEntry) bool {
		writeErr = writeStateEntry(w, enc, e, format, dec)
		return writeErr == nil
	})
	if err != nil {
		return failure(err)
	}
	if writeErr != nil {
		return failure(writeErr)
	}
	return flush(w)
}

// writeStateEntry writes one entry of state's output, as text to w or as JSON to enc, its value
// decoded by dec where a rule matches.
func writeStateEntry(w io.Writer, enc *json.Encoder, e host.StateEntry, format string, dec stateDecoder) error {
	decoded, ok := dec.Decode(e.Name, e.Value)
	if format == "json" {
		j := jsonEntry(e)
		if ok {
			j.Decoded = decodedJSON(decoded)
		}
		return enc.Encode(j)
	}
	value := escape(e.Value)
	if ok {
		value = decodedText(decoded)
	}
	key := escape(e.Key)
	if abi.IsNullKey(e.Key) {
		key = nullKeyText
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%s\n", key, escape(e.Name), value)
	return err
}

func flush(w *bufio.Writer) error {
	if err := w.Flush(); err != nil {
		return failure(err)
	}
	return nil
}

// stateJSON is a StateEntry as the JSON output spells it: each of key, name and value is
// set either as a string (valid UTF-8) or in base64.
type stateJSON struct {
	Stream    string  `json:"stream"`
	Key       *string `json:"key,omitempty"`
	KeyBase64 *string `json:"key_base64,omitempty"`
	// KeyNull: the null key (a Kafka record without a key), which key and key_base64 omit.
	KeyNull     bool    `json:"key_null,omitempty"`
	Name        *string `json:"name,omitempty"`
	NameBase64  *string `json:"name_base64,omitempty"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	// Decoded is the value as --decode's type: a JSON number, boolean or string.
	Decoded json.RawMessage `json:"decoded,omitempty"`
}

func jsonEntry(e host.StateEntry) stateJSON {
	j := stateJSON{Stream: e.Stream}
	put := func(text, b64 **string, b []byte) {
		var s string
		if utf8.Valid(b) {
			s = string(b)
			*text = &s
		} else {
			s = base64.StdEncoding.EncodeToString(b)
			*b64 = &s
		}
	}
	if abi.IsNullKey(e.Key) {
		j.KeyNull = true
	} else {
		put(&j.Key, &j.KeyBase64, e.Key)
	}
	put(&j.Name, &j.NameBase64, e.Name)
	put(&j.Value, &j.ValueBase64, e.Value)
	return j
}

// offlineDataDir is the data directory a command on a stopped host reads: the configuration
// file's data_dir (with the flags and environment over it), else the default.
func offlineDataDir(cmd *cobra.Command, file string) (string, error) {
	path, err := configPath(file, false)
	if err != nil {
		return "", err
	}
	s, err := loadFile(path, cmd.Flags(), false)
	if err != nil {
		return "", exitFor(err)
	}
	if s.Host.DataDir == "" {
		return defaultDataDir, nil
	}
	return s.Host.DataDir, nil
}
