//! ABI 0.2 in the SDK runtime and the native harness: timers, watermarks, ticks, migrations and
//! outbound HTTP.

use std::cell::RefCell;
use std::rc::Rc;

use wasmstream::testing::{Harness, Limits, TestRecord, Timer};
use wasmstream::{
    http_request, Context, Domain, Errno, Error, Firing, HttpRequest, HttpResponse, Migration,
    Record, Task, Tick, TickContext,
};

/// A task whose behaviour each record's value (and each timer's payload) selects.
struct Timers;

impl Task for Timers {
    fn init(_: &[u8]) -> Result<Self, Error> {
        // No scope during init: timers are not allowed.
        assert_eq!(
            wasmstream::set_timer("k", "t", Domain::ProcessingTime, 0, "")
                .unwrap_err()
                .code(),
            Errno::NOT_ALLOWED
        );
        assert_eq!(wasmstream::watermark(), -1);
        Ok(Timers)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let v = rec.value_str()?;
        let w: Vec<&str> = v.split(' ').collect();
        match w[0] {
            // set <name> <p|e> <time> [payload]
            "set" => {
                let d = if w[2] == "e" {
                    Domain::EventTime
                } else {
                    Domain::ProcessingTime
                };
                ctx.set_timer(w[1], d, w[3].parse()?, w.get(4).unwrap_or(&""))
            }
            "delete" => ctx.delete_timer(w[1]),
            "other" => wasmstream::set_timer("not-in-batch", "t", Domain::EventTime, 1, ""),
            "set-delete" => {
                ctx.set_timer("x", Domain::EventTime, 5, "")?;
                ctx.delete_timer("x")
            }
            "watermark" => {
                let w = ctx.watermark();
                ctx.emit("wm", rec.key(), w.to_string())
            }
            "late" => ctx.emit("late", rec.key(), if rec.late() { "yes" } else { "no" }),
            "set-and-fail" => {
                ctx.set_timer("t", Domain::ProcessingTime, 0, "")?;
                Err(Error::new("boom"))
            }
            _ => Ok(()),
        }
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        assert_eq!(ctx.key(), f.key());
        let n = ctx.get_u64("fired")?.unwrap_or(0) + 1;
        ctx.put_u64("fired", n)?;
        let mut desc = format!(
            "{}:{}@{}:{}:{}",
            String::from_utf8_lossy(f.key()),
            f.name_str()?,
            f.time(),
            if f.event_time() { "e" } else { "p" },
            String::from_utf8_lossy(f.payload())
        );
        desc.push_str(&format!(" p{}", f.partition()));
        ctx.emit("fired", f.key(), desc)?;
        match f.payload() {
            // Re-set the same timer one minute later: it must survive the firing.
            b"again" => ctx.set_timer(f.name(), f.domain(), f.time() + 60_000, "again"),
            // Re-set to a time already due: fires again in the next round, until n reaches 3.
            b"loop" if n < 3 => ctx.set_timer(f.name(), f.domain(), f.time(), "loop"),
            b"fail" => Err(Error::new("timer failed")),
            b"forever" => ctx.set_timer(f.name(), f.domain(), f.time(), "forever"),
            b"delete-self" => {
                ctx.set_timer(f.name(), f.domain(), f.time() + 1, "")?;
                ctx.delete_timer(f.name())
            }
            _ => Ok(()),
        }
    }
}

fn rec(key: &str, value: &str) -> TestRecord {
    TestRecord::new(key, value)
}

#[test]
fn timer_set_replace_delete() {
    let mut h = Harness::<Timers>::new("{}").unwrap();
    h.process(&[rec("a", "set t p 100 one")]).unwrap();
    assert_eq!(
        h.timers(),
        vec![Timer::new("a", "t", Domain::ProcessingTime, 100).payload("one")]
    );
    // Setting it again replaces domain, time and payload.
    h.process(&[rec("a", "set t e 200 two")]).unwrap();
    assert_eq!(
        h.timers(),
        vec![Timer::new("a", "t", Domain::EventTime, 200).payload("two")]
    );
    // Partition comes from the key's record.
    h.process(&[rec("b", "set t p 5").partition(2)]).unwrap();
    assert_eq!(h.timer(2, "b", "t").unwrap().time, 5);
    // Delete, in whichever domain; a missing timer is not an error.
    h.process(&[rec("a", "delete t"), rec("a", "delete missing")])
        .unwrap();
    assert!(h.timer(0, "a", "t").is_none());
    assert_eq!(h.timers().len(), 1);
    // A key outside the batch.
    let err = h.process(&[rec("a", "other")]).unwrap_err();
    assert!(err.contains("ERR_KEY_NOT_IN_BATCH"), "{}", err);
    // A failed call discards its timer changes.
    assert!(h.process(&[rec("z", "set-and-fail")]).is_err());
    assert!(h.timer(0, "z", "t").is_none());
}

