//! Event-time windows over a key's records, built on typed state and event-time timers, with the
//! state layout and semantics the Go SDK shares (`wasmstream.Windows`).
//!
//! A record with an event time goes to its windows: [`WindowKind::Tumbling`] gives it the one
//! window `[start, start+size)` with `start` a multiple of `size`; [`WindowKind::Sliding`] the
//! windows of that size whose start is a multiple of `slide`, from the latest start at or before
//! the record down to the first above `ts - size`; [`WindowKind::Session`] the session of the key
//! whose events are less than `gap` apart (a record merges every session it is within `gap` of,
//! with `merge`, in ascending order of their starts). `fold` adds the record to each window's
//! accumulator (`A::default()` for a new window). A window closes when the partition's watermark
//! reaches its end (`start + size`; a session's last event + `gap`): the timer fires, `emit` gets
//! the accumulator, and the window's state is deleted.
//!
//! Allowed lateness is the task's `lateness` setting: the watermark trails the highest event time
//! read by it, and the host flags a record read below the watermark late. A late record, or one
//! without an event time, goes whole to the output `late` (dropped when `None`): it joins no
//! window. The result is then the input's alone: the host runs every record of a key that is not
//! late before the firings whose time is above its timestamp (ABI.md §4.12), while a late record
//! may come before or after a window's close depending on how far the host read ahead, so the
//! helper never lets one into a window.
//!
//! State and timers, for windows named `n` (window starts and ends in decimal ms):
//!
//! | name | holds |
//! |---|---|
//! | `n/w/<start>` | the window's accumulator, the codec's bytes |
//! | `n/e/<start>` | sessions only: the session's last event time, 8-byte `i64` |
//! | timer `n/<start>` | event time, at the window's end |
//!
//! ```
//! use wasmstream::window::{Window, WindowKind, Windows};
//! use wasmstream::{Context, Error, Record};
//!
//! static PER_MINUTE: Windows<i64> = Windows {
//!     name: "clicks",
//!     kind: WindowKind::Tumbling(60_000),
//!     late: Some("late"),
//!     fold: |n, _rec| Ok(n + 1),
//!     merge: None,
//!     emit: |ctx, w, n| {
//!         let key = ctx.key();
//!         ctx.emit("counts", key, format!("{}-{}:{}", w.start, w.end, n))
//!     },
//! };
//! // In Task::process: PER_MINUTE.add(rec, ctx); in Task::on_timer: PER_MINUTE.fire(f, ctx).
//! # fn _f(r: &Record, c: &mut Context) -> Result<(), Error> { PER_MINUTE.add(r, c) }
//! ```
//!
//! `fold` and `emit` are plain `fn`s, so that a `Windows` can be a `static`; they capture
//! nothing. Where they need what the task holds (a threshold from its config, a metric handle),
//! call [`add_with`](Windows::add_with) and [`fire_with`](Windows::fire_with) instead, with
//! closures: `self.w.add_with(rec, ctx, |n, _| Ok(n + weight))`.

use crate::abi::{Firing, HeadersBuilder, Record};
use crate::context::Context;
use crate::error::Error;
use crate::state::{Codec, Store};
use crate::timer::Domain;

/// How records are assigned to windows (times in ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowKind {
    /// Consecutive, non-overlapping windows of this size (> 0).
    Tumbling(i64),
    /// Windows of `size` starting every `slide` ms (`0 < slide <= size`).
    Sliding {
        /// The window's length.
        size: i64,
        /// The distance between two windows' starts.
        slide: i64,
    },
    /// Sessions: a key's events less than this gap (> 0) apart.
    Session(i64),
}

/// One window's span: the event times in `[start, end)`. A session's `end` is its last event +
/// the gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// The first event time in the window.
    pub start: i64,
    /// The first event time after it.
    pub end: i64,
}

