//! The task config: `min_len`, parsed by hand (no JSON dependency). A line-by-line port of the Go
//! example's parser, so both accept and reject the same configs with the same messages.

/// Reads min_len from the task config, a JSON object.
///
/// Accepted: an empty or all-white-space config (= `{}`); an object whose member `"min_len"`, if
/// present, is a JSON integer from 0 to 4294967295 with no sign, fraction or exponent. 0 behaves
/// like 1 (a word has at least one byte). Other members may hold any JSON value and are ignored;
/// a repeated min_len counts the last time. Member names are compared as written, escapes
/// undecoded. The error is a message ending in `at byte <offset>`.
pub fn parse_min_len(cfg: &[u8]) -> Result<u64, String> {
    let mut p = Parser { b: cfg, i: 0 };
    p.space();
    if p.i == p.b.len() {
        return Ok(1);
    }
    let mut n = 1;
    if !p.eat(b'{') {
        return Err(p.error("the config is not a JSON object"));
    }
    p.space();
    if !p.eat(b'}') {
        loop {
            p.space();
            let name = p.str()?;
            p.space();
            if !p.eat(b':') {
                return Err(p.error("expected ':'"));
            }
            p.space();
            if name == b"min_len" {
                n = p.min_len()?;
            } else {
                p.value(0)?;
            }
            p.space();
            if p.eat(b'}') {
                break;
            }
            if !p.eat(b',') {
                return Err(p.error("expected ',' or '}'"));
            }
        }
    }
    p.space();
    if p.i != p.b.len() {
        return Err(p.error("trailing bytes after the object"));
    }
    Ok(n.max(1))
}

struct Parser<'a> {
    b: &'a [u8],
    /// The read position; may pass the end by one after a trailing backslash.
    i: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, msg: &str) -> String {
        let mut digits = [0u8; 20];
        let at = wasmstream::format_u64(self.i as u64, &mut digits);
        let mut s = String::from(msg);
        s.push_str(" at byte ");
        s.push_str(std::str::from_utf8(at).unwrap_or_default());
        s
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// Reads a string and returns its raw contents (escapes not decoded).
    fn str(&mut self) -> Result<&'a [u8], String> {
        if !self.eat(b'"') {
            return Err(self.error("expected a string"));
        }
        let start = self.i;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Ok(&self.b[start..self.i - 1]);
                }
                _ => self.i += 1,
            }
        }
        Err(self.error("unterminated string"))
    }

    fn min_len(&mut self) -> Result<u64, String> {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        let digits = &self.b[start..self.i];
        if digits.is_empty()
            || digits.len() > 1 && digits[0] == b'0'
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            self.i = start;
            return Err(self.error("min_len must be a non-negative integer"));
        }
        match wasmstream::parse_u64(digits) {
            Some(n) if n <= u32::MAX as u64 => Ok(n),
            _ => {
                self.i = start;
                Err(self.error("min_len is too large"))
            }
        }
    }

    /// Skips one JSON value of any kind; `depth` bounds the nesting.
    fn value(&mut self, depth: u32) -> Result<(), String> {
        if depth > 64 {
            return Err(self.error("nested too deep"));
        }
        let c = match self.peek() {
            Some(c) => c,
            None => return Err(self.error("expected a value")),
        };
        match c {
            b'"' => self.str().map(|_| ()),
            b'{' | b'[' => {
                let end = if c == b'[' { b']' } else { b'}' };
                self.i += 1;
                self.space();
                if self.eat(end) {
                    return Ok(());
                }
                loop {
                    self.space();
                    if c == b'{' {
                        self.str()?;
                        self.space();
                        if !self.eat(b':') {
                            return Err(self.error("expected ':'"));
                        }
                        self.space();
                    }
                    self.value(depth + 1)?;
                    self.space();
                    if self.eat(end) {
                        return Ok(());
                    }
                    if !self.eat(b',') {
                        return Err(self.error(if end == b']' {
                            "expected ',' or ']'"
                        } else {
                            "expected ',' or '}'"
                        }));
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
                    self.i += 1;
                }
                Ok(())
            }
            _ => {
                for lit in [&b"true"[..], b"false", b"null"] {
                    if self.b[self.i..].starts_with(lit) {
                        self.i += lit.len();
                        return Ok(());
                    }
                }
                Err(self.error("expected a value"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_min_len;

    #[test]
    fn parse_min_len_cases() {
        // The Go example's table, case for case (0: invalid).
        let deep = "[".repeat(100);
        let cases: &[(&str, u64)] = &[
            ("", 1),
            (" \n", 1),
            ("{}", 1),
            (" { } ", 1),
            (r#"{"min_len":3}"#, 3),
            (r#"{"min_len": 0}"#, 1),
            (r#"{"min_len":1,"min_len":4}"#, 4),
            (r#"{"min_len":4294967295}"#, 4294967295),
            (
                r#"{"other":[1,-2.5e+3,{"x":"y\"}"},true,false,null,[]],"min_len":2,"more":{}}"#,
                2,
            ),
            ("{\r\n\t\"min_len\" :\t7\n}\n", 7),
            (r#"{"min\u005flen":3}"#, 1),
            ("[]", 0),
            ("2", 0),
            (r#"{"min_len":-1}"#, 0),
            (r#"{"min_len":"2"}"#, 0),
            (r#"{"min_len":2.5}"#, 0),
            (r#"{"min_len":2.0}"#, 0),
            (r#"{"min_len":1e2}"#, 0),
            (r#"{"min_len":02}"#, 0),
            (r#"{"min_len":4294967296}"#, 0),
            (r#"{"min_len":null}"#, 0),
            (r#"{"min_len":2"#, 0),
            (r#"{"min_len":2,}"#, 0),
            (r#"{"min_len":2} x"#, 0),
            (r#"{"min_len" 2}"#, 0),
            (r#"{"a":tru}"#, 0),
            (r#"{"a":"unterminated}"#, 0),
            (r#"{"a":[1 2]}"#, 0),
            ("{min_len:2}", 0),
            (&deep, 0),
        ];
        for (cfg, want) in cases {
            let got = parse_min_len(cfg.as_bytes());
            if *want == 0 {
                assert!(got.is_err(), "{:?}: got {:?}, want an error", cfg, got);
            } else {
                assert_eq!(got, Ok(*want), "{:?}", cfg);
            }
        }
    }

    #[test]
    fn error_messages() {
        let cases = [
            (
                r#"{"min_len":-3}"#,
                "min_len must be a non-negative integer at byte 11",
            ),
            (
                r#"{"min_len":99999999999999999999999}"#,
                "min_len is too large at byte 11",
            ),
            ("[]", "the config is not a JSON object at byte 0"),
            (r#"{"a":[1 2]}"#, "expected ',' or ']' at byte 8"),
            (r#"{"a":1 "#, "expected ',' or '}' at byte 7"),
            (r#"{"a" 1}"#, "expected ':' at byte 5"),
            (r#"{"a":"\"#, "unterminated string at byte 8"),
            (r#"{"a":x}"#, "expected a value at byte 5"),
            (r#"{} x"#, "trailing bytes after the object at byte 3"),
            ("{1:2}", "expected a string at byte 1"),
        ];
        for (cfg, want) in cases {
            assert_eq!(
                parse_min_len(cfg.as_bytes()).unwrap_err(),
                want,
                "{:?}",
                cfg
            );
        }
    }
}
