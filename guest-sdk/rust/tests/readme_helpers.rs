//! The README's "JSON records, typed state" example, kept compiling and working.

use wasmstream::json::{Object, Writer};
use wasmstream::state::{Counter, List, Map, Value};
use wasmstream::{Context, Error, Record, Task};

static TX: Counter = Counter::new("tx"); // 8-byte little-endian i64
static TOTAL: Value<f64> = Value::new("total"); // 8-byte little-endian f64 bits
static CARDS: Map<i64> = Map::new("cards"); // "cards/<card>"
static RECENT: List<f64> = List::new("recent"); // "recent" + "recent/<16 hex digits>"

struct Fraud {
    limit: f64,
}

impl Task for Fraud {
    fn init(config: &[u8]) -> Result<Self, Error> {
        let cfg = Object::parse(config)?; // the task config: {"limit":1000}
        let limit = match cfg.get_str("limit_text") {
            Some(t) => t.parse()?, // a ParseFloatError converts too
            None => cfg.get_f64("limit").unwrap_or(1000.0),
        };
        Ok(Fraud { limit })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let tx = Object::parse(rec.value())?; // "json: expected ':' after field name "card" at byte 7"
        let card = tx.get_str("card").ok_or("card missing")?;
        let amount = tx
            .get_f64("amount")
            .ok_or("amount missing or not a number")?;
        let n = TX.add(ctx, 1)?;
        let total = TOTAL.get(ctx)?.unwrap_or(0.0) + amount;
        TOTAL.set(ctx, &total)?;
        CARDS.put(ctx, card, &n)?;
        RECENT.append(ctx, &amount)?;
        if total > self.limit {
            let mut w = Writer::new();
            w.str("card", card).i64("tx", n).f64("total", total);
            ctx.emit("alerts", rec.key(), w.finish())?; // stamped with the record's timestamp
        }
        Ok(())
    }
}

#[test]
fn readme_fraud() {
    use wasmstream::testing::{Harness, TestRecord};
    let mut h = Harness::<Fraud>::new(r#"{"limit":100}"#).unwrap();
    let out = h
        .process(&[
            TestRecord::new("u", r#"{"card":"c-17","amount":60}"#).timestamp(5),
            TestRecord::new("u", r#"{"card":"c-9","amount":50.5}"#).timestamp(6),
        ])
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].output, "alerts");
    assert_eq!(out[0].value_str(), r#"{"card":"c-9","tx":2,"total":110.5}"#);
    assert_eq!(out[0].ts, 6);
    let mut st = h.read("u");
    assert_eq!(RECENT.items(&mut st).unwrap(), [60.0, 50.5]);
    assert_eq!(CARDS.get(&mut st, "c-17").unwrap(), Some(1));
    assert!(Harness::<Fraud>::new(r#"{"limit_text":"x"}"#).is_err());
}
