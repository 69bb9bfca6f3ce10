//! cpuheavy: the benchmarks' CPU-heavy task in Rust (the port of the Go `testguests/cpuheavy`).
//! Per record it hashes the record's value `rounds` times over (FNV-1a, 64 bits, each round
//! starting from the last round's hash) and emits the final hash, 16 hex digits, with the
//! record's key to output `hash`. It touches no state. `rounds` comes from the task's config
//! (`{"rounds": N}`, default 220).

use wasmstream::{Context, Error, Record, Task};

pub struct CpuHeavy {
    rounds: u32,
}

const DEFAULT_ROUNDS: u32 = 220;

/// The value of `"rounds"` in the flat JSON config object, if there.
fn rounds_of(config: &[u8]) -> Result<Option<u32>, Error> {
    let text = core::str::from_utf8(config).map_err(|_| Error::new("cpuheavy: config is not UTF-8"))?;
    let at = match text.find("\"rounds\"") {
        Some(i) => i + "\"rounds\"".len(),
        None => return Ok(None),
    };
    let rest = text[at..].trim_start();
    let rest = rest.strip_prefix(':').ok_or_else(|| Error::new("cpuheavy: config \"rounds\" has no value"))?.trim_start();
    let digits: &str = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
    match digits.parse::<u32>() {
        Ok(n) if (1..=1_000_000).contains(&n) => Ok(Some(n)),
        _ => Err(Error::new("cpuheavy: config \"rounds\" must be 1 to 1000000")),
    }
}

impl Task for CpuHeavy {
    fn init(config: &[u8]) -> Result<Self, Error> {
        Ok(CpuHeavy { rounds: rounds_of(config)?.unwrap_or(DEFAULT_ROUNDS) })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let v = rec.value();
        let mut h: u64 = 14695981039346656037;
        for _ in 0..self.rounds {
            for &c in v {
                h = (h ^ c as u64).wrapping_mul(1099511628211);
            }
        }
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 16];
        for i in (0..16).rev() {
            out[i] = HEX[(h & 15) as usize];
            h >>= 4;
        }
        ctx.emit("hash", rec.key(), &out)
    }
}

wasmstream::export_task!(CpuHeavy);
