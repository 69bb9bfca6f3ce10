//! An in-memory fake host for native tests (not available on wasm32).
//!
//! On native targets the SDK's host calls go to a fake host kept per thread; a [`Harness`] drives
//! a [`Task`] through the same runtime the wasm exports use, with real Init and Batch payloads,
//! and lets a test inspect state, outputs and logs:
//!
//! ```
//! use wasmstream::testing::{Harness, TestRecord};
//! # use wasmstream::{Context, Error, Record, Task};
//! # struct Echo;
//! # impl Task for Echo {
//! #     fn init(_: &[u8]) -> Result<Self, Error> { Ok(Echo) }
//! #     fn process(&mut self, r: &Record, ctx: &mut Context) -> Result<(), Error> {
//! #         ctx.emit("out", r.key(), r.value())
//! #     }
//! # }
//! let mut h = Harness::<Echo>::new("{}").unwrap();
//! let out = h.process(&[TestRecord::new("k", "v").timestamp(5)]).unwrap();
//! assert_eq!(out[0].value, b"v");
//! assert_eq!(out[0].ts, 5);
//! ```
//!
//! The fake host follows ABI.md §4: scope checks (`ERR_KEY_NOT_IN_BATCH`), phase checks
//! (`ERR_NOT_ALLOWED` during init), size and count limits, paged scans, header validation, and
//! "a failed call has no effects". One harness per thread at a time: creating one resets the
//! thread's fake host.
//!
//! For ABI 0.2 it keeps timers (fired only when the test calls [`Harness::advance_time`],
//! [`Harness::advance_watermark`] or [`Harness::fire_due`]), per-partition watermarks, the
//! recorded state version of each key (stale keys are migrated before the call that involves
//! them, in the same unit of work), ticks ([`Harness::tick`], with paged `state_keys`) and an
//! HTTP stub ([`Harness::set_http`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::abi::{self, Init, RecordFields};
use crate::error::Errno;
use crate::rt::Runtime;
use crate::{Domain, HttpRequest, HttpResponse, Task};

/// One record the task emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The output name; compares with `&str`, byte strings and `Vec<u8>`
    /// (`assert_eq!(o.output, "counts")`).
    pub output: OutputName,
    /// The output record's key.
    pub key: Vec<u8>,
    /// The output record's value (empty for a null value).
    pub value: Vec<u8>,
    /// Whether the value is null: a tombstone (ABI 0.5, `emit_tombstone`).
    pub value_null: bool,
    /// The output record's headers, in order.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The timestamp, with "now" (a negative `ts`) already replaced by the fake clock.
    pub ts: i64,
}

impl Output {
    /// The value as text (lossy), handy in assertions.
    pub fn value_str(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }
}

/// The name of an [`Output`]: its bytes (it dereferences to `Vec<u8>`), comparable with `&str`,
/// `String`, byte strings (`b"counts"`), `&[u8]` and `Vec<u8>`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OutputName(pub Vec<u8>);

impl OutputName {
    /// The name as text (lossy).
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }
}

impl std::fmt::Debug for OutputName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.as_str(), f)
    }
}

