//! Decodes every golden vector of the ABI (abi/testdata/golden) into the values its README lists
//! and re-encodes those values byte for byte; checks that malformed layouts are rejected.

use std::path::PathBuf;

use wasmstream::abi::{self, Firing, HttpRequest, HttpResponse, Init, Migration, Tick};
use wasmstream::testing::{encode_batch, TestRecord};
use wasmstream::{Domain, Errno, HeadersBuilder};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../abi/testdata/golden")
}

/// Parses the golden hex format: hex byte pairs separated by white space; `#` starts a comment
/// that runs to the end of the line.
fn parse_hex(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = match line.find('#') {
            Some(i) => &line[..i],
            None => line,
        };
        for tok in line.split_whitespace() {
            assert!(tok.len() % 2 == 0, "odd hex token {:?}", tok);
            for i in (0..tok.len()).step_by(2) {
                out.push(
                    u8::from_str_radix(&tok[i..i + 2], 16)
                        .unwrap_or_else(|_| panic!("bad hex {:?}", tok)),
                );
            }
        }
    }
    out
}

fn golden(name: &str) -> Vec<u8> {
    let path = golden_dir().join(format!("{}.hex", name));
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e));
    parse_hex(&text)
}

#[test]
fn hex_parser() {
    assert_eq!(
        parse_hex("# c\n01 ff\n\tA0b1 # x 99\n"),
        vec![0x01, 0xff, 0xa0, 0xb1]
    );
}

#[test]
fn every_golden_file_is_tested() {
    let tested = [
        "batch_empty",
        "batch_two",
        "firings",
        "headers",
        "headers_empty",
        "http_request",
        "http_response",
        "init",
        "key_page",
        "migrate",
        "scan_page",
        "scan_page_empty",
        "tick",
    ];
    let mut found: Vec<String> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".hex").map(str::to_string))
        .collect();
    found.sort();
    assert_eq!(
        found, tested,
        "a golden vector was added or removed: test it here"
    );
}

#[test]
fn init() {
    let b = golden("init");
    let init = abi::decode_init(&b).unwrap();
    assert_eq!(
        init,
        Init {
            version: 0x0000_0001,
            task: b"wordcount",
            config: br#"{"min_len":2}"#
        }
    );
    let mut out = Vec::new();
    abi::encode_init(&mut out, &init);
    assert_eq!(out, b);
}

#[test]
fn batch_empty() {
    let b = golden("batch_empty");
    let batch = abi::decode_batch(&b).unwrap();
    assert_eq!(batch.len(), 0);
    assert!(batch.records().next().is_none());
    assert_eq!(encode_batch(&[]), b);
}

fn batch_two_values() -> Vec<TestRecord> {
    vec![
        TestRecord::new("alice", "hello world")
            .source("input")
            .timestamp(1_700_000_000_000),
        TestRecord::new("", [0x00, 0xff])
            .source("orders")
            .late(true)
            .partition(3)
            .offset(42)
            .timestamp(-1)
            .header("trace", "abc")
            .header("empty", ""),
    ]
}

