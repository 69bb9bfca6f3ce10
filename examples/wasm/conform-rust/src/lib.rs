//! conform: the Rust implementation of the wasmstream conformance guest contract
//! (`conformance/README.md` in the repository). Each record's value is one command, run against
//! the state of the record's key; its result is emitted to output `result` with the record's key
//! and timestamp.
//!
//! | command | effect |
//! |---|---|
//! | `put <name> <value>` | state put, emits `ok` |
//! | `get <name>` | emits the value, or `missing` |
//! | `del <name>` | state delete, emits `ok` |
//! | `scan <prefix>` | emits `name=value;name=value…` in ascending name order |
//! | `many <n> <prefix>` | puts `<prefix>00000`… with values `0`…, scans the prefix, emits `<count> <first> <last>` |
//! | `big <n>` | puts `big` = n bytes of `x`, reads it back, emits its length |
//! | `emit <out> <value> [h=v …]` | emits to `<out>` with those headers, nothing to `result` |
//! | `config` | emits the task config |
//! | `meta` | emits `<source> <partition> <offset> <timestamp>` |
//! | `fail <msg>` | the record fails with `<msg>` |
//! | `foreign <key> <name>` | state get on another key: `ok <value>`, `ok missing` or the error's ABI name |
//! | `emitdef <out> <value>` | emits to `<out>` with the SDK's default timestamp (`Context::emit`), nothing to `result` |
//! | `count <name> <n>` | adds n to the typed `Counter` `<name>`, emits the new value |
//! | `append <list> <item>` | appends to the typed `List<String>` `<list>`, emits its items joined with `;` |
//! | `mput <map> <k> <v>` | puts k=v in the typed `Map<String>` `<map>`, emits `k=v;k=v…` in key order |
//! | `json <object>` | parses a flat JSON object, emits it rewritten by the SDK's JSON writer (numbers as `f64`); a malformed object fails the record with `bad json` |
//! | `timer <name> <at>` | sets the event-time timer `<name>` of the record key at `<at>`, emits `ok` |
//! | `late` | emits `late` if the record carries the late flag, `on time` if not |
//!
//! A timer firing emits `fired <name> <time>` under its key, with the SDK's default timestamp.
//!
//! A record with a null value (a tombstone, ABI 0.5) is no command: it deletes every state entry
//! of its key and emits a tombstone (`Context::emit_tombstone`) to `result`. An empty value is no
//! tombstone.
//!
//! Anything else fails the record with `unknown command`; a host error from any other SDK call
//! fails it with the error's ABI name (the SDK's `Error` for a host code displays exactly that).
//!
//! ```sh
//! cargo build --release --target wasm32-unknown-unknown   # target/…/release/conform_rust.wasm
//! ```

use wasmstream::json::{Object, Value, Writer};
use wasmstream::state::{Counter, List, Map};
use wasmstream::{
    Context, Error, Firing, HeadersBuilder, MetricCounter, MetricHistogram, Record, Task,
};

/// The output every command's result goes to.
pub const OUTPUT: &str = "result";

/// Most names `many` may put.
const MAX_MANY: u64 = 99_999;
/// Largest value `big` may build (the host refuses anything over its value limit anyway).
const MAX_BIG: u64 = 16 << 20;
/// Largest number `count` adds.
const MAX_ADD: u64 = 999_999_999;
/// Latest time `timer` sets.
const MAX_AT: u64 = 999_999_999;

/// The task. It keeps nothing between records.
pub struct Conform {
    /// The counter the metric command adds to (ABI 0.3).
    metric: MetricCounter,
    /// The histogram the observe command observes into (ABI 0.3).
    observed: MetricHistogram,
}