#[test]
fn timer_ops_count_as_writes() {
    let limits = Limits {
        max_writes: 1,
        ..Limits::default()
    };
    let mut h = Harness::<Timers>::with_limits("{}", limits).unwrap();
    let err = h.process(&[rec("a", "set-delete")]).unwrap_err();
    assert!(err.contains("ERR_LIMIT"), "{}", err);
}

#[test]
fn fire_order_and_deletion() {
    let mut h = Harness::<Timers>::new("{}").unwrap();
    h.set_now(0);
    h.process(&[
        rec("b", "set x p 20"),
        rec("a", "set y p 20"),
        rec("a", "set x p 20"),
        rec("a", "set early p 10"),
        rec("c", "set later p 1000"),
        rec("e", "set ev e 15"),
    ])
    .unwrap();
    // Nothing is due yet.
    assert!(h.fire_due().unwrap().timers.is_empty());
    let fired = h.advance_time(20).unwrap();
    let got: Vec<String> = fired.outputs.iter().map(|o| o.value_str()).collect();
    assert_eq!(
        got,
        vec![
            "a:early@10:p: p0",
            "a:x@20:p: p0",
            "a:y@20:p: p0",
            "b:x@20:p: p0",
        ]
    );
    assert_eq!(fired.timers.len(), 4);
    // Fired timers are deleted; the others stay.
    let left: Vec<Vec<u8>> = h.timers().into_iter().map(|t| t.name).collect();
    assert_eq!(left, vec![b"later".to_vec(), b"ev".to_vec()]);
    assert_eq!(h.state_str("a", "fired").as_deref(), Some("3"));
    // Event-time timers wait for the watermark of their partition.
    assert!(h.advance_watermark(1, 100).unwrap().timers.is_empty());
    let fired = h.advance_watermark(0, 15).unwrap();
    assert_eq!(fired.outputs[0].value_str(), "e:ev@15:e: p0");
    // The output of an event-time firing carries the firing's time.
    assert_eq!(fired.outputs[0].ts, 15);
    // That of a processing-time firing is stamped "now".
    h.process(&[rec("p", "set t p 25")]).unwrap();
    let fired = h.advance_time(30).unwrap();
    assert_eq!(fired.outputs[0].ts, 30);
    // Time and watermarks never go back.
    assert!(h.advance_time(19).is_err());
    assert!(h.advance_watermark(0, 14).is_err());
    assert_eq!(h.watermark(0), 15);
    assert_eq!(h.watermark(7), -1);
}

#[test]
fn watermark_and_late_records() {
    let mut h = Harness::<Timers>::new("{}").unwrap();
    h.advance_watermark(3, 500).unwrap();
    let out = h
        .process(&[
            rec("a", "watermark").partition(3),
            rec("b", "late").late(true),
        ])
        .unwrap();
    assert_eq!(out[0].value_str(), "500");
    assert_eq!(out[1].value_str(), "yes");
}

#[test]
fn again_rescheduling() {
    let mut h = Harness::<Timers>::new("{}").unwrap();
    h.set_now(0);
    h.process(&[rec("a", "set t p 100 again")]).unwrap();
    let fired = h.advance_time(100).unwrap();
    assert_eq!(fired.timers.len(), 1);
    // The handler set the same timer again: the new setting stands.
    assert_eq!(
        h.timers(),
        vec![Timer::new("a", "t", Domain::ProcessingTime, 60_100).payload("again")]
    );
    let fired = h.advance_time(200_000).unwrap();
    // 60 100, 120 100, 180 100 fire in successive rounds.
    assert_eq!(fired.timers.len(), 3);
    assert_eq!(h.timer(0, "a", "t").unwrap().time, 240_100);

    // Re-set to a time already due: fires again in the next round.
    h.process(&[rec("b", "set u p 5 loop")]).unwrap();
    let fired = h.fire_due().unwrap();
    assert_eq!(fired.timers.len(), 3);
    assert!(h.timer(0, "b", "u").is_none());

    // Set then deleted by the handler: deleted.
    h.process(&[rec("c", "set d p 5 delete-self")]).unwrap();
    h.fire_due().unwrap();
    assert!(h.timer(0, "c", "d").is_none());

    // A handler that keeps a timer due forever is stopped.
    h.process(&[rec("d", "set f p 5 forever")]).unwrap();
    let err = h.fire_due().unwrap_err();
    assert!(err.contains("rounds"), "{}", err);
}