#[test]
fn batch_two() {
    let b = golden("batch_two");
    let batch = abi::decode_batch(&b).unwrap();
    assert_eq!(batch.len(), 2);
    let recs: Vec<_> = batch.records().collect();

    let r = &recs[0];
    assert_eq!(
        (r.flags(), r.partition(), r.offset(), r.timestamp()),
        (0, 0, 0, 1_700_000_000_000)
    );
    assert_eq!(
        (r.source(), r.key(), r.value()),
        (&b"input"[..], &b"alice"[..], &b"hello world"[..])
    );
    assert!(!r.is_late());
    assert_eq!(r.event_time(), Some(1_700_000_000_000));
    assert!(r.headers().is_empty());
    assert_eq!(r.value_str().unwrap(), "hello world");

    let r = &recs[1];
    assert_eq!(
        (r.flags(), r.partition(), r.offset(), r.timestamp()),
        (1, 3, 42, -1)
    );
    assert!(r.is_late());
    assert_eq!(r.event_time(), None);
    assert_eq!(
        (r.source(), r.key(), r.value()),
        (&b"orders"[..], &b""[..], &[0x00, 0xff][..])
    );
    let hs: Vec<_> = r.headers().iter().collect();
    assert_eq!(
        hs,
        vec![(&b"trace"[..], &b"abc"[..]), (&b"empty"[..], &b""[..])]
    );
    assert_eq!(r.header("trace"), Some(&b"abc"[..]));
    assert_eq!(r.header("empty"), Some(&b""[..]));
    assert_eq!(r.header("missing"), None);
    assert!(r.value_str().is_err());

    // Encode the documented values, and re-encode what was decoded.
    assert_eq!(encode_batch(&batch_two_values()), b);
    let copies: Vec<TestRecord> = recs.iter().map(TestRecord::from_record).collect();
    assert_eq!(copies, batch_two_values());
    assert_eq!(encode_batch(&copies), b);
}

#[test]
fn headers() {
    let b = golden("headers");
    let hs = abi::decode_headers(&b).unwrap();
    let got: Vec<_> = hs.iter().collect();
    assert_eq!(
        got,
        vec![
            (&b"content-type"[..], &b"text/plain"[..]),
            (&b"x"[..], &b""[..])
        ]
    );
    let mut hb = HeadersBuilder::new();
    hb.add("content-type", "text/plain").add("x", "");
    assert_eq!(hb.len(), 2);
    assert_eq!(hb.as_bytes(), &b[..]);
    assert_eq!(hb.headers(), hs);
    hb.clear();
    assert_eq!(hb.as_bytes(), &golden("headers_empty")[..]);
}

#[test]
fn headers_empty() {
    let b = golden("headers_empty");
    let hs = abi::decode_headers(&b).unwrap();
    assert!(hs.is_empty());
    assert_eq!(HeadersBuilder::new().as_bytes(), &b[..]);
}

#[test]
fn scan_page() {
    let b = golden("scan_page");
    let p = abi::decode_scan_page(&b).unwrap();
    assert!(p.more());
    let got: Vec<_> = p.entries().collect();
    assert_eq!(got, vec![(&b"a"[..], &b"1"[..]), (&b"b"[..], &b""[..])]);
    let mut out = Vec::new();
    abi::encode_scan_page(&mut out, &[(b"a", b"1"), (b"b", b"")], true);
    assert_eq!(out, b);
}

#[test]
fn scan_page_empty() {
    let b = golden("scan_page_empty");
    let p = abi::decode_scan_page(&b).unwrap();
    assert!(!p.more());
    assert!(p.is_empty());
    let mut out = Vec::new();
    abi::encode_scan_page(&mut out, &[], false);
    assert_eq!(out, b);
}

/// Decodes with the decoder of each layout; Ok(()) when it accepts.
fn decode(layout: &str, b: &[u8]) -> Result<(), wasmstream::Error> {
    match layout {
        "init" => abi::decode_init(b).map(|_| ()),
        "batch" => abi::decode_batch(b).map(|_| ()),
        "headers" => abi::decode_headers(b).map(|_| ()),
        "scan_page" => abi::decode_scan_page(b).map(|_| ()),
        "firings" => abi::decode_firings(b).map(|_| ()),
        "tick" => abi::decode_tick(b).map(|_| ()),
        "migrate" => abi::decode_migrate(b).map(|_| ()),
        "key_page" => abi::decode_key_page(b).map(|_| ()),
        "http_request" => abi::decode_http_request(b).map(|_| ()),
        "http_response" => abi::decode_http_response(b).map(|_| ()),
        _ => unreachable!(),
    }
}

