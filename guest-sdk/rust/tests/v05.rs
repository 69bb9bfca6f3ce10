//! ABI 0.5 in the SDK and the native harness: null values (tombstones) in and out.

use wasmstream::testing::{Harness, TestRecord};
use wasmstream::{Context, Error, HeadersBuilder, Record, Task};

/// Keeps each key's latest value as state "v" and publishes it to "table"; a tombstone deletes
/// the state and is published as two tombstones (with and without headers).
struct Table;

impl Task for Table {
    fn init(_: &[u8]) -> Result<Self, Error> {
        Ok(Table)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        if rec.value_null() {
            ctx.delete("v")?;
            ctx.emit_tombstone("table", rec.key())?;
            let mut hs = HeadersBuilder::new();
            hs.add("h", "1");
            return ctx.emit_tombstone_with("table", rec.key(), Some(&hs), 5);
        }
        ctx.put("v", rec.value())?;
        ctx.emit("table", rec.key(), rec.value())
    }
}

#[test]
fn tombstone_in_and_out() {
    let mut h = Harness::<Table>::new("{}").unwrap();
    let outs = h
        .process(&[TestRecord::new("a", "1"), TestRecord::new("b", "")])
        .unwrap();
    assert_eq!(outs.len(), 2);
    assert!(!outs[1].value_null && outs[1].value.is_empty());
    assert_eq!(h.state("b", "v"), Some(Vec::new()));

    let outs = h
        .process(&[TestRecord::new("a", "x").value_null(true)])
        .unwrap();
    assert_eq!(h.state("a", "v"), None, "the tombstone did not delete a's state");
    assert_eq!(h.state("b", "v"), Some(Vec::new()));
    assert_eq!(outs.len(), 2);
    for o in &outs {
        assert!(o.value_null && o.value.is_empty() && o.key == b"a", "{:?}", o);
    }
    assert_eq!(outs[1].headers, vec![(b"h".to_vec(), b"1".to_vec())]);
    assert_eq!(outs[1].ts, 5);
}