impl std::fmt::Display for OutputName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl std::ops::Deref for OutputName {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl AsRef<[u8]> for OutputName {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

macro_rules! output_name_eq {
    ($($t:ty),*) => {$(
        impl PartialEq<$t> for OutputName {
            fn eq(&self, other: &$t) -> bool {
                let o: &[u8] = other.as_ref();
                self.0 == o
            }
        }
        impl PartialEq<OutputName> for $t {
            fn eq(&self, other: &OutputName) -> bool {
                other == self
            }
        }
    )*};
}

output_name_eq!(str, &str, String, [u8], &[u8], Vec<u8>);

impl<const N: usize> PartialEq<[u8; N]> for OutputName {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.0 == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for OutputName {
    fn eq(&self, other: &&[u8; N]) -> bool {
        self.0 == other[..]
    }
}

/// A read-only copy of one key's committed state (see [`Harness::read`]).
pub struct StateView {
    entries: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl crate::state::Store for StateView {
    fn read(&mut self, name: &[u8]) -> Result<Option<&[u8]>, crate::Error> {
        Ok(self.entries.get(name).map(|v| &v[..]))
    }
    fn write(&mut self, _: &[u8], _: &[u8]) -> Result<(), crate::Error> {
        Err(read_only())
    }
    fn remove(&mut self, _: &[u8]) -> Result<(), crate::Error> {
        Err(read_only())
    }
    fn list(&mut self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, crate::Error> {
        Ok(self
            .entries
            .range(prefix.to_vec()..)
            .take_while(|(n, _)| n.starts_with(prefix))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect())
    }
}

fn read_only() -> crate::Error {
    crate::Error::with_code(
        Errno::NOT_ALLOWED,
        "testing: state read with Harness::read is read-only",
    )
}

/// One message the task logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// 0 debug, 1 info, 2 warn, 3 error.
    pub level: i32,
    /// The message (lossy UTF-8).
    pub msg: String,
}

/// A record to feed to a [`Harness`]: owned fields with builder methods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRecord {
    /// Flags word (bit 0: late).
    pub flags: u32,
    /// Partition of the source.
    pub partition: u32,
    /// Position in the partition.
    pub offset: i64,
    /// Event time in ms, or -1.
    pub timestamp: i64,
    /// Input name.
    pub source: Vec<u8>,
    /// Record key.
    pub key: Vec<u8>,
    /// Record value.
    pub value: Vec<u8>,
    /// Headers, in order.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
}

impl TestRecord {
    /// A record with this key and value, from source `"input"`, partition 0, offset 0, unknown
    /// timestamp (-1), no flags, no headers.
    pub fn new(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> TestRecord {
        TestRecord {
            flags: 0,
            partition: 0,
            offset: 0,
            timestamp: -1,
            source: b"input".to_vec(),
            key: key.as_ref().to_vec(),
            value: value.as_ref().to_vec(),
            headers: Vec::new(),
        }
    }

    /// Sets the event time.
    pub fn timestamp(mut self, ts: i64) -> TestRecord {
        self.timestamp = ts;
        self
    }

    /// Sets the offset.
    pub fn offset(mut self, offset: i64) -> TestRecord {
        self.offset = offset;
        self
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: u32) -> TestRecord {
        self.partition = partition;
        self
    }

    /// Sets the source name.
    pub fn source(mut self, source: impl AsRef<[u8]>) -> TestRecord {
        self.source = source.as_ref().to_vec();
        self
    }

    /// Sets the late flag.
    pub fn late(mut self, late: bool) -> TestRecord {
        if late {
            self.flags |= abi::FLAG_LATE;
        } else {
            self.flags &= !abi::FLAG_LATE;
        }
        self
    }

    /// Sets the null-value flag (ABI 0.5: a Kafka tombstone); a null value also empties the value.
    pub fn value_null(mut self, null: bool) -> TestRecord {
        if null {
            self.flags |= abi::FLAG_VALUE_NULL;
            self.value.clear();
        } else {
            self.flags &= !abi::FLAG_VALUE_NULL;
        }
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> TestRecord {
        self.headers
            .push((name.as_ref().to_vec(), value.as_ref().to_vec()));
        self
    }

    /// A copy of a decoded record.
    pub fn from_record(r: &abi::Record<'_>) -> TestRecord {
        TestRecord {
            flags: r.flags(),
            partition: r.partition(),
            offset: r.offset(),
            timestamp: r.timestamp(),
            source: r.source().to_vec(),
            key: r.key().to_vec(),
            value: r.value().to_vec(),
            headers: r
                .headers()
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
        }
    }

    /// Appends the record's Record layout.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let headers: Vec<(&[u8], &[u8])> =
            self.headers.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        abi::encode_record(
            out,
            &RecordFields {
                flags: self.flags,
                partition: self.partition,
                offset: self.offset,
                timestamp: self.timestamp,
                source: &self.source,
                key: &self.key,
                value: &self.value,
                headers: &headers,
            },
        );
    }
}

/// Encodes a Batch layout of these records.
pub fn encode_batch(records: &[TestRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    abi::encode_batch_header(&mut out, records.len() as u32);
    for r in records {
        r.encode(&mut out);
    }
    out
}

/// Limits the fake host enforces, like a task's limits in the real host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest state value or emitted value (`ERR_TOO_LARGE`). Default 1 MiB.
    pub max_value_bytes: usize,
    /// Largest state name (`ERR_TOO_LARGE`). Default 64 KiB.
    pub max_name_bytes: usize,
    /// Most state writes (puts and deletes) in one call (`ERR_LIMIT`). Default 100 000.
    pub max_writes: usize,
    /// Most outputs in one call (`ERR_LIMIT`). Default 100 000.
    pub max_outputs: usize,
    /// Most entries the fake puts on one scan page, to exercise paging. Default: no limit.
    pub scan_page_entries: usize,
    /// The output names the task may emit to (`ERR_INVALID` for others). Default: any.
    pub outputs: Option<Vec<Vec<u8>>>,
    /// Most keys the fake puts on one `state_keys` page, to exercise paging. Default: no limit.
    pub key_page_entries: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_value_bytes: 1 << 20,
            max_name_bytes: 64 << 10,
            max_writes: 100_000,
            max_outputs: 100_000,
            scan_page_entries: usize::MAX,
            outputs: None,
            key_page_entries: usize::MAX,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Init,
    Process,
    Timer,
    Tick,
    Migrate,
}

type StateMap = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

/// A timer is identified by partition, key and name.
type TimerId = (u32, Vec<u8>, Vec<u8>);

/// One timer of the fake host; every field is a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    /// The partition of the call that set the timer (of the key's record in the batch, of the
    /// firing, migration or tick).
    pub partition: u32,
    /// The key the timer belongs to.
    pub key: Vec<u8>,
    /// The timer's name.
    pub name: Vec<u8>,
    /// The timer's time domain.
    pub domain: Domain,
    /// When the timer fires, ms since the epoch, in its domain.
    pub time: i64,
    /// The payload handed back in the firing.
    pub payload: Vec<u8>,
}

impl Timer {
    /// A timer of partition 0 with no payload.
    pub fn new(key: impl AsRef<[u8]>, name: impl AsRef<[u8]>, domain: Domain, time: i64) -> Timer {
        Timer {
            partition: 0,
            key: key.as_ref().to_vec(),
            name: name.as_ref().to_vec(),
            domain,
            time,
            payload: Vec::new(),
        }
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: u32) -> Timer {
        self.partition = partition;
        self
    }

    /// Sets the payload.
    pub fn payload(mut self, payload: impl AsRef<[u8]>) -> Timer {
        self.payload = payload.as_ref().to_vec();
        self
    }

    fn id(&self) -> TimerId {
        (self.partition, self.key.clone(), self.name.clone())
    }
}

/// What [`Harness::fire_due`] (and `advance_time`, `advance_watermark`) delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// The timers delivered to [`Task::on_timer`], in delivery order.
    pub timers: Vec<Timer>,
    /// The outputs of the firing calls (and of the migrations in their units), in order.
    pub outputs: Vec<Output>,
}

/// A stub answering [`http_request`](crate::http_request) in place of the network; see
/// [`Harness::set_http`].
pub type HttpStub = Box<dyn FnMut(&HttpRequest) -> Result<HttpResponse, Errno>>;

/// What a unit of work restores when it fails.
struct Snapshot {
    state: StateMap,
    timers: BTreeMap<TimerId, Timer>,
    versions: BTreeMap<Vec<u8>, u32>,
}

/// The fake host's data: per-thread, reset by [`Harness::new`].
pub(crate) struct FakeHost {
    phase: Phase,
    config: Vec<u8>,
    now: i64,
    limits: Limits,
    state: StateMap,
    /// State, timers and versions as they were when the current unit of work started, restored
    /// if one of its calls fails.
    saved: Option<Snapshot>,
    writes: usize,
    pending: Vec<Output>,
    outputs: Vec<Output>,
    logs: Vec<LogLine>,
    fail_msg: Option<String>,
    /// The current call called `fail_permanent` (0.4).
    fail_permanent: bool,
    /// The last failed call of the harness failed permanently.
    last_permanent: bool,
    // ABI 0.2
    /// The current call's keys and their partitions.
    key_partitions: BTreeMap<Vec<u8>, u32>,
    /// A tick: every key is in scope.
    scope_all: bool,
    /// The current call's partition.
    partition: u32,
    timers: BTreeMap<TimerId, Timer>,
    /// Timers set during the current unit of work (a fired timer set again is kept).
    timers_set: BTreeSet<TimerId>,
    watermarks: BTreeMap<u32, i64>,
    versions: BTreeMap<Vec<u8>, u32>,
    /// Keys whose recorded state version becomes the module's when the unit commits.
    touched: BTreeSet<Vec<u8>>,
    module_version: u32,
    http: Option<HttpStub>,
    http_kept: Option<Vec<u8>>,
    // ABI 0.3
    /// Declared metrics: kind, name, labels layout, value; an id indexes it.
    metrics: Vec<(i32, Vec<u8>, Vec<u8>, i64)>,
    /// A histogram's buckets, parallel to `metrics` (None for a counter or gauge).
    hists: Vec<Option<Histogram>>,
}

/// The value of a guest histogram (ABI 0.3) as the harness recorded it: the bucket upper bounds,
/// the observations in each bucket (not cumulative; the last is above every bound), their
/// number and their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// The buckets' upper bounds, as declared.
    pub bounds: Vec<f64>,
    /// The observations in each bucket; the last counts those above every bound.
    pub counts: Vec<u64>,
    /// The number of observations.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
}

impl FakeHost {
    fn new() -> FakeHost {
        FakeHost {
            phase: Phase::Idle,
            config: b"{}".to_vec(),
            now: 1_700_000_000_000,
            limits: Limits::default(),
            state: BTreeMap::new(),
            saved: None,
            writes: 0,
            pending: Vec::new(),
            outputs: Vec::new(),
            logs: Vec::new(),
            fail_msg: None,
            fail_permanent: false,
            last_permanent: false,
            key_partitions: BTreeMap::new(),
            scope_all: false,
            partition: 0,
            timers: BTreeMap::new(),
            timers_set: BTreeSet::new(),
            watermarks: BTreeMap::new(),
            versions: BTreeMap::new(),
            touched: BTreeSet::new(),
            module_version: 0,
            http: None,
            http_kept: None,
            metrics: Vec::new(),
            hists: Vec::new(),
        }
    }

