// Command conform is the Go implementation of the wasmstream conformance guest contract
// (conformance/README.md in the repository): each record's value is one command, run against the
// state of the record's key, whose result is emitted to output "result".
//
//	put <name> <value>      state put, emits "ok"
//	get <name>              emits the value, or "missing"
//	del <name>              state delete, emits "ok"
//	scan <prefix>           emits "name=value;name=value..." in ascending name order
//	many <n> <prefix>       puts <prefix>00000.. with values 0.., scans the prefix, emits "<count> <first> <last>"
//	big <n>                 puts "big" = n bytes of 'x', reads it back, emits its length
//	emit <out> <value> [h=v ...]  emits to <out> with those headers, nothing to "result"
//	config                  emits the task config
//	meta                    emits "<source> <partition> <offset> <timestamp>"
//	fail <msg>              the record fails with <msg>
//	foreign <key> <name>    state get on another key: "ok <value>", "ok missing" or the error's ABI name
//	emitdef <out> <value>   emits to <out> with the SDK's default timestamp (Emit), nothing to "result"
//	count <name> <n>        adds n to the typed Counter <name>, emits the new value
//	append <list> <item>    appends to the typed List[string] <list>, emits its items joined with ";"
//	mput <map> <k> <v>      puts k=v in the typed Map[string] <map>, emits "k=v;k=v..." in key order
//	json <object>           parses a flat JSON object, emits it rewritten by the SDK's JSON writer
//	                        (numbers as float64); a malformed object fails the record with "bad json"
//	timer <name> <at>       sets the event-time timer <name> of the record key at <at>, emits "ok"
//	late                    emits "late" if the record carries the late flag, "on time" if not
//
// A timer firing emits "fired <name> <time>" under its key, with the SDK's default timestamp.
//
// A record with a null value (a tombstone, ABI 0.5) is no command: it deletes every state entry
// of its key and emits a tombstone (EmitTombstone) to "result". An empty value is no tombstone.
//
// Anything else fails the record with "unknown command". A host error from any other SDK call
// fails the record with the error's ABI name (e.g. "ERR_TOO_LARGE").
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o conform.wasm .
package main

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	wasmstream "github.com/wasmstream/wasmstream/guest-sdk/go"
)

func main() {}

func init() {
	wasmstream.Handle(handle)
	wasmstream.HandleTimer(func(f *wasmstream.Firing) error {
		return hostErr(wasmstream.Emit(Output, f.Key(), []byte("fired "+f.Name()+" "+strconv.FormatInt(f.Time(), 10))))
	})
}

// Output is the output every command's result goes to.
const Output = "result"

// Limits of the numeric arguments.
const (
	maxMany = 99999
	maxBig  = 16 << 20
	maxAdd  = 999999999
	maxAt   = 999999999
)

var errBadNumber = errors.New("bad number")

// metric is the counter the metric command adds to (ABI 0.3).
var metric = wasmstream.NewMetricCounter("conform_metric", "contract", "conform")

// observed is the histogram the observe command observes into (ABI 0.3).
var observed = wasmstream.NewMetricHistogram("conform_observed", []float64{10, 100, 1000}, "contract", "conform")

