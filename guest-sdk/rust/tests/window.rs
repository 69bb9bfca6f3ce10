//! The window helpers (`wasmstream::window`) in the native harness: the same cases, outputs and
//! state bytes as the Go SDK's wasmstreamtest/window_test.go.

use wasmstream::testing::{Harness, Output, TestRecord, Timer};
use wasmstream::window::{WindowKind, Windows};
use wasmstream::{Context, Domain, Error, Firing, Record, Task};

/// Counts records per window and emits "<start>-<end>:<count>" to "counts"; the config names the
/// kind.
struct Count(Windows<i64>);

impl Task for Count {
    fn init(config: &[u8]) -> Result<Self, Error> {
        let (kind, merge): (WindowKind, Option<fn(i64, i64) -> Result<i64, Error>>) = match config {
            b"tumbling" => (WindowKind::Tumbling(60_000), None),
            b"sliding" => (
                WindowKind::Sliding {
                    size: 60_000,
                    slide: 20_000,
                },
                None,
            ),
            b"session" => (WindowKind::Session(10_000), Some(|a, b| Ok(a + b))),
            _ => (WindowKind::Session(10), None),
        };
        Ok(Count(Windows {
            name: "c",
            kind,
            late: Some("late"),
            fold: |n, _| Ok(n + 1),
            merge,
            emit: |ctx, w, n| {
                let key = ctx.key();
                ctx.emit("counts", key, format!("{}-{}:{}", w.start, w.end, n))
            },
        }))
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        self.0.add(rec, ctx)
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        if self.0.fire(f, ctx)? {
            return Ok(());
        }
        let key = ctx.key();
        ctx.emit("other", key, f.name())
    }
}

fn ev(key: &str, ts: i64, late: bool) -> TestRecord {
    TestRecord::new(key, format!("{}@{}", key, ts))
        .timestamp(ts)
        .late(late)
}

