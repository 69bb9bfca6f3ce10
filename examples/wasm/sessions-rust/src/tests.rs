use wasmstream::testing::{Harness, TestRecord};

use super::*;

const MIN: i64 = 60_000;

fn ev(user: &str, m: i64, late: bool) -> TestRecord {
    TestRecord::new(user, "/").timestamp(m * MIN).late(late)
}

#[test]
fn sessions_merge_close_and_late() {
    let mut h = Harness::<Sessions>::new(r#"{"gap_minutes":30}"#).unwrap();
    let out = h
        .process(&[
            ev("alice", 100, false),
            ev("alice", 150, false),
            ev("alice", 90, true),
        ])
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].output, LATE_OUTPUT);
    assert_eq!(out[0].ts, 90 * MIN);
    h.process(&[ev("alice", 125, false)]).unwrap();
    let f = h.advance_watermark(0, 180 * MIN).unwrap();
    assert_eq!(f.outputs.len(), 1);
    assert_eq!(
        f.outputs[0].value_str(),
        format!(
            "{{\"user\":\"alice\",\"count\":3,\"first\":{},\"last\":{}}}",
            100 * MIN,
            150 * MIN
        )
    );
    assert_eq!(f.outputs[0].ts, 180 * MIN);
    assert!(h.all_state().is_empty());
}

#[test]
fn config() {
    assert_eq!(parse_gap_minutes(b"").unwrap(), 30);
    assert_eq!(parse_gap_minutes(b"{}").unwrap(), 30);
    assert_eq!(parse_gap_minutes(br#"{"gap_minutes":5}"#).unwrap(), 5);
    for bad in [
        &br#"{"gap_minutes":0}"#[..],
        br#"{"gap_minutes":1.5}"#,
        br#"{"gap_minutes":"5"}"#,
        b"[]",
    ] {
        assert!(parse_gap_minutes(bad).is_err(), "{:?}", bad);
    }
}
