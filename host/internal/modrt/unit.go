package modrt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmstream/wasmstream/abi"
)

// ErrNoExport is returned by Run for a step whose optional export (ABI 0.2) the module lacks.
var ErrNoExport = errors.New("the module does not export the callback")

// StepKind is what one guest call of a Unit carries.
type StepKind uint8

const (
	StepRecords StepKind = iota + 1 // wasmstream_process over Records
	StepFirings                     // wasmstream_on_timer over Firings
	StepTick                        // wasmstream_on_tick with Tick
	StepMigrate                     // wasmstream_migrate with Migrate
)

// Step is one guest call of a Unit.
type Step struct {
	Kind    StepKind
	Records []abi.Record
	Firings []abi.Firing
	Tick    abi.Tick
	Migrate abi.Migrate
}

// Unit is a unit of work (ABI.md §3): guest calls run back to back that succeed or fail
// together. Later calls see the state writes of earlier ones. All of a unit's records, firings
// and keys belong to one partition.
type Unit struct {
	// Watermark is the partition's event-time watermark, returned by watermark_ms (-1: none).
	Watermark int64
	Steps     []Step
}

// HasExport reports whether the instance serves a step kind: records always; firings, ticks and
// migrations only when the module exports the 0.2 callback.
func (i *Instance) HasExport(k StepKind) bool {
	switch k {
	case StepRecords:
		return true
	case StepFirings:
		return i.fnOnTimer != nil
	case StepTick:
		return i.fnOnTick != nil
	case StepMigrate:
		return i.fnMigrate != nil
	}
	return false
}

// StateVersion is the module's wasmstream_state_version (0 when it does not export it).
func (i *Instance) StateVersion() uint32 { return i.stateVers }

// Run runs the steps of u in order as one unit of work: the scope of every call is the union of
// the unit's keys (every key of the partition when a step is a tick), the state overlay carries
// from one call to the next, and the Effects are those of all calls together. If any call fails
// Run returns its *CallError and no effects; the steps after it do not run. Each call's CPU
// budget is FuelPerRecord × its records or firings (1 for a tick or a migration).
//
// A step whose export the module lacks fails the unit with ErrNoExport before any guest call.
// Everything else is as for Process.
func (i *Instance) Run(ctx context.Context, u *Unit, env Env) (Effects, error) {
	switch {
	case i.closed:
		return Effects{}, ErrClosed
	case i.broken:
		return Effects{}, ErrBroken
	}
	if err := ctx.Err(); err != nil {
		return Effects{}, err
	}
	for s := range u.Steps {
		if !i.HasExport(u.Steps[s].Kind) {
			return Effects{}, fmt.Errorf("%w: step %d (kind %d)", ErrNoExport, s, u.Steps[s].Kind)
		}
	}
	i.spent = 0
	i.beginCall(env)
	i.wm = u.Watermark
	for s := range u.Steps {
		st := &u.Steps[s]
		switch st.Kind {
		case StepRecords:
			for k := range st.Records {
				i.scope.add(st.Records[k].Key)
			}
		case StepFirings:
			for k := range st.Firings {
				i.scope.add(st.Firings[k].Key)
			}
		case StepMigrate:
			i.scope.add(st.Migrate.Key)
		case StepTick:
			i.allKeys = true
		}
	}
	var err error
	for s := range u.Steps {
		if err = i.runStep(ctx, &u.Steps[s]); err != nil {
			break
		}
	}
	eff := Effects{Writes: i.writes, Outputs: i.outs, Timers: i.timers, Fuel: i.spent}
	i.endCall()
	if err != nil {
		return Effects{}, err
	}
	return eff, nil
}

// runStep places one step's payload in guest memory and calls its export.
func (i *Instance) runStep(ctx context.Context, st *Step) error {
	c, call, err := i.planStep(st)
	if !call || err != nil {
		return err
	}
	bud := i.processBudget(c.n)
	before := i.spent
	ptr, buf, err := i.place(ctx, c.export, c.size, bud)
	if err != nil {
		return err
	}
	b := appendPayload(buf[:0], st, c.fs)
	if len(b) != c.size || &b[0] != &buf[0] {
		return fmt.Errorf("internal error: %s payload size %d, expected %d", c.export, len(b), c.size)
	}
	bud.left -= i.spent - before // the alloc and the call share the budget
	i.logAttrs = stepAttrs(i.logAttrs[:0], st, c.fs)
	defer func() { i.logAttrs = i.logAttrs[:0] }()
	return i.callPayload(ctx, phaseProcess, c.export, c.fn, ptr, c.size, bud)
}

// stepCall is the call a step makes.
type stepCall struct {
	export string
	fn     api.Function
	size   int          // the payload's size
	n      int          // records or firings, for the budget
	fs     []abi.Firing // the live firings of a firings step
}

