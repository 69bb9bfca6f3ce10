//! Native tests: the handler against the SDK's fake host, on the example's files.

use wasmstream::testing::{Harness, Output, TestRecord};

use crate::WordCount;

/// A file of this example, read at compile time so the test needs no working directory.
macro_rules! file {
    ($name:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/", $name))
    };
}

/// One line of input.ndjson as the host's file source reads it: key field "user", timestamp
/// field "ts", value field "text".
struct Line {
    user: String,
    ts: i64,
    text: String,
}

fn input() -> Vec<Line> {
    file!("input.ndjson")
        .lines()
        .map(|l| {
            let fields = json::parse_flat_object(l).unwrap_or_else(|e| panic!("{}: {:?}", e, l));
            let get = |k: &str| {
                fields
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap()
            };
            let ts = match get("ts") {
                json::Value::Int(n) => n,
                v => panic!("ts {:?}", v),
            };
            match (get("user"), get("text")) {
                (json::Value::Str(user), json::Value::Str(text)) => Line { user, ts, text },
                v => panic!("{:?}", v),
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

/// Feeds the batches to the task; returns the sink lines sorted by key (stable: emit order within
/// a key) and the final state lines (`key<TAB>name<TAB>value`, sorted).
fn run(config: &str, batches: &[Vec<&Line>]) -> (Vec<String>, Vec<String>) {
    let mut h = Harness::<WordCount>::new(config).unwrap();
    let mut all = Vec::new();
    let mut offset = 0;
    for b in batches {
        let recs: Vec<TestRecord> = b
            .iter()
            .map(|l| {
                offset += 1;
                TestRecord::new(&l.user, &l.text)
                    .timestamp(l.ts)
                    .offset(offset)
            })
            .collect();
        all.extend(h.process(&recs).unwrap());
    }
    all.sort_by(|a, b| a.key.cmp(&b.key));
    let outputs = all.iter().map(sink_line).collect();
    let state = h
        .all_state()
        .into_iter()
        .map(|(k, n, v)| {
            format!(
                "{}\t{}\t{}",
                String::from_utf8(k).unwrap(),
                String::from_utf8(n).unwrap(),
                String::from_utf8(v).unwrap()
            )
        })
        .collect();
    (outputs, state)
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

    // One batch per record, keys in the reverse order of their first appearance: per key the
    // result is the same.
    let mut keys: Vec<&str> = Vec::new();
    for l in &input {
        if !keys.contains(&l.user.as_str()) {
            keys.push(&l.user);
        }
    }
    let mut batches = Vec::new();
    for k in keys.iter().rev() {
        for l in input.iter().filter(|l| l.user == *k) {
            batches.push(vec![l]);
        }
    }
    let (out, state) = run(config, &batches);
    same_lines("batch per record: outputs", &out, &want_out);
    same_lines("batch per record: state", &state, &want_state);
}

/// The sample files are copies of the Go example's: both ports are checked against the same data.
#[test]
fn files_match_the_go_example() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wordcount");
    if !dir.exists() {
        return;
    }
    let ours = [
        ("config.json", file!("config.json")),
        ("input.ndjson", file!("input.ndjson")),
        ("expected.ndjson", file!("expected.ndjson")),
        ("expected-state.txt", file!("expected-state.txt")),
    ];
    for (name, text) in ours {
        let theirs = std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(text, theirs, "{} differs from the Go example's", name);
    }
}

#[test]
fn default_min_len() {
    let l = Line {
        user: "u".into(),
        ts: -1,
        text: "a B a".into(),
    };
    let (out, state) = run("{}", &[vec![&l]]);
    let mut h = Harness::<WordCount>::new("{}").unwrap();
    h.set_now(5);
    // ts -1 asks the host for "now"; the fake host fills in its clock.
    let o = h.process(&[TestRecord::new("u", "x")]).unwrap();
    assert_eq!(o[0].ts, 5);
    same_lines(
        "outputs",
        &out,
        &[
            r#"{"output":"counts","key":"u","value":"a 1","ts":1700000000000}"#.to_string(),
            r#"{"output":"counts","key":"u","value":"b 1","ts":1700000000000}"#.to_string(),
            r#"{"output":"counts","key":"u","value":"a 2","ts":1700000000000}"#.to_string(),
        ],
    );
    same_lines(
        "state",
        &state,
        &["u\ta\t2".to_string(), "u\tb\t1".to_string()],
    );
}

#[test]
fn invalid_config_fails_init() {
    let err = Harness::<WordCount>::new(r#"{"min_len":-3}"#)
        .err()
        .unwrap();
    assert_eq!(
        err,
        "wordcount: invalid config: min_len must be a non-negative integer at byte 11"
    );
}

#[test]
fn corrupt_count_fails_the_batch() {
    let mut h = Harness::<WordCount>::new("{}").unwrap();
    h.set_state("k", "hello", "x\"\n\u{e9}\u{ff}");
    h.set_state("k", "world", "1");
    let err = h
        .process(&[TestRecord::new("k", "world hello").source("in").offset(3)])
        .unwrap_err();
    assert_eq!(err, "wasmstream: record in/0@3: wordcount: the count of \"hello\" is not a number: \"x\\\"\\n\u{e9}\u{ff}\"");
    // The batch left no trace.
    assert_eq!(h.state_str("k", "world").as_deref(), Some("1"));
    assert!(h.outputs().is_empty());
}

#[test]
fn min_len_counts_bytes() {
    let mut h = Harness::<WordCount>::new(r#"{"min_len":3}"#).unwrap();
    let out = h
        .process(&[TestRecord::new("k", "ab ABC abcd caf\u{e9} x9y").timestamp(7)])
        .unwrap();
    let values: Vec<String> = out.iter().map(Output::value_str).collect();
    assert_eq!(values, ["abc 1", "abcd 1", "caf 1", "x9y 1"]);
    assert!(out
        .iter()
        .all(|o| o.output == b"counts" && o.key == b"k" && o.ts == 7));
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
