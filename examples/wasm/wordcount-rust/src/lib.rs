//! wordcount: the wasmstream example task, in Rust. It counts words per record key.
//!
//! For each record the value is text. It is split into words on every byte that is not an ASCII
//! letter or digit, ASCII letters are lowercased, and words shorter than the config's `min_len`
//! bytes are skipped. For each remaining word, in order of appearance, the count in the key's
//! state (state name = the word, value = the count in decimal ASCII, missing = 0) is incremented
//! and `<word> <count>` is emitted to output `counts` with the record's key and timestamp.
//!
//! It is a byte-for-byte port of the Go example `examples/wasm/wordcount`: same config rules,
//! same outputs, same state, same error messages. Build:
//!
//! ```sh
//! cargo build --release --target wasm32-unknown-unknown   # target/…/release/wordcount.wasm
//! ```

mod config;

use wasmstream::{Context, Error, Record, Task};

pub use config::parse_min_len;

/// The output the counts are emitted to.
pub const OUTPUT: &str = "counts";

/// The task: its config, and buffers reused between words and records.
pub struct WordCount {
    /// Words shorter than this many bytes are skipped.
    min_len: u64,
    word: Vec<u8>,
    out: Vec<u8>,
}

impl Task for WordCount {
    fn init(config: &[u8]) -> Result<Self, Error> {
        let min_len = parse_min_len(config)
            .map_err(|e| Error::new(String::from("wordcount: invalid config: ") + &e))?;
        Ok(WordCount {
            min_len,
            word: Vec::new(),
            out: Vec::new(),
        })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let text = rec.value();
        let mut i = 0;
        while i < text.len() {
            if !text[i].is_ascii_alphanumeric() {
                i += 1;
                continue;
            }
            let start = i;
            while i < text.len() && text[i].is_ascii_alphanumeric() {
                i += 1;
            }
            if ((i - start) as u64) < self.min_len {
                continue;
            }
            self.word.clear();
            self.word
                .extend(text[start..i].iter().map(u8::to_ascii_lowercase));

            let n = load(ctx, &self.word)?.wrapping_add(1);
            let mut digits = [0u8; 20];
            let count = wasmstream::format_u64(n, &mut digits);
            ctx.put(&self.word, count)?;

            self.out.clear();
            self.out.extend_from_slice(&self.word);
            self.out.push(b' ');
            self.out.extend_from_slice(count);
            ctx.emit(OUTPUT, rec.key(), &self.out)?;
        }
        Ok(())
    }
}

/// The stored count of `word`, 0 when there is none.
fn load(ctx: &mut Context, word: &[u8]) -> Result<u64, Error> {
    let v = match ctx.get(word)? {
        Some(v) => v,
        None => return Ok(0),
    };
    match wasmstream::parse_u64(v) {
        Some(n) => Ok(n),
        None => {
            let mut msg = String::from("wordcount: the count of ");
            msg.push_str(&go_quote(word));
            msg.push_str(" is not a number: ");
            msg.push_str(&go_quote(v));
            Err(Error::new(msg))
        }
    }
}

/// Quotes bytes like Go's `strconv.Quote` does for the texts met here: valid UTF-8 as is
/// (Go also escapes non-printable non-ASCII characters, which this skips), `"` and `\` escaped,
/// ASCII control characters and invalid bytes as escapes.
fn go_quote(mut b: &[u8]) -> String {
    let mut s = String::from("\"");
    while !b.is_empty() {
        let (valid, bad) = match std::str::from_utf8(b) {
            Ok(v) => (v, 0),
            Err(e) => {
                let v = std::str::from_utf8(&b[..e.valid_up_to()]).unwrap_or_default();
                (v, e.error_len().unwrap_or(b.len() - e.valid_up_to()))
            }
        };
        for c in valid.chars() {
            match c {
                '"' => s.push_str("\\\""),
                '\\' => s.push_str("\\\\"),
                '\x07' => s.push_str("\\a"),
                '\x08' => s.push_str("\\b"),
                '\x0c' => s.push_str("\\f"),
                '\n' => s.push_str("\\n"),
                '\r' => s.push_str("\\r"),
                '\t' => s.push_str("\\t"),
                '\x0b' => s.push_str("\\v"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => push_hex(&mut s, c as u8),
                c => s.push(c),
            }
        }
        let rest = &b[valid.len()..];
        for &c in &rest[..bad] {
            push_hex(&mut s, c);
        }
        b = &rest[bad..];
    }
    s.push('"');
    s
}

fn push_hex(s: &mut String, c: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    s.push_str("\\x");
    s.push(HEX[(c >> 4) as usize] as char);
    s.push(HEX[(c & 15) as usize] as char);
}

wasmstream::export_task!(WordCount);

#[cfg(test)]
mod tests;
