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

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::abi::{self, Init, RecordFields};
use crate::error::Errno;
use crate::rt::Runtime;
use crate::Task;

/// One record the task emitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// The output name.
    pub output: Vec<u8>,
    /// The output record's key.
    pub key: Vec<u8>,
    /// The output record's value.
    pub value: Vec<u8>,
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
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Init,
    Process,
}

type StateMap = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>;

/// The fake host's data: per-thread, reset by [`Harness::new`].
pub(crate) struct FakeHost {
    phase: Phase,
    config: Vec<u8>,
    now: i64,
    limits: Limits,
    scope: BTreeSet<Vec<u8>>,
    state: StateMap,
    /// State as it was when the current call started, restored if it fails.
    saved: Option<StateMap>,
    writes: usize,
    pending: Vec<Output>,
    outputs: Vec<Output>,
    logs: Vec<LogLine>,
    fail_msg: Option<String>,
}

impl FakeHost {
    fn new() -> FakeHost {
        FakeHost {
            phase: Phase::Idle,
            config: b"{}".to_vec(),
            now: 1_700_000_000_000,
            limits: Limits::default(),
            scope: BTreeSet::new(),
            state: BTreeMap::new(),
            saved: None,
            writes: 0,
            pending: Vec::new(),
            outputs: Vec::new(),
            logs: Vec::new(),
            fail_msg: None,
        }
    }

    fn check_state(&self, key: &[u8]) -> Result<(), i32> {
        if self.phase != Phase::Process {
            return Err(Errno::NOT_ALLOWED.raw());
        }
        if !self.scope.contains(key) {
            return Err(Errno::KEY_NOT_IN_BATCH.raw());
        }
        Ok(())
    }

    fn check_write(&mut self, key: &[u8], name: &[u8]) -> Result<(), i32> {
        self.check_state(key)?;
        if name.len() > self.limits.max_name_bytes {
            return Err(Errno::TOO_LARGE.raw());
        }
        if self.writes >= self.limits.max_writes {
            return Err(Errno::LIMIT.raw());
        }
        self.writes += 1;
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

    pub(crate) fn emit(
        &mut self,
        output: &[u8],
        key: &[u8],
        value: &[u8],
        headers: &[u8],
        ts: i64,
    ) -> i32 {
        if self.phase != Phase::Process {
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
            output: output.to_vec(),
            key: key.to_vec(),
            value: value.to_vec(),
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

    pub(crate) fn fail(&mut self, msg: &[u8]) -> i32 {
        self.fail_msg = Some(String::from_utf8_lossy(msg).into_owned());
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

/// Drives a [`Task`] natively against this thread's fake host, through the same runtime (payload
/// decoding, per-record loop, error reporting) as the wasm exports.
pub struct Harness<T> {
    rt: Runtime<T>,
}

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
        harness.run(Phase::Init, BTreeSet::new(), &payload)?;
        Ok(harness)
    }

    /// Runs one `process` call on these records (one batch). On success returns the outputs of
    /// the call; on failure returns the message the task gave to `fail` and discards every state
    /// write and output of the call, as the host does.
    pub fn process(&mut self, records: &[TestRecord]) -> Result<Vec<Output>, String> {
        let scope = records.iter().map(|r| r.key.clone()).collect();
        self.run(Phase::Process, scope, &encode_batch(records))
    }

    /// Like [`process`](Harness::process) with a raw Batch payload; every key in it is in scope
    /// (a payload that does not decode gets an empty scope).
    pub fn process_raw(&mut self, payload: &[u8]) -> Result<Vec<Output>, String> {
        let scope = match abi::decode_batch(payload) {
            Ok(b) => b.records().map(|r| r.key().to_vec()).collect(),
            Err(_) => BTreeSet::new(),
        };
        self.run(Phase::Process, scope, payload)
    }

    fn run(
        &mut self,
        phase: Phase,
        scope: BTreeSet<Vec<u8>>,
        payload: &[u8],
    ) -> Result<Vec<Output>, String> {
        with_host(|h| {
            h.phase = phase;
            h.scope = scope;
            h.saved = Some(h.state.clone());
            h.writes = 0;
            h.pending.clear();
            h.fail_msg = None;
        });
        let rc = match phase {
            Phase::Init => self.rt.init(payload),
            _ => self.rt.process(payload),
        };
        with_host(|h| {
            h.phase = Phase::Idle;
            h.scope.clear();
            let saved = h.saved.take().unwrap_or_default();
            let pending = std::mem::take(&mut h.pending);
            if rc == 0 {
                h.outputs.extend(pending.iter().cloned());
                Ok(pending)
            } else {
                h.state = saved;
                Err(h
                    .fail_msg
                    .take()
                    .unwrap_or_else(|| format!("guest returned {} without calling fail", rc)))
            }
        })
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

    /// Sets `state[key][name]` directly, e.g. to seed state before a call.
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
        })
    }

    /// Every output of the successful calls so far, in order.
    pub fn outputs(&self) -> Vec<Output> {
        with_host(|h| h.outputs.clone())
    }

    /// Every message logged so far (failed calls included).
    pub fn logs(&self) -> Vec<LogLine> {
        with_host(|h| h.logs.clone())
    }

    /// Sets the fake processing-time clock (`now_ms`, and the time of outputs emitted with a
    /// negative timestamp). Default 1 700 000 000 000.
    pub fn set_now(&mut self, ms: i64) {
        with_host(|h| h.now = ms)
    }

    /// Changes the fake host's limits.
    pub fn set_limits(&mut self, limits: Limits) {
        with_host(|h| h.limits = limits)
    }
}
