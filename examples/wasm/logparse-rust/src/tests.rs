//! Native tests: the handler against the SDK's fake host, on the example's files.

use wasmstream::testing::{Harness, Output, TestRecord};

use crate::LogParse;

/// A file of this example, read at compile time so the test needs no working directory.
macro_rules! file {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $name))
    };
}

/// One line of input.ndjson as the host's file source reads it: key field "client", value field
/// "line" (no timestamp field: the task takes the time from the line).
struct Line {
    client: String,
    line: String,
}

fn input() -> Vec<Line> {
    file!("input.ndjson")
        .lines()
        .map(|l| {
            let fields = json::parse_flat_object(l).unwrap_or_else(|e| panic!("{}: {:?}", e, l));
            let get = |k: &str| match fields.iter().find(|(n, _)| n == k) {
                Some((_, json::Value::Str(s))) => s.clone(),
                v => panic!("{}: {:?}", k, v),
            };
            Line {
                client: get("client"),
                line: get("line"),
            }
        })
        .collect()
}

fn lines(text: &str) -> Vec<String> {
    assert!(text.ends_with('\n'), "expected files end with a newline");
    text.lines().map(str::to_string).collect()
}

/// A sink line as the host's file sink writes it.
fn sink_line(o: &Output) -> String {
    format!(
        r#"{{"output":{},"key":{},"value":{},"ts":{}}}"#,
        json::quote(&o.output),
        json::quote(&o.key),
        json::quote(&o.value),
        o.ts
    )
}

fn state_lines(h: &Harness<LogParse>) -> Vec<String> {
    h.all_state()
        .into_iter()
        .map(|(k, n, v)| {
            format!(
                "{}\t{}\t{}",
                String::from_utf8(k).unwrap(),
                String::from_utf8(n).unwrap(),
                String::from_utf8(v).unwrap()
            )
        })
        .collect()
}

/// Feeds the batches to the task; returns the sink lines sorted by key (stable: emit order within
/// a key) and the final state lines (`key<TAB>name<TAB>value`, sorted).
fn run(config: &str, batches: &[Vec<&Line>]) -> (Vec<String>, Vec<String>) {
    let mut h = Harness::<LogParse>::new(config).unwrap();
    let mut all = Vec::new();
    let mut offset = 0;
    for b in batches {
        let recs: Vec<TestRecord> = b
            .iter()
            .map(|l| {
                offset += 1;
                TestRecord::new(&l.client, &l.line).offset(offset)
            })
            .collect();
        all.extend(h.process(&recs).unwrap());
    }
    all.sort_by(|a, b| a.key.cmp(&b.key));
    (all.iter().map(sink_line).collect(), state_lines(&h))
}

fn same_lines(what: &str, got: &[String], want: &[String]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g, w, "{} line {}", what, i + 1);
    }
    assert_eq!(got.len(), want.len(), "{}: line count", what);
}

#[test]
fn handler_matches_expected() {
    let input = input();
    let want_out = lines(file!("expected.ndjson"));
    let want_state = lines(file!("expected-state.txt"));
    let config = file!("config.json");

    // One batch with every record, in file order.
    let (out, state) = run(config, &[input.iter().collect()]);
    same_lines("one batch: outputs", &out, &want_out);
    same_lines("one batch: state", &state, &want_state);

    // Batches of three records, keys in the reverse order of their first appearance: per key the
    // result is the same.
    let mut keys: Vec<&str> = Vec::new();
    for l in &input {
        if !keys.contains(&l.client.as_str()) {
            keys.push(&l.client);
        }
    }
    let ordered: Vec<&Line> = keys
        .iter()
        .rev()
        .flat_map(|k| input.iter().filter(move |l| l.client == *k))
        .collect();
    let batches: Vec<Vec<&Line>> = ordered.chunks(3).map(|c| c.to_vec()).collect();
    let (out, state) = run(config, &batches);
    same_lines("batches of three: outputs", &out, &want_out);
    same_lines("batches of three: state", &state, &want_state);
}

#[test]
fn invalid_lines_are_counted_and_logged() {
    let mut h = Harness::<LogParse>::new("{}").unwrap();
    let out = h
        .process(&[TestRecord::new("c", "nope").offset(17)])
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(h.state_str("c", "invalid").as_deref(), Some("1"));
    let log = h.logs().pop().unwrap();
    assert_eq!((log.level, log.msg.as_str()), (2, "logparse: not an access-log line (expected client, ident and user fields) at offset 17"));
}

