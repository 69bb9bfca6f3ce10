package task

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmstream/wasmstream/abi"
	"github.com/wasmstream/wasmstream/host/internal/kafka"
	"github.com/wasmstream/wasmstream/host/internal/modrt"
	"github.com/wasmstream/wasmstream/host/internal/sched"
	"github.com/wasmstream/wasmstream/host/internal/source"
	"github.com/wasmstream/wasmstream/internal/scripttest"
	"github.com/wasmstream/wasmstream/store"
)

// TestCore drives the loop's core (core.go) step by step with the scripts in testdata: no
// goroutine, no worker, no clock but the script's. The test plays the driver and the workers:
// it feeds events, runs each job's units on a scripted processor (through runUnit, as a worker
// does) and prints the actions the core asks for. Rewrite the expected outputs with
// go test -run TestCore ./host/internal/task -update.
//
// Commands (a record is <key>:<value>):
//
//	new [workers=N] [policy=key|partition] [attempts=N] [exhausted=deadletter|skip|halt]
//	    [batch=N] [high=N] [kafka]
//	                       a task named "core" with a file input "in" (empty: the script feeds
//	                       its records), or with kafka a Kafka input of topic "t" (no partition
//	                       until assign)
//	read <record>... [done]  a chunk of input "in"; done: the input's end
//	fetch p=N <record>...  a fetch of partition t/N
//	step                   one loop turn without an event: prints the jobs and actions, then
//	                       "done" or when to wake
//	done job=N [fail=msg] [timer=key:name:due]...
//	                       the workers ran job N (its units on the scripted processor, which
//	                       outputs "<key>=<value> n=<count>" per record and counts in state "n";
//	                       timer= also sets a processing-time timer), and the job comes back
//	clock ms=N             the clock moves to N ms (it starts at 1000)
//	checkpoint             the checkpoint interval elapsed: prints the committed positions
//	switch version=N       a deploy: version N becomes current
//	pause / resume
//	assign N[:committed]... / revoke N... / lost N...
//	                       a rebalance of partitions of topic "t"
//	state <key> [p=N]      the committed state n of the key in input "in" (or partition t/N)
func TestCore(t *testing.T) {
	scripttest.Run(t, func(t *testing.T) func(cmd string, args []string) string {
		var h *coreHarness
		return func(cmd string, args []string) string {
			c := parseCmd(cmd, args)
			if cmd == "new" {
				h = newCoreHarness(t, c)
				return ""
			}
			if h == nil {
				t.Fatalf("%s before new", cmd)
			}
			return h.run(t, c)
		}
	})
}

// coreCmd is a script command: its name=value arguments and the others, in order.
type coreCmd struct {
	name  string
	kv    [][2]string
	words []string
}

func parseCmd(name string, args []string) coreCmd {
	c := coreCmd{name: name}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			c.kv = append(c.kv, [2]string{k, v})
		} else {
			c.words = append(c.words, a)
		}
	}
	return c
}

// arg returns the value of the first argument named k.
func (c coreCmd) arg(k string) (string, bool) {
	for _, a := range c.kv {
		if a[0] == k {
			return a[1], true
		}
	}
	return "", false
}

// all returns the values of every argument named k.
func (c coreCmd) all(k string) []string {
	var vs []string
	for _, a := range c.kv {
		if a[0] == k {
			vs = append(vs, a[1])
		}
	}
	return vs
}

func (c coreCmd) has(word string) bool { return slices.Contains(c.words, word) }

// int returns the integer argument k; a missing or bad one fails the test.
func (c coreCmd) int(t *testing.T, k string) int64 {
	v, ok := c.arg(k)
	n, err := strconv.ParseInt(v, 10, 64)
	if !ok || err != nil {
		t.Fatalf("%s: want %s=<integer>", c.name, k)
	}
	return n
}

