package modrt

import (
	"context"
	"encoding/binary"
	"math"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// WASI's poll_oneoff, replaced. wazero's does work in proportion to its subscriptions (up to
// about 800,000 in 64 MiB of memory) for the one HostCallUnits a call costs, so that a loop of
// it never spent its budget (a call of 500,000 subscriptions in a loop ran past 60 s and a
// SIGTERM, never reaching the end of a time slice); and with the real clock it slept for as
// long as the guest asked, past any stop. This one is charged for the subscriptions it reads
// and the events it writes, a unit per 4 bytes like other host functions, and its sleep (with
// Grants.RealClock) a unit per nanosecond and ends when the call's context does.
//
// It answers as wazero's does in this sandbox, where stdin is always empty: a clock
// subscription (relative; an absolute one is ENOTSUP) is acknowledged after the shortest
// timeout; an fd_read subscription is ready at once and then nothing sleeps (wazero's empty stdin
// is always ready, and it treats every blocking file as stdin); an fd_write subscription gets
// ENOTSUP. Unlike wazero's, an fd_read or fd_write subscription on a descriptor that is not
// open is not told apart (EBADF): the read or write that follows says so.

// WASI errno values (wasi_snapshot_preview1) and event types poll_oneoff uses.
const (
	wasiEBADF   = 8
	wasiEFAULT  = 21
	wasiEINVAL  = 28
	wasiENOTSUP = 58

	eventClock   = 0
	eventFdRead  = 1
	eventFdWrite = 2

	subscriptionBytes = 48
	eventBytes        = 32
)

// instantiateWASI registers wazero's WASI module in rt with poll_oneoff replaced.
func instantiateWASI(ctx context.Context, rt wazero.Runtime) error {
	b := rt.NewHostModuleBuilder(wasi_snapshot_preview1.ModuleName)
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(b)
	i32 := api.ValueTypeI32
	b.NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(pollOneoff), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32}).
		WithParameterNames("in", "out", "nsubscriptions", "result.nevents").
		Export("poll_oneoff")
	_, err := b.Instantiate(ctx)
	return err
}

// pollOneoff is poll_oneoff(in, out, nsubscriptions, result_nevents) -> errno.
func pollOneoff(ctx context.Context, mod api.Module, stack []uint64) {
	errno := uint32(wasiEINVAL)
	if i := instanceOf(ctx); i != nil {
		errno = i.poll(mod.Memory(), uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3]))
	}
	stack[0] = uint64(errno)
}

func (i *Instance) poll(mem api.Memory, in, out, n, nevents uint32) uint32 {
	if n == 0 {
		return wasiEINVAL
	}
	inLen, outLen := uint64(n)*subscriptionBytes, uint64(n)*eventBytes
	if inLen > math.MaxUint32 || outLen > math.MaxUint32 {
		return wasiEFAULT
	}
	subs, ok := mem.Read(in, uint32(inLen))
	if !ok {
		return wasiEFAULT
	}
	events, ok := mem.Read(out, uint32(outLen))
	if !ok {
		return wasiEFAULT
	}
	// Charged before the work, whatever comes of it.
	i.moved = int(inLen + outLen)
	i.chargeMoved()
	// Check every subscription before writing anything: subs and events may overlap.
	timeout, reads := int64(math.MaxInt64), false
	for k := range n {
		s := subs[k*subscriptionBytes:][:subscriptionBytes]
		switch s[8] {
		case eventClock:
			switch binary.LittleEndian.Uint16(s[40:]) {
			case 0:
			case 1:
				return wasiENOTSUP // absolute time
			default:
				return wasiEINVAL
			}
			timeout = min(timeout, int64(min(binary.LittleEndian.Uint64(s[24:]), math.MaxInt64)))
		case eventFdRead, eventFdWrite:
			if int32(binary.LittleEndian.Uint32(s[16:])) < 0 {
				return wasiEBADF
			}
			reads = reads || s[8] == eventFdRead
		default:
			return wasiEINVAL
		}
	}
	out2 := make([]byte, outLen) // the events, built apart from subs, then copied out
	for k := range n {
		s, e := subs[k*subscriptionBytes:][:subscriptionBytes], out2[k*eventBytes:][:eventBytes]
		copy(e[:8], s[:8]) // userdata
		if s[8] == eventFdWrite {
			e[8] = wasiENOTSUP
		}
		e[10] = s[8]
	}
	copy(events, out2)
	if !mem.WriteUint32Le(nevents, n) {
		return wasiEFAULT
	}
	if !reads && timeout > 0 && timeout != math.MaxInt64 {
		i.sleep(timeout)
	}
	return 0
}

// sleep is a poll_oneoff's wait of ns nanoseconds: none with the fake clock (no
// Grants.RealClock); with the real clock, it is charged a fuel unit per nanosecond (about what
// a plain loop takes to spend it, so that a call's budget bounds its time, sleeping or not),
// and stops the call when the call's context ends or the runtime is interrupted meanwhile, as
// the end of a time slice would.
func (i *Instance) sleep(ns int64) {
	if !i.lim.Grants.RealClock {
		return
	}
	i.charge(ns)
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-i.cctx.Context.Done():
			i.stopErr = i.cctx.Context.Err()
			panic(i.stopErr) // the call stops with the context's error (Instance.call)
		case <-tick.C:
			if i.interrupted != nil && i.interrupted.Load() {
				i.stopErr = ErrInterrupted
				panic(i.stopErr)
			}
		}
	}
}
