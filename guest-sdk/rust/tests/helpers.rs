//! The helpers a task author reaches for: JSON, typed state, `?` on any error, the emit timestamp
//! rule, and the harness views of outputs and state.

use wasmstream::json::{Object, Value, Writer};
use wasmstream::state::{Counter, List, Map, Value as StateValue};
use wasmstream::testing::{Harness, TestRecord};
use wasmstream::{Context, Domain, Errno, Error, Firing, Record, Task, Tick, TickContext};

static COUNT: Counter = Counter::new("count");
static LAST: StateValue<f64> = StateValue::new("last");
static SEEN: Map<bool> = Map::new("seen");
static RECENT: List<String> = List::new("recent");

/// A custom error type of the task's own: `?` converts it.
#[derive(Debug)]
struct Mine;

impl std::fmt::Display for Mine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mine went wrong")
    }
}

impl std::error::Error for Mine {}

fn mine(fail: bool) -> Result<(), Mine> {
    if fail {
        Err(Mine)
    } else {
        Ok(())
    }
}

struct Fraud;

impl Task for Fraud {
    fn init(_: &[u8]) -> Result<Self, Error> {
        Ok(Fraud)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let v = std::str::from_utf8(rec.value())?; // Utf8Error
        if let Some(n) = v.strip_prefix("int ") {
            let _: i32 = n.parse()?; // ParseIntError
            return Ok(());
        }
        if v == "mine" {
            mine(true)?;
        }
        if v == "float x" {
            let _: f64 = "x".parse()?; // ParseFloatError
        }
        if v == "io" {
            Err(std::io::Error::new(
                std::io::ErrorKind::Other,
                "disk on fire",
            ))?;
        }
        if v == "timers" {
            ctx.set_timer("ev", Domain::EventTime, 70, "")?;
            ctx.set_timer("pt", Domain::ProcessingTime, 2_000_000_000_000, "")?;
            return ctx.emit("rec", rec.key(), "");
        }
        let o = Object::parse(rec.value())?;
        let card = o.get_str("card").ok_or("no card")?; // &str message
        let amount = o
            .get_f64("amount")
            .ok_or_else(|| String::from("no amount"))?;
        let n = COUNT.add(ctx, 1)?;
        LAST.set(ctx, &amount)?;
        SEEN.put(ctx, card, &true)?;
        RECENT.append(ctx, &card.to_string())?;
        let items = RECENT.items(ctx)?.len() as i64;
        let mut w = Writer::new();
        w.i64("n", n).f64("last", amount).i64("items", items);
        ctx.emit("out", rec.key(), w.finish())
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        let name = f.name().to_vec();
        ctx.emit(name, f.key(), "")
    }

    fn on_tick(&mut self, _: &Tick, ctx: &mut TickContext) -> Result<(), Error> {
        ctx.with_key(b"u1").emit("tick", "", "")
    }
}

#[test]
fn typed_state_json_and_harness_views() {
    let mut h = Harness::<Fraud>::new("{}").unwrap();
    let recs: Vec<TestRecord> = [
        r#"{"card":"c-17","amount":123.45}"#,
        r#"{"card":"c-9","amount":1}"#,
        r#"{"card":"c-17","amount":2.5}"#,
    ]
    .iter()
    .map(|v| TestRecord::new("u1", v))
    .collect();
    let out = h.process(&recs).unwrap();
    let values: Vec<String> = out.iter().map(|o| o.value_str()).collect();
    assert_eq!(
        values,
        [
            r#"{"n":1,"last":123.45,"items":1}"#,
            r#"{"n":2,"last":1,"items":2}"#,
            r#"{"n":3,"last":2.5,"items":3}"#
        ]
    );
    // Output names compare with text and bytes alike.
    assert_eq!(out[0].output, "out");
    assert_eq!(out[0].output, b"out");
    assert!(out[0].output == *"out" && out[0].output == String::from("out"));
    assert_eq!(h.outputs_named("out").len(), 3);
    assert!(h.outputs_named("other").is_empty());

    let mut st = h.read("u1");
    assert_eq!(COUNT.get(&mut st).unwrap(), 3);
    assert_eq!(LAST.get(&mut st).unwrap(), Some(2.5));
    assert_eq!(
        SEEN.entries(&mut st).unwrap(),
        vec![("c-17".to_string(), true), ("c-9".to_string(), true)]
    );
    assert_eq!(RECENT.items(&mut st).unwrap(), ["c-17", "c-9", "c-17"]);
    assert_eq!(RECENT.get(&mut st, 1).unwrap().as_deref(), Some("c-9"));
    assert_eq!(RECENT.len(&mut st).unwrap(), 3);
    // The byte encodings are the documented ones, the same as the Go SDK's.
    assert_eq!(h.state("u1", "count").unwrap(), 3i64.to_le_bytes());
    assert_eq!(h.state("u1", "recent/0000000000000002").unwrap(), b"c-17");
    assert_eq!(h.state("u1", "seen/c-9").unwrap(), [1]);
    assert_eq!(
        h.state("u1", "last").unwrap(),
        2.5f64.to_bits().to_le_bytes()
    );
    assert_eq!(h.state("u1", "recent").unwrap(), 3u64.to_le_bytes());
    let err = COUNT.reset(&mut st).unwrap_err();
    assert_eq!(err.code(), Errno::NOT_ALLOWED);
}

