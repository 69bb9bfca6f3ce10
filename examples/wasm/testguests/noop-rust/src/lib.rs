//! noop: the benchmarks' no-op task in Rust. It receives batches and does nothing with them,
//! which measures the runtime's own cost per record (the port of the Go `testguests/noop`).

use wasmstream::{Context, Error, Record, Task};

pub struct Noop;

impl Task for Noop {
    fn init(_config: &[u8]) -> Result<Self, Error> {
        Ok(Noop)
    }

    fn process(&mut self, _rec: &Record, _ctx: &mut Context) -> Result<(), Error> {
        Ok(())
    }
}

wasmstream::export_task!(Noop);
