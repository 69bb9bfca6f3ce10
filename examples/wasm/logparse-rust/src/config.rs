//! The task config, parsed by hand (no JSON dependency).

/// What to do with a value that is not an access-log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInvalid {
    /// Count it in the key's `invalid` state entry, log a warning, emit nothing.
    Count,
    /// Fail the batch (the host retries it, then dead-letters it or halts, per the task's policy).
    Fail,
}

/// The task's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The output the summaries go to. Default `summary`.
    pub output: Vec<u8>,
    /// Default [`OnInvalid::Count`].
    pub on_invalid: OnInvalid,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            output: b"summary".to_vec(),
            on_invalid: OnInvalid::Count,
        }
    }
}

/// Parses the config: an empty or all-white-space text (= `{}`), or a JSON object whose members
/// are all optional:
///
/// - `"output"`: a non-empty string without escapes or control characters;
/// - `"on_invalid"`: `"count"` or `"fail"`.
///
/// Any other member is an error (a misspelt setting should not be silently ignored); a repeated
/// member counts the last time.
pub fn parse(cfg: &[u8]) -> Result<Config, String> {
    let mut c = Config::default();
    let mut p = Parser { b: cfg, i: 0 };
    p.space();
    if p.i == cfg.len() {
        return Ok(c);
    }
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
            let at = p.i;
            match name {
                b"output" => {
                    let v = p.str()?;
                    if v.is_empty() {
                        p.i = at;
                        return Err(p.error("output must not be empty"));
                    }
                    c.output = v.to_vec();
                }
                b"on_invalid" => {
                    c.on_invalid = match p.str()? {
                        b"count" => OnInvalid::Count,
                        b"fail" => OnInvalid::Fail,
                        _ => {
                            p.i = at;
                            return Err(p.error("on_invalid must be \"count\" or \"fail\""));
                        }
                    }
                }
                _ => {
                    let mut msg = String::from("unknown member \"");
                    msg.push_str(std::str::from_utf8(name).unwrap_or("(not UTF-8)"));
                    msg.push('"');
                    p.i = at;
                    return Err(p.error(&msg));
                }
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
    if p.i != cfg.len() {
        return Err(p.error("trailing bytes after the object"));
    }
    Ok(c)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, msg: &str) -> String {
        let mut digits = [0u8; 20];
        let mut s = String::from(msg);
        s.push_str(" at byte ");
        s.push_str(
            std::str::from_utf8(wasmstream::format_u64(self.i as u64, &mut digits))
                .unwrap_or_default(),
        );
        s
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// A string without escapes or control characters; returns its contents.
    fn str(&mut self) -> Result<&'a [u8], String> {
        if !self.eat(b'"') {
            return Err(self.error("expected a string"));
        }
        let start = self.i;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'"' => {
                    self.i += 1;
                    return Ok(&self.b[start..self.i - 1]);
                }
                b'\\' => return Err(self.error("escapes are not supported in config strings")),
                0..=0x1f => return Err(self.error("control character in a string")),
                _ => self.i += 1,
            }
        }
        Err(self.error("unterminated string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        let d = Config::default();
        let fail = Config {
            on_invalid: OnInvalid::Fail,
            ..Config::default()
        };
        let cases: &[(&str, Config)] = &[
            ("", d.clone()),
            (" \n", d.clone()),
            ("{}", d.clone()),
            (r#" { "on_invalid" : "fail" } "#, fail.clone()),
            (
                r#"{"output":"per-client","on_invalid":"count"}"#,
                Config {
                    output: b"per-client".to_vec(),
                    ..Config::default()
                },
            ),
            (r#"{"on_invalid":"count","on_invalid":"fail"}"#, fail),
        ];
        for (cfg, want) in cases {
            assert_eq!(parse(cfg.as_bytes()).as_ref(), Ok(want), "{:?}", cfg);
        }
    }

    #[test]
    fn rejected() {
        let cases = [
            ("[]", "the config is not a JSON object at byte 0"),
            (
                r#"{"on_invalid":"drop"}"#,
                "on_invalid must be \"count\" or \"fail\" at byte 14",
            ),
            (r#"{"output":""}"#, "output must not be empty at byte 10"),
            (r#"{"outptu":"x"}"#, "unknown member \"outptu\" at byte 10"),
            (r#"{"output":1}"#, "expected a string at byte 10"),
            (
                r#"{"output":"a\u0062"}"#,
                "escapes are not supported in config strings at byte 12",
            ),
            (r#"{"output":"x""#, "expected ',' or '}' at byte 13"),
            (
                r#"{"output":"x"} y"#,
                "trailing bytes after the object at byte 15",
            ),
            (r#"{"output" "x"}"#, "expected ':' at byte 10"),
            (r#"{"output":"x"#, "unterminated string at byte 12"),
        ];
        for (cfg, want) in cases {
            assert_eq!(parse(cfg.as_bytes()), Err(want.to_string()), "{:?}", cfg);
        }
    }
}
