// Package fuel makes a WebAssembly module meter its own execution: Instrument rewrites the binary
// so that it counts down a fuel counter as it runs and traps (unreachable) when the counter goes
// negative. The host sets the counter before each call into the guest and reads it afterwards,
// which bounds the CPU time of every call deterministically, at a small fraction of the cost of
// interrupting the guest from outside (DESIGN S21). The package works on bytes only and imports
// nothing but the standard library; the module runtime (modrt) drives it.
//
// # What the rewritten module does
//
//   - It defines one more global, a mutable i64 — the counter — exported as GlobalExport. Its
//     initial value is Options.Initial: the budget of a start function.
//   - Every function is charged at its entry, and every loop at its header (each iteration), by
//     the cost of the longest path through that function or loop body up to the next charge
//     point, where every instruction costs one unit, a call of an imported (host) function
//     HostCallUnits, and the body of an inner loop is charged by that loop's own header. The charge is therefore an upper bound of the instructions executed,
//     computed statically: the same call with the same inputs always consumes the same fuel.
//     Every charge is at least one unit, so no guest can loop or recurse without paying.
//     modrt's FuzzFuelSound checks this bound on generated programs by running them: charges
//     are never behind an independent count of the instructions executed.
//   - Standard Go compiles each function into one "dispatch loop" whose every jump goes back
//     through the loop header. In such a loop only backward jumps of the Go code (and leaving one
//     of its loops) are charged, for the longest run of code that can follow them (see costs in
//     code.go): Go's counts are therefore coarser upper bounds than Rust's or C's, which are close
//     to the instructions executed.
//   - The counter holds one time slice of the call's budget at most (Meter). When a charge makes
//     it negative, the function calls the import SliceModule.SliceFunc, (i64) -> i64, with the
//     counter's value and goes on with the counter it returns: the host's Meter.Refill hands out
//     the next slice less the overdraft, and gets control back from compiled code after every
//     slice (Go cannot preempt compiled guest code). When the whole budget is spent it returns
//     the negative fuel left: the function stores it in the global and executes unreachable. The
//     host tells an exhausted budget from any other trap by the counter being negative after the
//     call. Slicing changes neither what a call spends nor where it stops.
//   - Bulk memory and table instructions (memory.fill, memory.copy, memory.init, table.fill,
//     table.copy, table.init) are charged their size operand as well, dynamically, before they
//     run: a unit per byte or element (the size is kept in a scratch i32 local).
//   - A function with loops keeps the counter in a local of its own while it runs (a register,
//     instead of a memory load and store per iteration), unless its loops nest more than 16 deep.
//     It stores it back to the global before every call (host functions may charge the call for
//     what they copy, from the global) and at every exit, and reloads it after the call.
//   - The call stack is bounded too (wazero keeps it outside the linear memory, and would grow it
//     to about 100 MiB for a recursion without end): a second global, a mutable i32 exported as
//     StackExport, holds the stack units the call may still use. Every function subtracts its
//     frame's units (FrameUnits: 1 plus 1 per LocalsPerUnit params and locals) at its entry,
//     keeps the result in a local of its own, and traps (unreachable) when it is negative; after
//     every call that may run guest code (call of a defined function, call_indirect) it stores
//     that local back, which undoes whatever the callee took without instrumenting its exits. A
//     tail call gives the frame's units back before it jumps. The host sets the counter before
//     each call and tells a depth trap from others by the counter being negative.
//   - A start function, if the module has one, no longer runs on instantiation: the start section
//     is removed and the function exported as StartExport, for the host to call (with a budget)
//     before anything else. Instantiation itself then runs no guest code.
//   - The slice import comes after the module's own imports, so every defined function's index
//     moves up by one: call, return_call and ref.func, element segments, exports, the start
//     function, ref.func in global initializers and the function, local and label names of the
//     "name" section are remapped in the same pass (remap.go). DWARF custom sections (".debug_*")
//     are dropped: their code offsets no longer hold. The new locals go after the existing ones.
//
// The package also bounds tables (LimitTables: each table's maximum lowered so that the tables
// together hold at most a limit) and reads what a module declares that costs compile time and
// memory (Declarations: functions, locals, nesting depth, nesting work, block work), for the runtime to
// refuse compile bombs before compiling them. The rewriting itself is one linear pass.
//
// # Coverage
//
// Instrument decodes every instruction of the WebAssembly 2.0 core specification — including
// sign extension, non-trapping float-to-int conversions, bulk memory and reference types (0xFC
// prefix), fixed-width SIMD (0xFD), multi-value block types — and the threads proposal's atomics
// (0xFE). Tail calls are metered (the counter is stored before the call). Exception handling and
// typed function references are refused with an error naming the opcode; the runtime does not
// support them either.
package fuel
