package conformance_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmstream/wasmstream/internal/guestbuild"
)

var update = flag.Bool("update", false, "rewrite every case's expected files from the reference model")

// The host's limits the model applies (its defaults; the runner leaves them unchanged).
const (
	maxValueBytes = 1 << 20  // a state value or an emitted value
	maxNameBytes  = 64 << 10 // a state name or an output name
)

// expectation is what a case must produce, as the reference model computes it.
type expectation struct {
	Outputs string       // expected.ndjson: every record's outputs, records in input order
	State   string       // expected-state.txt
	Dead    []deadLetter // expected-deadletters.ndjson, by offset
	Metrics string       // expected-metrics.txt: the guest metrics after the run ("" when not checked)
}

// coverage is what the model saw a case exercise, for TestCasesCoverContract.
type coverage struct {
	commands    map[string]int
	maxScanPage int  // largest ScanPage one scan needs: 8 + Σ (8 + name + value)
	maxBig      int  // largest value a successful big read back
	headers     bool // an output with headers
	retried     bool // a dead letter after more than one attempt
	emptyKey    bool // a record with the empty key
	emptyValue  bool // a state value or an output value that is empty
	nonASCII    bool // a record key or value that is not ASCII
	interleaved bool // a key whose records are not consecutive
	tombstone   bool // a record with a null value that deleted state
}

// model runs a case through the reference model of its contract.
func model(c *testCase) (expectation, *coverage, error) {
	cov := &coverage{commands: map[string]int{}}
	var step func(state map[string]string, r inputRecord, emit func(output, value string, hs []header) error) error
	var step0 any // the conform model, for its metric and timers
	var cm *conformModel
	switch c.Spec.Contract {
	case contractConform:
		m := &conformModel{cfg: string(c.configBytes()), keys: map[string]bool{}, cov: cov}
		step0, cm = m, m
		for _, r := range c.Input {
			m.keys[r.Key] = true
		}
		step = m.record
	case contractWordcount:
		minLen, err := wordcountMinLen(c.Spec.Config)
		if err != nil {
			return expectation{}, nil, err
		}
		step = func(state map[string]string, r inputRecord, emit func(string, string, []header) error) error {
			return wordcount(minLen, state, r, emit)
		}
	}

	state := map[string]map[string]string{} // key → name → value
	var exp expectation
	last := map[string]int64{}
	// Event time (ABI.md §4.12, the host's default allowed lateness of 0): the watermark is the
	// highest timestamp read; a record read at a watermark above its timestamp is late, and a
	// key's event-time timer for T fires before the key's first record read at a watermark of T
	// or above (at the end of the input otherwise), timers due together in order of time and name.
	wm := int64(-1)
	timers := map[string]map[string]int64{} // key → name → time
	fire := func(key string, upTo int64) {
		type due struct {
			name string
			at   int64
		}
		var ds []due
		for n, at := range timers[key] {
			if at <= upTo {
				ds = append(ds, due{n, at})
			}
		}
		sort.Slice(ds, func(i, j int) bool {
			if ds[i].at != ds[j].at {
				return ds[i].at < ds[j].at
			}
			return ds[i].name < ds[j].name
		})
		for _, d := range ds {
			delete(timers[key], d.name)
			exp.Outputs += outputLine("result", key, "fired "+d.name+" "+strconv.FormatInt(d.at, 10), d.at, nil)
		}
	}
	for i, r := range c.Input {
		if wm >= 0 {
			fire(r.Key, wm)
		}
		if cm != nil {
			cm.late = wm >= 0 && r.Ts < wm
			cm.sets = cm.sets[:0]
		}
		wm = max(wm, r.Ts)
		if r.Key == "" {
			cov.emptyKey = true
		}
		if !isASCII(r.Key) || !isASCII(r.Value) {
			cov.nonASCII = true
		}
		if p, ok := last[r.Key]; ok && p != int64(i-1) {
			cov.interleaved = true
		}
		last[r.Key] = int64(i)

		// A record's writes and outputs take effect only if it succeeds.
		work := map[string]string{}
		for n, v := range state[r.Key] {
			work[n] = v
		}
		var outs []string
		if cm != nil {
			cm.emitNull = func(output string) { outs = append(outs, tombstoneLine(output, r.Key, r.Ts)) }
		}
		emit := func(output, value string, hs []header) error {
			if len(output) > maxNameBytes || len(value) > maxValueBytes {
				return errors.New("ERR_TOO_LARGE")
			}
			if value == "" {
				cov.emptyValue = true
			}
			if len(hs) > 0 {
				cov.headers = true
			}
			outs = append(outs, outputLine(output, r.Key, value, r.Ts, hs))
			return nil
		}
		if err := step(work, r, emit); err != nil {
			var bad caseError
			if errors.As(err, &bad) {
				return expectation{}, nil, fmt.Errorf("%s line %d: %s", fileInput, r.Offset+1, bad.msg)
			}
			// The host retries the record, then dead-letters it with the SDK's fail message; a
			// permanent failure after its first attempt.
			attempts := c.Spec.Retry.MaxAttempts
			var perm permanentError
			if errors.As(err, &perm) {
				attempts = 1
			}
			exp.Dead = append(exp.Dead, deadLetter{
				Input: inputName, Offset: r.Offset, Attempts: attempts,
				Error: "wasmstream: record " + inputName + "/0@" + strconv.FormatInt(r.Offset, 10) + ": " + err.Error(),
				Key:   r.Key, Record: r.Value,
			})
			if c.Spec.Retry.MaxAttempts > 1 {
				cov.retried = true
			}
			continue
		}
		if len(work) == 0 {
			delete(state, r.Key)
		} else {
			state[r.Key] = work
		}
		exp.Outputs += strings.Join(outs, "")
		if cm != nil {
			for _, s := range cm.sets {
				if timers[r.Key] == nil {
					timers[r.Key] = map[string]int64{}
				}
				timers[r.Key][s.name] = s.at
			}
		}
	}
	keys := make([]string, 0, len(timers))
	for k := range timers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fire(k, math.MaxInt64) // the end of the input: every timer fires
	}
	var lines []string
	for k, names := range state {
		for n, v := range names {
			if v == "" {
				cov.emptyValue = true
			}
			lines = append(lines, stateLine(k, n, v))
		}
	}
	exp.State = stateText(lines)
	if cm, ok := step0.(*conformModel); ok && cm.metricUsed {
		// A metric is not rolled back with a failed batch: a retried batch would count again.
		if len(exp.Dead) > 0 {
			return expectation{}, nil, errors.New("a case using metric may not have failing records: a retried batch counts again")
		}
		exp.Metrics = fmt.Sprintf("conform_metric{contract=%q} %d\n", "conform", cm.metric) +
			fmt.Sprintf("conform_observed{contract=%q} %s\n", "conform", histogramText(cm.observed[:], cm.obsCount, cm.obsSum))
	}
	return exp, cov, nil
}