    /// Whether a call with a scope is running (not init, not between calls).
    fn in_call(&self) -> bool {
        self.phase != Phase::Idle && self.phase != Phase::Init
    }

    fn check_state(&self, key: &[u8]) -> Result<(), i32> {
        if !self.in_call() {
            return Err(Errno::NOT_ALLOWED.raw());
        }
        if !self.scope_all && !self.key_partitions.contains_key(key) {
            return Err(Errno::KEY_NOT_IN_BATCH.raw());
        }
        Ok(())
    }

    fn begin_unit(&mut self) {
        self.saved = Some(Snapshot {
            state: self.state.clone(),
            timers: self.timers.clone(),
            versions: self.versions.clone(),
        });
        self.pending.clear();
        self.timers_set.clear();
        self.touched.clear();
    }

    fn abort_unit(&mut self) {
        if let Some(s) = self.saved.take() {
            self.state = s.state;
            self.timers = s.timers;
            self.versions = s.versions;
        }
        self.pending.clear();
        self.timers_set.clear();
        self.touched.clear();
    }

    fn commit_unit(&mut self) -> Vec<Output> {
        self.saved = None;
        for key in std::mem::take(&mut self.touched) {
            if self.state.contains_key(&key) {
                self.versions.insert(key, self.module_version);
            } else {
                self.versions.remove(&key);
            }
        }
        self.timers_set.clear();
        let pending = std::mem::take(&mut self.pending);
        self.outputs.extend(pending.iter().cloned());
        pending
    }

    fn has_state(&self, key: &[u8]) -> bool {
        self.state.get(key).map_or(false, |m| !m.is_empty())
    }

    fn watermark(&self, partition: u32) -> i64 {
        self.watermarks.get(&partition).copied().unwrap_or(-1)
    }

    fn count_write(&mut self) -> Result<(), i32> {
        if self.writes >= self.limits.max_writes {
            return Err(Errno::LIMIT.raw());
        }
        self.writes += 1;
        Ok(())
    }

    pub(crate) fn timer_set(
        &mut self,
        key: &[u8],
        name: &[u8],
        domain: i32,
        time: i64,
        payload: &[u8],
    ) -> i32 {
        if let Err(e) = self.check_state(key) {
            return e;
        }
        let domain = match domain {
            abi::DOMAIN_PROCESSING => Domain::ProcessingTime,
            abi::DOMAIN_EVENT => Domain::EventTime,
            _ => return Errno::INVALID.raw(),
        };
        if name.len() > self.limits.max_name_bytes || payload.len() > self.limits.max_value_bytes {
            return Errno::TOO_LARGE.raw();
        }
        if let Err(e) = self.count_write() {
            return e;
        }
        let partition = self
            .key_partitions
            .get(key)
            .copied()
            .unwrap_or(self.partition);
        let t = Timer {
            partition,
            key: key.to_vec(),
            name: name.to_vec(),
            domain,
            time,
            payload: payload.to_vec(),
        };
        self.timers_set.insert(t.id());
        self.timers.insert(t.id(), t);
        0
    }

    pub(crate) fn timer_delete(&mut self, key: &[u8], name: &[u8]) -> i32 {
        if let Err(e) = self.check_state(key) {
            return e;
        }
        if name.len() > self.limits.max_name_bytes {
            return Errno::TOO_LARGE.raw();
        }
        if let Err(e) = self.count_write() {
            return e;
        }
        let partition = self
            .key_partitions
            .get(key)
            .copied()
            .unwrap_or(self.partition);
        self.timers
            .remove(&(partition, key.to_vec(), name.to_vec()));
        0
    }

    pub(crate) fn watermark_ms(&mut self) -> i64 {
        if !self.in_call() {
            return -1;
        }
        self.watermark(self.partition)
    }

    pub(crate) fn state_keys(&mut self, after: Option<&[u8]>, buf: &mut [u8]) -> i32 {
        if self.phase != Phase::Tick {
            return Errno::NOT_ALLOWED.raw();
        }
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut size = 8;
        let mut more = false;
        let listed = self
            .state
            .iter()
            .filter(|(k, m)| !m.is_empty() && after.map_or(true, |a| &k[..] > a));
        for (k, _) in listed {
            let sz = abi::key_size(k);
            if keys.len() >= self.limits.key_page_entries || size + sz > buf.len() {
                more = true;
                break;
            }
            size += sz;
            keys.push(k);
        }
        if (keys.is_empty() && more) || size > buf.len() {
            return Errno::BUFFER_TOO_SMALL.raw();
        }
        let mut page = Vec::with_capacity(size);
        abi::encode_key_page(&mut page, &keys, more);
        buf[..page.len()].copy_from_slice(&page);
        page.len() as i32
    }

    pub(crate) fn http_response(&mut self, buf: &mut [u8]) -> i32 {
        match &self.http_kept {
            None => Errno::NOT_FOUND.raw(),
            Some(b) => {
                if b.len() <= buf.len() {
                    buf[..b.len()].copy_from_slice(b);
                }
                b.len() as i32
            }
        }
    }

