//! JSON helpers for records that are flat JSON objects of scalars, such as
//! `{"card":"c-17","amount":123.45,"ok":true,"note":null}`, with no dependency.
//!
//! [`Object::parse`] reads one (strings, numbers, booleans, null; `\uXXXX` escapes and surrogate
//! pairs; nested objects and arrays are refused with an error naming the field); [`Writer`]
//! builds one field by field with proper escaping. The Go SDK's `ParseJSONObject` and
//! `JSONWriter` read and write the same, byte for byte.
//!
//! ```
//! use wasmstream::json::{Object, Writer};
//! # fn f() -> Result<(), wasmstream::Error> {
//! let o = Object::parse(br#"{"card":"c-17","amount":123.45}"#)?;
//! assert_eq!(o.get_str("card"), Some("c-17"));
//! assert_eq!(o.get_f64("amount"), Some(123.45));
//!
//! let mut w = Writer::new();
//! w.str("card", "c-17").f64("total", 130.0).i64("n", 2);
//! assert_eq!(w.finish(), br#"{"card":"c-17","total":130,"n":2}"#);
//! # Ok(())
//! # }
//! ```

use crate::error::Error;
use crate::text;

/// One scalar value of a JSON object.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// A number, as written in the input (so large integers keep every digit).
    Number(String),
    /// A string, unescaped.
    String(String),
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number as an `f64`, if this is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The number as an `i64`, if this is an integer number within range (no fraction, no
    /// exponent).
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(s) => s.parse().ok(),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// A parsed flat JSON object: its fields in input order. When a name repeats, [`get`](Object::get)
/// and the typed getters see the last one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    /// The fields, in input order.
    pub fields: Vec<(String, Value)>,
}

impl Object {
    /// Parses `b`, a JSON object whose values are strings, numbers, booleans or null. Whitespace
    /// is allowed where JSON allows it; anything but whitespace after the closing brace is an
    /// error. Errors (`ERR_INVALID`) say what is wrong and at which byte offset.
    pub fn parse(b: impl AsRef<[u8]>) -> Result<Object, Error> {
        let mut p = Parser {
            b: b.as_ref(),
            i: 0,
        };
        let mut o = Object::default();
        p.ws();
        if !p.eat(b'{') {
            return Err(p.err("expected '{' at the start of an object"));
        }
        p.ws();
        if p.eat(b'}') {
            return p.end().map(|_| o);
        }
        loop {
            p.ws();
            if p.peek() != b'"' {
                return Err(p.err("expected a field name in double quotes"));
            }
            let name = p.string()?;
            p.ws();
            if !p.eat(b':') {
                return Err(p.err(&field_msg("expected ':' after field name ", &name, "")));
            }
            p.ws();
            let v = p.value(&name)?;
            o.fields.push((name, v));
            p.ws();
            if p.eat(b',') {
                continue;
            }
            if p.eat(b'}') {
                return p.end().map(|_| o);
            }
            let name = &o.fields[o.fields.len() - 1].0;
            return Err(p.err(&field_msg("expected ',' or '}' after field ", name, "")));
        }
    }

    /// The value of the field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

    /// The string field `name` (`None` when missing or not a string).
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }

    /// The number field `name` as an `f64` (`None` when missing or not a number).
    pub fn get_f64(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(Value::as_f64)
    }

    /// The number field `name` as an `i64` (`None` when missing, not a number or not an integer
    /// within range).
    pub fn get_i64(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(Value::as_i64)
    }

    /// The boolean field `name` (`None` when missing or not a boolean).
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        self.get(name).and_then(Value::as_bool)
    }

    /// Whether the field `name` is present and `null`.
    pub fn is_null(&self, name: &str) -> bool {
        self.get(name).map_or(false, Value::is_null)
    }
}