// conformModel is the conform contract (README.md) on maps.
type conformModel struct {
	cfg  string
	keys map[string]bool // every key of the case's input
	cov  *coverage

	metric     int64 // the sum the metric commands added
	metricUsed bool
	observed   [4]uint64 // the observe commands' values per bucket: <= 10, 100, 1000, above
	obsCount   uint64
	obsSum     float64

	late     bool                // the current record carries the late flag
	sets     []timerSet          // the current record's timer sets, applied if it succeeds
	emitNull func(output string) // emits a tombstone for the current record's key
}

// timerSet is a timer command of a record: an event-time timer of the record key.
type timerSet struct {
	name string
	at   int64
}

var errBadNumber = errors.New("bad number")

// caseError is a case the model refuses: its expectations would not be deterministic.
type caseError struct{ msg string }

func (e caseError) Error() string { return e.msg }

// permanentError is the failure of pfail: the host does not retry it.
type permanentError string

func (e permanentError) Error() string { return string(e) }

func (m *conformModel) record(st map[string]string, r inputRecord, emit func(string, string, []header) error) error {
	result := func(v string) error { return emit("result", v, nil) }
	put := func(name, value string) error {
		if len(name) > maxNameBytes || len(value) > maxValueBytes {
			return errors.New("ERR_TOO_LARGE")
		}
		st[name] = value
		return nil
	}
	scan := func(prefix string) []string {
		var names []string
		size := 8
		for n, v := range st {
			if strings.HasPrefix(n, prefix) {
				names = append(names, n)
				size += 8 + len(n) + len(v)
			}
		}
		m.cov.maxScanPage = max(m.cov.maxScanPage, size)
		sort.Strings(names)
		return names
	}

	if r.Null {
		// A tombstone (ABI 0.5) is no command: it deletes every state entry of its key and emits
		// a tombstone to result.
		m.cov.tombstone = m.cov.tombstone || len(st) > 0
		clear(st)
		m.emitNull("result")
		return nil
	}
	cmd, args := cut(r.Value)
	m.cov.commands[cmd]++
	switch cmd {
	case "put":
		name, value := cut(args)
		if err := put(name, value); err != nil {
			return err
		}
		return result("ok")
	case "get":
		v, ok := st[args]
		if !ok {
			return result("missing")
		}
		return result(v)
	case "del":
		delete(st, args)
		return result("ok")
	case "scan":
		var parts []string
		for _, n := range scan(args) {
			parts = append(parts, n+"="+st[n])
		}
		return result(strings.Join(parts, ";"))
	case "many":
		count, prefix := cut(args)
		n, ok := number(count, 99999)
		if !ok {
			return errBadNumber
		}
		for i := 0; i < n; i++ {
			if err := put(fmt.Sprintf("%s%05d", prefix, i), strconv.Itoa(i)); err != nil {
				return err
			}
		}
		names := scan(prefix)
		first, last := "", ""
		if len(names) > 0 {
			first, last = names[0], names[len(names)-1]
		}
		return result(fmt.Sprintf("%d %s %s", len(names), first, last))
	case "big":
		n, ok := number(args, 16<<20)
		if !ok {
			return errBadNumber
		}
		if err := put("big", strings.Repeat("x", n)); err != nil {
			return err
		}
		m.cov.maxBig = max(m.cov.maxBig, n)
		return result(strconv.Itoa(n))
	case "emit":
		fields := strings.Split(args, " ")
		value := ""
		if len(fields) > 1 {
			value = fields[1]
		}
		var hs []header
		for _, f := range fields[min(len(fields), 2):] {
			n, v, _ := strings.Cut(f, "=")
			hs = append(hs, header{n, v})
		}
		return emit(fields[0], value, hs)
	case "timer":
		name, num := cut(args)
		at, ok := number(num, 999999999)
		if !ok {
			return errBadNumber
		}
		m.sets = append(m.sets, timerSet{name, int64(at)})
		return result("ok")
	case "late":
		if m.late {
			return result("late")
		}
		return result("on time")
	case "config":
		return result(m.cfg)
	case "meta":
		return result(fmt.Sprintf("%s 0 %d %d", inputName, r.Offset, r.Ts))
	case "fail":
		return errors.New(args)
	case "pfail":
		return permanentError(args)
	case "foreign":
		key, name := cut(args)
		if key != r.Key {
			if m.keys[key] {
				// Whether another key of the input shares the record's batch is up to the host.
				return caseError{fmt.Sprintf("foreign on key %q of the input: whether it shares the record's batch is up to the host", key)}
			}
			return result("ERR_KEY_NOT_IN_BATCH")
		}
		if v, ok := st[name]; ok {
			return result("ok " + v)
		}
		return result("ok missing")
	case "emitdef":
		out, value := cut(args)
		return emit(out, value, nil) // the SDKs' default timestamp is the record's
	case "metric":
		d, ok := number(args, 999999999)
		if !ok {
			return errBadNumber
		}
		m.metric += int64(d)
		m.metricUsed = true
		return result("ok")
	case "observe":
		d, ok := number(args, 999999999)
		if !ok {
			return errBadNumber
		}
		k := 0
		for k < 3 && float64(d) > []float64{10, 100, 1000}[k] {
			k++
		}
		m.observed[k]++
		m.obsCount++
		m.obsSum += float64(d)
		m.metricUsed = true
		return result("ok")
	case "count":
		name, num := cut(args)
		d, ok := number(num, 999999999)
		if !ok {
			return errBadNumber
		}
		n, err := m.u64(st, name, "counter")
		if err != nil {
			return err
		}
		n += uint64(d)
		st[name] = le64(n)
		return result(strconv.FormatInt(int64(n), 10))
	case "append":
		name, item := cut(args)
		n, err := m.u64(st, name, "list")
		if err != nil {
			return err
		}
		st[fmt.Sprintf("%s/%016x", name, n)] = item
		st[name] = le64(n + 1)
		var items []string
		for _, k := range scan(name + "/") {
			items = append(items, st[k])
		}
		return result(strings.Join(items, ";"))
	case "mput":
		name, rest := cut(args)
		k, v := cut(rest)
		st[name+"/"+k] = v
		var parts []string
		for _, n := range scan(name + "/") {
			parts = append(parts, n[len(name)+1:]+"="+st[n])
		}
		return result(strings.Join(parts, ";"))
	case "json":
		out, ok := rewriteJSON(args)
		if !ok {
			return errors.New("bad json")
		}
		return result(out)
	default:
		return errors.New("unknown command")
	}
}

