//! sessions: the wasmstream example task of `examples/wasm/sessions`, in Rust, on the SDK's
//! session windows ([`wasmstream::window`]). Its README is the specification; this port gives
//! the same outputs and the same state for the same input and config (`cmd/wasmstream`'s
//! `TestTimerExamples` runs both through the host on the Go example's files).
//!
//! An event of a user (the record's key) at its timestamp joins every open session of the user it
//! is less than `gap_minutes` from, merging them, or starts one; a session closes when the
//! watermark reaches its last event + gap and its summary goes to output `sessions`. A late event,
//! or one without a timestamp, goes to output `late` as it is. Build:
//!
//! ```sh
//! cargo build --release --target wasm32-unknown-unknown   # target/…/release/sessions.wasm
//! ```

use wasmstream::state::Codec;
use wasmstream::window::{Window, WindowKind, Windows};
use wasmstream::{Context, Error, Firing, Record, Task};

/// The output the session summaries go to.
pub const OUTPUT: &str = "sessions";
/// The output late events and events without a timestamp go to.
pub const LATE_OUTPUT: &str = "late";

const DEFAULT_GAP_MINUTES: u64 = 30;
const MAX_GAP_MINUTES: u64 = 1_000_000_000;

/// A session's accumulator: its number of events and its latest event time (its earliest is the
/// window's start). Stored as 16 bytes: count and last, each an i64 little-endian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    count: i64,
    last: i64,
}

impl Codec for Summary {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.last.to_le_bytes());
    }
    fn decode(b: &[u8]) -> Result<Summary, Error> {
        if b.len() != 16 {
            return Err(Error::new(format!(
                "sessions: a session summary is 16 bytes, not {}",
                b.len()
            )));
        }
        let mut c = [0u8; 8];
        let mut l = [0u8; 8];
        c.copy_from_slice(&b[..8]);
        l.copy_from_slice(&b[8..]);
        Ok(Summary {
            count: i64::from_le_bytes(c),
            last: i64::from_le_bytes(l),
        })
    }
}

/// The task: the users' sessions.
pub struct Sessions(Windows<Summary>);

/// Reads `gap_minutes` from the task config: an integer from 1 to 1000000000, default 30.
pub fn parse_gap_minutes(config: &[u8]) -> Result<u64, String> {
    let blank = config.iter().all(|b| b.is_ascii_whitespace());
    if blank {
        return Ok(DEFAULT_GAP_MINUTES);
    }
    let obj = wasmstream::json::Object::parse(config).map_err(|e| e.to_string())?;
    let raw = match obj.get("gap_minutes") {
        None => return Ok(DEFAULT_GAP_MINUTES),
        Some(_) => obj.get_f64("gap_minutes"),
    };
    match raw {
        Some(f) if f.fract() == 0.0 && f >= 1.0 && f <= MAX_GAP_MINUTES as f64 => Ok(f as u64),
        _ => Err(format!(
            "gap_minutes must be an integer from 1 to {}",
            MAX_GAP_MINUTES
        )),
    }
}

impl Task for Sessions {
    fn init(config: &[u8]) -> Result<Self, Error> {
        let gap = parse_gap_minutes(config)
            .map_err(|e| Error::new(String::from("sessions: invalid config: ") + &e))?;
        Ok(Sessions(Windows {
            name: "session",
            kind: WindowKind::Session(gap as i64 * 60_000),
            late: Some(LATE_OUTPUT),
            fold: |s: Summary, rec| {
                Ok(Summary {
                    count: s.count + 1,
                    last: s.last.max(rec.timestamp()),
                })
            },
            merge: Some(|a: Summary, b: Summary| {
                Ok(Summary {
                    count: a.count + b.count,
                    last: a.last.max(b.last),
                })
            }),
            emit,
        }))
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        self.0.add(rec, ctx)
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        self.0.fire(f, ctx).map(|_| ()) // any other timer is not this task's: ignored
    }
}

/// Emits the summary of the context key's session, stamped with its close time.
fn emit(ctx: &mut Context, w: Window, s: Summary) -> Result<(), Error> {
    let user = ctx.key();
    let mut v = String::from("{\"user\":");
    push_json_string(&mut v, user);
    v.push_str(&format!(
        ",\"count\":{},\"first\":{},\"last\":{}}}",
        s.count, w.start, s.last
    ));
    ctx.emit_with(OUTPUT, user, v, None, w.end)
}

/// Appends `s` as a JSON string the way the Go example does: `"` and `\` escaped, control bytes
/// as `\u00XX`, every other byte as it is (invalid UTF-8 replaced).
fn push_json_string(out: &mut String, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut b = Vec::with_capacity(s.len() + 2);
    b.push(b'"');
    for &c in s {
        match c {
            b'"' | b'\\' => b.extend_from_slice(&[b'\\', c]),
            0..=0x1f => b.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 15) as usize],
            ]),
            _ => b.push(c),
        }
    }
    b.push(b'"');
    out.push_str(&String::from_utf8_lossy(&b));
}

wasmstream::export_task!(Sessions);

#[cfg(test)]
mod tests;
