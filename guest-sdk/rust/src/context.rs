//! The per-call views of the host: state scoped to a key, timers, outputs, logging; the tick's
//! view with key listing.

use crate::abi::{self, HeadersBuilder};
use crate::error::{check, Errno, Error};
use crate::sys;
use crate::text;

/// A log level of the host's `log` function (ABI.md §4.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// 0
    Debug = 0,
    /// 1
    Info = 1,
    /// 2
    Warn = 2,
    /// 3
    Error = 3,
}

/// Writes a message to the host's log, tagged with the task. Usable at any time, also in `init`.
/// Over-long messages are truncated by the host. Logging never fails a call: a refused message is
/// dropped.
pub fn log(level: Level, msg: impl AsRef<str>) {
    let _ = sys::host_log(level as i32, msg.as_ref().as_bytes());
}

/// The host's processing time in ms since the Unix epoch (the guest has no other clock unless
/// the task is granted one).
pub fn now_ms() -> i64 {
    sys::host_now_ms()
}

/// The task's configuration bytes (a JSON object, `{}` when the task has none), read from the
/// host. The same bytes are passed to [`Task::init`](crate::Task::init).
pub fn config() -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    loop {
        let n = sys::host_config_get(&mut buf);
        if n < 0 {
            // config_get only fails on bad pointers, which this SDK never passes.
            return Vec::new();
        }
        let n = n as usize;
        if n <= buf.len() {
            buf.truncate(n);
            return buf;
        }
        buf.resize(n, 0);
    }
}

/// A scan page buffer starts here and doubles while not even one entry fits …
const SCAN_START: usize = 4096;
/// … up to here; beyond this the scan fails with `ERR_BUFFER_TOO_SMALL`.
const SCAN_MAX: usize = 1 << 28;

/// The view of the host a task gets with each record.
///
/// State calls are scoped to the record's key: `state[key][name] = value`. Reads see the writes
/// made earlier in the same call. Writes and outputs take effect only if the whole call succeeds;
/// if the task returns an error (or any record of the batch fails), none of them happen.
pub struct Context<'a> {
    key: &'a [u8],
    timestamp: i64,
    scratch: &'a mut Vec<u8>,
    scan_buf: &'a mut Vec<u8>,
}