// u64 reads a typed-state u64/i64 entry (8 bytes little-endian; missing is 0). Any other value
// makes the SDKs fail with messages of their own, which the cases do not pin.
func (m *conformModel) u64(st map[string]string, name, what string) (uint64, error) {
	v, ok := st[name]
	if !ok {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, caseError{fmt.Sprintf("%s %q holds a value that is not 8 bytes", what, name)}
	}
	return binary.LittleEndian.Uint64([]byte(v)), nil
}

func le64(n uint64) string { return string(binary.LittleEndian.AppendUint64(nil, n)) }

// rewriteJSON is the json command: s must be one flat JSON object of scalars; its fields are
// written back in order, numbers as float64 in encoding/json's form (±Inf as null), strings with
// the SDKs' escaping.
func rewriteJSON(s string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	var b strings.Builder
	b.WriteByte('{')
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return "", false
		}
		v, err := dec.Token()
		if err != nil {
			return "", false
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(jsonString(name.(string)) + ":")
		switch v := v.(type) {
		case json.Delim:
			return "", false
		case string:
			b.WriteString(jsonString(v))
		case json.Number:
			f, err := strconv.ParseFloat(string(v), 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return "", false
			}
			if math.IsInf(f, 0) {
				b.WriteString("null")
				break
			}
			num, _ := json.Marshal(f)
			b.Write(num)
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case nil:
			b.WriteString("null")
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false // anything after the object
	}
	b.WriteByte('}')
	return b.String(), true
}

