//! The task config, read with the SDK's JSON helpers.

use wasmstream::json::Object;

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

/// Parses the config with the SDK's JSON reader: an empty or all-white-space text (= `{}`), or a
/// JSON object whose members are all optional:
///
/// - `"output"`: a non-empty string;
/// - `"on_invalid"`: `"count"` or `"fail"`.
///
/// Any other member is an error (a misspelt setting should not be silently ignored); a repeated
/// member counts the last time.
pub fn parse(cfg: &[u8]) -> Result<Config, String> {
    let mut c = Config::default();
    if cfg
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        return Ok(c);
    }
    let o =
        Object::parse(cfg).map_err(|e| String::from(e.message().unwrap_or("malformed JSON")))?;
    for (name, v) in &o.fields {
        match name.as_str() {
            "output" => match v.as_str() {
                Some("") => return Err("output must not be empty".into()),
                Some(s) => c.output = s.as_bytes().to_vec(),
                None => return Err("output must be a string".into()),
            },
            "on_invalid" => {
                c.on_invalid = match v.as_str() {
                    Some("count") => OnInvalid::Count,
                    Some("fail") => OnInvalid::Fail,
                    _ => return Err("on_invalid must be \"count\" or \"fail\"".into()),
                }
            }
            _ => return Err(String::from("unknown member \"") + name + "\""),
        }
    }
    Ok(c)
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
            (
                r#"{"output":"a\u0062\u00e9"}"#,
                Config {
                    output: "abé".as_bytes().to_vec(),
                    ..Config::default()
                },
            ),
        ];
        for (cfg, want) in cases {
            assert_eq!(parse(cfg.as_bytes()).as_ref(), Ok(want), "{:?}", cfg);
        }
    }

    #[test]
    fn rejected() {
        let cases = [
            (
                "[]",
                "json: expected '{' at the start of an object at byte 0",
            ),
            (
                r#"{"on_invalid":"drop"}"#,
                "on_invalid must be \"count\" or \"fail\"",
            ),
            (r#"{"output":""}"#, "output must not be empty"),
            (r#"{"outptu":"x"}"#, "unknown member \"outptu\""),
            (r#"{"output":1}"#, "output must be a string"),
            (
                r#"{"output":"x""#,
                "json: expected ',' or '}' after field \"output\" at the end of the input",
            ),
            (
                r#"{"output":"x"} y"#,
                "json: unexpected data after the object at byte 15",
            ),
            (
                r#"{"output" "x"}"#,
                "json: expected ':' after field name \"output\" at byte 10",
            ),
            (
                r#"{"output":"x"#,
                "json: unterminated string at the end of the input",
            ),
        ];
        for (cfg, want) in cases {
            assert_eq!(parse(cfg.as_bytes()), Err(want.to_string()), "{:?}", cfg);
        }
    }
}