#[test]
fn invalid_lines_fail_the_batch_when_configured() {
    let mut h = Harness::<LogParse>::new(r#"{"on_invalid":"fail"}"#).unwrap();
    let good = r#"c - - [14/Nov/2023:22:13:20 +0000] "GET / HTTP/1.1" 200 5"#;
    let err = h
        .process(&[
            TestRecord::new("c", good),
            TestRecord::new("c", good.replace("200", "999"))
                .source("web")
                .offset(8),
        ])
        .unwrap_err();
    assert_eq!(
        err,
        "wasmstream: record web/0@8: logparse: not an access-log line (status out of range)"
    );
    assert!(
        h.all_state().is_empty(),
        "the failed batch left state behind"
    );
    assert!(h.outputs().is_empty());
}

#[test]
fn output_name_and_timestamp() {
    let mut h = Harness::<LogParse>::new(r#"{"output":"per-client"}"#).unwrap();
    let out = h
        .process(&[TestRecord::new(
            "k",
            r#"k - - [01/Jan/2024:01:00:00 +0100] "GET / HTTP/1.1" 200 -"#,
        )
        .timestamp(5)])
        .unwrap();
    assert_eq!(out[0].output, b"per-client");
    assert_eq!(
        out[0].ts, 1_704_067_200_000,
        "the line's time, not the record's"
    );
    assert_eq!(out[0].value_str(), "GET / 200 - req=1 bytes=0 2xx=1");
}

#[test]
fn unknown_state_names_are_kept_and_corrupt_counters_fail() {
    let mut h = Harness::<LogParse>::new("{}").unwrap();
    let line = r#"k - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 10"#;
    h.set_state("k", "note", "hello");
    h.set_state("k", "req", "41");
    h.set_state("k", "bytes", "18446744073709551610");
    let out = h.process(&[TestRecord::new("k", line)]).unwrap();
    assert_eq!(
        out[0].value_str(),
        "GET / 200 10 req=42 bytes=18446744073709551615 2xx=1"
    );
    assert_eq!(h.state_str("k", "note").as_deref(), Some("hello"));

    h.set_state("k", "4xx", "x");
    let err = h.process(&[TestRecord::new("k", line)]).unwrap_err();
    assert_eq!(
        err,
        "wasmstream: record input/0@0: logparse: state 4xx is not a decimal number"
    );
}

#[test]
fn many_counters_page_through_the_scan() {
    // With one entry per scan page the counters still load completely.
    let limits = wasmstream::testing::Limits {
        scan_page_entries: 1,
        ..Default::default()
    };
    let mut h = Harness::<LogParse>::with_limits("{}", limits).unwrap();
    let recs: Vec<TestRecord> = [101, 200, 302, 404, 500, 201]
        .iter()
        .map(|s| {
            TestRecord::new(
                "k",
                format!(
                    r#"k - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" {} 1"#,
                    s
                ),
            )
        })
        .collect();
    let out = h.process(&recs).unwrap();
    assert_eq!(
        out.last().unwrap().value_str(),
        "GET / 201 1 req=6 bytes=6 1xx=1 2xx=2 3xx=1 4xx=1 5xx=1"
    );
}

#[test]
fn invalid_config_fails_init() {
    let err = Harness::<LogParse>::new(r#"{"on_invalid":"drop"}"#)
        .err()
        .unwrap();
    assert_eq!(
        err,
        r#"logparse: invalid config: on_invalid must be "count" or "fail""#
    );
}

/// Just enough JSON for the test files: flat objects of strings and integers, and Go's
/// `encoding/json` string quoting for the sink lines.
mod json {
    #[derive(Clone, Debug, PartialEq)]
    pub enum Value {
        Str(String),
        Int(i64),
    }

    pub fn parse_flat_object(s: &str) -> Result<Vec<(String, Value)>, String> {
        let b = s.as_bytes();
        let mut i = 0;
        let mut out = Vec::new();
        expect(b, &mut i, b'{')?;
        loop {
            let name = string(b, &mut i)?;
            expect(b, &mut i, b':')?;
            let v = if b.get(i) == Some(&b'"') {
                Value::Str(string(b, &mut i)?)
            } else {
                let start = i;
                while i < b.len() && (b[i] == b'-' || b[i].is_ascii_digit()) {
                    i += 1;
                }
                Value::Int(
                    s[start..i]
                        .parse()
                        .map_err(|_| format!("bad number at {}", start))?,
                )
            };
            out.push((name, v));
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') if i + 1 == b.len() => return Ok(out),
                _ => return Err(format!("unexpected byte at {}", i)),
            }
        }
    }

    fn expect(b: &[u8], i: &mut usize, c: u8) -> Result<(), String> {
        if b.get(*i) == Some(&c) {
            *i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", c as char, i))
        }
    }

    fn hex4(b: &[u8], i: &mut usize) -> Result<u32, String> {
        let h = b.get(*i..*i + 4).ok_or("short \\u")?;
        *i += 4;
        u32::from_str_radix(std::str::from_utf8(h).map_err(|e| e.to_string())?, 16)
            .map_err(|e| e.to_string())
    }

    fn string(b: &[u8], i: &mut usize) -> Result<String, String> {
        expect(b, i, b'"')?;
        let mut out = Vec::new();
        loop {
            let c = *b.get(*i).ok_or("unterminated string")?;
            *i += 1;
            match c {
                b'"' => return String::from_utf8(out).map_err(|e| e.to_string()),
                b'\\' => {
                    let e = *b.get(*i).ok_or("short escape")?;
                    *i += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\x08',
                        b'f' => '\x0c',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let mut u = hex4(b, i)?;
                            if (0xd800..0xdc00).contains(&u) && b.get(*i..*i + 2) == Some(b"\\u") {
                                *i += 2;
                                let lo = hex4(b, i)?;
                                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
                            }
                            char::from_u32(u).unwrap_or('\u{fffd}')
                        }
                        _ => return Err(format!("bad escape at {}", i)),
                    };
                    let mut buf = [0; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                c => out.push(c),
            }
        }
    }

    /// Quotes bytes as Go's `json.Marshal` quotes a string: invalid UTF-8 becomes U+FFFD, `<`,
    /// `>`, `&`, U+2028 and U+2029 are escaped, as are control characters.
    pub fn quote(b: &[u8]) -> String {
        let s = String::from_utf8_lossy(b);
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                    out.push_str(&format!("\\u{:04x}", c as u32))
                }
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
}