// jsonString quotes s as the SDKs' JSON writers do: '"' and backslash escaped, newline, CR and tab
// as \n \r \t, other bytes below 0x20 and 0x7f as \u00XX, everything else as is.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// cut splits s at its first space; without a space the rest is empty.
func cut(s string) (string, string) {
	before, after, _ := strings.Cut(s, " ")
	return before, after
}

// number parses 1 to 9 ASCII digits with a value of at most limit.
func number(s string, limit int) (int, bool) {
	if len(s) == 0 || len(s) > 9 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, _ := strconv.Atoi(s)
	return n, n <= limit
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// wordcountMinLen reads min_len from a wordcount case's config (examples/wasm/wordcount/README.md).
func wordcountMinLen(cfg map[string]any) (int, error) {
	v, ok := cfg["min_len"]
	if !ok {
		return 1, nil
	}
	num, _ := v.(json.Number)
	n, err := strconv.ParseUint(string(num), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("min_len: %v", err)
	}
	return max(int(n), 1), nil
}

// wordcount is the wordcount contract (examples/wasm/wordcount/README.md) on maps: words are runs
// of ASCII letters and digits, lowercased; those of at least minLen bytes are counted in the
// key's state and "<word> <count>" goes to output "counts".
func wordcount(minLen int, st map[string]string, r inputRecord, emit func(string, string, []header) error) error {
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	text := r.Value
	for i := 0; i < len(text); {
		if !alnum(text[i]) {
			i++
			continue
		}
		start := i
		for i < len(text) && alnum(text[i]) {
			i++
		}
		if i-start < minLen {
			continue
		}
		word := strings.ToLower(text[start:i])
		n, _ := strconv.Atoi(st[word])
		st[word] = strconv.Itoa(n + 1)
		if err := emit("counts", word+" "+st[word], nil); err != nil {
			return err
		}
	}
	return nil
}

// writeOrCompare compares a case file with what the model says, or with -update writes it (an
// empty want removes an optional file).
func writeOrCompare(t *testing.T, path, want string, optional bool) {
	t.Helper()
	if *update {
		if want == "" && optional {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if os.IsNotExist(err) && optional && want == "" {
		return
	}
	if err != nil {
		t.Fatalf("%v (regenerate the expected files with go test ./conformance -run TestExpectedFiles -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s differs from the reference model's (first difference at line %d); regenerate with -update",
			path, firstDiffLine(string(got), want))
	}
}

func firstDiffLine(a, b string) int {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) && i < len(lb); i++ {
		if la[i] != lb[i] {
			return i + 1
		}
	}
	return min(len(la), len(lb)) + 1
}

// TestExpectedFiles checks that every case's expected files are what the reference model
// computes from its input; with -update it writes them. They never come from a guest run.
func TestExpectedFiles(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			exp, _, err := model(c)
			if err != nil {
				t.Fatal(err)
			}
			writeOrCompare(t, filepath.Join(c.Dir, fileExpected), exp.Outputs, false)
			writeOrCompare(t, filepath.Join(c.Dir, fileState), exp.State, false)
			var dead strings.Builder
			for _, d := range exp.Dead {
				dead.WriteString(d.line())
			}
			writeOrCompare(t, filepath.Join(c.Dir, fileDead), dead.String(), true)
			writeOrCompare(t, filepath.Join(c.Dir, fileMetrics), exp.Metrics, true)
		})
	}
}