    fn check_write(&mut self, key: &[u8], name: &[u8]) -> Result<(), i32> {
        self.check_state(key)?;
        if name.len() > self.limits.max_name_bytes {
            return Err(Errno::TOO_LARGE.raw());
        }
        self.count_write()?;
        self.touched.insert(key.to_vec());
        Ok(())
    }

    pub(crate) fn state_get(&mut self, key: &[u8], name: &[u8], buf: &mut [u8]) -> i32 {
        if let Err(e) = self.check_state(key) {
            return e;
        }
        match self.state.get(key).and_then(|m| m.get(name)) {
            None => Errno::NOT_FOUND.raw(),
            Some(v) => {
                if v.len() <= buf.len() {
                    buf[..v.len()].copy_from_slice(v);
                }
                v.len() as i32
            }
        }
    }

    pub(crate) fn state_put(&mut self, key: &[u8], name: &[u8], value: &[u8]) -> i32 {
        if let Err(e) = self.check_write(key, name) {
            return e;
        }
        if value.len() > self.limits.max_value_bytes {
            return Errno::TOO_LARGE.raw();
        }
        self.state
            .entry(key.to_vec())
            .or_default()
            .insert(name.to_vec(), value.to_vec());
        0
    }

    pub(crate) fn state_delete(&mut self, key: &[u8], name: &[u8]) -> i32 {
        if let Err(e) = self.check_write(key, name) {
            return e;
        }
        if let Some(m) = self.state.get_mut(key) {
            m.remove(name);
            if m.is_empty() {
                self.state.remove(key);
            }
        }
        0
    }

    pub(crate) fn state_scan(
        &mut self,
        key: &[u8],
        prefix: &[u8],
        after: Option<&[u8]>,
        buf: &mut [u8],
    ) -> i32 {
        if let Err(e) = self.check_state(key) {
            return e;
        }
        let empty = BTreeMap::new();
        let names = self.state.get(key).unwrap_or(&empty);
        let mut matching = names
            .iter()
            .filter(|(n, _)| n.starts_with(prefix) && after.map_or(true, |a| &n[..] > a));
        let mut entries: Vec<(&[u8], &[u8])> = Vec::new();
        let mut size = 8;
        let mut more = false;
        for (n, v) in matching.by_ref() {
            let sz = abi::pair_size(n, v);
            if entries.len() >= self.limits.scan_page_entries || size + sz > buf.len() {
                more = true;
                break;
            }
            size += sz;
            entries.push((n, v));
        }
        if entries.is_empty() && more {
            return Errno::BUFFER_TOO_SMALL.raw();
        }
        let mut page = Vec::with_capacity(size);
        abi::encode_scan_page(&mut page, &entries, more);
        if page.len() > buf.len() {
            // Only when even the empty page (8 bytes) does not fit.
            return Errno::BUFFER_TOO_SMALL.raw();
        }
        buf[..page.len()].copy_from_slice(&page);
        page.len() as i32
    }

    /// emit; `value` None is a null value (`val_len` -1, ABI 0.5).
    pub(crate) fn emit(
        &mut self,
        output: &[u8],
        key: &[u8],
        value: Option<&[u8]>,
        headers: &[u8],
        ts: i64,
    ) -> i32 {
        let value_null = value.is_none();
        let value = value.unwrap_or(&[]);
        if !self.in_call() {
            return Errno::NOT_ALLOWED.raw();
        }
        let hs = match abi::decode_headers(headers) {
            Ok(h) => h,
            Err(_) => return Errno::INVALID.raw(),
        };
        if let Some(names) = &self.limits.outputs {
            if !names.iter().any(|n| n == output) {
                return Errno::INVALID.raw();
            }
        }
        if value.len() > self.limits.max_value_bytes {
            return Errno::TOO_LARGE.raw();
        }
        if self.pending.len() >= self.limits.max_outputs {
            return Errno::LIMIT.raw();
        }
        self.pending.push(Output {
            output: OutputName(output.to_vec()),
            key: key.to_vec(),
            value: value.to_vec(),
            value_null,
            headers: hs.iter().map(|(n, v)| (n.to_vec(), v.to_vec())).collect(),
            ts: if ts < 0 { self.now } else { ts },
        });
        0
    }

    pub(crate) fn log(&mut self, level: i32, msg: &[u8]) -> i32 {
        if !(0..=3).contains(&level) {
            return Errno::INVALID.raw();
        }
        self.logs.push(LogLine {
            level,
            msg: String::from_utf8_lossy(msg).into_owned(),
        });
        0
    }

    pub(crate) fn now_ms(&mut self) -> i64 {
        self.now
    }

    pub(crate) fn config_get(&mut self, buf: &mut [u8]) -> i32 {
        let n = self.config.len();
        if n <= buf.len() {
            buf[..n].copy_from_slice(&self.config);
        }
        n as i32
    }

    pub(crate) fn metric_declare(&mut self, kind: i32, name: &[u8], labels: &[u8]) -> i32 {
        if kind == 2 {
            // A histogram needs its bounds: metric_declare_histogram.
            return if self.phase != Phase::Init {
                Errno::NOT_ALLOWED.raw()
            } else {
                Errno::INVALID.raw()
            };
        }
        self.declare(kind, name, labels, None)
    }

    pub(crate) fn metric_declare_histogram(
        &mut self,
        name: &[u8],
        labels: &[u8],
        bounds: &[u8],
    ) -> i32 {
        if self.phase != Phase::Init {
            return Errno::NOT_ALLOWED.raw();
        }
        if bounds.is_empty() || bounds.len() % 8 != 0 {
            return Errno::INVALID.raw();
        }
        if bounds.len() / 8 > 32 {
            return Errno::LIMIT.raw();
        }
        let mut bs: Vec<f64> = Vec::new();
        for c in bounds.chunks(8) {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            let b = f64::from_le_bytes(a);
            if !b.is_finite() || bs.last().map_or(false, |p| b <= *p) {
                return Errno::INVALID.raw();
            }
            bs.push(b);
        }
        self.declare(2, name, labels, Some(bs))
    }