const CASES: [(&str, &str); 13] = [
    ("init", "init"),
    ("batch_empty", "batch"),
    ("batch_two", "batch"),
    ("headers", "headers"),
    ("headers_empty", "headers"),
    ("scan_page", "scan_page"),
    ("scan_page_empty", "scan_page"),
    ("firings", "firings"),
    ("tick", "tick"),
    ("migrate", "migrate"),
    ("key_page", "key_page"),
    ("http_request", "http_request"),
    ("http_response", "http_response"),
];

#[test]
fn truncated_is_rejected() {
    for (file, layout) in CASES {
        let b = golden(file);
        for n in 0..b.len() {
            if layout == "headers" && n == 0 {
                continue; // an empty Headers buffer means "no headers" (emit's hdr_len = 0)
            }
            let err = decode(layout, &b[..n])
                .expect_err(&format!("{} truncated to {} bytes accepted", file, n));
            assert_eq!(err.code(), Errno::INVALID);
            assert!(
                err.to_string().starts_with("wasmstream abi: malformed"),
                "{}",
                err
            );
        }
    }
}

#[test]
fn trailing_bytes_are_rejected() {
    for (file, layout) in CASES {
        let mut b = golden(file);
        b.push(0);
        assert!(
            decode(layout, &b).is_err(),
            "{} with a trailing byte accepted",
            file
        );
    }
}

#[test]
fn unknown_batch_kind_is_rejected() {
    for kind in [0u8, 2, 0xff] {
        let mut b = golden("batch_empty");
        b[0] = kind;
        assert!(abi::decode_batch(&b).is_err(), "kind {} accepted", kind);
        let mut b = golden("batch_two");
        b[0] = kind;
        assert!(abi::decode_batch(&b).is_err(), "kind {} accepted", kind);
    }
}

#[test]
fn impossible_counts_are_rejected() {
    // A count far larger than the bytes that follow: rejected up front, without looping.
    let mut b = golden("batch_two");
    b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_batch(&b).is_err());
    let mut b = golden("batch_two");
    b[4..8].copy_from_slice(&3u32.to_le_bytes());
    assert!(abi::decode_batch(&b).is_err());
    let mut b = golden("batch_two");
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(
        abi::decode_batch(&b).is_err(),
        "one record plus trailing bytes accepted"
    );

    let mut b = golden("headers");
    b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_headers(&b).is_err());
    let mut b = golden("scan_page");
    b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_scan_page(&b).is_err());

    // A length prefix running past the end.
    let mut b = golden("init");
    b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_init(&b).is_err());
}

#[test]
fn scan_page_more_must_be_0_or_1() {
    let mut b = golden("scan_page");
    b[4] = 2;
    assert!(abi::decode_scan_page(&b).is_err());
}

// ---------------------------------------------------------------------------------------------
// ABI 0.2 vectors

fn firings_values() -> [Firing<'static>; 2] {
    [
        Firing {
            flags: 0,
            partition: 0,
            time: 1_700_000_000_000,
            key: b"alice",
            name: b"flush",
            payload: b"",
        },
        Firing {
            flags: abi::FIRING_EVENT_TIME,
            partition: 3,
            time: 1_700_000_060_000,
            key: b"",
            name: b"window/60",
            payload: &[0x00, 0xff],
        },
    ]
}

#[test]
fn firings() {
    let b = golden("firings");
    let fs = abi::decode_firings(&b).unwrap();
    assert_eq!(fs.len(), 2);
    let got: Vec<Firing> = fs.iter().collect();
    assert_eq!(got, firings_values());
    assert!(!got[0].event_time());
    assert_eq!(got[0].domain(), Domain::ProcessingTime);
    assert!(got[1].event_time());
    assert_eq!(got[1].domain(), Domain::EventTime);
    assert_eq!(got[1].name_str().unwrap(), "window/60");

    let mut out = Vec::new();
    abi::encode_firings_header(&mut out, 2);
    for f in &firings_values() {
        abi::encode_firing(&mut out, f);
    }
    assert_eq!(out, b);
    let mut again = Vec::new();
    abi::encode_firings_header(&mut again, fs.len() as u32);
    for f in fs.iter() {
        abi::encode_firing(&mut again, &f);
    }
    assert_eq!(again, b);
}