#[test]
fn failed_firing_keeps_timer_and_discards_effects() {
    let mut h = Harness::<Timers>::new("{}").unwrap();
    h.set_now(0);
    h.process(&[rec("a", "set t p 10 fail")]).unwrap();
    let before = h.outputs().len();
    let err = h.advance_time(10).unwrap_err();
    assert!(
        err.starts_with("wasmstream: timer \"t\" of key \"a\": timer failed"),
        "{}",
        err
    );
    assert!(h.timer(0, "a", "t").is_some());
    assert_eq!(h.state("a", "fired"), None);
    assert_eq!(h.outputs().len(), before);
    // It fires again (and fails again) next time.
    assert!(h.fire_due().is_err());
}

/// A task without timer, tick or migrate handlers: the defaults.
struct Plain;

impl Task for Plain {
    fn init(_: &[u8]) -> Result<Self, Error> {
        Ok(Plain)
    }
    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        ctx.put("v", rec.value())
    }
}

#[test]
fn defaults() {
    let mut h = Harness::<Plain>::new("{}").unwrap();
    h.process(&[rec("a", "1")]).unwrap();
    // A firing without a handler fails with a clear message; the timer stays.
    h.set_timer(Timer::new("a", "t", Domain::ProcessingTime, 0));
    let err = h.fire_due().unwrap_err();
    assert!(err.contains("no timer handler"), "{}", err);
    assert!(err.contains("Task::on_timer"), "{}", err);
    assert_eq!(h.timers().len(), 1);
    // Ticks and migrations without handlers succeed doing nothing.
    assert_eq!(h.tick(0, "input").unwrap(), vec![]);
    h.set_state_version("a", 7);
    assert_eq!(h.migrate_all().unwrap(), vec![]);
    assert_eq!(h.state_str("a", "v").as_deref(), Some("1"));
    assert_eq!(h.state_version("a"), 0);
    assert_eq!(wasmstream::rt::state_version::<Plain>(), 0);
}

/// Ticks: lists every key with state and writes a summary.
struct Ticker;

impl Task for Ticker {
    fn init(_: &[u8]) -> Result<Self, Error> {
        Ok(Ticker)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        ctx.put("v", rec.value())
    }

    fn on_tick(&mut self, t: &Tick, ctx: &mut TickContext) -> Result<(), Error> {
        let keys = ctx.keys()?;
        let mut listed = Vec::new();
        ctx.for_each_key(|key, kctx| {
            let v = kctx.get("v")?.map(|v| v.to_vec()).unwrap_or_default();
            listed.push(format!(
                "{}={}",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(&v)
            ));
            if v == b"stop" {
                return Ok(false);
            }
            kctx.set_timer("tick", Domain::ProcessingTime, t.now + 1000, "")?;
            Ok(true)
        })?;
        let summary = format!(
            "{} {} {} {} keys={} listed={}",
            String::from_utf8_lossy(t.source),
            t.partition,
            t.now,
            t.watermark,
            keys.len(),
            listed.join(",")
        );
        if listed.iter().any(|l| l.ends_with("=fail")) {
            return Err(Error::new("tick failed"));
        }
        ctx.with_key(b"summary").put("last", &summary)?;
        ctx.with_key(b"summary").emit("ticks", "summary", summary)
    }
}

#[test]
fn tick_key_paging() {
    let limits = Limits {
        key_page_entries: 2,
        ..Limits::default()
    };
    let mut h = Harness::<Ticker>::with_limits("{}", limits).unwrap();
    h.set_now(1000);
    let recs: Vec<TestRecord> = ["e", "a", "d", "b", "c"]
        .iter()
        .map(|k| rec(k, &format!("v{}", k)))
        .collect();
    h.process(&recs).unwrap();
    h.advance_watermark(4, 77).unwrap();
    let out = h.tick(4, "orders").unwrap();
    assert_eq!(
        out[0].value_str(),
        "orders 4 1000 77 keys=5 listed=a=va,b=vb,c=vc,d=vd,e=ve"
    );
    // Timers set in the tick belong to the tick's partition.
    assert_eq!(h.timer(4, "c", "tick").unwrap().time, 2000);
    assert_eq!(h.timers().len(), 5);

    // Stopping early, and a key larger than the first page buffer (4 KiB) grows it.
    let big = "k".repeat(10_000);
    h.process(&[rec(&big, "x"), rec("b", "stop")]).unwrap();
    let out = h.tick(4, "orders").unwrap();
    assert_eq!(
        out[0].value_str(),
        "orders 4 1000 77 keys=7 listed=a=va,b=stop"
    );

    // A failed tick changes nothing.
    let timers = h.timers();
    h.process(&[rec("b", "fail")]).unwrap();
    let err = h.tick(4, "orders").unwrap_err();
    assert_eq!(err, "wasmstream: tick of orders/4: tick failed");
    assert_eq!(h.timers(), timers);
}