#[test]
fn typed_state_bad_value_names_the_entry() {
    let mut h = Harness::<Fraud>::new("{}").unwrap();
    h.set_state("u1", "count", "12");
    let err = h
        .process(&[TestRecord::new("u1", r#"{"card":"c","amount":1}"#)])
        .unwrap_err();
    assert!(
        err.ends_with(
            r#"state "count": state value is not an i64 (8 bytes little-endian): 2 bytes"#
        ),
        "{}",
        err
    );
}

#[test]
fn question_mark_on_foreign_errors() {
    let mut h = Harness::<Fraud>::new("{}").unwrap();
    for (value, want) in [
        ("int x", "invalid digit found in string"),
        ("mine", "mine went wrong"),
        ("float x", "invalid float literal"),
        ("io", "disk on fire"),
        (r#"{"amount":1}"#, "no card"),
        (r#"{"card":"c"}"#, "no amount"),
        (
            r#"{"card":["c"]}"#,
            r#"json: field "card": nested objects and arrays are not supported at byte 8"#,
        ),
    ] {
        let err = h.process(&[TestRecord::new("k", value)]).unwrap_err();
        assert!(err.ends_with(want), "{}: {}", value, err);
    }
    let err = h.process(&[TestRecord::new("k", [0xff])]).unwrap_err();
    assert!(err.contains("invalid utf-8"), "{}", err);
    // An SDK error can still be handed to code that wants a std::error::Error.
    let e: Box<dyn std::error::Error + Send + Sync> = Error::new("boom").into_std();
    assert_eq!(e.to_string(), "boom");
}

/// Context::emit stamps an output with the time of what the task handles: the record's
/// timestamp, an event-time firing's time, processing time in a processing-time firing or a
/// tick. The Go SDK's Emit follows the same rule.
#[test]
fn emit_timestamp_rule() {
    let mut h = Harness::<Fraud>::new("{}").unwrap();
    h.set_now(1_000);
    let out = h
        .process(&[TestRecord::new("a", "timers").timestamp(55)])
        .unwrap();
    assert_eq!(out[0].ts, 55);
    let out = h
        .process(&[TestRecord::new("b", "timers").timestamp(-1)])
        .unwrap();
    assert_eq!(out[0].ts, 1_000, "unknown record time is processing time");
    let fired = h.advance_watermark(0, 100).unwrap();
    assert_eq!(fired.outputs.len(), 2);
    assert!(fired.outputs.iter().all(|o| o.output == "ev" && o.ts == 70));
    let fired = h.advance_time(2_000_000_000_500).unwrap();
    assert!(fired
        .outputs
        .iter()
        .all(|o| o.output == "pt" && o.ts == 2_000_000_000_500));
}

#[test]
fn json_parse() {
    let o = Object::parse(
        " {\"card\" : \"c-17\", \"amount\":123.45,\"n\":-7,\"big\":12345678901234567890,\"ok\":true,\
         \"no\":false,\"note\":null,\"esc\":\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\ud83d\\ude00\",\"e\":1.5e3} \n",
    )
    .unwrap();
    assert_eq!(o.get_str("card"), Some("c-17"));
    assert_eq!(o.get_f64("amount"), Some(123.45));
    assert_eq!(o.get_i64("n"), Some(-7));
    assert_eq!(o.get_i64("amount"), None);
    assert_eq!(
        o.get("big"),
        Some(&Value::Number("12345678901234567890".into()))
    );
    assert_eq!(o.get_i64("big"), None);
    assert_eq!(o.get_bool("ok"), Some(true));
    assert_eq!(o.get_bool("no"), Some(false));
    assert!(o.is_null("note") && !o.is_null("card") && !o.is_null("missing"));
    assert_eq!(o.get_str("esc"), Some("a\"b\\c/d\n\té😀"));
    assert_eq!(o.get_f64("e"), Some(1500.0));
    // Lone surrogates become U+FFFD, as Go reads them.
    let lone = Object::parse(r#"{"a":"\ud83d\u0041\ude00x\ud83d"}"#).unwrap();
    assert_eq!(lone.get_str("a"), Some("\u{FFFD}A\u{FFFD}x\u{FFFD}"));
    assert_eq!(o.get_str("amount"), None);
    assert!(Object::parse("{}").unwrap().fields.is_empty());
}

/// The same inputs and messages as the Go SDK's TestParseJSONObjectErrors (without its
/// "wasmstream: " prefix).
#[test]
fn json_parse_errors() {
    for (input, want) in [
        (
            &b""[..],
            "json: expected '{' at the start of an object at the end of the input",
        ),
        (
            b"[1]",
            "json: expected '{' at the start of an object at byte 0",
        ),
        (
            b"{\"a\":1",
            "json: expected ',' or '}' after field \"a\" at the end of the input",
        ),
        (
            b"{\"a\":1,}",
            "json: expected a field name in double quotes at byte 7",
        ),
        (
            b"{a:1}",
            "json: expected a field name in double quotes at byte 1",
        ),
        (
            b"{\"a\" 1}",
            "json: expected ':' after field name \"a\" at byte 5",
        ),
        (
            b"{\"a\":{\"b\":1}}",
            "json: field \"a\": nested objects and arrays are not supported at byte 5",
        ),
        (
            b"{\"a\":[1]}",
            "json: field \"a\": nested objects and arrays are not supported at byte 5",
        ),
        (
            b"{\"a\":01}",
            "json: field \"a\": malformed number at byte 6",
        ),
        (
            b"{\"a\":1.}",
            "json: field \"a\": malformed number at byte 7",
        ),
        (
            b"{\"a\":-}",
            "json: field \"a\": malformed number at byte 6",
        ),
        (
            b"{\"a\":1e}",
            "json: field \"a\": malformed number at byte 7",
        ),
        (
            b"{\"a\":tru}",
            "json: field \"a\": expected a string, number, true, false or null at byte 5",
        ),
        (
            b"{\"a\":\"x}",
            "json: unterminated string at the end of the input",
        ),
        (b"{\"a\":\"\\x\"}", "json: unknown escape \\x at byte 7"),
        (b"{\"a\":\"\\u12\"}", "json: malformed \\u escape at byte 8"),
        (
            b"{\"a\":\"\x01\"}",
            "json: control character in a string (escape it) at byte 6",
        ),
        (
            b"{\"a\":1} x",
            "json: unexpected data after the object at byte 8",
        ),
    ] {
        let err = Object::parse(input).unwrap_err();
        assert_eq!(
            err.to_string(),
            want,
            "{:?}",
            String::from_utf8_lossy(input)
        );
        assert_eq!(err.code(), Errno::INVALID);
    }
}

#[test]
fn json_writer() {
    let mut w = Writer::new();
    assert_eq!(w.finish(), b"{}");
    w.str("card", "c-\"17\"\\\n\x01\x7fé")
        .f64("amount", 123.45)
        .i64("n", -3)
        .bool("ok", true)
        .null("x")
        .f64("nan", f64::NAN)
        .f64("big", 1e21)
        .f64("m", 1e6)
        .f64("small", 1.5e-7)
        .f64("z", 0.0);
    assert_eq!(
        String::from_utf8_lossy(w.finish()),
        r#"{"card":"c-\"17\"\\\n\u0001\u007fé","amount":123.45,"n":-3,"ok":true,"x":null,"nan":null,"big":1e+21,"m":1000000,"small":1.5e-7,"z":0}"#
    );
    w.str("a\tb", "v");
    let b = w.finish().to_vec();
    assert_eq!(b, br#"{"a\tb":"v"}"#);
    assert_eq!(Object::parse(&b).unwrap().fields[0].0, "a\tb");
}