// planStep returns the call step st makes, or false when it makes none (a firings step whose
// firings were all deleted). A payload larger than the memory may grow is ErrBatchTooLarge.
func (i *Instance) planStep(st *Step) (stepCall, bool, error) {
	var c stepCall
	switch st.Kind {
	case StepRecords:
		c = stepCall{export: abi.ExportProcess, fn: i.fnProcess, size: 8, n: len(st.Records)}
		for k := range st.Records {
			c.size += abi.RecordSize(&st.Records[k])
			if c.size > math.MaxInt32 {
				return c, false, ErrBatchTooLarge
			}
		}
	case StepFirings:
		fs := i.liveFirings(st.Firings)
		if len(fs) == 0 {
			return c, false, nil
		}
		c = stepCall{export: abi.ExportOnTimer, fn: i.fnOnTimer, size: 8, n: len(fs), fs: fs}
		for k := range fs {
			c.size += abi.FiringSize(&fs[k])
			if c.size > math.MaxInt32 {
				return c, false, ErrBatchTooLarge
			}
		}
	case StepTick:
		c = stepCall{export: abi.ExportOnTick, fn: i.fnOnTick, size: abi.TickSize(&st.Tick), n: 1}
	case StepMigrate:
		c = stepCall{export: abi.ExportMigrate, fn: i.fnMigrate, size: abi.MigrateSize(&st.Migrate), n: 1}
	}
	if uint64(c.size) > uint64(i.lim.MaxMemoryPages)*pageSize {
		return c, false, ErrBatchTooLarge
	}
	return c, true, nil
}

// appendPayload appends the payload of st to b (fs: its live firings). A record whose key is
// null gets abi.FlagKeyNull.
func appendPayload(b []byte, st *Step, fs []abi.Firing) []byte {
	switch st.Kind {
	case StepRecords:
		b = abi.AppendBatchHeader(b, len(st.Records))
		for k := range st.Records {
			r := &st.Records[k]
			if abi.IsNullKey(r.Key) {
				r.Flags |= abi.FlagKeyNull // ABI 0.4: the record's key is null
			}
			b = abi.AppendRecord(b, r)
		}
	case StepFirings:
		b = abi.AppendFiringsHeader(b, len(fs))
		for k := range fs {
			b = abi.AppendFiring(b, &fs[k])
		}
	case StepTick:
		b = abi.AppendTick(b, &st.Tick)
	case StepMigrate:
		b = abi.AppendMigrate(b, &st.Migrate)
	}
	return b
}

// stepAttrs appends to a what a step hands the guest, for the guest's log lines: the partition,
// and the key and offset when the call holds one key and one record (a range of offsets, and
// no key, when it holds several). fs are the step's live firings.
func stepAttrs(a []slog.Attr, st *Step, fs []abi.Firing) []slog.Attr {
	switch st.Kind {
	case StepRecords:
		rs := st.Records
		if len(rs) == 0 {
			return a
		}
		a = append(a, slog.Int64("partition", int64(rs[0].Partition)))
		if sameKey(len(rs), func(k int) []byte { return rs[k].Key }) {
			a = append(a, slog.String("key", shortKey(rs[0].Key)))
		}
		if len(rs) == 1 {
			return append(a, slog.Int64("offset", rs[0].Offset))
		}
		return append(a, slog.String("offsets", fmt.Sprintf("%d-%d", rs[0].Offset, rs[len(rs)-1].Offset)))
	case StepFirings:
		if len(fs) == 0 {
			return a
		}
		a = append(a, slog.Int64("partition", int64(fs[0].Partition)))
		if sameKey(len(fs), func(k int) []byte { return fs[k].Key }) {
			a = append(a, slog.String("key", shortKey(fs[0].Key)))
		}
		if len(fs) == 1 {
			a = append(a, slog.String("timer", string(fs[0].Name)))
		}
		return a
	case StepTick:
		return append(a, slog.Int64("partition", int64(st.Tick.Partition)))
	case StepMigrate:
		return append(a, slog.Int64("partition", int64(st.Migrate.Partition)), slog.String("key", shortKey(st.Migrate.Key)))
	}
	return a
}

// sameKey reports whether the n keys key(0)..key(n-1) are all equal.
func sameKey(n int, key func(int) []byte) bool {
	for k := 1; k < n; k++ {
		if !bytes.Equal(key(k), key(0)) {
			return false
		}
	}
	return true
}

// liveFirings leaves out the firings whose timer an earlier call of the unit set or deleted: they
// are stale (the guest never sees a firing of a timer it has replaced). fs is not modified (the
// caller may run the unit again); a new slice is returned when a firing is left out.
func (i *Instance) liveFirings(fs []abi.Firing) []abi.Firing {
	if len(i.timers) == 0 {
		return fs
	}
	var live []abi.Firing
	for k, f := range fs {
		stale := false
		for j := range i.timers {
			if bytes.Equal(i.timers[j].Key, f.Key) && bytes.Equal(i.timers[j].Name, f.Name) {
				stale = true
				break
			}
		}
		switch {
		case stale && live == nil:
			live = append(make([]abi.Firing, 0, len(fs)-1), fs[:k]...)
		case !stale && live != nil:
			live = append(live, f)
		}
	}
	if live == nil {
		return fs
	}
	return live
}
