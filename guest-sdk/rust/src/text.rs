//! Small text builders for error messages, written by hand so that a module does not pull in
//! `core::fmt`'s Debug escaping and Unicode tables (several KB of wasm) just to report an error.

/// Appends bytes as text: valid UTF-8 as is, each invalid byte as `\xNN`.
pub(crate) fn push_lossy(s: &mut String, mut b: &[u8]) {
    while !b.is_empty() {
        match std::str::from_utf8(b) {
            Ok(t) => {
                s.push_str(t);
                return;
            }
            Err(e) => {
                let (valid, rest) = b.split_at(e.valid_up_to());
                s.push_str(std::str::from_utf8(valid).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len());
                for &c in &rest[..bad] {
                    push_hex_escape(s, c);
                }
                b = &rest[bad..];
            }
        }
    }
}

/// Appends bytes in double quotes: printable ASCII as is, `"` and `\` escaped, everything else
/// as `\xNN` (so a message always shows exactly which bytes were there).
pub(crate) fn push_quoted(s: &mut String, b: &[u8]) {
    s.push('"');
    for &c in b {
        match c {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(c as char);
            }
            0x20..=0x7e => s.push(c as char),
            _ => push_hex_escape(s, c),
        }
    }
    s.push('"');
}

fn push_hex_escape(s: &mut String, c: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    s.push_str("\\x");
    s.push(HEX[(c >> 4) as usize] as char);
    s.push(HEX[(c & 15) as usize] as char);
}

/// Appends `n` in decimal.
pub(crate) fn push_u64(s: &mut String, n: u64) {
    let mut buf = [0u8; 20];
    for &c in crate::context::format_u64(n, &mut buf) {
        s.push(c as char);
    }
}

/// Appends `n` in decimal, with a `-` when negative.
pub(crate) fn push_i64(s: &mut String, n: i64) {
    if n < 0 {
        s.push('-');
    }
    push_u64(s, n.unsigned_abs());
}