impl Task for Conform {
    fn init(_config: &[u8]) -> Result<Self, Error> {
        Ok(Conform {
            metric: MetricCounter::new("conform_metric", &[("contract", "conform")])?,
            observed: MetricHistogram::new(
                "conform_observed",
                &[10.0, 100.0, 1000.0],
                &[("contract", "conform")],
            )?,
        })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        if rec.value_null() {
            // Listed first, then deleted: no write during a scan.
            for (name, _) in ctx.scan_all("")? {
                ctx.delete(name)?;
            }
            return ctx.emit_tombstone(OUTPUT, rec.key());
        }
        let (cmd, args) = cut(rec.value());
        match cmd {
            b"put" => {
                let (name, value) = cut(args);
                ctx.put(name, value)?;
                result(ctx, rec, "ok")
            }
            b"get" => {
                let v = ctx.get(args)?.map(|v| v.to_vec());
                match v {
                    Some(v) => result(ctx, rec, v),
                    None => result(ctx, rec, "missing"),
                }
            }
            b"del" => {
                ctx.delete(args)?;
                result(ctx, rec, "ok")
            }
            b"scan" => {
                let mut out = Vec::new();
                let mut scan = ctx.scan(args);
                while let Some((name, value)) = scan.next()? {
                    if !out.is_empty() {
                        out.push(b';');
                    }
                    out.extend_from_slice(name);
                    out.push(b'=');
                    out.extend_from_slice(value);
                }
                result(ctx, rec, out)
            }
            b"many" => {
                let (count, prefix) = cut(args);
                let n = number(count, MAX_MANY)?;
                let mut name = Vec::with_capacity(prefix.len() + 5);
                let mut digits = [0u8; 20];
                for i in 0..n {
                    name.clear();
                    name.extend_from_slice(prefix);
                    pad5(&mut name, i);
                    ctx.put(&name, wasmstream::format_u64(i, &mut digits))?;
                }
                let (mut seen, mut first, mut last) = (0u64, Vec::new(), Vec::new());
                let mut scan = ctx.scan(prefix);
                while let Some((name, _)) = scan.next()? {
                    if seen == 0 {
                        first = name.to_vec();
                    }
                    last.clear();
                    last.extend_from_slice(name);
                    seen += 1;
                }
                let mut out = wasmstream::format_u64(seen, &mut digits).to_vec();
                out.push(b' ');
                out.extend_from_slice(&first);
                out.push(b' ');
                out.extend_from_slice(&last);
                result(ctx, rec, out)
            }
            b"big" => {
                let n = number(args, MAX_BIG)?;
                ctx.put("big", vec![b'x'; n as usize])?;
                let len = ctx.get("big")?.map(|v| v.len());
                match len {
                    Some(len) => {
                        let mut digits = [0u8; 20];
                        let out = wasmstream::format_u64(len as u64, &mut digits).to_vec();
                        result(ctx, rec, out)
                    }
                    None => result(ctx, rec, "missing"),
                }
            }
            b"emit" => {
                let mut fields = args.split(|&c| c == b' ');
                let output = fields.next().unwrap_or_default();
                let value = fields.next().unwrap_or_default();
                let mut headers = HeadersBuilder::new();
                for f in fields {
                    let (name, value) = match f.iter().position(|&c| c == b'=') {
                        Some(i) => (&f[..i], &f[i + 1..]),
                        None => (f, &b""[..]),
                    };
                    headers.add(name, value);
                }
                let hdr = if headers.is_empty() {
                    None
                } else {
                    Some(&headers)
                };
                ctx.emit_with(output, rec.key(), value, hdr, rec.timestamp())
            }
            b"config" => result(ctx, rec, wasmstream::config()),
            b"meta" => {
                let mut out = rec.source().to_vec();
                out.push(b' ');
                out.extend_from_slice(rec.partition().to_string().as_bytes());
                out.push(b' ');
                out.extend_from_slice(rec.offset().to_string().as_bytes());
                out.push(b' ');
                out.extend_from_slice(rec.timestamp().to_string().as_bytes());
                result(ctx, rec, out)
            }
            b"fail" => Err(Error::new(String::from_utf8_lossy(args).into_owned())),
            b"pfail" => Err(Error::permanent(String::from_utf8_lossy(args).into_owned())),
            b"foreign" => {
                let (key, name) = cut(args);
                let got = ctx.with_key(key).get(name).map(|v| v.map(|v| v.to_vec()));
                let out = match got {
                    Ok(Some(v)) => [&b"ok "[..], &v[..]].concat(),
                    Ok(None) => b"ok missing".to_vec(),
                    Err(e) => e.to_string().into_bytes(),
                };
                result(ctx, rec, out)
            }
            b"emitdef" => {
                let (output, value) = cut(args);
                ctx.emit(output, rec.key(), value)
            }
            b"count" => {
                let (name, num) = cut(args);
                let d = number(num, MAX_ADD)?;
                let n = Counter::named(text(name)?).add(ctx, d as i64)?;
                result(ctx, rec, n.to_string())
            }
            b"metric" => {
                let d = number(args, MAX_ADD)?;
                self.metric.add(d as i64)?;
                result(ctx, rec, "ok")
            }
            b"observe" => {
                let d = number(args, MAX_ADD)?;
                self.observed.observe(d as f64)?;
                result(ctx, rec, "ok")
            }
            b"append" => {
                let (name, item) = cut(args);
                let list: List<String> = List::named(text(name)?);
                list.append(ctx, &text(item)?)?;
                let items = list.items(ctx)?;
                result(ctx, rec, items.join(";"))
            }
            b"mput" => {
                let (name, rest) = cut(args);
                let (k, v) = cut(rest);
                let map: Map<String> = Map::named(text(name)?);
                map.put(ctx, &text(k)?, &text(v)?)?;
                let parts: Vec<String> = map
                    .entries(ctx)?
                    .into_iter()
                    .map(|(k, v)| k + "=" + &v)
                    .collect();
                result(ctx, rec, parts.join(";"))
            }
            b"json" => {
                let o = Object::parse(args).map_err(|_| Error::new("bad json"))?;
                let mut w = Writer::new();
                for (name, v) in &o.fields {
                    match v {
                        Value::String(s) => w.str(name, s),
                        Value::Number(_) => w.f64(name, v.as_f64().unwrap_or(f64::NAN)),
                        Value::Bool(b) => w.bool(name, *b),
                        Value::Null => w.null(name),
                    };
                }
                let out = w.finish().to_vec();
                result(ctx, rec, out)
            }
            b"timer" => {
                let (name, num) = cut(args);
                let at = number(num, MAX_AT)?;
                ctx.set_timer(name, wasmstream::Domain::EventTime, at as i64, b"")?;
                result(ctx, rec, "ok")
            }
            b"late" => result(ctx, rec, if rec.is_late() { "late" } else { "on time" }),
            _ => Err(Error::new("unknown command")),
        }
    }

