//! ktable: a table of each key's latest value (ABI 0.5; the port of the Go `testguests/ktable`).
//! A record with a value stores it as the key's state `v` and emits it to output `table` with
//! the record's key; a record with a null value (a Kafka tombstone) deletes the key's state and
//! emits a tombstone for the key. An empty value is a value.

use wasmstream::{Context, Error, Record, Task};

pub struct KTable;

impl Task for KTable {
    fn init(_config: &[u8]) -> Result<Self, Error> {
        Ok(KTable)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        if rec.value_null() {
            ctx.delete("v")?;
            return ctx.emit_tombstone("table", rec.key());
        }
        ctx.put("v", rec.value())?;
        ctx.emit("table", rec.key(), rec.value())
    }
}

wasmstream::export_task!(KTable);
