//! The SDK runtime and context against the fake host: state, scans, outputs, errors.

use wasmstream::testing::{Harness, Limits, TestRecord};
use wasmstream::{Context, Errno, Error, HeadersBuilder, Level, Record, Task};

/// A task whose behaviour each record's value selects.
struct Probe {
    calls: u32,
}

impl Task for Probe {
    fn init(config: &[u8]) -> Result<Self, Error> {
        wasmstream::log(
            Level::Info,
            format!("init {}", String::from_utf8_lossy(config)),
        );
        assert_eq!(wasmstream::config(), config);
        if config == b"bad" {
            return Err(Error::new("config: bad"));
        }
        Ok(Probe { calls: 0 })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        self.calls += 1;
        let value = rec.value_str()?;
        let mut words = value.split(' ');
        match words.next().unwrap_or("") {
            "count" => {
                let n = ctx.get_u64("n")?.unwrap_or(0) + 1;
                ctx.put_u64("n", n)?;
                ctx.emit("out", rec.key(), n.to_string())
            }
            "put" => ctx.put(words.next().unwrap(), words.next().unwrap_or("")),
            "delete" => ctx.delete(words.next().unwrap()),
            "get" => {
                let v = ctx.get(words.next().unwrap())?.map(|v| v.to_vec());
                let v = match v {
                    Some(v) => v,
                    None => b"<none>".to_vec(),
                };
                ctx.emit("out", rec.key(), v)
            }
            "scan" => {
                let prefix = words.next().unwrap_or("");
                let mut listed = Vec::new();
                let mut scan = ctx.scan(prefix);
                while let Some((n, v)) = scan.next()? {
                    listed.push(format!("{}={}", String::from_utf8_lossy(n), v.len()));
                }
                ctx.emit("out", rec.key(), listed.join(","))
            }
            "big" => {
                let n: usize = words.next().unwrap().parse()?;
                ctx.put(words.next().unwrap(), vec![b'x'; n])
            }
            "headers" => {
                let mut h = HeadersBuilder::new();
                h.add("a", "1").add("b", "");
                ctx.emit_with("out", "k2", "v2", Some(&h), 7)?;
                ctx.emit_with("out", "k3", "v3", None, -1)
            }
            "meta" => {
                let m = format!(
                    "{:?} {} {} {} {} {:?} {} {}",
                    String::from_utf8_lossy(rec.source()),
                    rec.partition(),
                    rec.offset(),
                    rec.timestamp(),
                    rec.is_late(),
                    rec.header("h")
                        .map(|v| String::from_utf8_lossy(v).into_owned()),
                    ctx.timestamp(),
                    ctx.now_ms()
                );
                ctx.log(Level::Debug, &m);
                ctx.emit("out", rec.key(), m)
            }
            "other" => {
                let other = words.next().unwrap().as_bytes().to_vec();
                let mut o = ctx.with_key(&other);
                let v = o.get("n")?.map(|v| v.to_vec()).unwrap_or_default();
                o.put("from-other", &v)?;
                ctx.emit("out", rec.key(), v)
            }
            "fail" => Err(Error::new(format!("failing on {}", rec.offset()))),
            "fail-permanent" => Err(Error::from(Errno::INVALID).into_permanent()),
            "bad" => Err(Error::permanent(format!("bad record {}", rec.offset()))),
            "code" => Err(Errno::LIMIT.into()),
            "emit-unknown" => ctx.emit("nope", "", ""),
            other => Err(Error::new(format!("unknown command {:?}", other))),
        }
    }
}

fn values(outs: &[wasmstream::testing::Output]) -> Vec<String> {
    outs.iter().map(|o| o.value_str()).collect()
}