/// Migrations: state version 2 stores "v" as "n=<v>"; version 1 stored it plain.
struct Migrating {
    log: Rc<RefCell<Vec<String>>>,
}

thread_local! {
    static MIGRATIONS: Rc<RefCell<Vec<String>>> = Rc::new(RefCell::new(Vec::new()));
}

impl Task for Migrating {
    const STATE_VERSION: u32 = 2;

    fn init(_: &[u8]) -> Result<Self, Error> {
        Ok(Migrating {
            log: MIGRATIONS.with(|m| m.clone()),
        })
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let v = ctx.get("v")?.map(|v| v.to_vec()).unwrap_or_default();
        if !v.is_empty() && !v.starts_with(b"n=") {
            return Err(Error::new("unmigrated state"));
        }
        if rec.value() == b"fail" {
            return Err(Error::new("process failed"));
        }
        ctx.put("v", format!("n={}", rec.value_str()?))
    }

    fn migrate(&mut self, m: &Migration, ctx: &mut Context) -> Result<(), Error> {
        self.log.borrow_mut().push(format!(
            "{} {}->{} p{}",
            String::from_utf8_lossy(m.key),
            m.from,
            m.to,
            m.partition
        ));
        if m.from > m.to {
            return Err(Error::new("cannot downgrade"));
        }
        let v = ctx.get("v")?.map(|v| v.to_vec()).unwrap_or_default();
        let mut nv = b"n=".to_vec();
        nv.extend_from_slice(&v);
        ctx.put("v", nv)
    }
}

#[test]
fn migrate() {
    MIGRATIONS.with(|m| m.borrow_mut().clear());
    let mut h = Harness::<Migrating>::new("{}").unwrap();
    assert_eq!(wasmstream::rt::state_version::<Migrating>(), 2);
    // State written by an older module.
    h.set_state("a", "v", "old");
    h.set_state_version("a", 1);
    h.set_state("b", "v", "n=ok");
    assert_eq!(h.state_version("b"), 2);

    // A failed batch discards the migration too (one unit of work).
    assert!(h.process(&[rec("a", "fail").partition(5)]).is_err());
    assert_eq!(h.state_str("a", "v").as_deref(), Some("old"));
    assert_eq!(h.state_version("a"), 1);

    // Migrated before the batch, in the same unit.
    h.process(&[rec("a", "x").partition(5), rec("b", "y")])
        .unwrap();
    assert_eq!(h.state_str("a", "v").as_deref(), Some("n=x"));
    assert_eq!(h.state_version("a"), 2);
    MIGRATIONS.with(|m| {
        assert_eq!(*m.borrow(), vec!["a 1->2 p5", "a 1->2 p5"]);
    });

    // A key without state is not migrated; a downgrade fails with the versions named.
    h.set_state("c", "v", "n=1");
    h.set_state_version("c", 3);
    let err = h.migrate_all().unwrap_err();
    assert_eq!(
        err,
        "wasmstream: migrating key \"c\" from state version 3 to 2: cannot downgrade"
    );
    h.set_state_version("c", 0);
    h.set_state("d", "v", "plain");
    h.set_state_version("d", 1);
    h.migrate_all().unwrap();
    assert_eq!(h.state_str("c", "v").as_deref(), Some("n=n=1"));
    assert_eq!(h.state_str("d", "v").as_deref(), Some("n=plain"));
    assert_eq!(h.state_version("d"), 2);
}

/// HTTP: the record's value is the URL; emits status and body.
struct Fetch;