#[test]
fn tick() {
    let b = golden("tick");
    let t = abi::decode_tick(&b).unwrap();
    let want = Tick {
        partition: 3,
        now: 1_700_000_000_000,
        watermark: -1,
        source: b"orders",
    };
    assert_eq!(t, want);
    let mut out = Vec::new();
    abi::encode_tick(&mut out, &want);
    assert_eq!(out, b);
}

#[test]
fn migrate() {
    let b = golden("migrate");
    let m = abi::decode_migrate(&b).unwrap();
    let want = Migration {
        from: 1,
        to: 2,
        partition: 3,
        key: b"alice",
    };
    assert_eq!(m, want);
    let mut out = Vec::new();
    abi::encode_migrate(&mut out, &want);
    assert_eq!(out, b);
}

#[test]
fn key_page() {
    let b = golden("key_page");
    let p = abi::decode_key_page(&b).unwrap();
    assert!(p.more());
    assert_eq!(p.len(), 3);
    let got: Vec<&[u8]> = p.keys().collect();
    assert_eq!(got, vec![&b""[..], &b"alice"[..], &b"bob"[..]]);
    let mut out = Vec::new();
    abi::encode_key_page(&mut out, &[b"", b"alice", b"bob"], true);
    assert_eq!(out, b);
}

#[test]
fn http_request() {
    let b = golden("http_request");
    let r = abi::decode_http_request(&b).unwrap();
    assert_eq!(r.method, b"POST");
    assert_eq!(r.url, b"https://api.example.com/v1/score?id=1");
    let hs: Vec<_> = r.headers.iter().collect();
    assert_eq!(
        hs,
        vec![
            (&b"content-type"[..], &b"application/json"[..]),
            (&b"x-empty"[..], &b""[..])
        ]
    );
    assert_eq!(r.body, br#"{"user":"alice"}"#);
    assert_eq!(r.timeout_ms, 2500);

    // The layout encoder, from the documented values and from what was decoded.
    let mut hb = HeadersBuilder::new();
    hb.add("content-type", "application/json")
        .add("x-empty", "");
    let want = HttpRequest {
        method: b"POST",
        url: b"https://api.example.com/v1/score?id=1",
        headers: hb.headers(),
        body: br#"{"user":"alice"}"#,
        timeout_ms: 2500,
    };
    assert_eq!(r, want);
    let mut out = Vec::new();
    abi::encode_http_request(&mut out, &want);
    assert_eq!(out, b);
    let mut again = Vec::new();
    abi::encode_http_request(&mut again, &r);
    assert_eq!(again, b);

    // The SDK's request type encodes to the same bytes.
    let req = wasmstream::HttpRequest::post(
        "https://api.example.com/v1/score?id=1",
        &br#"{"user":"alice"}"#[..],
    )
    .header("content-type", "application/json")
    .header("x-empty", "")
    .timeout_ms(2500);
    let mut sdk = Vec::new();
    req.encode(&mut sdk);
    assert_eq!(sdk, b);
}

#[test]
fn http_response() {
    let b = golden("http_response");
    let r = abi::decode_http_response(&b).unwrap();
    assert_eq!(r.status, 404);
    let hs: Vec<_> = r.headers.iter().collect();
    assert_eq!(hs, vec![(&b"content-type"[..], &b"text/plain"[..])]);
    assert_eq!(r.body, b"not found");
    let mut hb = HeadersBuilder::new();
    hb.add("content-type", "text/plain");
    let want = HttpResponse {
        status: 404,
        headers: hb.headers(),
        body: b"not found",
    };
    assert_eq!(r, want);
    let mut out = Vec::new();
    abi::encode_http_response(&mut out, &want);
    assert_eq!(out, b);

    let owned = wasmstream::HttpResponse::from_layout(&r);
    assert_eq!(
        owned,
        wasmstream::HttpResponse::new(404)
            .with_header("content-type", "text/plain")
            .with_body("not found")
    );
    assert_eq!(owned.header("Content-Type"), Some(&b"text/plain"[..]));
    assert_eq!(owned.body_str().unwrap(), "not found");
    let mut again = Vec::new();
    owned.encode(&mut again);
    assert_eq!(again, b);
}

#[test]
fn wrong_kinds_are_rejected() {
    for (file, kind_ok) in [("firings", 2u8), ("tick", 3), ("migrate", 4)] {
        for kind in [0u8, 1, 2, 3, 4, 5, 0xff] {
            if kind == kind_ok {
                continue;
            }
            let mut b = golden(file);
            b[0] = kind;
            assert!(
                decode(file, &b).is_err(),
                "{} with kind {} accepted",
                file,
                kind
            );
        }
    }
}

#[test]
fn impossible_counts_are_rejected_02() {
    let mut b = golden("firings");
    b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_firings(&b).is_err());
    let mut b = golden("firings");
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(
        abi::decode_firings(&b).is_err(),
        "one firing plus trailing bytes accepted"
    );
    let mut b = golden("key_page");
    b[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_key_page(&b).is_err());
    let mut b = golden("key_page");
    b[4] = 2;
    assert!(abi::decode_key_page(&b).is_err(), "more = 2 accepted");
    let mut b = golden("http_response");
    b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(abi::decode_http_response(&b).is_err());
}