#[test]
fn init_gets_config_and_can_log() {
    let h = Harness::<Probe>::new(r#"{"a":1}"#).unwrap();
    assert_eq!(h.logs()[0].msg, r#"init {"a":1}"#);
    assert_eq!(h.logs()[0].level, 1);
    assert_eq!(h.task().calls, 0);
}

#[test]
fn init_error_is_reported() {
    let err = Harness::<Probe>::new("bad").err().unwrap();
    assert_eq!(err, "config: bad");
}

#[test]
fn state_and_outputs() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    let out = h
        .process(&[
            TestRecord::new("alice", "count").timestamp(10),
            TestRecord::new("bob", "count").timestamp(11),
            TestRecord::new("alice", "count").timestamp(12),
        ])
        .unwrap();
    assert_eq!(values(&out), ["1", "1", "2"]);
    assert_eq!(out[2].key, b"alice");
    assert_eq!(out[2].output, b"out");
    assert_eq!(out[2].ts, 12);
    assert_eq!(h.state_str("alice", "n").as_deref(), Some("2"));
    assert_eq!(h.state_str("bob", "n").as_deref(), Some("1"));

    h.process(&[
        TestRecord::new("alice", "put x hello"),
        TestRecord::new("alice", "delete n"),
    ])
    .unwrap();
    assert_eq!(
        h.state_of("alice"),
        vec![(b"x".to_vec(), b"hello".to_vec())]
    );
    let out = h
        .process(&[
            TestRecord::new("alice", "get x"),
            TestRecord::new("alice", "get n"),
        ])
        .unwrap();
    assert_eq!(values(&out), ["hello", "<none>"]);
    assert_eq!(h.task().calls, 7);
    assert_eq!(h.outputs().len(), 5);
}

#[test]
fn other_key_of_the_batch() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    h.set_state("b", "n", "5");
    let out = h
        .process(&[
            TestRecord::new("a", "other b"),
            TestRecord::new("b", "count"),
        ])
        .unwrap();
    assert_eq!(values(&out), ["5", "6"]);
    assert_eq!(h.state_str("b", "from-other").as_deref(), Some("5"));
    let err = h.process(&[TestRecord::new("a", "other c")]).unwrap_err();
    assert_eq!(err, "wasmstream: record input/0@0: ERR_KEY_NOT_IN_BATCH");
}

#[test]
fn get_grows_its_buffer() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    h.set_state("k", "v", vec![b'y'; 100_000]);
    let out = h.process(&[TestRecord::new("k", "get v")]).unwrap();
    assert_eq!(out[0].value.len(), 100_000);
}

#[test]
fn permanent_error_fails_the_call_permanently() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    assert!(!h.failed_permanently());
    let err = h
        .process(&[
            TestRecord::new("a", "count"),
            TestRecord::new("b", "bad").offset(4),
        ])
        .unwrap_err();
    assert_eq!(err, "wasmstream: record input/0@4: bad record 4");
    assert!(h.failed_permanently());
    assert_eq!(h.state("a", "n"), None);
    assert_eq!(
        h.process(&[TestRecord::new("a", "fail-permanent")])
            .unwrap_err(),
        "wasmstream: record input/0@0: ERR_INVALID"
    );
    assert!(h.failed_permanently());
    // A plain error is not permanent.
    h.process(&[TestRecord::new("a", "fail")]).unwrap_err();
    assert!(!h.failed_permanently());
    assert!(Error::permanent("x").is_permanent());
    assert!(!Error::new("x").is_permanent());
    assert_eq!(format!("{:?}", Error::permanent("x")), "ERR_INVALID: \"x\" (permanent)");
}

#[test]
fn failed_call_has_no_effects() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    h.process(&[TestRecord::new("a", "count")]).unwrap();
    let err = h
        .process(&[
            TestRecord::new("a", "count"),
            TestRecord::new("a", "put z 1"),
            TestRecord::new("b", "fail").offset(9),
        ])
        .unwrap_err();
    assert_eq!(err, "wasmstream: record input/0@9: failing on 9");
    assert_eq!(h.state_str("a", "n").as_deref(), Some("1"));
    assert_eq!(h.state("a", "z"), None);
    assert_eq!(h.outputs().len(), 1);

    // A bare code fails with its ABI name.
    assert_eq!(
        h.process(&[TestRecord::new("a", "code")
            .source("s")
            .partition(2)
            .offset(7)])
            .unwrap_err(),
        "wasmstream: record s/2@7: ERR_LIMIT"
    );
    // A value that is not UTF-8.
    assert!(h
        .process(&[TestRecord::new("a", [0xff])])
        .unwrap_err()
        .contains("utf-8"));
}