    fn declare(&mut self, kind: i32, name: &[u8], labels: &[u8], bounds: Option<Vec<f64>>) -> i32 {
        if self.phase != Phase::Init {
            return Errno::NOT_ALLOWED.raw();
        }
        let valid = |s: &[u8]| {
            !s.is_empty()
                && s.len() <= 64
                && !s.starts_with(b"__")
                && s.iter().enumerate().all(|(k, c)| {
                    *c == b'_' || c.is_ascii_alphabetic() || (k > 0 && c.is_ascii_digit())
                })
        };
        if !(0..=2).contains(&kind) || !valid(name) {
            return Errno::INVALID.raw();
        }
        let hs = match crate::abi::decode_headers(labels) {
            Ok(h) => h,
            Err(_) => return Errno::INVALID.raw(),
        };
        if hs.iter().any(|(n, _)| !valid(n) || n == &b"task"[..]) {
            return Errno::INVALID.raw();
        }
        if let Some(i) = self
            .metrics
            .iter()
            .position(|m| m.1 == name && m.2 == labels)
        {
            if self.metrics[i].0 != kind
                || self.hists[i].as_ref().map(|h| &h.bounds) != bounds.as_ref()
            {
                return Errno::INVALID.raw();
            }
            return i as i32;
        }
        let same_bounds = |i: usize| self.hists[i].as_ref().map(|h| &h.bounds) == bounds.as_ref();
        if (0..self.metrics.len())
            .any(|i| self.metrics[i].1 == name && (self.metrics[i].0 != kind || !same_bounds(i)))
        {
            return Errno::INVALID.raw();
        }
        if self.metrics.len() >= 64 {
            return Errno::LIMIT.raw();
        }
        self.metrics.push((kind, name.to_vec(), labels.to_vec(), 0));
        self.hists.push(bounds.map(|b| Histogram {
            counts: vec![0; b.len() + 1],
            bounds: b,
            count: 0,
            sum: 0.0,
        }));
        (self.metrics.len() - 1) as i32
    }

    pub(crate) fn metric_update(&mut self, id: i32, v: i64, set: bool) -> i32 {
        let m = match self.metrics.get_mut(id as usize) {
            Some(m) if id >= 0 => m,
            _ => return Errno::INVALID.raw(),
        };
        if m.0 == 2 || (m.0 == 0 && (set || v < 0)) {
            return Errno::INVALID.raw();
        }
        if set {
            m.3 = v;
        } else {
            m.3 = m.3.wrapping_add(v);
        }
        0
    }

    pub(crate) fn metric_observe(&mut self, id: i32, v: f64) -> i32 {
        let h = match self.hists.get_mut(id as usize) {
            Some(Some(h)) if id >= 0 && !v.is_nan() => h,
            _ => return Errno::INVALID.raw(),
        };
        let k = h
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(h.bounds.len());
        h.counts[k] += 1;
        h.count += 1;
        h.sum += v;
        0
    }

    pub(crate) fn fail(&mut self, msg: &[u8]) -> i32 {
        self.fail_msg = Some(String::from_utf8_lossy(msg).into_owned());
        0
    }

    pub(crate) fn fail_permanent(&mut self, msg: &[u8]) -> i32 {
        self.fail(msg);
        self.fail_permanent = true;
        0
    }
}

thread_local! {
    static HOST: RefCell<FakeHost> = RefCell::new(FakeHost::new());
}

/// Runs `f` on this thread's fake host.
pub(crate) fn with_host<R>(f: impl FnOnce(&mut FakeHost) -> R) -> R {
    HOST.with(|h| f(&mut h.borrow_mut()))
}

fn valid_method(m: &[u8]) -> bool {
    !m.is_empty() && m.iter().all(|c| c.is_ascii_uppercase())
}

/// `http_request` of the fake host: answered by the stub of [`Harness::set_http`], which runs
/// outside the fake host's borrow.
pub(crate) fn http_request(req: &[u8], buf: &mut [u8]) -> i32 {
    let stub = with_host(|h| {
        h.http_kept = None;
        if !h.in_call() {
            return Err(Errno::NOT_ALLOWED.raw());
        }
        h.http.take().ok_or(Errno::NOT_ALLOWED.raw())
    });
    let mut stub = match stub {
        Ok(s) => s,
        Err(e) => return e,
    };
    let parsed = match abi::decode_http_request(req) {
        Ok(r)
            if valid_method(r.method)
                && (r.url.starts_with(b"http://") || r.url.starts_with(b"https://")) =>
        {
            let mut headers = crate::HeadersBuilder::new();
            for (n, v) in r.headers.iter() {
                headers.add(n, v);
            }
            Some(HttpRequest {
                method: String::from_utf8_lossy(r.method).into_owned(),
                url: String::from_utf8_lossy(r.url).into_owned(),
                headers,
                body: r.body.to_vec(),
                timeout_ms: r.timeout_ms,
            })
        }
        _ => None,
    };
    let result = parsed.as_ref().map(&mut stub);
    with_host(|h| {
        h.http = Some(stub);
        let resp = match result {
            None => return Errno::INVALID.raw(),
            Some(Err(e)) if e.raw() < 0 => return e.raw(),
            Some(Err(_)) => return Errno::UNAVAILABLE.raw(),
            Some(Ok(r)) => r,
        };
        let mut b = Vec::new();
        resp.encode(&mut b);
        let n = b.len() as i32;
        if b.len() <= buf.len() {
            buf[..b.len()].copy_from_slice(&b);
        } else {
            h.http_kept = Some(b);
        }
        n
    })
}

/// Drives a [`Task`] natively against this thread's fake host, through the same runtime (payload
/// decoding, per-record loop, error reporting) as the wasm exports.
///
/// Every call runs as a *unit of work* (ABI.md §3): the migrations of its stale keys, then the
/// call itself; if any of them fails, none of the unit's state writes, timer changes or outputs
/// take effect.
pub struct Harness<T> {
    rt: Runtime<T>,
}

/// The scope of one guest call: its keys with their partitions, or every key (a tick).
struct Scope {
    keys: BTreeMap<Vec<u8>, u32>,
    all: bool,
    partition: u32,
}

/// Most rounds of [`Harness::fire_due`]: a handler that keeps setting timers already due would
/// loop forever.
const MAX_FIRE_ROUNDS: usize = 1000;

impl<T: Task> Harness<T> {
    /// Resets this thread's fake host, gives it `config` and initialises the task as the host
    /// would (task name `"test"`). `Err` holds the message the task gave to `fail`.
    pub fn new(config: impl AsRef<[u8]>) -> Result<Harness<T>, String> {
        Harness::with_limits(config, Limits::default())
    }