#[test]
fn version_is_0_5() {
    assert_eq!(abi::VERSION, 0x0000_0005);
    assert_eq!(Errno::UNAVAILABLE.raw(), -10);
    assert_eq!(Errno::UNAVAILABLE.to_string(), "ERR_UNAVAILABLE");
}

/// ABI 0.4: a record without a key has flag bit 1 and the key NULL_KEY, which is not the empty
/// key; a record with the empty key has neither.
#[test]
fn null_key_flag() {
    let mut b = Vec::new();
    abi::encode_batch_header(&mut b, 2);
    abi::encode_record(
        &mut b,
        &abi::RecordFields {
            flags: abi::FLAG_KEY_NULL,
            key: wasmstream::NULL_KEY,
            timestamp: -1,
            ..Default::default()
        },
    );
    abi::encode_record(
        &mut b,
        &abi::RecordFields {
            timestamp: -1,
            ..Default::default()
        },
    );
    let batch = abi::decode_batch(&b).unwrap();
    let recs: Vec<_> = batch.records().collect();
    assert!(recs[0].key_null() && !recs[0].is_late());
    assert!(wasmstream::is_null_key(recs[0].key()));
    assert_eq!(recs[0].key(), &b"\xffnull\xff"[..]);
    assert!(!recs[1].key_null() && !wasmstream::is_null_key(recs[1].key()));
    assert!(std::str::from_utf8(wasmstream::NULL_KEY).is_err());
}

/// ABI 0.5: a record with a null value has flag bit 2 and an empty value; a record with an
/// empty value has neither.
#[test]
fn value_null_flag() {
    assert_eq!(abi::FLAG_VALUE_NULL, 4);
    assert_eq!(abi::EMIT_NULL_VALUE, -1);
    let mut b = Vec::new();
    abi::encode_batch_header(&mut b, 2);
    abi::encode_record(
        &mut b,
        &abi::RecordFields {
            flags: abi::FLAG_VALUE_NULL | abi::FLAG_LATE,
            key: b"k",
            timestamp: -1,
            ..Default::default()
        },
    );
    abi::encode_record(
        &mut b,
        &abi::RecordFields {
            key: b"k",
            timestamp: -1,
            ..Default::default()
        },
    );
    let batch = abi::decode_batch(&b).unwrap();
    let recs: Vec<_> = batch.records().collect();
    assert!(recs[0].value_null() && recs[0].is_late() && !recs[0].key_null());
    assert!(recs[0].value().is_empty());
    assert!(!recs[1].value_null() && recs[1].value().is_empty());
}
