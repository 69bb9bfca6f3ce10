package sched

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/internal/scripttest"
)

// epoch is the scripts' time zero; times print as offsets from it.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func itemString[T any](it Item[T]) string {
	s := fmt.Sprintf("s%d/%s@%d", it.Stream, it.Key, it.Offset)
	if it.Size != 0 {
		s += fmt.Sprintf(":%d", it.Size)
	}
	return s
}

func batchString[T any](b Batch[T]) string {
	parts := make([]string, len(b.Items))
	for i, it := range b.Items {
		parts[i] = itemString(it)
	}
	return fmt.Sprintf("batch %d: %s", b.ID, strings.Join(parts, " "))
}

// scriptDriver interprets the scheduler scripts under testdata. Commands:
//
//	config [name=value...]       a fresh scheduler (names: batch-items key-items batches
//	                             stream-inflight high-items low-items high-bytes low-bytes key-depth)
//	add-stream <id>...           AddStream
//	remove <id>                  RemoveStream; prints the dropped items
//	push s<id> <key>@<offset>[:<size>]...
//	next [<n>]                   up to n batches (default 1), or "no batch"
//	complete <batch>...
//	retry <batch> [isolate]
//	delay s<id> <key> <duration> the key waits until now + duration
//	undelay s<id> <key>          Delay with the zero time
//	tick <duration>              advance the clock
//	drain                        next and complete until no batch forms; prints the batches
//	flow | wake | stats | idle <id>
//
// Errors print as "error: ...". The invariants are checked after every command.
type scriptDriver struct {
	t   *testing.T
	s   *Scheduler[struct{}]
	now time.Time
}

func (d *scriptDriver) do(cmd string, args []string) (out string) {
	var w strings.Builder
	defer func() {
		if d.s != nil {
			if err := d.s.checkInvariants(); err != nil {
				d.t.Errorf("after %s %v: %v", cmd, args, err)
			}
		}
		out = w.String()
	}()
	errf := func(err error) {
		if err != nil {
			fmt.Fprintf(&w, "error: %v\n", err)
		}
	}
	stream := func(a string) uint32 {
		n, err := strconv.ParseUint(strings.TrimPrefix(a, "s"), 10, 32)
		if err != nil {
			d.t.Fatalf("bad stream %q", a)
		}
		return uint32(n)
	}
	atoi := func(a string) int {
		n, err := strconv.Atoi(a)
		if err != nil {
			d.t.Fatalf("bad number %q", a)
		}
		return n
	}
	dur := func(a string) time.Duration {
		v, err := time.ParseDuration(a)
		if err != nil {
			d.t.Fatalf("bad duration %q", a)
		}
		return v
	}
	if d.s == nil && cmd != "config" {
		d.t.Fatalf("%s before config", cmd)
	}
	switch cmd {
	case "config":
		var c Config
		fields := map[string]*int{
			"batch-items": &c.MaxBatchItems, "key-items": &c.MaxKeyItems, "batches": &c.MaxBatches,
			"stream-inflight": &c.MaxStreamInFlight, "high-items": &c.HighItems, "low-items": &c.LowItems,
			"high-bytes": &c.HighBytes, "low-bytes": &c.LowBytes, "key-depth": &c.MaxKeyDepth,
		}
		for _, a := range args {
			name, v, _ := strings.Cut(a, "=")
			p := fields[name]
			if p == nil {
				d.t.Fatalf("unknown config %q", name)
			}
			*p = atoi(v)
		}
		s, err := New[struct{}](c)
		if err != nil {
			for _, l := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(&w, "error: %s\n", l)
			}
			d.s = nil
			return
		}
		d.s, d.now = s, epoch
	case "add-stream":
		for _, a := range args {
			d.s.AddStream(stream(a))
		}
	case "remove":
		dropped := d.s.RemoveStream(stream(args[0]))
		w.WriteString("dropped:")
		if len(dropped) == 0 {
			w.WriteString(" none")
		}
		for _, it := range dropped {
			w.WriteString(" " + itemString(it))
		}
		w.WriteString("\n")
	case "push":
		id := stream(args[0])
		for _, a := range args[1:] {
			k, rest, ok := strings.Cut(a, "@")
			if !ok {
				d.t.Fatalf("bad item %q", a)
			}
			off, size, _ := strings.Cut(rest, ":")
			it := Item[struct{}]{Stream: id, Key: k, Offset: int64(atoi(off))}
			if size != "" {
				it.Size = atoi(size)
			}
			errf(d.s.Push(it))
		}
	case "next":
		n := 1
		if len(args) > 0 {
			n = atoi(args[0])
		}
		for range n {
			b, ok := d.s.Next(d.now)
			if !ok {
				w.WriteString("no batch\n")
				break
			}
			w.WriteString(batchString(b) + "\n")
		}
	case "complete":
		for _, a := range args {
			errf(d.s.Complete(uint64(atoi(a))))
		}
	case "retry":
		errf(d.s.Retry(uint64(atoi(args[0])), len(args) > 1 && args[1] == "isolate"))
	case "delay":
		errf(d.s.Delay(stream(args[0]), args[1], d.now.Add(dur(args[2]))))
	case "undelay":
		errf(d.s.Delay(stream(args[0]), args[1], time.Time{}))
	case "tick":
		d.now = d.now.Add(dur(args[0]))
	case "drain":
		for {
			var ids []uint64
			for {
				b, ok := d.s.Next(d.now)
				if !ok {
					break
				}
				w.WriteString(batchString(b) + "\n")
				ids = append(ids, b.ID)
			}
			if len(ids) == 0 {
				break
			}
			for _, id := range ids {
				errf(d.s.Complete(id))
			}
		}
		if w.Len() == 0 {
			w.WriteString("no batch\n")
		}
	case "flow":
		changes := d.s.Flow()
		if len(changes) == 0 {
			w.WriteString("none\n")
		}
		for _, c := range changes {
			state := "resumed"
			if c.Paused {
				state = "paused"
			}
			fmt.Fprintf(&w, "s%d %s\n", c.Stream, state)
		}
	case "wake":
		if at, ok := d.s.NextWake(); ok {
			fmt.Fprintf(&w, "+%v\n", at.Sub(epoch))
		} else {
			w.WriteString("none\n")
		}
	case "stats":
		st := d.s.Stats()
		fmt.Fprintf(&w, "keys=%d ready=%d delayed=%d queued=%d/%dB inflight=%d/%d\n",
			st.Keys, st.ReadyKeys, st.DelayedKeys, st.QueuedItems, st.QueuedBytes, st.InFlightBatches, st.InFlightItems)
		for _, ss := range st.Streams {
			fmt.Fprintf(&w, "s%d: keys=%d queued=%d/%dB inflight=%d", ss.ID, ss.Keys, ss.QueuedItems, ss.QueuedBytes, ss.InFlightItems)
			if ss.Paused {
				w.WriteString(" paused")
			}
			w.WriteString("\n")
		}
	case "idle":
		fmt.Fprintf(&w, "%v\n", d.s.Idle(stream(args[0])))
	default:
		d.t.Fatalf("unknown command %q", cmd)
	}
	return
}

func TestScripts(t *testing.T) {
	scripttest.Run(t, func(t *testing.T) func(string, []string) string {
		d := &scriptDriver{t: t}
		return d.do
	})
}
