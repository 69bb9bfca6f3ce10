//! Native tests: every command of the contract against the SDK's fake host.

use wasmstream::testing::{Harness, Limits, Output, TestRecord};

use crate::Conform;

/// Runs one command as a batch of its own with this key and timestamp 1000 + offset.
fn run(h: &mut Harness<Conform>, key: &str, offset: i64, cmd: &str) -> Result<Vec<Output>, String> {
    h.process(&[TestRecord::new(key, cmd)
        .source("in")
        .offset(offset)
        .timestamp(1000 + offset)])
}

/// The values of a successful command's outputs, which must all be results for `key`.
fn results(h: &mut Harness<Conform>, key: &str, cmd: &str) -> Vec<String> {
    let out = run(h, key, 0, cmd).unwrap_or_else(|e| panic!("{:?} failed: {}", cmd, e));
    out.iter()
        .map(|o| {
            assert_eq!(o.output, b"result", "{:?}", cmd);
            assert_eq!(o.key, key.as_bytes(), "{:?}", cmd);
            assert_eq!(o.ts, 1000, "{:?}", cmd);
            assert!(o.headers.is_empty(), "{:?}", cmd);
            o.value_str()
        })
        .collect()
}

fn one(h: &mut Harness<Conform>, key: &str, cmd: &str) -> String {
    let mut r = results(h, key, cmd);
    assert_eq!(r.len(), 1, "{:?}: {:?}", cmd, r);
    r.remove(0)
}

#[test]
fn state_commands() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    let steps: &[(&str, &str, &str)] = &[
        ("a", "get x", "missing"),
        ("a", "put x 1", "ok"),
        ("a", "put y two words ", "ok"),
        ("a", "put z", "ok"),
        ("a", "put  empty-name", "ok"),
        ("a", "get x", "1"),
        ("a", "get y", "two words "),
        ("a", "get z", ""),
        ("a", "get ", "empty-name"),
        ("a", "get", "empty-name"),
        ("b", "get x", "missing"),
        ("a", "scan", "=empty-name;x=1;y=two words ;z="),
        ("a", "scan y", "y=two words "),
        ("a", "scan q", ""),
        ("a", "del x", "ok"),
        ("a", "del nothing", "ok"),
        ("a", "scan x", ""),
        ("", "put k v", "ok"),
        ("", "get k", "v"),
    ];
    for (key, cmd, want) in steps {
        assert_eq!(one(&mut h, key, cmd), *want, "key {:?} {:?}", key, cmd);
    }
    assert_eq!(h.state_str("a", "y").as_deref(), Some("two words "));
    assert_eq!(h.state_str("a", "x"), None);
}

#[test]
fn many_pages() {
    // Three entries per page: the scans inside `many` and `scan` cross many pages.
    let limits = Limits {
        scan_page_entries: 3,
        ..Limits::default()
    };
    let mut h = Harness::<Conform>::with_limits("{}", limits).unwrap();
    assert_eq!(one(&mut h, "k", "many 20 p/"), "20 p/00000 p/00019");
    assert_eq!(one(&mut h, "k", "many 0 q/"), "0  ");
    assert_eq!(one(&mut h, "k", "many 2 p/"), "20 p/00000 p/00019");
    assert_eq!(one(&mut h, "k", "many 3 "), "23 00000 p/00019");
    assert_eq!(
        one(&mut h, "k", "scan p/0001"),
        (10..20)
            .map(|i| format!("p/000{}={}", i, i))
            .collect::<Vec<_>>()
            .join(";")
    );
    assert_eq!(h.state_str("k", "p/00007").as_deref(), Some("7"));
    assert_eq!(h.state_str("k", "00002").as_deref(), Some("2"));
    for bad in [
        "many",
        "many x p",
        "many 100000 p",
        "many -1 p",
        "many 0000000001 p",
    ] {
        let err = run(&mut h, "k", 3, bad).unwrap_err();
        assert_eq!(err, "wasmstream: record in/0@3: bad number", "{:?}", bad);
    }
}

#[test]
fn big_values() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    assert_eq!(one(&mut h, "k", "big 200000"), "200000");
    assert_eq!(one(&mut h, "k", "big 1048576"), "1048576");
    assert_eq!(one(&mut h, "k", "big 5000"), "5000");
    // One entry larger than the scan buffer's first size: the SDK grows it.
    assert_eq!(
        one(&mut h, "k", "scan b"),
        format!("big={}", "x".repeat(5000))
    );
    let err = run(&mut h, "k", 9, "big 1048577").unwrap_err();
    assert_eq!(err, "wasmstream: record in/0@9: ERR_TOO_LARGE");
    assert_eq!(h.state("k", "big").map(|v| v.len()), Some(5000));
    assert_eq!(one(&mut h, "k", "big 0"), "0");
}