impl<'a> Context<'a> {
    /// A context for a record with this key and timestamp, using these buffers for reads.
    pub(crate) fn new(
        key: &'a [u8],
        timestamp: i64,
        scratch: &'a mut Vec<u8>,
        scan_buf: &'a mut Vec<u8>,
    ) -> Context<'a> {
        Context {
            key,
            timestamp,
            scratch,
            scan_buf,
        }
    }

    /// A context whose state calls are scoped to another key of the same batch (the record's
    /// own context is scoped to its key). The host refuses keys outside the batch with
    /// `ERR_KEY_NOT_IN_BATCH`; records of different keys in one batch are independent, so use
    /// this only for keys the task knows to be in the batch.
    pub fn with_key<'b>(&'b mut self, key: &'b [u8]) -> Context<'b> {
        Context {
            key,
            timestamp: self.timestamp,
            scratch: self.scratch,
            scan_buf: self.scan_buf,
        }
    }

    /// The key the state calls are scoped to (the record's key).
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The record's event time (ms since the epoch, -1 when unknown): the default timestamp of
    /// [`emit`](Context::emit).
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// Reads `state[key][name]`. The value is a view into a buffer of the context, valid until the
    /// next call on it; `None` when there is no such entry.
    pub fn get(&mut self, name: impl AsRef<[u8]>) -> Result<Option<&[u8]>, Error> {
        let name = name.as_ref();
        if self.scratch.is_empty() {
            self.scratch.resize(256, 0);
        }
        loop {
            let n = sys::host_state_get(self.key, name, self.scratch);
            if n == Errno::NOT_FOUND.raw() {
                return Ok(None);
            }
            let n = check(n)? as usize;
            if n <= self.scratch.len() {
                return Ok(Some(&self.scratch[..n]));
            }
            // The value did not fit and nothing was written: grow to its length and read again.
            self.scratch.resize(n, 0);
        }
    }

    /// Reads `state[key][name]` as an unsigned decimal ASCII number (e.g. a counter written with
    /// [`put_u64`](Context::put_u64)); `None` when there is no such entry. A value that is not
    /// such a number is an `ERR_INVALID` error naming the entry.
    pub fn get_u64(&mut self, name: impl AsRef<[u8]>) -> Result<Option<u64>, Error> {
        let name = name.as_ref();
        let v = match self.get(name)? {
            Some(v) => v,
            None => return Ok(None),
        };
        match parse_u64(v) {
            Some(n) => Ok(Some(n)),
            None => {
                let mut msg = String::from("state ");
                text::push_quoted(&mut msg, name);
                msg.push_str(": value ");
                text::push_quoted(&mut msg, v);
                msg.push_str(" is not a decimal number");
                Err(Error::new(msg))
            }
        }
    }

    /// Sets `state[key][name] = value`.
    pub fn put(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), Error> {
        check(sys::host_state_put(self.key, name.as_ref(), value.as_ref())).map(|_| ())
    }

    /// Sets `state[key][name]` to `n` in decimal ASCII.
    pub fn put_u64(&mut self, name: impl AsRef<[u8]>, n: u64) -> Result<(), Error> {
        let mut buf = [0u8; 20];
        let s = format_u64(n, &mut buf);
        self.put(name, s)
    }

    /// Removes `state[key][name]`; removing a missing name is not an error.
    pub fn delete(&mut self, name: impl AsRef<[u8]>) -> Result<(), Error> {
        check(sys::host_state_delete(self.key, name.as_ref())).map(|_| ())
    }

    /// Lists the entries of `state[key]` whose names start with `prefix`, in ascending bytewise
    /// name order. The cursor pages through the host's `state_scan` as needed:
    ///
    /// ```
    /// # fn f(ctx: &mut wasmstream::Context) -> Result<(), wasmstream::Error> {
    /// let mut scan = ctx.scan("count/");
    /// while let Some((name, value)) = scan.next()? {
    ///     // name and value are valid until the next call to scan.next()
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// The cursor borrows the context and reuses its page buffer (no allocation once warm); to
    /// change entries while listing them, collect first ([`scan_all`](Context::scan_all)).
    pub fn scan<'s, P: AsRef<[u8]> + ?Sized>(&'s mut self, prefix: &'s P) -> Scan<'s> {
        if self.scan_buf.is_empty() {
            self.scan_buf.resize(SCAN_START, 0);
        }
        Scan {
            key: self.key,
            prefix: prefix.as_ref(),
            after: Vec::new(),
            buf: self.scan_buf,
            state: ScanState::Start,
            pos: 0,
            left: 0,
        }
    }

    /// Lists the entries of `state[key]` whose names start with `prefix`, copied.
    #[allow(clippy::type_complexity)]
    pub fn scan_all<P: AsRef<[u8]> + ?Sized>(
        &mut self,
        prefix: &P,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
        let mut out = Vec::new();
        let mut scan = self.scan(prefix);
        while let Some((n, v)) = scan.next()? {
            out.push((n.to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    /// Sends a record to the output named `output`, without headers. Outputs are released in
    /// emit order, only if the call succeeds.
    ///
    /// The output's timestamp follows the rule every wasmstream SDK shares: the time of what the
    /// task is handling — the record's timestamp in `process` (processing time when the record has
    /// none), the firing's time in an event-time `on_timer`, processing time in a
    /// processing-time `on_timer`, a tick or a migration. Use [`emit_with`](Context::emit_with)
    /// for another timestamp.
    pub fn emit(
        &mut self,
        output: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let ts = self.timestamp;
        check(sys::host_emit(
            output.as_ref(),
            key.as_ref(),
            value.as_ref(),
            &[],
            ts,
        ))
        .map(|_| ())
    }

    /// Sends a record to the output named `output` with headers (or `None`) and a timestamp in ms
    /// since the epoch; a negative `ts` means "now" (processing time).
    pub fn emit_with(
        &mut self,
        output: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        headers: Option<&HeadersBuilder>,
        ts: i64,
    ) -> Result<(), Error> {
        let hdr = headers_bytes(headers);
        check(sys::host_emit(
            output.as_ref(),
            key.as_ref(),
            value.as_ref(),
            hdr,
            ts,
        ))
        .map(|_| ())
    }

    /// Sends a record with `key` and a null value to the output named `output`, without headers:
    /// a tombstone (ABI 0.5), which deletes `key` from a compacted Kafka topic (a file output
    /// writes `"value":null`). Its timestamp is [`emit`](Context::emit)'s. The null key
    /// ([`NULL_KEY`](crate::NULL_KEY)) cannot be deleted that way: compaction keeps no record
    /// without a key.
    pub fn emit_tombstone(
        &mut self,
        output: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        let ts = self.timestamp;
        check(sys::host_emit_null(output.as_ref(), key.as_ref(), &[], ts)).map(|_| ())
    }

    /// [`emit_tombstone`](Context::emit_tombstone) with headers (or `None`) and a timestamp, as
    /// [`emit_with`](Context::emit_with).
    pub fn emit_tombstone_with(
        &mut self,
        output: impl AsRef<[u8]>,
        key: impl AsRef<[u8]>,
        headers: Option<&HeadersBuilder>,
        ts: i64,
    ) -> Result<(), Error> {
        let hdr = headers_bytes(headers);
        check(sys::host_emit_null(output.as_ref(), key.as_ref(), hdr, ts)).map(|_| ())
    }

    /// Writes a message to the host's log (see [`log`](crate::log)).
    pub fn log(&self, level: Level, msg: impl AsRef<str>) {
        log(level, msg)
    }

    /// The host's processing time (see [`now_ms`](crate::now_ms)).
    pub fn now_ms(&self) -> i64 {
        now_ms()
    }

    /// Sets the timer `name` of the context's key (see [`set_timer`](crate::set_timer)): it
    /// fires at `at` in `domain` and hands `payload` back to [`Task::on_timer`](crate::Task::on_timer).
    pub fn set_timer(
        &mut self,
        name: impl AsRef<[u8]>,
        domain: crate::Domain,
        at: i64,
        payload: impl AsRef<[u8]>,
    ) -> Result<(), Error> {
        crate::timer::set_timer(self.key, name, domain, at, payload)
    }

    /// Deletes the timer `name` of the context's key (see [`delete_timer`](crate::delete_timer)).
    pub fn delete_timer(&mut self, name: impl AsRef<[u8]>) -> Result<(), Error> {
        crate::timer::delete_timer(self.key, name)
    }

    /// The event-time watermark of the call's partition (see [`watermark`](crate::watermark)).
    pub fn watermark(&self) -> i64 {
        crate::timer::watermark()
    }
}

/// A key page buffer starts here and doubles while not even one key fits (up to `SCAN_MAX`).
const KEYS_START: usize = 4096;

/// The view of the host a task gets in [`Task::on_tick`](crate::Task::on_tick): every key of the
/// tick's partition is in scope. List the keys that have state with
/// [`for_each_key`](TickContext::for_each_key) or [`keys`](TickContext::keys), and reach any key's
/// state, timers and outputs with [`with_key`](TickContext::with_key).
pub struct TickContext<'a> {
    scratch: &'a mut Vec<u8>,
    scan_buf: &'a mut Vec<u8>,
    keys_buf: &'a mut Vec<u8>,
}

impl<'a> TickContext<'a> {
    pub(crate) fn new(
        scratch: &'a mut Vec<u8>,
        scan_buf: &'a mut Vec<u8>,
        keys_buf: &'a mut Vec<u8>,
    ) -> TickContext<'a> {
        TickContext {
            scratch,
            scan_buf,
            keys_buf,
        }
    }

    /// A context scoped to `key`: its state, timers and outputs (emitted with timestamp -1, i.e.
    /// processing time, by [`Context::emit`]).
    pub fn with_key<'b>(&'b mut self, key: &'b [u8]) -> Context<'b> {
        Context::new(key, -1, self.scratch, self.scan_buf)
    }

    /// Calls `f` for every key of the partition that has state, in ascending bytewise order,
    /// with a context scoped to that key, until `f` returns `Ok(false)` or an error (which is
    /// returned). `f` may read and write the state and timers of that key (or any other, with
    /// [`set_timer`](crate::set_timer)). Keys are fetched page by page with the host's
    /// `state_keys`, growing the page buffer when not even one key fits.
    pub fn for_each_key<F>(&mut self, mut f: F) -> Result<(), Error>
    where
        F: FnMut(&[u8], &mut Context<'_>) -> Result<bool, Error>,
    {
        if self.keys_buf.is_empty() {
            self.keys_buf.resize(KEYS_START, 0);
        }
        let mut after: Option<Vec<u8>> = None;
        loop {
            let n = loop {
                let n = sys::host_state_keys(after.as_deref(), self.keys_buf);
                if n != Errno::BUFFER_TOO_SMALL.raw() || self.keys_buf.len() >= SCAN_MAX {
                    break n;
                }
                // Not even one key fits: the ABI gives no size hint, so double and retry.
                let grown = self.keys_buf.len() * 2;
                self.keys_buf.resize(grown, 0);
            };
            let n = check(n)? as usize;
            let page = match self.keys_buf.get(..n).map(abi::decode_key_page) {
                Some(Ok(p)) => p,
                _ => {
                    return Err(Error::with_code(
                        Errno::INTERNAL,
                        "state_keys: malformed KeyPage from the host",
                    ))
                }
            };
            if page.is_empty() && page.more() {
                return Err(Error::with_code(
                    Errno::INTERNAL,
                    "state_keys: empty page with more = 1",
                ));
            }
            let mut last: &[u8] = &[];
            for key in page.keys() {
                let mut ctx = Context::new(key, -1, self.scratch, self.scan_buf);
                if !f(key, &mut ctx)? {
                    return Ok(());
                }
                last = key;
            }
            if !page.more() {
                return Ok(());
            }
            let a = after.get_or_insert_with(Vec::new);
            a.clear();
            a.extend_from_slice(last);
        }
    }

    /// Every key of the partition that has state, in ascending bytewise order, copied.
    pub fn keys(&mut self) -> Result<Vec<Vec<u8>>, Error> {
        let mut out = Vec::new();
        self.for_each_key(|k, _| {
            out.push(k.to_vec());
            Ok(true)
        })?;
        Ok(out)
    }

    /// The event-time watermark of the tick's partition (see [`watermark`](crate::watermark)).
    pub fn watermark(&self) -> i64 {
        crate::timer::watermark()
    }

    /// The host's processing time (see [`now_ms`](crate::now_ms)).
    pub fn now_ms(&self) -> i64 {
        now_ms()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ScanState {
    /// No page fetched yet.
    Start,
    /// A page is loaded; `more` says whether another follows it.
    Page { more: bool },
    /// Finished (or failed): `next` returns `None`.
    Done,
}

/// A cursor over the state entries of one key with a name prefix; see [`Context::scan`].
pub struct Scan<'c> {
    key: &'c [u8],
    prefix: &'c [u8],
    /// The last name returned, where the next page starts.
    after: Vec<u8>,
    buf: &'c mut Vec<u8>,
    state: ScanState,
    /// Offset of the next entry in `buf`.
    pos: usize,
    /// Entries left on the page.
    left: u32,
}

impl<'c> Scan<'c> {
    /// The next (name, value) entry, or `None` after the last one. Both are views valid until the
    /// next call.
    #[allow(clippy::should_implement_trait, clippy::type_complexity)]
    pub fn next(&mut self) -> Result<Option<(&[u8], &[u8])>, Error> {
        while self.left == 0 {
            let after = match self.state {
                ScanState::Done | ScanState::Page { more: false } => {
                    self.state = ScanState::Done;
                    return Ok(None);
                }
                ScanState::Start => None,
                ScanState::Page { more: true } => Some(&self.after[..]),
            };
            let n = loop {
                let n = sys::host_state_scan(self.key, self.prefix, after, self.buf);
                if n != Errno::BUFFER_TOO_SMALL.raw() || self.buf.len() >= SCAN_MAX {
                    break n;
                }
                // Not even one entry fits: the ABI gives no size hint, so double and retry.
                let grown = self.buf.len() * 2;
                self.buf.resize(grown, 0);
            };
            let n = match check(n) {
                Ok(n) => n as usize,
                Err(e) => {
                    self.state = ScanState::Done;
                    return Err(e);
                }
            };
            let page = match self.buf.get(..n).map(abi::decode_scan_page) {
                Some(Ok(p)) => p,
                _ => {
                    self.state = ScanState::Done;
                    return Err(Error::with_code(
                        Errno::INTERNAL,
                        "state_scan: malformed ScanPage from the host",
                    ));
                }
            };
            if page.is_empty() && page.more() {
                // A page without entries cannot move `after` forward: stop instead of looping.
                self.state = ScanState::Done;
                return Err(Error::with_code(
                    Errno::INTERNAL,
                    "state_scan: empty page with more = 1",
                ));
            }
            self.state = ScanState::Page { more: page.more() };
            self.left = page.len() as u32;
            self.pos = 8;
        }
        self.left -= 1;
        let (name, value, next) = read_entry(self.buf, self.pos);
        self.pos = next;
        if self.left == 0 {
            self.after.clear();
            self.after.extend_from_slice(&self.buf[name.clone()]);
        }
        Ok(Some((&self.buf[name], &self.buf[value])))
    }
}

/// Reads one (name, value) entry of a validated page at `pos`: their ranges and the next offset.
fn read_entry(b: &[u8], pos: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>, usize) {
    let len = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
    let ns = pos + 4;
    let ne = ns + len(pos);
    let vs = ne + 4;
    let ve = vs + len(ne);
    (ns..ne, vs..ve, ve)
}

/// Parses unsigned decimal ASCII digits (no sign, no spaces); `None` on anything else or overflow.
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(n)
}

/// Formats `n` in decimal ASCII into `buf` and returns the digits.
pub fn format_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

/// The Headers layout of `headers` for `emit`, empty for `None`.
fn headers_bytes(headers: Option<&HeadersBuilder>) -> &[u8] {
    headers.map_or(&[], |h| h.as_bytes())
}
