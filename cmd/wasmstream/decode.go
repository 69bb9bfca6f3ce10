package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmstream/wasmstream/host"
)

// The decoder turns a YAML document, as go.yaml.in/yaml/v3 decodes it into an any (maps,
// lists, strings, numbers, booleans, nil), into fileConfig. Its rules:
//
//   - A struct field's key is its yaml tag (`yaml:"data_dir"`); every exported field has one,
//     `yaml:"-"` for a field that is not a key (host.Config.Logger) and `yaml:",inline"` for
//     an embedded struct whose keys are flattened into the parent's. Keys are case-sensitive.
//   - A key that names no field is an error: "tasks[0].inputs[0].kye_field: unknown key (did
//     you mean key_field?)". Every problem is reported, each naming its key; the walk goes on.
//   - A field of type map[string]any is free-form (tasks[].config: the guest's own settings):
//     its keys are not checked, but it must be encodable as JSON.
//   - A null value leaves the field at its zero value, i.e. its default.
//   - Strings must be strings; numbers must be integers in range (a string of digits is
//     accepted too, since environment variables are strings); booleans are true/false;
//     durations are Go duration strings ("1s", "500ms", "2m"), a bare number other than 0 is
//     an error rather than nanoseconds.
//   - Errors never echo a value that may be a secret: a key that names one (see secretKey)
//     is described by its type only, and so is what a string key got instead of a string
//     (an unquoted token or password, "token: 1234", lands there whatever the key is named).
//
// No panics: every input yields a value or errors.

var (
	durationType = reflect.TypeFor[time.Duration]()
	freeMapType  = reflect.TypeFor[map[string]any]()
)

// decoder accumulates the problems of one document.
type decoder struct {
	errs []error
	// skip holds keys that are checked for being known but decoded elsewhere (the
	// overridable keys, which viper resolves).
	skip map[string]bool
	// seen, if non-nil, records every key met, list indexes written "[]" (tests use it).
	seen map[string]bool
}

// topLevel is the key errors about the document as a whole name.
const topLevel = "(top level)"

func (d *decoder) bad(key, format string, args ...any) {
	if key == "" {
		key = topLevel
	}
	d.errs = append(d.errs, &host.ConfigError{Key: key, Problem: fmt.Sprintf(format, args...)})
}

// field is a configuration key of a struct type.
type field struct {
	key   string
	index []int
}

// fieldsOf lists the configuration keys of struct type t, in field order. An exported field
// without a yaml tag is a programming error (TestConfigKeysTagged finds it first): it panics.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup("yaml")
		if !ok {
			panic("wasmstream: configuration field " + t.String() + "." + f.Name + " has no yaml tag")
		}
		name, opts, _ := strings.Cut(tag, ",")
		switch {
		case name == "-":
			continue
		case opts == "inline" && f.Anonymous && f.Type.Kind() == reflect.Struct:
			for _, sub := range fieldsOf(f.Type) {
				out = append(out, field{key: sub.key, index: append([]int{i}, sub.index...)})
			}
			continue
		case name == "":
			panic("wasmstream: configuration field " + t.String() + "." + f.Name + " has an empty yaml key")
		}
		out = append(out, field{key: name, index: []int{i}})
	}
	return out
}

// fieldByKey finds the field of struct value v a dotted key names.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	for part := range strings.SplitSeq(key, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		fields := fieldsOf(v.Type())
		i := slices.IndexFunc(fields, func(f field) bool { return f.key == part })
		if i < 0 {
			return reflect.Value{}, false
		}
		v = v.FieldByIndex(fields[i].index)
	}
	return v, true
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// structure decodes the mapping raw into the struct dst, reporting unknown keys.
func (d *decoder) structure(key string, raw any, dst reflect.Value) {
	m, ok := stringMap(raw)
	if !ok {
		d.bad(key, "must be a mapping of keys, got %s", shown(key, raw))
		return
	}
	fields := fieldsOf(dst.Type())
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report in a stable order
	for _, k := range keys {
		full := join(key, k)
		i := slices.IndexFunc(fields, func(f field) bool { return f.key == k })
		if i < 0 {
			d.bad(full, "unknown key%s", suggest(k, fields))
			continue
		}
		d.see(full)
		if d.skip[full] {
			continue
		}
		d.value(full, m[k], dst.FieldByIndex(fields[i].index))
	}
}

