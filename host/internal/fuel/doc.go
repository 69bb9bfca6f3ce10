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
//     point, where every instruction costs one unit and the body of an inner loop is charged by
//     that loop's own header. The charge is therefore an upper bound of the instructions executed,
//     computed statically: the same call with the same inputs always consumes the same fuel.
//     Every charge is at least one unit, so no guest can loop or recurse without paying.
//     modrt's FuzzFuelSound checks this bound on generated programs by running them: charges
//     are never behind an independent count of the instructions executed.
//   - Standard Go compiles each function into one "dispatch loop" whose every jump goes back
//     through the loop header. In such a loop only backward jumps of the Go code (and leaving one
//     of its loops) are charged, for the longest run of code that can follow them (see costs in
//     code.go): Go's counts are therefore coarser upper bounds than Rust's or C's, which are close
//     to the instructions executed.
//   - When a charge makes the counter negative, the negative value is stored in the global and the
//     function executes unreachable. The host tells an exhausted budget from any other trap by the
//     counter being negative after the call.
//   - A function with loops keeps the counter in a local of its own while it runs (a register,
//     instead of a memory load and store per iteration). It stores it back to the global before it
//     calls another function of the module and at every exit, and reloads it after the call.
//     Calls to imported functions (host functions) do not touch the counter.
//   - A start function, if the module has one, no longer runs on instantiation: the start section
//     is removed and the function exported as StartExport, for the host to call (with a budget)
//     before anything else. Instantiation itself then runs no guest code.
//   - DWARF custom sections (".debug_*") are dropped: their code offsets no longer hold. The "name"
//     section is kept (indices do not change: no import or function is added, and the new local
//     is appended after the existing ones).
//
// Host functions and bulk memory instructions (memory.copy, memory.fill) cost one unit each
// whatever the size they work on; their work is bounded by the memory limit and by the host's own
// limits.
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