    /// Like [`new`](Harness::new), with limits for the fake host.
    pub fn with_limits(config: impl AsRef<[u8]>, limits: Limits) -> Result<Harness<T>, String> {
        let config = config.as_ref();
        with_host(|h| {
            *h = FakeHost::new();
            h.config = config.to_vec();
            h.limits = limits;
            h.module_version = T::STATE_VERSION;
        });
        let mut payload = Vec::new();
        abi::encode_init(
            &mut payload,
            &Init {
                version: abi::VERSION,
                task: b"test",
                config,
            },
        );
        let mut harness = Harness { rt: Runtime::new() };
        with_host(|h| h.begin_unit());
        let scope = Scope {
            keys: BTreeMap::new(),
            all: false,
            partition: 0,
        };
        harness.call(Phase::Init, scope, &payload)?;
        with_host(|h| h.commit_unit());
        Ok(harness)
    }

    /// Runs one `process` call on these records (one batch), after migrating the batch's keys
    /// whose state has another recorded state version
    /// ([`set_state_version`](Harness::set_state_version)), in the same unit of work. On success returns the outputs of
    /// the unit; on failure returns the message the task gave to `fail` and discards every state
    /// write, timer change and output of the unit, as the host does.
    pub fn process(&mut self, records: &[TestRecord]) -> Result<Vec<Output>, String> {
        let mut keys = BTreeMap::new();
        let mut order = Vec::new();
        for r in records {
            if !keys.contains_key(&r.key) {
                keys.insert(r.key.clone(), r.partition);
                order.push(r.key.clone());
            }
        }
        let partition = records.first().map_or(0, |r| r.partition);
        self.process_unit(order, keys, partition, &encode_batch(records))
    }

    /// Like [`process`](Harness::process) with a raw Batch payload; every key in it is in scope
    /// (a payload that does not decode gets an empty scope).
    pub fn process_raw(&mut self, payload: &[u8]) -> Result<Vec<Output>, String> {
        let mut keys = BTreeMap::new();
        let mut order = Vec::new();
        let mut partition = None;
        if let Ok(b) = abi::decode_batch(payload) {
            for r in b.records() {
                partition.get_or_insert(r.partition());
                if !keys.contains_key(r.key()) {
                    keys.insert(r.key().to_vec(), r.partition());
                    order.push(r.key().to_vec());
                }
            }
        }
        self.process_unit(order, keys, partition.unwrap_or(0), payload)
    }

    fn process_unit(
        &mut self,
        order: Vec<Vec<u8>>,
        keys: BTreeMap<Vec<u8>, u32>,
        partition: u32,
        payload: &[u8],
    ) -> Result<Vec<Output>, String> {
        with_host(|h| h.begin_unit());
        self.migrate_stale(&order, &keys)?;
        let scope = Scope {
            keys,
            all: false,
            partition,
        };
        self.call(Phase::Process, scope, payload)?;
        Ok(with_host(|h| h.commit_unit()))
    }

    /// Runs one guest call within the current unit of work; on failure aborts the unit and
    /// returns the message the task gave to `fail`.
    fn call(&mut self, phase: Phase, scope: Scope, payload: &[u8]) -> Result<(), String> {
        with_host(|h| {
            h.phase = phase;
            h.touched.extend(scope.keys.keys().cloned());
            h.key_partitions = scope.keys;
            h.scope_all = scope.all;
            h.partition = scope.partition;
            h.writes = 0;
            h.fail_msg = None;
            h.fail_permanent = false;
            h.http_kept = None;
        });
        let rc = match phase {
            Phase::Init => self.rt.init(payload),
            Phase::Process => self.rt.process(payload),
            Phase::Timer => self.rt.on_timer(payload),
            Phase::Tick => self.rt.on_tick(payload),
            Phase::Migrate => self.rt.migrate(payload),
            Phase::Idle => unreachable!("no guest call in phase Idle"),
        };
        with_host(|h| {
            h.phase = Phase::Idle;
            h.key_partitions.clear();
            h.scope_all = false;
            h.partition = 0;
            h.http_kept = None;
            // fail_permanent fails the call whatever it returns, except in init (ABI.md §4.22).
            let permanent = h.fail_permanent && phase != Phase::Init;
            h.fail_permanent = false;
            if rc == 0 && !permanent {
                Ok(())
            } else {
                h.last_permanent = permanent;
                h.abort_unit();
                Err(h
                    .fail_msg
                    .take()
                    .unwrap_or_else(|| format!("guest returned {} without calling fail", rc)))
            }
        })
    }

    /// Calls [`Task::migrate`], within the current unit, for each of `order` that has state
    /// recorded under another version than the module's.
    fn migrate_stale(
        &mut self,
        order: &[Vec<u8>],
        partitions: &BTreeMap<Vec<u8>, u32>,
    ) -> Result<(), String> {
        let to = T::STATE_VERSION;
        for key in order {
            let (from, stale) = with_host(|h| {
                let from = h.versions.get(key).copied().unwrap_or(0);
                (from, from != to && h.has_state(key))
            });
            if !stale {
                continue;
            }
            let partition = partitions.get(key).copied().unwrap_or(0);
            let mut payload = Vec::new();
            abi::encode_migrate(
                &mut payload,
                &abi::Migration {
                    from,
                    to,
                    partition,
                    key,
                },
            );
            let mut keys = BTreeMap::new();
            keys.insert(key.clone(), partition);
            let scope = Scope {
                keys,
                all: false,
                partition,
            };
            self.call(Phase::Migrate, scope, &payload)?;
        }
        Ok(())
    }

    /// Delivers every due timer to [`Task::on_timer`]: processing-time timers whose time is at or
    /// before [`now`](Harness::now), event-time timers whose time is at or before their
    /// partition's [`watermark`](Harness::watermark). Each partition's due timers go in one call
    /// (one unit of work, after migrating stale keys), ordered by time, then key, then name; a
    /// successful call deletes its timers unless the handler set them again. Timers the handler
    /// sets to a time already due fire in a following round. Timers fire only when a test calls
    /// this, [`advance_time`](Harness::advance_time) or
    /// [`advance_watermark`](Harness::advance_watermark), never on their own.
    ///
    /// On a failed call it stops and returns the task's `fail` message: that call's effects are
    /// discarded and its timers stay in place; the calls before it are committed (see
    /// [`outputs`](Harness::outputs) and [`timers`](Harness::timers)).
    pub fn fire_due(&mut self) -> Result<Fired, String> {
        let mut total = Fired::default();
        for round in 0.. {
            let due: BTreeMap<u32, Vec<Timer>> = with_host(|h| {
                let mut due: BTreeMap<u32, Vec<Timer>> = BTreeMap::new();
                for t in h.timers.values() {
                    let limit = match t.domain {
                        Domain::ProcessingTime => h.now,
                        Domain::EventTime => h.watermark(t.partition),
                    };
                    if t.time <= limit {
                        due.entry(t.partition).or_default().push(t.clone());
                    }
                }
                due
            });
            if due.is_empty() {
                break;
            }
            if round == MAX_FIRE_ROUNDS {
                return Err(format!(
                    "wasmstream testing: timers still due after {} rounds of firing: does the \
                     timer handler keep setting timers to a time already due?",
                    MAX_FIRE_ROUNDS
                ));
            }
            for (partition, mut ts) in due {
                ts.sort_by(|a, b| (a.time, &a.key, &a.name).cmp(&(b.time, &b.key, &b.name)));
                let outputs = self.fire(partition, &ts)?;
                total.outputs.extend(outputs);
                total.timers.extend(ts);
            }
        }
        Ok(total)
    }