impl Task for Fetch {
    fn init(_: &[u8]) -> Result<Self, Error> {
        let err = http_request(&HttpRequest::get("https://x.test/")).unwrap_err();
        assert_eq!(err.code(), Errno::NOT_ALLOWED);
        Ok(Fetch)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        let req = HttpRequest::post(rec.value_str()?, "body")
            .header("x-key", rec.key())
            .timeout_ms(250);
        match http_request(&req) {
            Ok(resp) => ctx.emit(
                "out",
                rec.key(),
                format!(
                    "{} {} {}",
                    resp.status,
                    String::from_utf8_lossy(resp.header("Content-Type").unwrap_or(b"-")),
                    resp.body.len()
                ),
            ),
            Err(e) => ctx.emit("err", rec.key(), e.to_string()),
        }
    }
}

#[test]
fn http_stub() {
    let mut h = Harness::<Fetch>::new("{}").unwrap();
    // No grant.
    let out = h.process(&[rec("k", "https://x.test/")]).unwrap();
    assert_eq!(out[0].value_str(), "ERR_NOT_ALLOWED");

    let seen = Rc::new(RefCell::new(Vec::new()));
    let s = seen.clone();
    h.set_http(move |req| {
        s.borrow_mut().push(req.clone());
        match req.url.as_str() {
            "https://x.test/big" => Ok(HttpResponse::new(200)
                .with_header("content-type", "application/octet-stream")
                .with_body(vec![7u8; 100_000])),
            "https://x.test/down" => Err(Errno::UNAVAILABLE),
            "https://x.test/other" => Err(Errno::OK),
            "https://x.test/forbidden" => Err(Errno::NOT_ALLOWED),
            _ => Ok(HttpResponse::new(404)
                .with_header("content-type", "text/plain")
                .with_body("not found")),
        }
    });
    let out = h
        .process(&[
            rec("a", "https://x.test/missing"),
            rec("b", "https://x.test/big"),
            rec("c", "https://x.test/down"),
            rec("d", "https://x.test/other"),
            rec("e", "https://x.test/forbidden"),
            rec("f", "ftp://x.test/"),
        ])
        .unwrap();
    let got: Vec<String> = out.iter().map(|o| o.value_str()).collect();
    assert_eq!(
        got,
        vec![
            "404 text/plain 9",
            // Larger than the SDK's 16 KiB buffer: fetched with http_response.
            "200 application/octet-stream 100000",
            "ERR_UNAVAILABLE",
            "ERR_UNAVAILABLE",
            "ERR_NOT_ALLOWED",
            "ERR_INVALID",
        ]
    );
    let seen = seen.borrow();
    assert_eq!(seen.len(), 5);
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].body, b"body");
    assert_eq!(seen[0].timeout_ms, 250);
    assert_eq!(seen[0].headers.headers().get("x-key"), Some(&b"a"[..]));
    h.clear_http();
    let out = h.process(&[rec("k", "https://x.test/")]).unwrap();
    assert_eq!(out[0].value_str(), "ERR_NOT_ALLOWED");
}

/// The session-window example of the README.
struct Sessions;

impl Task for Sessions {
    fn init(_config: &[u8]) -> Result<Self, Error> {
        Ok(Sessions)
    }

    fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
        if rec.late() {
            return Ok(());
        }
        let n = ctx.get_u64("n")?.unwrap_or(0) + 1;
        ctx.put_u64("n", n)?;
        ctx.set_timer("close", Domain::EventTime, rec.timestamp() + 60_000, "")
    }

    fn on_timer(&mut self, f: &Firing, ctx: &mut Context) -> Result<(), Error> {
        let n = ctx.get_u64("n")?.unwrap_or(0);
        ctx.delete("n")?;
        ctx.emit("sessions", f.key, n.to_string())
    }
}

#[test]
fn readme_sessions() {
    let mut h = Harness::<Sessions>::new("{}").unwrap();
    h.process(&[
        TestRecord::new("alice", "x").timestamp(1_000),
        TestRecord::new("alice", "y").timestamp(500),
        TestRecord::new("alice", "z").timestamp(0).late(true),
    ])
    .unwrap();
    // The second record replaced the timer: it closes 60 s after 500.
    assert_eq!(h.timer(0, "alice", "close").unwrap().time, 60_500);
    assert!(h.advance_watermark(0, 60_499).unwrap().timers.is_empty());
    let fired = h.advance_watermark(0, 61_000).unwrap();
    assert_eq!(fired.outputs[0].value_str(), "2");
    assert_eq!(fired.outputs[0].ts, 60_500);
    assert!(h.timers().is_empty());
    assert!(h.state_of("alice").is_empty());
}