func (d *decoder) see(key string) {
	if d.seen == nil {
		return
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if key[i] == '[' {
			j := strings.IndexByte(key[i:], ']')
			b.WriteString("[]")
			i += j
			continue
		}
		b.WriteByte(key[i])
	}
	d.seen[b.String()] = true
}

// value decodes raw into dst, the field key names.
func (d *decoder) value(key string, raw any, dst reflect.Value) {
	if raw == nil {
		return
	}
	t := dst.Type()
	switch {
	case t == durationType:
		d.duration(key, raw, dst)
		return
	case t == freeMapType:
		d.freeMap(key, raw, dst)
		return
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			d.bad(key, "must be a string, got %s (quote it)", kind(raw))
			return
		}
		dst.SetString(s)
	case reflect.Bool:
		d.boolean(key, raw, dst)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.signed(key, raw, dst)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		d.unsigned(key, raw, dst)
	case reflect.Slice:
		d.list(key, raw, dst)
	case reflect.Struct:
		d.structure(key, raw, dst)
	case reflect.Map:
		d.mapping(key, raw, dst)
	default:
		// A field type this decoder does not know: TestEveryFieldIsDecodable catches it first.
		d.bad(key, "cannot be set from a configuration file (type %s)", t)
	}
}

// boolean decodes a bool: true or false, or a string strconv.ParseBool takes.
func (d *decoder) boolean(key string, raw any, dst reflect.Value) {
	switch b := raw.(type) {
	case bool:
		dst.SetBool(b)
	case string:
		v, err := strconv.ParseBool(b)
		if err != nil {
			d.bad(key, "must be true or false, got %s", shown(key, b))
			return
		}
		dst.SetBool(v)
	default:
		d.bad(key, "must be true or false, got %s", shown(key, raw))
	}
}

// signed decodes an integer into a signed field, within its range.
func (d *decoder) signed(key string, raw any, dst reflect.Value) {
	show := func(raw any) string { return shown(key, raw) }
	n, problem := integer(raw, show)
	if problem != "" {
		d.bad(key, "%s", problem)
		return
	}
	if dst.OverflowInt(n) {
		d.bad(key, "%s is out of range", strings.TrimPrefix(show(n), "number "))
		return
	}
	dst.SetInt(n)
}

// unsigned decodes a non-negative integer into an unsigned field, within its range.
func (d *decoder) unsigned(key string, raw any, dst reflect.Value) {
	show := func(raw any) string { return shown(key, raw) }
	n, problem := integer(raw, show)
	if problem != "" {
		d.bad(key, "%s", problem)
		return
	}
	if n < 0 {
		d.bad(key, "must not be negative, got %d", n)
		return
	}
	if dst.OverflowUint(uint64(n)) {
		d.bad(key, "%s is out of range", strings.TrimPrefix(show(n), "number "))
		return
	}
	dst.SetUint(uint64(n))
}

// list decodes a YAML sequence into a slice, each item named key[i].
func (d *decoder) list(key string, raw any, dst reflect.Value) {
	items, ok := raw.([]any)
	if !ok {
		d.bad(key, "must be a list, got %s", shown(key, raw))
		return
	}
	s := reflect.MakeSlice(dst.Type(), len(items), len(items))
	for i, item := range items {
		d.value(fmt.Sprintf("%s[%d]", key, i), item, s.Index(i))
	}
	dst.Set(s)
}

// mapping decodes a map with string keys whose values this decoder can decode (e.g.
// output.topics): its keys are data, not configuration keys.
func (d *decoder) mapping(key string, raw any, dst reflect.Value) {
	t := dst.Type()
	m, ok := stringMap(raw)
	if !ok || t.Key().Kind() != reflect.String {
		d.bad(key, "must be a mapping, got %s", shown(key, raw))
		return
	}
	out := reflect.MakeMapWithSize(t, len(m))
	for k, v := range m {
		ev := reflect.New(t.Elem()).Elem()
		d.value(key+"."+k, v, ev)
		out.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), ev)
	}
	dst.Set(out)
}

func (d *decoder) duration(key string, raw any, dst reflect.Value) {
	switch v := raw.(type) {
	case string:
		dur, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			d.bad(key, "%s is not a duration (write e.g. \"1s\", \"500ms\", \"2m\")", shown(key, v))
			return
		}
		dst.SetInt(int64(dur))
	default:
		if n, problem := integer(raw, describe); problem == "" && n == 0 {
			dst.SetInt(0)
			return
		}
		d.bad(key, "must be a duration with a unit, like \"1s\" or \"500ms\", got %s", shown(key, raw))
	}
}