func handle(r *wasmstream.Record) error {
	st := r.State()
	if r.ValueNull() {
		return tombstone(r, st)
	}
	cmd, args := cut(string(r.Value()))
	switch cmd {
	case "put":
		name, value := cut(args)
		if err := st.Put(name, []byte(value)); err != nil {
			return hostErr(err)
		}
		return result(r, "ok")
	case "get":
		v, found, err := st.Get(args)
		if err != nil {
			return hostErr(err)
		}
		if !found {
			return result(r, "missing")
		}
		return result(r, string(v))
	case "del":
		if err := st.Delete(args); err != nil {
			return hostErr(err)
		}
		return result(r, "ok")
	case "scan":
		var b strings.Builder
		err := st.Scan(args, func(name, value []byte) bool {
			if b.Len() > 0 {
				b.WriteByte(';')
			}
			b.Write(name)
			b.WriteByte('=')
			b.Write(value)
			return true
		})
		if err != nil {
			return hostErr(err)
		}
		return result(r, b.String())
	case "many":
		count, prefix := cut(args)
		n, ok := number(count, maxMany)
		if !ok {
			return errBadNumber
		}
		for i := 0; i < n; i++ {
			if err := st.Put(prefix+pad5(i), []byte(strconv.Itoa(i))); err != nil {
				return hostErr(err)
			}
		}
		seen, first, last := 0, "", ""
		err := st.Scan(prefix, func(name, _ []byte) bool {
			if seen == 0 {
				first = string(name)
			}
			last = string(name)
			seen++
			return true
		})
		if err != nil {
			return hostErr(err)
		}
		return result(r, strconv.Itoa(seen)+" "+first+" "+last)
	case "big":
		n, ok := number(args, maxBig)
		if !ok {
			return errBadNumber
		}
		if err := st.Put("big", bytes.Repeat([]byte{'x'}, n)); err != nil {
			return hostErr(err)
		}
		v, found, err := st.Get("big")
		if err != nil {
			return hostErr(err)
		}
		if !found {
			return result(r, "missing")
		}
		return result(r, strconv.Itoa(len(v)))
	case "emit":
		fields := strings.Split(args, " ")
		o := wasmstream.Output{Name: fields[0], Key: r.Key(), Timestamp: r.Timestamp()}
		if len(fields) > 1 {
			o.Value = []byte(fields[1])
		}
		for _, f := range fields[min(len(fields), 2):] {
			name, value, _ := strings.Cut(f, "=")
			o.Headers = append(o.Headers, wasmstream.Header{Name: []byte(name), Value: []byte(value)})
		}
		return hostErr(wasmstream.EmitWith(o))
	case "config":
		return result(r, string(wasmstream.Config()))
	case "meta":
		return result(r, r.Source()+" "+strconv.FormatUint(uint64(r.Partition()), 10)+" "+
			strconv.FormatInt(r.Offset(), 10)+" "+strconv.FormatInt(r.Timestamp(), 10))
	case "fail":
		return errors.New(args)
	case "pfail":
		return wasmstream.Permanent(errors.New(args))
	case "foreign":
		key, name := cut(args)
		v, found, err := wasmstream.StateOf([]byte(key)).Get(name)
		var he *wasmstream.HostError
		switch {
		case errors.As(err, &he):
			return result(r, he.Errno.String())
		case err != nil:
			return err
		case !found:
			return result(r, "ok missing")
		default:
			return result(r, "ok "+string(v))
		}
	case "emitdef":
		out, value := cut(args)
		return hostErr(wasmstream.Emit(out, r.Key(), []byte(value)))
	case "count":
		name, num := cut(args)
		d, ok := number(num, maxAdd)
		if !ok {
			return errBadNumber
		}
		n, err := wasmstream.Counter{Name: name}.Add(st, int64(d))
		if err != nil {
			return hostErr(err)
		}
		return result(r, strconv.FormatInt(n, 10))
	case "metric":
		d, ok := number(args, maxAdd)
		if !ok {
			return errBadNumber
		}
		if err := metric.Add(int64(d)); err != nil {
			return hostErr(err)
		}
		return result(r, "ok")
	case "observe":
		d, ok := number(args, maxAdd)
		if !ok {
			return errBadNumber
		}
		if err := observed.Observe(float64(d)); err != nil {
			return hostErr(err)
		}
		return result(r, "ok")
	case "append":
		name, item := cut(args)
		l := wasmstream.List[string]{Name: name, Codec: wasmstream.StringCodec}
		if err := l.Append(st, item); err != nil {
			return hostErr(err)
		}
		items, err := l.Items(st)
		if err != nil {
			return hostErr(err)
		}
		return result(r, strings.Join(items, ";"))
	case "mput":
		name, rest := cut(args)
		k, v := cut(rest)
		m := wasmstream.Map[string]{Name: name, Codec: wasmstream.StringCodec}
		if err := m.Put(st, k, v); err != nil {
			return hostErr(err)
		}
		var parts []string
		if err := m.Each(st, func(k, v string) bool {
			parts = append(parts, k+"="+v)
			return true
		}); err != nil {
			return hostErr(err)
		}
		return result(r, strings.Join(parts, ";"))
	case "json":
		o, err := wasmstream.ParseJSONObject([]byte(args))
		if err != nil {
			return errors.New("bad json")
		}
		var w wasmstream.JSONWriter
		for _, f := range o.Fields {
			switch f.Value.Kind {
			case wasmstream.JSONString:
				w.String(f.Name, f.Value.Str)
			case wasmstream.JSONNumber:
				x, _ := f.Value.Float()
				w.Float(f.Name, x)
			case wasmstream.JSONBool:
				w.Bool(f.Name, f.Value.Bool)
			default:
				w.Null(f.Name)
			}
		}
		return result(r, string(w.Bytes()))
	case "timer":
		name, num := cut(args)
		at, ok := number(num, maxAt)
		if !ok {
			return errBadNumber
		}
		if err := wasmstream.SetTimer(r.Key(), name, wasmstream.EventTime, int64(at), nil); err != nil {
			return hostErr(err)
		}
		return result(r, "ok")
	case "late":
		if r.Late() {
			return result(r, "late")
		}
		return result(r, "on time")
	default:
		return errors.New("unknown command")
	}
}

// result emits value to Output with the record's key and timestamp.
func result(r *wasmstream.Record, value string) error {
	return hostErr(wasmstream.EmitWith(wasmstream.Output{Name: Output, Key: r.Key(), Value: []byte(value),
		Timestamp: r.Timestamp()}))
}

// hostErr turns a host error into an error whose message is the code's ABI name, as the contract
// says; other errors (and nil) pass unchanged.
func hostErr(err error) error {
	var he *wasmstream.HostError
	if errors.As(err, &he) {
		return errors.New(he.Errno.String())
	}
	return err
}

// cut splits s at its first space; without a space the rest is empty.
func cut(s string) (before, after string) {
	before, after, _ = strings.Cut(s, " ")
	return before, after
}

// number parses one or more ASCII digits with a value of at most limit.
func number(s string, limit int) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n <= limit
}

// pad5 formats 0 <= i <= 99999 as exactly five decimal digits.
func pad5(i int) string {
	s := strconv.Itoa(i)
	return strings.Repeat("0", 5-len(s)) + s
}

// tombstone deletes every state entry of the record's key (listed first, then deleted: no write
// during a scan) and passes the tombstone on to the result output.
func tombstone(r *wasmstream.Record, st wasmstream.State) error {
	var names []string
	err := st.Scan("", func(name, _ []byte) bool {
		names = append(names, string(name))
		return true
	})
	if err != nil {
		return hostErr(err)
	}
	for _, name := range names {
		if err := st.Delete(name); err != nil {
			return hostErr(err)
		}
	}
	return hostErr(wasmstream.EmitTombstone(Output, r.Key()))
}