#[test]
fn host_errors_surface_as_error_codes() {
    let mut h = Harness::<Probe>::with_limits(
        "{}",
        Limits {
            outputs: Some(vec![b"out".to_vec()]),
            max_value_bytes: 10,
            ..Limits::default()
        },
    )
    .unwrap();
    assert_eq!(
        h.process(&[TestRecord::new("a", "emit-unknown")])
            .unwrap_err(),
        "wasmstream: record input/0@0: ERR_INVALID"
    );
    assert_eq!(
        h.process(&[TestRecord::new("a", "big 11 v")]).unwrap_err(),
        "wasmstream: record input/0@0: ERR_TOO_LARGE"
    );
    h.process(&[TestRecord::new("a", "big 10 v")]).unwrap();
    h.set_limits(Limits {
        max_writes: 1,
        ..Limits::default()
    });
    assert_eq!(
        h.process(&[
            TestRecord::new("a", "put x 1"),
            TestRecord::new("a", "put y 1")
        ])
        .unwrap_err(),
        "wasmstream: record input/0@0: ERR_LIMIT"
    );
}

#[test]
fn corrupt_counter_is_an_error() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    h.set_state("a", "n", "12x");
    let err = h.process(&[TestRecord::new("a", "count")]).unwrap_err();
    assert_eq!(
        err,
        r#"wasmstream: record input/0@0: state "n": value "12x" is not a decimal number"#
    );
}

#[test]
fn scan_pages_through_the_host() {
    for page in [1, 2, 3, 100] {
        let mut h = Harness::<Probe>::with_limits(
            "{}",
            Limits {
                scan_page_entries: page,
                ..Limits::default()
            },
        )
        .unwrap();
        for n in ["a", "b1", "b2", "b3", "c", ""] {
            h.set_state("k", n, n);
        }
        h.set_state("other", "b9", "x");
        let out = h
            .process(&[
                TestRecord::new("k", "scan b"),
                TestRecord::new("k", "scan"),
                TestRecord::new("k", "scan zz"),
            ])
            .unwrap();
        assert_eq!(
            values(&out),
            ["b1=2,b2=2,b3=2", "=0,a=1,b1=2,b2=2,b3=2,c=1", ""],
            "page size {}",
            page
        );
    }
}

#[test]
fn scan_grows_its_buffer_for_a_big_entry() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    h.set_state("k", "a", "1");
    h.set_state("k", "big", vec![b'x'; 50_000]);
    h.set_state("k", "c", "3");
    let out = h.process(&[TestRecord::new("k", "scan")]).unwrap();
    assert_eq!(values(&out), ["a=1,big=50000,c=1"]);
}

#[test]
fn scan_sees_writes_of_the_same_call() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    let out = h
        .process(&[
            TestRecord::new("k", "put p1 x"),
            TestRecord::new("k", "scan p"),
            TestRecord::new("k", "delete p1"),
            TestRecord::new("k", "scan p"),
        ])
        .unwrap();
    assert_eq!(values(&out), ["p1=1", ""]);
}

#[test]
fn headers_timestamps_and_metadata() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    h.set_now(99);
    let out = h.process(&[TestRecord::new("k", "headers")]).unwrap();
    assert_eq!(
        out[0].headers,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"".to_vec())
        ]
    );
    assert_eq!((out[0].key.as_slice(), out[0].ts), (&b"k2"[..], 7));
    assert_eq!((out[1].headers.len(), out[1].ts), (0, 99));

    let out = h
        .process(&[TestRecord::new("k", "meta")
            .source("orders")
            .partition(2)
            .offset(5)
            .timestamp(1000)
            .late(true)
            .header("h", "hv")])
        .unwrap();
    assert_eq!(
        values(&out),
        [r#""orders" 2 5 1000 true Some("hv") 1000 99"#]
    );
    assert_eq!(h.logs().last().unwrap().level, 0);
}