    /// Delivers the firings of one partition in one call.
    fn fire(&mut self, partition: u32, ts: &[Timer]) -> Result<Vec<Output>, String> {
        let mut payload = Vec::new();
        abi::encode_firings_header(&mut payload, ts.len() as u32);
        let mut keys = BTreeMap::new();
        let mut order = Vec::new();
        for t in ts {
            let flags = match t.domain {
                Domain::EventTime => abi::FIRING_EVENT_TIME,
                Domain::ProcessingTime => 0,
            };
            abi::encode_firing(
                &mut payload,
                &abi::Firing {
                    flags,
                    partition: t.partition,
                    time: t.time,
                    key: &t.key,
                    name: &t.name,
                    payload: &t.payload,
                },
            );
            if !keys.contains_key(&t.key) {
                keys.insert(t.key.clone(), partition);
                order.push(t.key.clone());
            }
        }
        with_host(|h| h.begin_unit());
        self.migrate_stale(&order, &keys)?;
        let scope = Scope {
            keys,
            all: false,
            partition,
        };
        self.call(Phase::Timer, scope, &payload)?;
        Ok(with_host(|h| {
            for t in ts {
                let id = t.id();
                if !h.timers_set.contains(&id) {
                    h.timers.remove(&id);
                }
            }
            h.commit_unit()
        }))
    }

    /// Sets the processing time to `ms` and fires the timers that are then due, as
    /// [`fire_due`](Harness::fire_due). Processing time never goes back: an earlier `ms` is an
    /// error.
    pub fn advance_time(&mut self, ms: i64) -> Result<Fired, String> {
        let now = self.now();
        if ms < now {
            return Err(format!(
                "wasmstream testing: processing time cannot go back from {} to {}",
                now, ms
            ));
        }
        with_host(|h| h.now = ms);
        self.fire_due()
    }

    /// Sets the watermark of `partition` to `ms` and fires the timers that are then due, as
    /// [`fire_due`](Harness::fire_due). A watermark never decreases: a lower `ms` is an error.
    /// The harness moves watermarks only when told: processing records does not move them, and
    /// the late flag of a record is what the test sets ([`TestRecord::late`]).
    pub fn advance_watermark(&mut self, partition: u32, ms: i64) -> Result<Fired, String> {
        let w = self.watermark(partition);
        if ms < w {
            return Err(format!(
                "wasmstream testing: the watermark of partition {} cannot go back from {} to {}",
                partition, w, ms
            ));
        }
        with_host(|h| h.watermarks.insert(partition, ms));
        self.fire_due()
    }

    /// The event-time watermark of `partition` (-1 until the test advances it).
    pub fn watermark(&self, partition: u32) -> i64 {
        with_host(|h| h.watermark(partition))
    }

    /// The fake processing-time clock.
    pub fn now(&self) -> i64 {
        with_host(|h| h.now)
    }

    /// Runs [`Task::on_tick`] for `partition` with the harness's clock, the partition's watermark
    /// and `source` as the input name, after migrating every stale key, in one unit of work.
    /// During the tick every key is in scope and [`TickContext::keys`](crate::TickContext::keys)
    /// lists every key with state (the harness does not track which partition a key belongs to).
    /// Returns the unit's outputs; on failure nothing changes.
    pub fn tick(
        &mut self,
        partition: u32,
        source: impl AsRef<[u8]>,
    ) -> Result<Vec<Output>, String> {
        with_host(|h| h.begin_unit());
        let keys: BTreeMap<Vec<u8>, u32> = with_host(|h| {
            h.state
                .iter()
                .filter(|(_, m)| !m.is_empty())
                .map(|(k, _)| (k.clone(), partition))
                .collect()
        });
        let order: Vec<Vec<u8>> = keys.keys().cloned().collect();
        self.migrate_stale(&order, &keys)?;
        let mut payload = Vec::new();
        let (now, watermark) = (self.now(), self.watermark(partition));
        abi::encode_tick(
            &mut payload,
            &abi::Tick {
                partition,
                now,
                watermark,
                source: source.as_ref(),
            },
        );
        let scope = Scope {
            keys: BTreeMap::new(),
            all: true,
            partition,
        };
        self.call(Phase::Tick, scope, &payload)?;
        Ok(with_host(|h| h.commit_unit()))
    }

    /// Migrates every key that has state recorded under another version than the module's, one
    /// unit of work per key in bytewise key order (partition 0), as a host does when a task
    /// migrates eagerly. Returns the outputs; on a failed migration it stops and returns the
    /// task's message (the migrations before it are committed).
    pub fn migrate_all(&mut self) -> Result<Vec<Output>, String> {
        let keys: Vec<Vec<u8>> = with_host(|h| {
            h.state
                .iter()
                .filter(|(_, m)| !m.is_empty())
                .map(|(k, _)| k.clone())
                .collect()
        });
        let mut outputs = Vec::new();
        for key in keys {
            with_host(|h| h.begin_unit());
            let mut parts = BTreeMap::new();
            parts.insert(key.clone(), 0);
            self.migrate_stale(&[key], &parts)?;
            outputs.extend(with_host(|h| h.commit_unit()));
        }
        Ok(outputs)
    }

    /// Sets the recorded state version of `key`, e.g. to start a test from state an older module
    /// wrote. Before any call involving a key that has state and whose recorded version differs
    /// from [`Task::STATE_VERSION`], the harness calls [`Task::migrate`], as a host does
    /// (ABI.md §4.16); after a successful unit the key's version is the module's.
    pub fn set_state_version(&mut self, key: impl AsRef<[u8]>, version: u32) {
        with_host(|h| h.versions.insert(key.as_ref().to_vec(), version));
    }

