//! counter: the benchmarks' stateful task in Rust (the port of the Go `testguests/counter`).
//! Per record it reads the key's count `n` (one state get, decimal ASCII, missing = 0), writes it
//! back incremented (one put) and emits the new count with the record's key to output `counts`
//! (one output), which measures the runtime's cost of state and outputs per record.

use wasmstream::{Context, Error, Record, Task};

pub struct Counter;

impl Task for Counter {
    fn init(_config: &[u8]) -> Result<Self, Error> {
        Ok(Counter)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let n = ctx.get_u64("n")?.unwrap_or(0) + 1;
        let mut buf = [0u8; 20];
        let count = wasmstream::format_u64(n, &mut buf);
        ctx.put("n", count)?;
        ctx.emit("counts", rec.key(), count)
    }
}

wasmstream::export_task!(Counter);