    fn on_timer(&mut self, firing: &Firing<'_>, ctx: &mut Context<'_>) -> Result<(), Error> {
        let mut out = b"fired ".to_vec();
        out.extend_from_slice(firing.name());
        out.push(b' ');
        out.extend_from_slice(firing.time().to_string().as_bytes());
        ctx.emit(OUTPUT, firing.key(), out)
    }
}

/// Emits `value` to [`OUTPUT`] with the record's key and timestamp.
fn result(ctx: &mut Context, rec: &Record, value: impl AsRef<[u8]>) -> Result<(), Error> {
    ctx.emit(OUTPUT, rec.key(), value)
}

/// `s` as text; the cases only give UTF-8.
fn text(s: &[u8]) -> Result<String, Error> {
    Ok(std::str::from_utf8(s)?.to_string())
}

/// Splits `s` at its first space; without a space the rest is empty.
pub fn cut(s: &[u8]) -> (&[u8], &[u8]) {
    match s.iter().position(|&c| c == b' ') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, &b""[..]),
    }
}

/// Parses 1 to 9 ASCII digits with a value of at most `limit`; anything else is `bad number`.
pub fn number(s: &[u8], limit: u64) -> Result<u64, Error> {
    match wasmstream::parse_u64(s) {
        Some(n) if s.len() <= 9 && n <= limit => Ok(n),
        _ => Err(Error::new("bad number")),
    }
}

/// Appends `i` (at most 99999) as exactly five decimal digits.
fn pad5(out: &mut Vec<u8>, i: u64) {
    let mut digits = [0u8; 20];
    let d = wasmstream::format_u64(i, &mut digits);
    out.extend(std::iter::repeat(b'0').take(5 - d.len()));
    out.extend_from_slice(d);
}

wasmstream::export_task!(Conform);

#[cfg(test)]
mod tests;