    /// The recorded state version of `key` (0 when none was recorded).
    pub fn state_version(&self, key: impl AsRef<[u8]>) -> u32 {
        with_host(|h| h.versions.get(key.as_ref()).copied().unwrap_or(0))
    }

    /// Sets a committed timer, e.g. to start a test from existing timers; it replaces the timer
    /// with the same partition, key and name.
    pub fn set_timer(&mut self, timer: Timer) {
        with_host(|h| h.timers.insert(timer.id(), timer));
    }

    /// The committed timers sorted by partition, key, then name.
    pub fn timers(&self) -> Vec<Timer> {
        with_host(|h| h.timers.values().cloned().collect())
    }

    /// The committed timer `name` of `key` in `partition`, if set.
    pub fn timer(
        &self,
        partition: u32,
        key: impl AsRef<[u8]>,
        name: impl AsRef<[u8]>,
    ) -> Option<Timer> {
        let id = (partition, key.as_ref().to_vec(), name.as_ref().to_vec());
        with_host(|h| h.timers.get(&id).cloned())
    }

    /// Grants outbound HTTP: `stub` answers every [`http_request`](crate::http_request) in place
    /// of the network (without a stub, requests fail with `ERR_NOT_ALLOWED`). It receives the
    /// decoded request; an `Err` with a negative code (e.g. [`Errno::NOT_ALLOWED`],
    /// [`Errno::TOO_LARGE`]) is returned to the task as that code, any other as
    /// `ERR_UNAVAILABLE`. A malformed method or URL is `ERR_INVALID` without calling the stub. A
    /// response that does not fit the task's buffer is kept for `http_response`, as on the host.
    pub fn set_http<F>(&mut self, stub: F)
    where
        F: FnMut(&HttpRequest) -> Result<HttpResponse, Errno> + 'static,
    {
        with_host(|h| h.http = Some(Box::new(stub)));
    }

    /// Removes the HTTP stub: requests fail with `ERR_NOT_ALLOWED` again.
    pub fn clear_http(&mut self) {
        with_host(|h| h.http = None);
    }

    /// The task, for inspecting its fields.
    pub fn task(&self) -> &T {
        self.rt.task().expect("init succeeded")
    }

    /// `state[key][name]`, if set.
    pub fn state(&self, key: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Option<Vec<u8>> {
        with_host(|h| {
            h.state
                .get(key.as_ref())
                .and_then(|m| m.get(name.as_ref()))
                .cloned()
        })
    }

    /// A read-only view of the committed state of `key`, for reading what the task wrote with the
    /// typed helpers of [`state`](crate::state):
    /// `Counter::new("count").get(&mut harness.read("alice"))`. Writes through it fail.
    pub fn read(&self, key: impl AsRef<[u8]>) -> StateView {
        with_host(|h| StateView {
            entries: h.state.get(key.as_ref()).cloned().unwrap_or_default(),
        })
    }

    /// The outputs of the successful calls so far that went to the output `name`, in order.
    pub fn outputs_named(&self, name: &str) -> Vec<Output> {
        with_host(|h| {
            h.outputs
                .iter()
                .filter(|o| o.output == name)
                .cloned()
                .collect()
        })
    }

    /// `state[key][name]` as text (lossy), if set.
    pub fn state_str(&self, key: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Option<String> {
        self.state(key, name)
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    /// Every (name, value) of `state[key]`, in name order.
    pub fn state_of(&self, key: impl AsRef<[u8]>) -> Vec<(Vec<u8>, Vec<u8>)> {
        with_host(|h| {
            h.state
                .get(key.as_ref())
                .map(|m| m.iter().map(|(n, v)| (n.clone(), v.clone())).collect())
                .unwrap_or_default()
        })
    }

    /// Every (key, name, value) of the state, in key then name order.
    pub fn all_state(&self) -> Vec<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        with_host(|h| {
            let mut out = Vec::new();
            for (k, m) in &h.state {
                for (n, v) in m {
                    out.push((k.clone(), n.clone(), v.clone()));
                }
            }
            out
        })
    }

    /// Sets `state[key][name]` directly, e.g. to seed state before a call. The entry counts as
    /// written by the module under test: a key without a recorded state version gets
    /// [`Task::STATE_VERSION`]; use [`set_state_version`](Harness::set_state_version) to make it
    /// older.
    pub fn set_state(
        &mut self,
        key: impl AsRef<[u8]>,
        name: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) {
        with_host(|h| {
            h.state
                .entry(key.as_ref().to_vec())
                .or_default()
                .insert(name.as_ref().to_vec(), value.as_ref().to_vec());
            // Counts as written by the module under test (see set_state_version).
            let v = h.module_version;
            h.versions.entry(key.as_ref().to_vec()).or_insert(v);
        })
    }

    /// Every output of the successful calls so far, in order.
    pub fn outputs(&self) -> Vec<Output> {
        with_host(|h| h.outputs.clone())
    }

    /// The value of the metric (ABI 0.3) `name` with exactly these labels, if the task declared it.
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<i64> {
        let layout = crate::metric::labels_layout(labels);
        with_host(|h| {
            h.metrics
                .iter()
                .find(|m| m.1 == name.as_bytes() && m.2 == layout)
                .map(|m| m.3)
        })
    }

    /// The histogram (ABI 0.3) `name` with exactly these labels, if the task declared it.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Option<Histogram> {
        let layout = crate::metric::labels_layout(labels);
        with_host(|h| {
            let i = h
                .metrics
                .iter()
                .position(|m| m.1 == name.as_bytes() && m.2 == layout)?;
            h.hists[i].clone()
        })
    }

    /// Whether the last call that failed failed permanently: the task returned an
    /// [`Error::permanent`](crate::Error::permanent) error (ABI 0.4), which the host does not
    /// retry but sends to the dead letters at once. `false` before any call failed.
    pub fn failed_permanently(&self) -> bool {
        with_host(|h| h.last_permanent)
    }

    /// Every message logged so far (failed calls included).
    pub fn logs(&self) -> Vec<LogLine> {
        with_host(|h| h.logs.clone())
    }

    /// Sets the fake processing-time clock (`now_ms`, and the time of outputs emitted with a
    /// negative timestamp). Default 1 700 000 000 000. It fires no timer and may go back; use
    /// [`advance_time`](Harness::advance_time) to fire the timers that become due.
    pub fn set_now(&mut self, ms: i64) {
        with_host(|h| h.now = ms)
    }

    /// Changes the fake host's limits.
    pub fn set_limits(&mut self, limits: Limits) {
        with_host(|h| h.limits = limits)
    }
}
