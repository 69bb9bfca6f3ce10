//! Window helpers whose fold and emit are closures capturing what init read from the config.

use wasmstream::testing::{Harness, TestRecord};
use wasmstream::window::{Window, WindowKind, Windows};
use wasmstream::{Context, Error, Firing, Record, Task};

type Fold = Box<dyn Fn(i64, &Record<'_>) -> Result<i64, Error>>;
type Emit = Box<dyn Fn(&mut Context<'_>, Window, i64) -> Result<(), Error>>;

/// Counts, per one-minute window, the records whose value has at least `min` bytes, `min`
/// coming from the config; emits "<count> of at least <min>".
struct Long(Windows<i64, Fold, Emit>);

impl Task for Long {
    fn init(config: &[u8]) -> Result<Self, Error> {
        let min: usize = std::str::from_utf8(config)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("config: want the minimum length")?;
        Ok(Long(Windows {
            name: "long",
            kind: WindowKind::Tumbling(60_000),
            late: None,
            fold: Box::new(move |n, rec| Ok(if rec.value().len() >= min { n + 1 } else { n })),
            merge: None,
            emit: Box::new(move |ctx, _w, n| {
                let key = ctx.key();
                ctx.emit("long", key, format!("{} of at least {}", n, min))
            }),
        }))
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        self.0.add(rec, ctx)
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        self.0.fire(f, ctx).map(|_| ())
    }
}

#[test]
fn closures_capture_the_config() {
    let mut h: Harness<Long> = Harness::new("3").unwrap();
    h.process(&[
        TestRecord::new("a", "xy").timestamp(1_000),
        TestRecord::new("a", "xyz").timestamp(2_000),
        TestRecord::new("a", "wxyz").timestamp(3_000),
    ])
    .unwrap();
    let out = h.advance_watermark(0, 60_000).unwrap();
    let values: Vec<String> = out.outputs.iter().map(|o| o.value_str()).collect();
    assert_eq!(values, ["2 of at least 3"]);
}