fn outs(o: &[Output]) -> String {
    o.iter()
        .map(|o| {
            format!(
                "{} {} {} ts={}",
                o.output.as_str(),
                String::from_utf8_lossy(&o.key),
                o.value_str(),
                o.ts
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn hex_state(h: &Harness<Count>) -> String {
    h.all_state()
        .iter()
        .map(|(k, n, v)| {
            let hex: String = v.iter().map(|b| format!("{:02x}", b)).collect();
            format!(
                "{}/{}={}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(n),
                hex
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn timers(h: &Harness<Count>) -> String {
    h.timers()
        .iter()
        .map(|t| {
            format!(
                "{}/{}/{}@{}",
                t.partition,
                String::from_utf8_lossy(&t.key),
                String::from_utf8_lossy(&t.name),
                t.time
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn windows_tumbling() {
    let mut h = Harness::<Count>::new("tumbling").unwrap();
    // The harness stamps a negative output timestamp with its clock: 0 here.
    h.set_now(0);
    let o = h
        .process(&[
            ev("a", 1000, false),
            ev("a", 59_999, false),
            ev("b", 60_000, false),
            ev("a", 500, true),
            ev("a", -1, false),
        ])
        .unwrap();
    assert_eq!(outs(&o), "late a a@500 ts=500, late a a@-1 ts=0");
    assert_eq!(
        hex_state(&h),
        "a/c/w/0=0200000000000000,b/c/w/60000=0100000000000000"
    );
    assert_eq!(timers(&h), "0/a/c/0@60000,0/b/c/60000@120000");
    assert_eq!(outs(&h.advance_watermark(0, 59_999).unwrap().outputs), "");
    let f = h.advance_watermark(0, 60_000).unwrap();
    assert_eq!(outs(&f.outputs), "counts a 0-60000:2 ts=60000");
    assert_eq!(hex_state(&h), "b/c/w/60000=0100000000000000");
    let f = h.advance_watermark(0, 200_000).unwrap();
    assert_eq!(outs(&f.outputs), "counts b 60000-120000:1 ts=120000");
}

#[test]
fn windows_sliding() {
    let mut h = Harness::<Count>::new("sliding").unwrap();
    assert_eq!(
        outs(
            &h.process(&[ev("a", 45_000, false), ev("a", 61_000, false)])
                .unwrap()
        ),
        ""
    );
    let f = h.advance_watermark(0, 1_000_000).unwrap();
    assert_eq!(outs(&f.outputs), "counts a 0-60000:1 ts=60000, counts a 20000-80000:2 ts=80000, counts a 40000-100000:2 ts=100000, counts a 60000-120000:1 ts=120000");
}

#[test]
fn windows_session() {
    let mut h = Harness::<Count>::new("session").unwrap();
    h.process(&[
        ev("a", 1000, false),
        ev("a", 5000, false),
        ev("a", 21_000, false),
        ev("b", 100, false),
    ])
    .unwrap();
    assert_eq!(hex_state(&h), "a/c/e/1000=8813000000000000,a/c/e/21000=0852000000000000,a/c/w/1000=0200000000000000,a/c/w/21000=0100000000000000,b/c/e/100=6400000000000000,b/c/w/100=0100000000000000");
    h.process(&[ev("a", 14_900, false), ev("a", 30_000, false)])
        .unwrap();
    assert_eq!(timers(&h), "0/a/c/1000@40000,0/b/c/100@10100");
    h.set_timer(Timer::new("a", "own", Domain::EventTime, 20_000));
    let f = h.advance_watermark(0, 39_999).unwrap();
    assert_eq!(
        outs(&f.outputs),
        "counts b 100-10100:1 ts=10100, other a own ts=20000"
    );
    let f = h.advance_watermark(0, 40_000).unwrap();
    assert_eq!(outs(&f.outputs), "counts a 1000-40000:5 ts=40000");
    assert_eq!(hex_state(&h), "");
}

#[test]
fn windows_config_error() {
    let mut h = Harness::<Count>::new("nomerge").unwrap();
    let err = h.process(&[ev("a", 1, false)]).unwrap_err();
    assert!(err.contains("session windows need merge"), "{}", err);
}

/// A task whose window functions capture what it read from its config: `add_with` and
/// `fire_with` take closures (the struct's `fold` and `emit` are fn pointers, which capture
/// nothing).
struct Weighted {
    w: Windows<i64>,
    weight: i64,
    min: i64,
    closed: i64,
}

impl Task for Weighted {
    fn init(config: &[u8]) -> Result<Self, Error> {
        let s = std::str::from_utf8(config).unwrap_or("");
        let mut it = s.split(',').map(|n| n.parse::<i64>().unwrap_or(0));
        let (weight, min) = (it.next().unwrap_or(1), it.next().unwrap_or(0));
        Ok(Weighted {
            w: Windows {
                name: "w",
                kind: WindowKind::Tumbling(1000),
                late: None,
                fold: |n, _| Ok(n),
                merge: None,
                emit: |_, _, _| Ok(()),
            },
            weight,
            min,
            closed: 0,
        })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let weight = self.weight;
        self.w.add_with(rec, ctx, |n, _| Ok(n + weight))
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        let (min, closed) = (self.min, &mut self.closed);
        self.w.fire_with(f, ctx, |ctx, w, n| {
            *closed += 1;
            if n < min {
                return Ok(());
            }
            let key = ctx.key();
            ctx.emit("sums", key, format!("{}:{} #{}", w.start, n, closed))
        })?;
        Ok(())
    }
}

#[test]
fn windows_with_closures() {
    let mut h = Harness::<Weighted>::new("5,10").unwrap();
    h.process(&[ev("a", 100, false), ev("a", 200, false), ev("b", 300, false)])
        .unwrap();
    let f = h.advance_watermark(0, 1000).unwrap();
    // a: 2 records × 5 = 10 ≥ 10 is emitted; b: 5 < 10 is not, but counted as closed.
    let mut got: Vec<String> = f.outputs.iter().map(|o| o.value_str()).collect();
    got.sort();
    assert_eq!(got.len(), 1, "{:?}", got);
    assert!(got[0].starts_with("0:10 #"), "{:?}", got);
    assert_eq!(h.task().closed, 2);
}