// TestCasesCoverContract checks that the cases, together, exercise every command of the conform
// contract and the situations the suite promises to cover.
func TestCasesCoverContract(t *testing.T) {
	total := coverage{commands: map[string]int{}}
	wordcountCases := 0
	for _, c := range loadCases(t) {
		if c.Spec.Contract == contractWordcount {
			wordcountCases++
		}
		_, cov, err := model(c)
		if err != nil {
			t.Fatal(err)
		}
		for k, n := range cov.commands {
			total.commands[k] += n
		}
		total.maxScanPage = max(total.maxScanPage, cov.maxScanPage)
		total.maxBig = max(total.maxBig, cov.maxBig)
		total.headers = total.headers || cov.headers
		total.retried = total.retried || cov.retried
		total.emptyKey = total.emptyKey || cov.emptyKey
		total.emptyValue = total.emptyValue || cov.emptyValue
		total.nonASCII = total.nonASCII || cov.nonASCII
		total.interleaved = total.interleaved || cov.interleaved
		total.tombstone = total.tombstone || cov.tombstone
	}
	for _, cmd := range []string{"put", "get", "del", "scan", "many", "big", "emit", "config", "meta", "fail", "pfail", "foreign", "",
		"emitdef", "count", "append", "mput", "json", "metric", "observe", "timer", "late"} {
		if total.commands[cmd] == 0 {
			t.Errorf("no case uses command %q", cmd)
		}
	}
	// The SDKs' scan buffers start at 4 KiB: a scan of three pages or more crosses pages.
	if total.maxScanPage < 3*4096 {
		t.Errorf("the largest scan is %d bytes: not several 4 KiB pages", total.maxScanPage)
	}
	if total.maxBig < 200000 {
		t.Errorf("the largest big value is %d bytes", total.maxBig)
	}
	for what, ok := range map[string]bool{"output headers": total.headers, "retried failures": total.retried,
		"the empty key": total.emptyKey, "empty values": total.emptyValue, "non-ASCII text": total.nonASCII,
		"interleaved keys": total.interleaved, "a wordcount case": wordcountCases > 0,
		"a tombstone deleting state": total.tombstone} {
		if !ok {
			t.Errorf("no case covers %s", what)
		}
	}
}

// The wordcount case is the example's own sample: same outputs and state as its expected files.
func TestWordcountCaseIsTheExample(t *testing.T) {
	example := filepath.Join(guestbuild.Root(), "examples", "wasm", "wordcount")
	c := loadCase(t, filepath.Join(casesDir, "wordcount"))
	want, err := os.ReadFile(filepath.Join(example, "expected.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(c.Dir, fileExpected))
	if err != nil {
		t.Fatal(err)
	}
	g, err1 := byKey(got)
	w, err2 := byKey(want)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Error("the wordcount case's expected outputs differ from the example's expected.ndjson")
	}
	wantState, _ := os.ReadFile(filepath.Join(example, "expected-state.txt"))
	gotState, _ := os.ReadFile(filepath.Join(c.Dir, fileState))
	if !bytes.Equal(gotState, wantState) || len(wantState) == 0 {
		t.Error("the wordcount case's expected state differs from the example's expected-state.txt")
	}
	if fmt.Sprint(c.Spec.Config) != "map[min_len:2]" {
		t.Errorf("config %v; the example runs with {\"min_len\":2}", c.Spec.Config)
	}
}