type coreHarness struct {
	t       *testing.T
	tk      *Task
	db      *store.DB
	clock   *fakeClock
	out     *memOut
	dl      *memDL
	printed int // outputs printed so far
	dlSeen  int
	next    map[uint32]int64        // next offset per stream
	replies []func() (string, bool) // reads of the reply channels of requests not yet answered
}

func newCoreHarness(t *testing.T, c coreCmd) *coreHarness {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	empty := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := &coreHarness{t: t, db: db, clock: &fakeClock{}, out: &memOut{}, dl: &memDL{}, next: map[uint32]int64{}}
	h.clock.set(1000) // the zero time is "never" to the task
	cfg := Config{
		Name: "core", Output: h.out, DeadLetter: h.dl, Store: db, Policy: PolicyKey, Workers: 2,
		MaxAttempts: 1, OnExhausted: "deadletter", Backoff: time.Second, MaxBackoff: time.Second,
		Checkpoint: time.Hour, Now: h.clock.Now, Version: 1,
	}
	cfg.Sched.MaxBatchItems = 8
	for _, a := range c.kv {
		switch a[0] {
		case "workers":
			cfg.Workers = int(c.int(t, a[0]))
		case "policy":
			cfg.Policy = a[1]
		case "attempts":
			cfg.MaxAttempts = int(c.int(t, a[0]))
		case "exhausted":
			cfg.OnExhausted = a[1]
		case "batch":
			cfg.Sched.MaxBatchItems = int(c.int(t, a[0]))
		case "high":
			cfg.Sched.HighItems = int(c.int(t, a[0]))
		default:
			t.Fatalf("new: unknown argument %s", a[0])
		}
	}
	if c.has("kafka") {
		cfg.Kafka = &KafkaInput{Name: "k", Topics: []string{"t"}, DrainTimeout: time.Minute}
	} else {
		cfg.Inputs = []Input{{Name: "in", Path: empty}}
	}
	tk, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.tk = tk
	if c.has("kafka") {
		// What startKafka makes, less the consumer: the core never calls it (the driver does).
		tk.kafka = &kafkaSide{in: cfg.Kafka, log: tk.log, streams: map[kafka.TopicPartition]*stream{}}
	} else if _, err := tk.openStream(&tk.cfg.Inputs[0]); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *coreHarness) run(t *testing.T, c coreCmd) string {
	var b strings.Builder
	var err error
	tail := "" // printed after the actions
	switch c.name {
	case "read":
		st := h.tk.order[0]
		err = h.tk.ingest(source.Chunk{Stream: st.id, Records: h.records(t, c, st.id), Done: c.has("done")})
	case "fetch":
		tp := kafka.TopicPartition{Topic: "t", Partition: int32(c.int(t, "p"))}
		id := h.streamID(t, c)
		if st := h.tk.kafka.streams[tp]; st != nil && st.tracker != nil {
			if _, ok := h.next[id]; !ok {
				h.next[id] = st.tracker.Committable()
			}
		}
		f := kafka.Fetch{TopicPartition: tp}
		for _, r := range h.records(t, c, id) {
			f.Records = append(f.Records, kafka.Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value})
		}
		f.HighWatermark = h.next[id]
		err = h.tk.ingestKafka(f)
	case "step":
		var tn turn
		tn, err = h.tk.step()
		switch {
		case err != nil:
		case tn.done:
			tail = "done\n"
		case tn.hasWake:
			tail = fmt.Sprintf("wake at %d\n", tn.wake.UnixMilli())
		}
	case "done":
		err = h.done(t, c)
	case "clock":
		h.clock.set(c.int(t, "ms"))
	case "checkpoint":
		err = h.tk.checkpoint()
		if err == nil {
			h.printPositions(&b)
		}
	case "switch":
		h.request(request{kind: reqSwitch, ver: newVersion(c.int(t, "version"), nil, nil)})
	case "pause":
		h.request(request{kind: reqPause})
	case "resume":
		h.request(request{kind: reqResume})
	case "assign":
		req := assignReq{committed: map[kafka.TopicPartition]int64{}, reply: make(chan assignReply, 1)}
		for _, w := range c.words {
			p, cm, _ := strings.Cut(w, ":")
			tp := kafka.TopicPartition{Topic: "t", Partition: int32(atoi(t, p))}
			committed := int64(-1)
			if cm != "" {
				committed = int64(atoi(t, cm))
			}
			req.committed[tp] = committed
			if id, err := h.db.StreamID("core", kafkaStreamName(tp)); err == nil {
				delete(h.next, id) // fetches start where the partition starts
			}
		}
		h.tk.onAssign(req)
		h.replies = append(h.replies, func() (string, bool) {
			select {
			case r := <-req.reply:
				return fmt.Sprintf("assigned: start %v, err %v", sortedOffsets(r.start), r.err), true
			default:
				return "", false
			}
		})
	case "revoke":
		req := revokeReq{parts: h.partitions(t, c), reply: make(chan map[kafka.TopicPartition]kafka.EpochOffset, 1)}
		h.tk.onRevoke(req)
		h.replies = append(h.replies, func() (string, bool) {
			select {
			case offs := <-req.reply:
				return fmt.Sprintf("revoked: commit %v", sortedOffsets(offs)), true
			default:
				return "", false
			}
		})
	case "lost":
		req := lostReq{parts: h.partitions(t, c), reply: make(chan struct{}, 1)}
		h.tk.onLost(req)
		h.replies = append(h.replies, func() (string, bool) {
			select {
			case <-req.reply:
				return "lost: done", true
			default:
				return "", false
			}
		})
	case "state":
		if len(c.words) != 1 {
			t.Fatalf("state: want one key")
		}
		v, ok, gerr := h.db.Get("core", h.streamID(t, c), []byte(c.words[0]), []byte("n"))
		if gerr != nil {
			t.Fatal(gerr)
		}
		if !ok {
			return "none"
		}
		return fmt.Sprintf("n=%s", v)
	default:
		t.Fatalf("unknown command %s", c.name)
	}
	if err != nil {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	h.printActions(&b)
	b.WriteString(tail)
	return b.String()
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// records parses the command's <key>:<value> words as records of stream id, numbering them on.
func (h *coreHarness) records(t *testing.T, c coreCmd, id uint32) []source.Record {
	var recs []source.Record
	for _, w := range c.words {
		if w == "done" {
			continue
		}
		k, v, ok := strings.Cut(w, ":")
		if !ok {
			t.Fatalf("record %q: want <key>:<value>", w)
		}
		off := h.next[id]
		h.next[id]++
		r := source.Record{Offset: off, End: 10 * (off + 1), Raw: []byte(w)}
		r.Key, r.Value, r.Timestamp = []byte(k), []byte(v), -1
		recs = append(recs, r)
	}
	return recs
}

func (h *coreHarness) partitions(t *testing.T, c coreCmd) []kafka.TopicPartition {
	var tps []kafka.TopicPartition
	for _, w := range c.words {
		tps = append(tps, kafka.TopicPartition{Topic: "t", Partition: int32(atoi(t, w))})
	}
	return tps
}

// streamID is the id of input "in", or of partition t/N with p=N.
func (h *coreHarness) streamID(t *testing.T, c coreCmd) uint32 {
	name := "file:in/0"
	if _, ok := c.arg("p"); ok {
		name = kafkaStreamName(kafka.TopicPartition{Topic: "t", Partition: int32(c.int(t, "p"))})
	}
	id, err := h.db.StreamID("core", name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (h *coreHarness) request(r request) {
	r.reply = make(chan Switched, 1)
	h.tk.serve(context.Background(), r)
	h.replies = append(h.replies, func() (string, bool) {
		select {
		case s := <-r.reply:
			if r.kind != reqSwitch {
				return fmt.Sprintf("ok: paused=%v", h.tk.paused), true
			}
			return fmt.Sprintf("switched: v%d -> v%d", s.Previous, h.tk.cur.id), true
		default:
			return "", false
		}
	})
}

// done plays the workers for job N: its units run on the scripted processor, then the job goes
// back to the core.
func (h *coreHarness) done(t *testing.T, c coreCmd) error {
	id := uint64(c.int(t, "job"))
	j := h.tk.inflight[id]
	if j == nil {
		return fmt.Errorf("job %d is not in flight", id)
	}
	p := &scriptProc{}
	if msg, ok := c.arg("fail"); ok {
		p.fail = errors.New(msg)
	}
	for _, v := range c.all("timer") {
		parts := strings.Split(v, ":")
		if len(parts) != 3 {
			t.Fatalf("timer=%s: want key:name:due", v)
		}
		p.timers = append(p.timers, modrt.TimerOp{Key: []byte(parts[0]), Name: []byte(parts[1]),
			Domain: abi.DomainProcessing, Due: int64(atoi(t, parts[2]))})
	}
	load := h.tk.cache.Loader()
	for gi := range j.groups {
		if err := h.tk.runUnit(context.Background(), p, &j.groups[gi], load); err != nil {
			j.err = err
			break
		}
	}
	return h.tk.finish(j)
}

// scriptProc is the scripted guest: per record an output "<key>=<value> n=<count>" and the
// key's count in state "n"; per firing an output "fired <key>/<name>"; it sets the timers given
// for the keys of the unit, and fails every call with fail.
type scriptProc struct {
	fail   error
	timers []modrt.TimerOp
}

func (p *scriptProc) Run(_ context.Context, u *modrt.Unit, env modrt.Env) (modrt.Effects, error) {
	if p.fail != nil {
		return modrt.Effects{}, p.fail
	}
	var fx modrt.Effects
	counts := map[string]int{}
	inUnit := map[string]bool{}
	for _, s := range u.Steps {
		for _, r := range s.Records {
			k := string(r.Key)
			inUnit[k] = true
			if _, ok := counts[k]; !ok {
				v, _, err := env.StateGet(r.Key, []byte("n"))
				if err != nil {
					return fx, err
				}
				counts[k], _ = strconv.Atoi(string(v))
			}
			counts[k]++
			n := strconv.Itoa(counts[k])
			fx.Outputs = append(fx.Outputs, modrt.Output{Name: "out", Key: r.Key, Value: []byte(k + "=" + string(r.Value) + " n=" + n)})
			fx.Writes = append(fx.Writes, modrt.Write{Key: r.Key, Name: []byte("n"), Value: []byte(n)})
		}
		for _, f := range s.Firings {
			inUnit[string(f.Key)] = true
			fx.Outputs = append(fx.Outputs, modrt.Output{Name: "out", Key: f.Key, Value: []byte("fired " + string(f.Key) + "/" + string(f.Name))})
		}
	}
	for _, op := range p.timers {
		if inUnit[string(op.Key)] {
			fx.Timers = append(fx.Timers, op)
		}
	}
	return fx, nil
}

func (p *scriptProc) HasExport(k modrt.StepKind) bool { return k != modrt.StepTick }
func (p *scriptProc) StateVersion() uint32            { return 0 }
func (p *scriptProc) Broken() bool                    { return false }
func (p *scriptProc) Close(context.Context) error     { return nil }

// printActions prints and clears what the core asked the driver to do, the outputs and dead
// letters written since the last command, and the answers to requests.
func (h *coreHarness) printActions(b *strings.Builder) {
	o := &h.tk.out
	for _, j := range o.jobs {
		fmt.Fprintf(b, "job %d v%d:", j.id, j.ver.id)
		if j.tick != nil {
			fmt.Fprintf(b, " tick %s", j.groups[0].st.name())
		}
		for _, g := range j.groups {
			fmt.Fprintf(b, " %s[", g.st.name())
			for i, it := range g.work {
				if i > 0 {
					b.WriteString(" ")
				}
				switch {
				case it.fire != nil:
					fmt.Fprintf(b, "%s!%s", it.fire.Key, it.fire.Name)
				case it.migrate:
					fmt.Fprintf(b, "%s~migrate", it.rec.Key)
				default:
					fmt.Fprintf(b, "%s@%d", it.rec.Key, it.rec.Offset)
				}
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	for _, f := range o.flow {
		what := "resume"
		if f.pause {
			what = "pause"
		}
		fmt.Fprintf(b, "%s %s/%d\n", what, f.tp.Topic, f.tp.Partition)
	}
	for _, c := range o.commits {
		fmt.Fprintf(b, "commit offsets %v\n", sortedOffsets(c))
	}
	for _, r := range o.replies {
		r()
	}
	pending := h.replies[:0]
	for _, r := range h.replies {
		if s, ok := r(); ok {
			b.WriteString(s + "\n")
		} else {
			pending = append(pending, r)
		}
	}
	h.replies = pending
	o.flow, o.commits, o.jobs, o.replies = nil, nil, nil, nil
	lines := h.out.snapshot()
	for _, l := range lines[h.printed:] {
		fmt.Fprintf(b, "output %s\n", l)
	}
	h.printed = len(lines)
	h.dl.mu.Lock()
	for _, dl := range h.dl.all[h.dlSeen:] {
		fmt.Fprintf(b, "dead letter %s offset %d key %q: %v\n", dl.Input, dl.Offset, dl.Key, dl.Err)
	}
	h.dlSeen = len(h.dl.all)
	h.dl.mu.Unlock()
}

// printPositions prints every stream's committed position.
func (h *coreHarness) printPositions(b *strings.Builder) {
	for _, st := range h.tk.order {
		pos, ok, err := h.db.Position("core", st.id)
		switch {
		case err != nil:
			fmt.Fprintf(b, "position %s: %v\n", st.name(), err)
		case !ok:
			fmt.Fprintf(b, "position %s: none\n", st.name())
		default:
			fmt.Fprintf(b, "position %s: next %d resume %d horizon %d\n", st.name(), pos.Next, pos.Resume, pos.Horizon)
		}
		if n, err := h.db.PendingTimers("core", st.id); err != nil {
			fmt.Fprintf(b, "timers %s: %v\n", st.name(), err)
		} else if n > 0 {
			fmt.Fprintf(b, "timers %s: %d pending\n", st.name(), n)
		}
	}
	fmt.Fprintf(b, "checkpoints %d\n", h.tk.stats.Checkpoints)
}

// sortedOffsets prints partition offsets in partition order.
func sortedOffsets(m map[kafka.TopicPartition]kafka.EpochOffset) string {
	var parts []string
	for tp, o := range m {
		parts = append(parts, fmt.Sprintf("%s/%d=%d", tp.Topic, tp.Partition, o.Offset))
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, " ") + "]"
}

// TestQueueFiringUnknownStream checks that a firing pushed for a stream the scheduler does not
// have fails the loop instead of being lost.
func TestQueueFiringUnknownStream(t *testing.T) {
	tk, err := New(Config{Name: "core", Now: func() time.Time { return time.UnixMilli(1000) }})
	if err != nil {
		t.Fatal(err)
	}
	st := &stream{id: 7, in: &Input{Name: "gone"}, tm: newStreamTime(time.UnixMilli(1000), 0)}
	_, err = tk.queueFiring(st, timerID{"k", "t"}, abi.DomainProcessing, 500, nil, true)
	if !errors.Is(err, sched.ErrUnknownStream) {
		t.Errorf("queueFiring on a stream the scheduler lacks = %v, want ErrUnknownStream", err)
	}
}