func (d *decoder) freeMap(key string, raw any, dst reflect.Value) {
	if _, ok := stringMap(raw); !ok {
		d.bad(key, "must be a mapping, got %s", shown(key, raw))
		return
	}
	m, _ := jsonable(raw).(map[string]any)
	if _, err := json.Marshal(m); err != nil {
		d.bad(key, "cannot be passed to the guest as JSON: %v", err)
		return
	}
	dst.Set(reflect.ValueOf(m))
}

// jsonable converts the maps with non-string keys YAML may produce into map[string]any, so
// the value can be encoded as JSON.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jsonable(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[fmt.Sprint(k)] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonable(e)
		}
		return out
	}
	return v
}

func stringMap(raw any) (map[string]any, bool) {
	switch m := raw.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, v := range m {
			out[fmt.Sprint(k)] = v
		}
		return out, true
	}
	return nil, false
}

// integer reads an integer from a YAML number or a string of digits. problem is "" when it
// is one that fits an int64.
// show describes raw in the problem (describe, or shown for a key that may be a secret).
func integer(raw any, show func(any) string) (n int64, problem string) {
	switch v := raw.(type) {
	case int:
		return int64(v), ""
	case int64:
		return v, ""
	case uint64:
		if v > math.MaxInt64 {
			return 0, strings.TrimPrefix(show(v), "number ") + " is out of range"
		}
		return int64(v), ""
	case float64:
		switch {
		case v != math.Trunc(v): // also NaN and infinities
			return 0, "must be an integer, got " + show(raw)
		case v < -(1<<63) || v >= 1<<63:
			return 0, show(raw) + " is out of range"
		}
		return int64(v), ""
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch {
		case err == nil:
			return n, ""
		case errors.Is(err, strconv.ErrRange):
			return 0, show(v) + " is out of range"
		}
	}
	return 0, "must be an integer, got " + show(raw)
}

// shown describes the value key got, for error messages: describe, or only its kind when
// the key may hold a secret.
func shown(key string, raw any) string {
	if secretKey(key) {
		return kind(raw)
	}
	return describe(raw)
}

// secretWords are the words of a key that may hold a secret: admin.token,
// kafka.sasl.password, a token or password a guest is given, a private key.
var secretWords = []string{"token", "password", "passwd", "secret", "credential", "passphrase", "private", "apikey"}

// secretKey reports whether key may hold a secret: one of its parts contains a secretWords
// word, or is "key" or ends in "_key" (key_field, key_separator name a record's key).
func secretKey(key string) bool {
	for part := range strings.SplitSeq(strings.ToLower(key), ".") {
		if i := strings.IndexByte(part, '['); i >= 0 {
			part = part[:i]
		}
		// api_key, private_key: a secret; max_state_bytes_per_key: a limit per key.
		if part == "key" || strings.HasSuffix(part, "_key") && !strings.HasSuffix(part, "_per_key") {
			return true
		}
		compact := strings.ReplaceAll(part, "_", "")
		for _, w := range secretWords {
			if strings.Contains(compact, w) {
				return true
			}
		}
	}
	return false
}

// kind names the YAML type of a value without its value.
func kind(raw any) string {
	switch raw.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int, int64, uint64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", raw)
}

// describe names the YAML type of a value, and the value, for error messages.
func describe(raw any) string {
	switch v := raw.(type) {
	case string:
		return strconv.Quote(v)
	case bool:
		return "boolean " + strconv.FormatBool(v)
	case int, int64, uint64:
		return fmt.Sprintf("number %d", v)
	case float64:
		return "number " + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return kind(raw)
}

// suggest returns " (did you mean X?)" for the known key closest to an unknown one, if it is
// close enough to be a typo.
func suggest(k string, fields []field) string {
	best, bestDist := "", math.MaxInt
	for _, f := range fields {
		if dist := editDistance(strings.ToLower(k), f.key); dist < bestDist {
			best, bestDist = f.key, dist
		}
	}
	if best == "" || bestDist > max(2, len(k)/3) {
		return ""
	}
	return " (did you mean " + best + "?)"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt // not a typo of a key; and bounds the work on hostile input
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