#[test]
fn malformed_batch_fails_the_call() {
    let mut h = Harness::<Probe>::new("{}").unwrap();
    let mut b = wasmstream::testing::encode_batch(&[TestRecord::new("k", "count")]);
    b.push(0);
    assert_eq!(
        h.process_raw(&b).unwrap_err(),
        "wasmstream: batch: wasmstream abi: malformed Batch"
    );
    assert_eq!(h.task().calls, 0, "no record runs from a malformed batch");
    b.pop();
    h.process_raw(&b).unwrap();
    assert_eq!(h.task().calls, 1);
}

#[test]
fn errors_display_abi_names() {
    let names = [
        (Errno::OK, "OK"),
        (Errno::NOT_FOUND, "ERR_NOT_FOUND"),
        (Errno::OUT_OF_BOUNDS, "ERR_OUT_OF_BOUNDS"),
        (Errno::KEY_NOT_IN_BATCH, "ERR_KEY_NOT_IN_BATCH"),
        (Errno::TOO_LARGE, "ERR_TOO_LARGE"),
        (Errno::INVALID, "ERR_INVALID"),
        (Errno::NOT_ALLOWED, "ERR_NOT_ALLOWED"),
        (Errno::LIMIT, "ERR_LIMIT"),
        (Errno::BUFFER_TOO_SMALL, "ERR_BUFFER_TOO_SMALL"),
        (Errno::INTERNAL, "ERR_INTERNAL"),
    ];
    for (i, (code, name)) in names.iter().enumerate() {
        assert_eq!(code.raw(), -(i as i32));
        assert_eq!(code.to_string(), *name);
        assert_eq!(Error::from(*code).to_string(), *name);
        assert_eq!(Error::from(*code).code(), *code);
    }
    assert_eq!(Errno::from_raw(-42).to_string(), "ERR_UNKNOWN(-42)");
    assert_eq!(Errno::from_raw(-42).name(), None);
    let e = Error::with_code(Errno::TOO_LARGE, "value too big");
    assert_eq!(
        (e.to_string(), e.code(), e.message()),
        (
            "value too big".to_string(),
            Errno::TOO_LARGE,
            Some("value too big")
        )
    );
    assert_eq!(format!("{:?}", e), r#"ERR_TOO_LARGE: "value too big""#);
    assert_eq!(Error::from("x").code(), Errno::INVALID);
}

#[test]
fn decimal_helpers() {
    let mut buf = [0u8; 20];
    for n in [0u64, 7, 10, 1234567890, u64::MAX] {
        let s = wasmstream::format_u64(n, &mut buf).to_vec();
        assert_eq!(s, n.to_string().as_bytes());
        assert_eq!(wasmstream::parse_u64(&s), Some(n));
    }
    for bad in ["", "-1", "+1", " 1", "1 ", "18446744073709551616", "1a"] {
        assert_eq!(wasmstream::parse_u64(bad.as_bytes()), None, "{:?}", bad);
    }
}

#[test]
fn input_buffer() {
    use wasmstream::rt::InputBuf;
    let mut b = InputBuf::new();
    assert!(b.payload(0, 0).is_none());
    assert!(b.alloc(-1).is_none());
    let p = b.alloc(10).unwrap();
    unsafe { std::ptr::copy_nonoverlapping(b"0123456789".as_ptr(), p, 10) };
    assert_eq!(b.payload(p as usize, 10).unwrap(), b"0123456789");
    assert!(b.payload(p as usize + 1, 1).is_none());
    assert!(b.payload(p as usize, -1).is_none());
    assert!(b.payload(p as usize, 1 << 40).is_none());
    // A smaller payload reuses the buffer; a larger one grows it.
    assert_eq!(b.alloc(5).unwrap(), p);
    let q = b.alloc(1 << 20).unwrap();
    assert_eq!(b.payload(q as usize, 1 << 20).unwrap().len(), 1 << 20);
    assert!(!b.alloc(0).unwrap().is_null());
}