/// `<pre>"<name>"<post>` with the name quoted like Go's strconv.Quote for printable text.
fn field_msg(pre: &str, name: &str, post: &str) -> String {
    let mut s = String::from(pre);
    text::push_quoted(&mut s, name.as_bytes());
    s.push_str(post);
    s
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, msg: &str) -> Error {
        let mut s = String::from("json: ");
        s.push_str(msg);
        if self.i >= self.b.len() {
            s.push_str(" at the end of the input");
        } else {
            s.push_str(" at byte ");
            text::push_u64(&mut s, self.i as u64);
        }
        Error::new(s)
    }

    fn peek(&self) -> u8 {
        self.b.get(self.i).copied().unwrap_or(0)
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == c && self.i < self.b.len() {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn end(&mut self) -> Result<(), Error> {
        self.ws();
        if self.i != self.b.len() {
            return Err(self.err("unexpected data after the object"));
        }
        Ok(())
    }

    fn lit(&mut self, word: &[u8]) -> bool {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, name: &str) -> Result<Value, Error> {
        match self.peek() {
            b'"' => Ok(Value::String(self.string()?)),
            b't' if self.lit(b"true") => Ok(Value::Bool(true)),
            b'f' if self.lit(b"false") => Ok(Value::Bool(false)),
            b'n' if self.lit(b"null") => Ok(Value::Null),
            b'-' | b'0'..=b'9' => self.number(name),
            b'{' | b'[' => Err(self.err(&field_msg(
                "field ",
                name,
                ": nested objects and arrays are not supported",
            ))),
            _ => Err(self.err(&field_msg(
                "field ",
                name,
                ": expected a string, number, true, false or null",
            ))),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.peek().is_ascii_digit() && self.i < self.b.len() {
            self.i += 1;
        }
        self.i - start
    }

    /// A number with JSON's grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self, name: &str) -> Result<Value, Error> {
        let start = self.i;
        let bad = |p: &Parser| Err(p.err(&field_msg("field ", name, ": malformed number")));
        self.eat(b'-');
        if self.eat(b'0') {
            if self.peek().is_ascii_digit() {
                return bad(self);
            }
        } else if self.digits() == 0 {
            return bad(self);
        }
        if self.eat(b'.') && self.digits() == 0 {
            return bad(self);
        }
        if self.eat(b'e') || self.eat(b'E') {
            if !self.eat(b'+') {
                self.eat(b'-');
            }
            if self.digits() == 0 {
                return bad(self);
            }
        }
        // Only ASCII digits, signs, '.', 'e' were accepted.
        let s = String::from_utf8_lossy(&self.b[start..self.i]).into_owned();
        Ok(Value::Number(s))
    }

    /// A string literal at `self.i` (the opening quote), unescaped.
    fn string(&mut self) -> Result<String, Error> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = match self.b.get(self.i) {
                Some(&c) => c,
                None => return Err(self.err("unterminated string")),
            };
            match c {
                b'"' => {
                    self.i += 1;
                    // Invalid UTF-8 in the input is replaced, as Go's string conversion keeps it
                    // but a Rust String cannot.
                    return Ok(match String::from_utf8(out) {
                        Ok(s) => s,
                        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                    });
                }
                0..=0x1f => return Err(self.err("control character in a string (escape it)")),
                b'\\' => {}
                _ => {
                    out.push(c);
                    self.i += 1;
                    continue;
                }
            }
            self.i += 1;
            let e = match self.b.get(self.i) {
                Some(&e) => e,
                None => return Err(self.err("unterminated string")),
            };
            self.i += 1;
            match e {
                b'"' | b'\\' | b'/' => out.push(e),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'u' => {
                    let mut r = match self.hex4() {
                        Some(r) => r,
                        None => return Err(self.err("malformed \\u escape")),
                    };
                    if (0xD800..0xDC00).contains(&r) {
                        // A high surrogate pairs with a following \uDC00-\uDFFF; alone it is
                        // U+FFFD (and whatever follows it is read on its own), as in Go.
                        let hi = r;
                        r = 0xFFFD;
                        let save = self.i;
                        if self.lit(b"\\u") {
                            match self.hex4() {
                                Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                                    r = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                }
                                _ => self.i = save,
                            }
                        }
                    } else if (0xDC00..0xE000).contains(&r) {
                        r = 0xFFFD;
                    }
                    let ch = char::from_u32(r).unwrap_or('\u{FFFD}');
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
                _ => {
                    self.i -= 1;
                    let mut msg = String::from("unknown escape \\");
                    text::push_lossy(&mut msg, &[e]);
                    return Err(self.err(&msg));
                }
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.b.get(self.i..self.i + 4)?;
        let mut r = 0u32;
        for &c in h {
            r = r << 4 | (c as char).to_digit(16)?;
        }
        self.i += 4;
        Some(r)
    }
}

/// Builds a flat JSON object field by field:
///
/// ```
/// let mut w = wasmstream::json::Writer::new();
/// w.str("card", "c-17").f64("amount", 123.45).bool("flagged", true).null("note");
/// assert_eq!(w.finish(), br#"{"card":"c-17","amount":123.45,"flagged":true,"note":null}"#);
/// ```
///
/// [`finish`](Writer::finish) closes the object; the next field starts a new one, so one writer
/// can be reused without allocating.
#[derive(Clone, Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    open: bool,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer::default()
    }

    fn name(&mut self, n: &str) {
        if !self.open {
            self.buf.clear();
            self.buf.push(b'{');
            self.open = true;
        } else {
            self.buf.push(b',');
        }
        push_string(&mut self.buf, n);
        self.buf.push(b':');
    }

    /// Adds a string field.
    pub fn str(&mut self, name: &str, v: &str) -> &mut Writer {
        self.name(name);
        push_string(&mut self.buf, v);
        self
    }

    /// Adds an integer field.
    pub fn i64(&mut self, name: &str, v: i64) -> &mut Writer {
        self.name(name);
        let mut s = String::new();
        text::push_i64(&mut s, v);
        self.buf.extend_from_slice(s.as_bytes());
        self
    }

    /// Adds a number field in the shortest form that reads back as `v` (exponent form below 1e-6
    /// and from 1e21, like JavaScript and Go's encoding/json); NaN and infinities, which JSON
    /// cannot express, are written as `null`.
    pub fn f64(&mut self, name: &str, v: f64) -> &mut Writer {
        self.name(name);
        push_f64(&mut self.buf, v);
        self
    }

    /// Adds a boolean field.
    pub fn bool(&mut self, name: &str, v: bool) -> &mut Writer {
        self.name(name);
        self.buf
            .extend_from_slice(if v { b"true" as &[u8] } else { b"false" });
        self
    }

    /// Adds a `null` field.
    pub fn null(&mut self, name: &str) -> &mut Writer {
        self.name(name);
        self.buf.extend_from_slice(b"null");
        self
    }

    /// Closes the object and returns it (`{}` when no field was added), valid until the writer's
    /// next use ([`Context::emit`](crate::Context::emit) and `put` copy it).
    pub fn finish(&mut self) -> &[u8] {
        if !self.open {
            self.buf.clear();
            self.buf.push(b'{');
        }
        self.buf.push(b'}');
        self.open = false;
        &self.buf
    }
}

/// Appends `v` as a JSON number (see [`Writer::f64`]).
fn push_f64(out: &mut Vec<u8>, v: f64) {
    use std::io::Write;
    if !v.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let a = v.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        // Rust writes 1e21 and 1.5e-7; JSON writers (and Go) write 1e+21 and 1.5e-7.
        let start = out.len();
        let _ = write!(out, "{:e}", v);
        if let Some(p) = out[start..].iter().position(|&c| c == b'e') {
            let p = start + p + 1;
            if out.get(p) != Some(&b'-') {
                out.insert(p, b'+');
            }
        }
    } else {
        let _ = write!(out, "{}", v);
    }
}

/// Appends `s` as a JSON string literal, quoted and escaped: `"` and `\`, `\n`, `\r`, `\t`, other
/// control characters and DEL as `\u00XX`.
pub fn push_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &c in s.as_bytes() {
        match c {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', c]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..=0x1f | 0x7f => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 15) as usize],
            ]),
            _ => out.push(c),
        }
    }
    out.push(b'"');
}
