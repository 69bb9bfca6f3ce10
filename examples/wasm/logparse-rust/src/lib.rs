//! logparse: a wasmstream example task that parses web access-log lines (Common or Combined Log
//! Format) and keeps per-key traffic counters — the kind of CPU-bound, allocation-free byte work
//! Rust modules are chosen for.
//!
//! For each record the value is one access-log line (see [`clf`] for the exact grammar). For a
//! valid line the task updates the key's state, all values in decimal ASCII:
//!
//! | name | value |
//! |---|---|
//! | `req` | number of valid lines |
//! | `bytes` | sum of their response sizes (`-` counts as 0; saturates at 2^64-1) |
//! | `1xx` … `5xx` | number of responses per status class (only classes seen are stored) |
//! | `invalid` | number of invalid lines (with `on_invalid` = `count`) |
//!
//! and emits one summary to the configured output (default `summary`), with the record's key and
//! the line's own time (converted to UTC ms) as timestamp:
//!
//! ```text
//! <method> <target> <status> <size> req=<req> bytes=<bytes>[ 1xx=<n>]…[ 5xx=<n>][ invalid=<n>]
//! GET /index.html 200 2326 req=3 bytes=5230 2xx=2 4xx=1
//! ```
//!
//! where `<size>` is the line's size field as written (`-` or digits); `req` and `bytes` always
//! appear, the class counters and `invalid` only when not zero. An invalid line is counted (state `invalid`, a warning in the host log,
//! no output) or fails the batch, per the config's `on_invalid`.
//!
//! The record's counters are read with one `state_scan` of the key (they are few) instead of one
//! `state_get` per name, and written with one `state_put` per changed counter. Parsing borrows
//! from the record, and the summary is formatted into a buffer the task reuses, so a record costs
//! no heap allocation once the buffers are warm.

pub mod clf;
pub mod config;

use wasmstream::{Context, Error, Level, Record, Task};

use config::{Config, OnInvalid};

/// The names of the status-class counters, in summary order.
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The task: its config and the summary buffer it reuses.
pub struct LogParse {
    config: Config,
    out: Vec<u8>,
}

/// The counters of one key.
#[derive(Default)]
struct Counters {
    req: u64,
    bytes: u64,
    class: [u64; 5],
    invalid: u64,
}

impl Task for LogParse {
    fn init(cfg: &[u8]) -> Result<Self, Error> {
        let config = config::parse(cfg)
            .map_err(|e| Error::new(String::from("logparse: invalid config: ") + &e))?;
        Ok(LogParse {
            config,
            out: Vec::with_capacity(256),
        })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let line = match clf::parse(rec.value()) {
            Ok(a) => a,
            Err(why) => return self.invalid(rec, ctx, why),
        };
        let mut c = load(ctx)?;
        c.req += 1;
        c.bytes = c.bytes.saturating_add(line.bytes);
        let class = (line.status / 100 - 1) as usize;
        c.class[class] += 1;
        ctx.put_u64("req", c.req)?;
        ctx.put_u64("bytes", c.bytes)?;
        ctx.put_u64(CLASSES[class], c.class[class])?;

        let out = &mut self.out;
        out.clear();
        out.extend_from_slice(line.method);
        out.push(b' ');
        out.extend_from_slice(line.target);
        out.push(b' ');
        push_u64(out, line.status as u64);
        out.push(b' ');
        out.extend_from_slice(line.size);
        push_counter(out, "req", c.req);
        push_counter(out, "bytes", c.bytes);
        for (name, &n) in CLASSES.iter().zip(&c.class) {
            if n > 0 {
                push_counter(out, name, n);
            }
        }
        if c.invalid > 0 {
            push_counter(out, "invalid", c.invalid);
        }
        ctx.emit_with(
            &self.config.output,
            rec.key(),
            &self.out,
            None,
            line.time_ms,
        )
    }
}

impl LogParse {
    fn invalid(&mut self, rec: &Record, ctx: &mut Context, why: clf::Reason) -> Result<(), Error> {
        let mut msg = String::from("logparse: not an access-log line (");
        msg.push_str(why);
        msg.push(')');
        match self.config.on_invalid {
            OnInvalid::Fail => Err(Error::new(msg)),
            OnInvalid::Count => {
                let n = ctx.get_u64("invalid")?.unwrap_or(0) + 1;
                ctx.put_u64("invalid", n)?;
                msg.push_str(" at offset ");
                let mut digits = [0u8; 20];
                msg.push_str(
                    std::str::from_utf8(wasmstream::format_u64(
                        rec.offset().max(0) as u64,
                        &mut digits,
                    ))
                    .unwrap_or_default(),
                );
                ctx.log(Level::Warn, &msg);
                Ok(())
            }
        }
    }
}

/// Reads the key's counters with one scan. Names the task does not know are left alone.
fn load(ctx: &mut Context) -> Result<Counters, Error> {
    let mut c = Counters::default();
    let mut scan = ctx.scan("");
    while let Some((name, value)) = scan.next()? {
        let slot = match name {
            b"req" => &mut c.req,
            b"bytes" => &mut c.bytes,
            b"invalid" => &mut c.invalid,
            _ => match CLASSES.iter().position(|n| n.as_bytes() == name) {
                Some(i) => &mut c.class[i],
                None => continue,
            },
        };
        *slot = match wasmstream::parse_u64(value) {
            Some(n) => n,
            None => {
                let mut msg = String::from("logparse: state ");
                msg.push_str(std::str::from_utf8(name).unwrap_or("(not UTF-8)"));
                msg.push_str(" is not a decimal number");
                return Err(Error::new(msg));
            }
        };
    }
    Ok(c)
}

fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(wasmstream::format_u64(n, &mut digits));
}

fn push_counter(out: &mut Vec<u8>, name: &str, n: u64) {
    out.push(b' ');
    out.extend_from_slice(name.as_bytes());
    out.push(b'=');
    push_u64(out, n);
}

wasmstream::export_task!(LogParse);

#[cfg(test)]
mod tests;