#[test]
fn emit_headers() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    let out = run(&mut h, "k", 4, "emit side v1 a=1 b= c=x=y d").unwrap();
    assert_eq!(out.len(), 1);
    let o = &out[0];
    assert_eq!(
        (&o.output[..], &o.key[..], &o.value[..], o.ts),
        (&b"side"[..], &b"k"[..], &b"v1"[..], 1004)
    );
    let hs: Vec<(&[u8], &[u8])> = o.headers.iter().map(|(n, v)| (&n[..], &v[..])).collect();
    let want: Vec<(&[u8], &[u8])> = vec![(b"a", b"1"), (b"b", b""), (b"c", b"x=y"), (b"d", b"")];
    assert_eq!(hs, want);
    let out = run(&mut h, "k", 5, "emit side").unwrap();
    assert_eq!((&out[0].value[..], out[0].headers.len()), (&b""[..], 0));
    let out = run(&mut h, "k", 6, "emit").unwrap();
    assert_eq!(
        (&out[0].output[..], &out[0].value[..]),
        (&b""[..], &b""[..])
    );
}

#[test]
fn config_and_meta() {
    let cfg = r#"{"a":[1,"two"],"b":"é"}"#;
    let mut h = Harness::<Conform>::new(cfg).unwrap();
    assert_eq!(one(&mut h, "k", "config"), cfg);
    let out = h
        .process(&[TestRecord::new("k", "meta")
            .source("src")
            .partition(3)
            .offset(42)
            .timestamp(0)])
        .unwrap();
    assert_eq!(out[0].value_str(), "src 3 42 0");
    assert_eq!(out[0].ts, 0);
}

#[test]
fn failures() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    assert_eq!(one(&mut h, "k", "put n 1"), "ok");
    let cases: &[(&str, &str)] = &[
        ("fail boom", "boom"),
        ("fail with \"quotes\" and é", "with \"quotes\" and é"),
        ("fail", ""),
        ("", "unknown command"),
        ("PUT n 2", "unknown command"),
        ("put", "ok"),
    ];
    for (cmd, msg) in cases {
        match run(&mut h, "k", 7, cmd) {
            Err(e) => assert_eq!(
                e,
                format!("wasmstream: record in/0@7: {}", msg),
                "{:?}",
                cmd
            ),
            Ok(out) => assert_eq!(out[0].value_str(), *msg, "{:?}", cmd),
        }
    }
    // A failed batch left nothing behind, the records of other keys in it included.
    let err = h
        .process(&[
            TestRecord::new("j", "put n 9"),
            TestRecord::new("k", "fail x"),
        ])
        .unwrap_err();
    assert!(err.ends_with(": x"), "{}", err);
    assert_eq!(h.state_str("j", "n"), None);
    assert_eq!(h.state_str("k", "n").as_deref(), Some("1"));
}

#[test]
fn foreign_keys() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    assert_eq!(one(&mut h, "k", "put n 1"), "ok");
    assert_eq!(one(&mut h, "k", "foreign k n"), "ok 1");
    assert_eq!(one(&mut h, "k", "foreign k m"), "ok missing");
    assert_eq!(one(&mut h, "k", "foreign other n"), "ERR_KEY_NOT_IN_BATCH");
    assert_eq!(one(&mut h, "k", "foreign"), "ERR_KEY_NOT_IN_BATCH");
    // Another key of the same batch is in scope.
    let out = h
        .process(&[
            TestRecord::new("k", "foreign j n"),
            TestRecord::new("j", "get n"),
        ])
        .unwrap();
    assert_eq!(out[0].value_str(), "ok missing");
}

#[test]
fn helper_commands() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    for (cmd, want) in [
        ("count n 2", "2"),
        ("count n 40", "42"),
        ("append l a b", "a b"),
        ("append l c", "a b;c"),
        ("mput m y 1", "y=1"),
        ("mput m x 2", "x=2;y=1"),
        (
            r#"json {"a":"x\n","b":1.50,"c":true,"d":null}"#,
            r#"{"a":"x\n","b":1.5,"c":true,"d":null}"#,
        ),
    ] {
        assert_eq!(one(&mut h, "k", cmd), want, "{:?}", cmd);
    }
    let err = run(&mut h, "k", 3, r#"json {"a":[]}"#).unwrap_err();
    assert!(err.ends_with("bad json"), "{}", err);
    let out = run(&mut h, "k", 0, "emitdef side v").unwrap();
    assert_eq!(out.len(), 1);
    assert!(out[0].output == "side" && out[0].ts == 1000);
}

/// A record with a null value (ABI 0.5) deletes every state entry of its key (more than a scan
/// page of them) and emits a tombstone to `result`; another key's state stays, and an empty value
/// is an unknown command, no tombstone.
#[test]
fn tombstone() {
    let mut h = Harness::<Conform>::new("{}").unwrap();
    one(&mut h, "k", "many 300 p/");
    assert_eq!(one(&mut h, "k", "put x 1"), "ok");
    assert_eq!(one(&mut h, "other", "put x 2"), "ok");
    let out = h
        .process(&[TestRecord::new("k", "")
            .value_null(true)
            .source("in")
            .offset(5)
            .timestamp(1005)])
        .unwrap();
    assert_eq!(out.len(), 1, "{:?}", out);
    assert_eq!(out[0].output, b"result");
    assert_eq!(out[0].key, b"k");
    assert!(out[0].value_null && out[0].value.is_empty(), "{:?}", out[0]);
    assert_eq!(out[0].ts, 1005);
    assert!(out[0].headers.is_empty());
    assert_eq!(one(&mut h, "k", "scan"), "");
    assert_eq!(one(&mut h, "other", "get x"), "2");
    assert_eq!(
        run(&mut h, "k", 6, "").unwrap_err(),
        "wasmstream: record in/0@6: unknown command"
    );
}