/// A window aggregation of a key's records; call [`add`](Windows::add) from
/// [`Task::process`](crate::Task::process) and [`fire`](Windows::fire) from
/// [`Task::on_timer`](crate::Task::on_timer).
pub struct Windows<A: 'static> {
    /// The state and timer name prefix; unique among the key's names.
    pub name: &'static str,
    /// Tumbling, sliding or session windows.
    pub kind: WindowKind,
    /// The output late records (and records without an event time) go to; `None` drops them.
    pub late: Option<&'static str>,
    /// Returns the accumulator with the record added ([`add`](Windows::add); `add_with` takes a
    /// closure instead).
    pub fold: fn(A, &Record<'_>) -> Result<A, Error>,
    /// Combines the accumulators of two sessions a record joins (sessions only; required).
    pub merge: Option<fn(A, A) -> Result<A, Error>>,
    /// Called when a window closes, in its firing, with a context scoped to the key: emits the
    /// result ([`Context::emit`] stamps it with the window's end) ([`fire`](Windows::fire);
    /// `fire_with` takes a closure instead).
    pub emit: fn(&mut Context<'_>, Window, A) -> Result<(), Error>,
}

fn name_of(prefix: &str, part: &str, start: i64) -> Vec<u8> {
    format!("{}{}{}", prefix, part, start).into_bytes()
}

fn floor_to(t: i64, m: i64) -> i64 {
    let r = t % m;
    if r < 0 {
        t - r - m
    } else {
        t - r
    }
}

impl<A: Codec + Default> Windows<A> {
    fn check(&self) -> Result<(), Error> {
        let bad = match self.kind {
            WindowKind::Tumbling(s) | WindowKind::Session(s) => s <= 0,
            WindowKind::Sliding { size, slide } => size <= 0 || slide <= 0 || slide > size,
        };
        if self.name.is_empty() {
            return Err(Error::new(
                "wasmstream: windows: the name is empty: give the windows a state name",
            ));
        }
        if bad {
            return Err(Error::new(format!("wasmstream: windows {}: the kind needs Tumbling(size > 0), Sliding(size, 0 < slide <= size) or Session(gap > 0)", self.name)));
        }
        if matches!(self.kind, WindowKind::Session(_)) && self.merge.is_none() {
            return Err(Error::new(format!(
                "wasmstream: windows {}: session windows need merge",
                self.name
            )));
        }
        Ok(())
    }

    fn size(&self) -> i64 {
        match self.kind {
            WindowKind::Tumbling(s) | WindowKind::Session(s) => s,
            WindowKind::Sliding { size, .. } => size,
        }
    }

    /// The end of the window starting at `start` (of the session whose last event is `start`),
    /// the end of time on overflow.
    fn end(&self, start: i64) -> i64 {
        start.checked_add(self.size()).unwrap_or(i64::MAX)
    }

    fn acc_name(&self, start: i64) -> Vec<u8> {
        name_of(self.name, "/w/", start)
    }

    fn last_name(&self, start: i64) -> Vec<u8> {
        name_of(self.name, "/e/", start)
    }

    fn timer_name(&self, start: i64) -> Vec<u8> {
        name_of(self.name, "/", start)
    }

    fn get<T: Codec>(ctx: &mut Context<'_>, name: &[u8]) -> Result<Option<T>, Error> {
        match ctx.read(name)? {
            None => Ok(None),
            Some(b) => T::decode(b).map(Some).map_err(|e| {
                Error::new(format!(
                    "state \"{}\": {}",
                    String::from_utf8_lossy(name),
                    e
                ))
            }),
        }
    }

    fn put<T: Codec>(ctx: &mut Context<'_>, name: &[u8], v: &T) -> Result<(), Error> {
        let mut b = Vec::new();
        v.encode(&mut b);
        ctx.write(name, &b)
    }

    /// Puts `rec` in its windows, or sends it to the `late` output when it is late or has no
    /// event time.
    pub fn add(&self, rec: &Record<'_>, ctx: &mut Context<'_>) -> Result<(), Error> {
        self.add_with(rec, ctx, self.fold)
    }

    /// [`add`](Windows::add) with `fold` in place of the struct's: a closure, which may capture
    /// what the task holds (a threshold read from its config, a metric handle). The struct's
    /// `fold` is then not used.
    pub fn add_with<F>(&self, rec: &Record<'_>, ctx: &mut Context<'_>, mut fold: F) -> Result<(), Error>
    where
        F: FnMut(A, &Record<'_>) -> Result<A, Error>,
    {
        self.check()?;
        let ts = rec.timestamp();
        if ts < 0 || rec.late() {
            let out = match self.late {
                None => return Ok(()),
                Some(o) => o,
            };
            let mut hb = HeadersBuilder::new();
            for (n, v) in rec.headers().iter() {
                hb.add(n, v);
            }
            let hdr = if hb.is_empty() { None } else { Some(&hb) };
            return ctx.emit_with(out, rec.key(), rec.value(), hdr, ts);
        }
        let slide = match self.kind {
            WindowKind::Session(_) => return self.add_session(rec, ctx, ts, &mut fold),
            WindowKind::Tumbling(s) => s,
            WindowKind::Sliding { slide, .. } => slide,
        };
        let lowest = ts - self.size();
        let mut s = floor_to(ts, slide);
        while s > lowest {
            self.fold_into(rec, ctx, s, &mut fold)?;
            s = match s.checked_sub(slide) {
                Some(n) => n,
                None => break,
            };
        }
        Ok(())
    }

    fn fold_into(
        &self,
        rec: &Record<'_>,
        ctx: &mut Context<'_>,
        start: i64,
        fold: &mut dyn FnMut(A, &Record<'_>) -> Result<A, Error>,
    ) -> Result<(), Error> {
        let name = self.acc_name(start);
        let old: Option<A> = Self::get(ctx, &name)?;
        let open = old.is_some();
        let acc = fold(old.unwrap_or_default(), rec)?;
        Self::put(ctx, &name, &acc)?;
        if open {
            return Ok(());
        }
        ctx.set_timer(
            self.timer_name(start),
            Domain::EventTime,
            self.end(start),
            "",
        )
    }

    fn add_session(
        &self,
        rec: &Record<'_>,
        ctx: &mut Context<'_>,
        ts: i64,
        fold: &mut dyn FnMut(A, &Record<'_>) -> Result<A, Error>,
    ) -> Result<(), Error> {
        let gap = self.size();
        let prefix = format!("{}/e/", self.name).into_bytes();
        let mut joined: Vec<(i64, i64)> = Vec::new();
        for (name, value) in ctx.list(&prefix)? {
            let start = std::str::from_utf8(&name[prefix.len()..])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| {
                    Error::new(format!(
                        "wasmstream: windows {}: state {} is not a session",
                        self.name,
                        String::from_utf8_lossy(&name)
                    ))
                })?;
            let last = i64::decode(&value).map_err(|e| {
                Error::new(format!(
                    "state \"{}\": {}",
                    String::from_utf8_lossy(&name),
                    e
                ))
            })?;
            let after_start = match start.checked_sub(gap) {
                Some(lo) => ts > lo,
                None => true,
            };
            if ts < self.end(last) && after_start {
                joined.push((start, last));
            }
        }
        joined.sort_unstable();
        let merge = self.merge.expect("checked");
        let mut acc: Option<A> = None;
        let (mut start, mut last) = (ts, ts);
        for &(s, l) in &joined {
            if let Some(v) = Self::get::<A>(ctx, &self.acc_name(s))? {
                acc = Some(match acc {
                    None => v,
                    Some(a) => merge(a, v)?,
                });
            }
            start = start.min(s);
            last = last.max(l);
        }
        for &(s, _) in &joined {
            if s == start {
                continue;
            }
            ctx.delete(self.acc_name(s))?;
            ctx.delete(self.last_name(s))?;
            ctx.delete_timer(self.timer_name(s))?;
        }
        let acc = fold(acc.unwrap_or_default(), rec)?;
        Self::put(ctx, &self.acc_name(start), &acc)?;
        Self::put(ctx, &self.last_name(start), &last)?;
        ctx.set_timer(
            self.timer_name(start),
            Domain::EventTime,
            self.end(last),
            "",
        )
    }

    /// Closes the window whose timer fired and returns true, or returns false when `f` is not a
    /// timer of these windows (the task's own timer: handle it).
    pub fn fire(&self, f: &Firing<'_>, ctx: &mut Context<'_>) -> Result<bool, Error> {
        self.fire_with(f, ctx, self.emit)
    }

    /// [`fire`](Windows::fire) with `emit` in place of the struct's: a closure, which may capture
    /// what the task holds (a threshold read from its config, a metric handle). The struct's
    /// `emit` is then not used.
    pub fn fire_with<E>(&self, f: &Firing<'_>, ctx: &mut Context<'_>, mut emit: E) -> Result<bool, Error>
    where
        E: FnMut(&mut Context<'_>, Window, A) -> Result<(), Error>,
    {
        let name = f.name();
        let prefix = self.name.as_bytes();
        if !f.event_time()
            || name.len() <= prefix.len()
            || !name.starts_with(prefix)
            || name[prefix.len()] != b'/'
        {
            return Ok(false);
        }
        let start = match std::str::from_utf8(&name[prefix.len() + 1..])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            Some(s) => s,
            None => return Ok(false),
        };
        self.check()?;
        let acc_name = self.acc_name(start);
        let acc: A = match Self::get(ctx, &acc_name)? {
            Some(a) => a,
            None => return Ok(true), // closed already
        };
        let mut end = self.end(start);
        if let WindowKind::Session(_) = self.kind {
            let last_name = self.last_name(start);
            let last: i64 = Self::get(ctx, &last_name)?.unwrap_or(start);
            end = self.end(last);
            if f.time() < end {
                // The session grew after this timer was set: it closes at its new end.
                ctx.set_timer(name, Domain::EventTime, end, "")?;
                return Ok(true);
            }
            ctx.delete(&last_name)?;
        }
        emit(ctx, Window { start, end }, acc)?;
        ctx.delete(&acc_name)?;
        Ok(true)
    }
}
