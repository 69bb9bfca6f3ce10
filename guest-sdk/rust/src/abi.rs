//! The byte layouts of ABI.md §6: decoders for what the host sends (Init, Batch, ScanPage, and
//! since 0.2 Firings, Tick, Migrate, KeyPage, HttpResponse) and encoders for what the guest sends
//! (Headers, HttpRequest), plus encoders for the host-side layouts and decoders for the guest-side
//! ones, which tests and fake hosts use.
//!
//! Decoded byte fields are views into the buffer they were decoded from; nothing is copied. A
//! decoder rejects a layout whose lengths run past the end of its buffer, a Batch whose kind is
//! unknown, and trailing bytes after the last element; the error is `ERR_INVALID` with a message
//! naming the layout.

use crate::error::{Errno, Error};

/// The import module every host function of this ABI version lives in.
pub const MODULE: &str = "wasmstream_v0";
/// The ABI major version this SDK speaks.
pub const VERSION_MAJOR: u32 = 0;
/// The ABI minor version this SDK speaks.
pub const VERSION_MINOR: u32 = 5;
/// The packed ABI version, `major << 16 | minor`, returned by `wasmstream_abi_version`.
pub const VERSION: u32 = VERSION_MAJOR << 16 | VERSION_MINOR;
/// The Batch kind of a batch of records (the only kind of ABI 0.1).
pub const BATCH_RECORDS: u32 = 1;
/// The kind of a Firings payload (0.2, §6.5).
pub const BATCH_FIRINGS: u32 = 2;
/// The kind of a Tick payload (0.2, §6.6).
pub const BATCH_TICK: u32 = 3;
/// The kind of a Migrate payload (0.2, §6.7).
pub const BATCH_MIGRATE: u32 = 4;
/// Firing flag bit 0: the timer is an event-time timer (0.2).
pub const FIRING_EVENT_TIME: u32 = 1;
/// Time domain of `timer_set`: processing time (0.2).
pub const DOMAIN_PROCESSING: i32 = 0;
/// Time domain of `timer_set`: event time (0.2).
pub const DOMAIN_EVENT: i32 = 1;
/// Record flag bit 0: the record is late (its event time is behind the watermark).
pub const FLAG_LATE: u32 = 1;
/// Record flag bit 1: the record's key is null (0.4): a Kafka record sent without a key. Its key
/// bytes are then [`NULL_KEY`].
pub const FLAG_KEY_NULL: u32 = 2;
/// Record flag bit 2: the record's value is null (0.5): a Kafka tombstone, which on a compacted
/// topic deletes its key, as distinct from an empty value. Its value bytes are then empty.
pub const FLAG_VALUE_NULL: u32 = 4;
/// The `val_len` passed to `emit` for an output whose value is null, a tombstone (0.5); `val_ptr`
/// is then ignored.
pub const EMIT_NULL_VALUE: i32 = -1;
/// The key of a record without a key, and the key to emit for an output with a null key (0.4):
/// the bytes `ff 6e 75 6c 6c ff`, not UTF-8, so no key read from a JSON line can be them (the host
/// refuses a Kafka record whose key is these bytes). Its state is apart from the empty key's.
pub const NULL_KEY: &[u8] = b"\xffnull\xff";

/// Whether `key` is [`NULL_KEY`] (for a firing's or a tick's key, which carry no flag).
pub fn is_null_key(key: &[u8]) -> bool {
    key == NULL_KEY
}

/// The smallest encoded Record: five fixed fields, three empty byte strings and no headers.
const MIN_RECORD: usize = 4 + 4 + 8 + 8 + 4 + 4 + 4 + 4;
/// The smallest encoded header or scan entry: two empty byte strings.
const MIN_PAIR: usize = 8;

fn malformed(layout: &str) -> Error {
    let mut msg = String::from("wasmstream abi: malformed ");
    msg.push_str(layout);
    Error::with_code(Errno::INVALID, msg)
}

/// Reads a layout front to back. Every read fails once the buffer runs out.
#[derive(Clone)]
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.b.len() {
            return None;
        }
        let (p, rest) = self.b.split_at(n);
        self.b = rest;
        Some(p)
    }

    fn u32(&mut self) -> Option<u32> {
        let p = self.take(4)?;
        Some(u32::from_le_bytes([p[0], p[1], p[2], p[3]]))
    }

    fn u64(&mut self) -> Option<u64> {
        let p = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(p);
        Some(u64::from_le_bytes(a))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()?;
        self.take(n as usize)
    }

    /// Reads `count` (name, value) pairs and returns the bytes they span.
    fn pairs(&mut self, count: u32) -> Option<&'a [u8]> {
        if count as u64 * MIN_PAIR as u64 > self.b.len() as u64 {
            return None;
        }
        let start = self.b;
        for _ in 0..count {
            self.bytes()?;
            self.bytes()?;
        }
        Some(&start[..start.len() - self.b.len()])
    }

    fn finish(&self) -> Option<()> {
        if self.b.is_empty() {
            Some(())
        } else {
            None
        }
    }
}

/// Appends `v` little-endian.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a `u32` length prefix and `p`.
pub fn put_bytes(out: &mut Vec<u8>, p: &[u8]) {
    put_u32(out, p.len() as u32);
    out.extend_from_slice(p);
}

// ---------------------------------------------------------------------------------------------
// Init (§6.1)

/// The argument of `wasmstream_init` (ABI.md §6.1). Byte fields are views into the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Init<'a> {
    /// The host's ABI version, `major << 16 | minor`.
    pub version: u32,
    /// The task's name (UTF-8).
    pub task: &'a [u8],
    /// The task's configuration: a JSON object (`{}` when the task has none).
    pub config: &'a [u8],
}

/// Decodes an Init layout.
pub fn decode_init(b: &[u8]) -> Result<Init<'_>, Error> {
    fn go(b: &[u8]) -> Option<Init<'_>> {
        let mut r = Reader { b };
        let version = r.u32()?;
        let task = r.bytes()?;
        let config = r.bytes()?;
        r.finish()?;
        Some(Init {
            version,
            task,
            config,
        })
    }
    go(b).ok_or_else(|| malformed("Init"))
}

/// Appends an Init layout.
pub fn encode_init(out: &mut Vec<u8>, init: &Init<'_>) {
    put_u32(out, init.version);
    put_bytes(out, init.task);
    put_bytes(out, init.config);
}

// ---------------------------------------------------------------------------------------------
// Headers (§6.3, and the headers of a Record)

/// A borrowed, already validated list of headers: of a record, or decoded from a Headers layout.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Headers<'a> {
    count: u32,
    /// The encoded pairs, without the count.
    pairs: &'a [u8],
}

impl<'a> Headers<'a> {
    /// No headers.
    pub const EMPTY: Headers<'static> = Headers {
        count: 0,
        pairs: &[],
    };

    /// The number of headers.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether there are no headers.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The (name, value) pairs in order.
    pub fn iter(&self) -> PairIter<'a> {
        PairIter {
            r: Reader { b: self.pairs },
            left: self.count,
        }
    }

    /// The value of the first header called `name`.
    pub fn get(&self, name: impl AsRef<[u8]>) -> Option<&'a [u8]> {
        let name = name.as_ref();
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

impl<'a> IntoIterator for Headers<'a> {
    type Item = (&'a [u8], &'a [u8]);
    type IntoIter = PairIter<'a>;
    fn into_iter(self) -> PairIter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for Headers<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(n, v)| (Bytes(n), Bytes(v))))
            .finish()
    }
}

/// Iterates over validated (name, value) pairs: headers or scan entries.
#[derive(Clone)]
pub struct PairIter<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Iterator for PairIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The pairs were validated when decoded, so these reads cannot fail.
        let name = self.r.bytes()?;
        let value = self.r.bytes()?;
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for PairIter<'_> {}

/// Decodes a Headers layout. An empty buffer means no headers (like `hdr_len = 0` in `emit`).
pub fn decode_headers(b: &[u8]) -> Result<Headers<'_>, Error> {
    if b.is_empty() {
        return Ok(Headers::EMPTY);
    }
    fn go(b: &[u8]) -> Option<Headers<'_>> {
        let mut r = Reader { b };
        let count = r.u32()?;
        let pairs = r.pairs(count)?;
        r.finish()?;
        Some(Headers { count, pairs })
    }
    go(b).ok_or_else(|| malformed("Headers"))
}

/// Builds the Headers layout (ABI.md §6.3) that [`Context::emit_with`](crate::Context::emit_with)
/// sends with an output record.
///
/// Reuse one builder for many records with [`clear`](HeadersBuilder::clear): it keeps its buffer.
#[derive(Clone, PartialEq, Eq)]
pub struct HeadersBuilder {
    buf: Vec<u8>,
}

impl HeadersBuilder {
    /// An empty list (it encodes as a zero count).
    pub fn new() -> HeadersBuilder {
        HeadersBuilder { buf: vec![0; 4] }
    }

    /// Appends a header. Names are UTF-8 by convention; neither is checked.
    pub fn add(&mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> &mut HeadersBuilder {
        put_bytes(&mut self.buf, name.as_ref());
        put_bytes(&mut self.buf, value.as_ref());
        let n = self.len() as u32 + 1;
        self.buf[..4].copy_from_slice(&n.to_le_bytes());
        self
    }

    /// The number of headers added.
    pub fn len(&self) -> usize {
        u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize
    }

    /// Whether no header was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every header, keeping the buffer.
    pub fn clear(&mut self) {
        self.buf.truncate(4);
        self.buf[..4].copy_from_slice(&[0; 4]);
    }

    /// The encoded Headers layout: count, then the pairs.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The headers added, in order.
    pub fn headers(&self) -> Headers<'_> {
        Headers {
            count: self.len() as u32,
            pairs: &self.buf[4..],
        }
    }
}

impl Default for HeadersBuilder {
    fn default() -> HeadersBuilder {
        HeadersBuilder::new()
    }
}

impl std::fmt::Debug for HeadersBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.headers().fmt(f)
    }
}

// ---------------------------------------------------------------------------------------------
// Batch and Record (§6.2)

/// One record of a batch: borrowed views into the batch payload, valid during the `process` call
/// that received it (copy what you keep).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    flags: u32,
    partition: u32,
    offset: i64,
    timestamp: i64,
    source: &'a [u8],
    key: &'a [u8],
    value: &'a [u8],
    headers: Headers<'a>,
}

impl<'a> Record<'a> {
    /// The record key: the scope of the record's state. A record without a key (a Kafka record
    /// whose key is null) has the key [`NULL_KEY`], not the empty key: passing `key()` on to an
    /// output keeps the key null. [`key_null`](Record::key_null) tells such a record apart.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// Whether the record's key is null (ABI 0.4, flag bit 1); its key is then [`NULL_KEY`].
    pub fn key_null(&self) -> bool {
        self.flags & FLAG_KEY_NULL != 0
    }

    /// The record key as UTF-8 text.
    pub fn key_str(&self) -> Result<&'a str, Error> {
        Ok(std::str::from_utf8(self.key)?)
    }

    /// The record value. A null value ([`value_null`](Record::value_null)) is empty.
    pub fn value(&self) -> &'a [u8] {
        self.value
    }

    /// Whether the record's value is null (ABI 0.5, flag bit 2): a Kafka tombstone, which on a
    /// compacted topic deletes its key, as distinct from an empty value; its value is then empty.
    /// A file input's record has one when its JSON line's value field is null (`"value":null`); a
    /// chained task's when the upstream emitted one ([`Context::emit_tombstone`](crate::Context::emit_tombstone)).
    pub fn value_null(&self) -> bool {
        self.flags & FLAG_VALUE_NULL != 0
    }

    /// The record value as UTF-8 text.
    pub fn value_str(&self) -> Result<&'a str, Error> {
        Ok(std::str::from_utf8(self.value)?)
    }

    /// The name of the input the record came from (file input name or Kafka topic).
    pub fn source(&self) -> &'a [u8] {
        self.source
    }

    /// The partition of the source (0 for a file).
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// The position of the record in its partition (the line number for a file).
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The event time in ms since the Unix epoch, or -1 when unknown.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The event time, or `None` when unknown.
    pub fn event_time(&self) -> Option<i64> {
        if self.timestamp < 0 {
            None
        } else {
            Some(self.timestamp)
        }
    }

    /// Whether the record is late: its timestamp was below its partition's watermark when the
    /// host read it (ABI 0.2; always false from a 0.1 host).
    pub fn late(&self) -> bool {
        self.flags & FLAG_LATE != 0
    }

    /// The same as [`late`](Record::late).
    pub fn is_late(&self) -> bool {
        self.late()
    }

    /// The raw flags word.
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// The record's headers.
    pub fn headers(&self) -> Headers<'a> {
        self.headers
    }

    /// The value of the record's first header called `name`.
    pub fn header(&self, name: impl AsRef<[u8]>) -> Option<&'a [u8]> {
        self.headers.get(name)
    }
}

impl std::fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record")
            .field("flags", &self.flags)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp", &self.timestamp)
            .field("source", &Bytes(self.source))
            .field("key", &Bytes(self.key))
            .field("value", &Bytes(self.value))
            .field("headers", &self.headers)
            .finish()
    }
}

fn read_record<'a>(r: &mut Reader<'a>) -> Option<Record<'a>> {
    let flags = r.u32()?;
    let partition = r.u32()?;
    let offset = r.u64()? as i64;
    let timestamp = r.u64()? as i64;
    let source = r.bytes()?;
    let key = r.bytes()?;
    let value = r.bytes()?;
    let count = r.u32()?;
    let pairs = r.pairs(count)?;
    Some(Record {
        flags,
        partition,
        offset,
        timestamp,
        source,
        key,
        value,
        headers: Headers { count, pairs },
    })
}

/// A validated Batch of records (ABI.md §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch<'a> {
    count: u32,
    /// The encoded records, without kind and count.
    records: &'a [u8],
}

impl<'a> Batch<'a> {
    /// The number of records.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The records in batch order.
    pub fn records(&self) -> Records<'a> {
        Records {
            r: Reader { b: self.records },
            left: self.count,
        }
    }
}

/// Iterates over the records of a validated [`Batch`].
#[derive(Clone)]
pub struct Records<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        read_record(&mut self.r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Records<'_> {}

/// Decodes and validates a whole Batch layout; iterating over its records then cannot fail.
pub fn decode_batch(b: &[u8]) -> Result<Batch<'_>, Error> {
    fn go(b: &[u8]) -> Option<Batch<'_>> {
        let mut r = Reader { b };
        let kind = r.u32()?;
        let count = r.u32()?;
        if kind != BATCH_RECORDS || count as u64 * MIN_RECORD as u64 > r.b.len() as u64 {
            return None;
        }
        let records = r.b;
        for _ in 0..count {
            read_record(&mut r)?;
        }
        r.finish()?;
        Some(Batch { count, records })
    }
    go(b).ok_or_else(|| malformed("Batch"))
}

/// Appends the kind and count that start a Batch of records; append `count` records after it.
pub fn encode_batch_header(out: &mut Vec<u8>, count: u32) {
    put_u32(out, BATCH_RECORDS);
    put_u32(out, count);
}

/// The fields of one record to encode with [`encode_record`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordFields<'a> {
    /// Flags word (bit 0: late).
    pub flags: u32,
    /// Partition of the source.
    pub partition: u32,
    /// Position in the partition.
    pub offset: i64,
    /// Event time in ms, or -1.
    pub timestamp: i64,
    /// Input name.
    pub source: &'a [u8],
    /// Record key.
    pub key: &'a [u8],
    /// Record value.
    pub value: &'a [u8],
    /// Headers, in order.
    pub headers: &'a [(&'a [u8], &'a [u8])],
}

/// Appends one Record layout.
pub fn encode_record(out: &mut Vec<u8>, r: &RecordFields<'_>) {
    put_u32(out, r.flags);
    put_u32(out, r.partition);
    put_i64(out, r.offset);
    put_i64(out, r.timestamp);
    put_bytes(out, r.source);
    put_bytes(out, r.key);
    put_bytes(out, r.value);
    put_u32(out, r.headers.len() as u32);
    for (n, v) in r.headers {
        put_bytes(out, n);
        put_bytes(out, v);
    }
}

// ---------------------------------------------------------------------------------------------
// ScanPage (§6.4)

/// A validated ScanPage written by `state_scan` (ABI.md §6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanPage<'a> {
    count: u32,
    more: bool,
    entries: &'a [u8],
}

impl<'a> ScanPage<'a> {
    /// The number of entries on the page.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the page holds no entry.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether more names follow the last one on this page.
    pub fn more(&self) -> bool {
        self.more
    }

    /// The (name, value) entries, in ascending name order.
    pub fn entries(&self) -> PairIter<'a> {
        PairIter {
            r: Reader { b: self.entries },
            left: self.count,
        }
    }
}

/// Decodes and validates a ScanPage layout.
pub fn decode_scan_page(b: &[u8]) -> Result<ScanPage<'_>, Error> {
    fn go(b: &[u8]) -> Option<ScanPage<'_>> {
        let mut r = Reader { b };
        let count = r.u32()?;
        let more = r.u32()?;
        if more > 1 {
            return None;
        }
        let entries = r.pairs(count)?;
        r.finish()?;
        Some(ScanPage {
            count,
            more: more == 1,
            entries,
        })
    }
    go(b).ok_or_else(|| malformed("ScanPage"))
}

/// Appends a ScanPage layout.
pub fn encode_scan_page(out: &mut Vec<u8>, entries: &[(&[u8], &[u8])], more: bool) {
    put_u32(out, entries.len() as u32);
    put_u32(out, more as u32);
    for (n, v) in entries {
        put_bytes(out, n);
        put_bytes(out, v);
    }
}

/// Shows bytes as a string when they are UTF-8, else as a byte list.
struct Bytes<'a>(&'a [u8]);

impl std::fmt::Debug for Bytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match std::str::from_utf8(self.0) {
            Ok(s) => s.fmt(f),
            Err(_) => self.0.fmt(f),
        }
    }
}

/// The bytes one (name, value) pair takes in a Headers or ScanPage layout.
pub fn pair_size(name: &[u8], value: &[u8]) -> usize {
    8 + name.len() + value.len()
}

// ---------------------------------------------------------------------------------------------
// ABI 0.2 layouts

impl<'a> Reader<'a> {
    fn headers(&mut self) -> Option<Headers<'a>> {
        let count = self.u32()?;
        let pairs = self.pairs(count)?;
        Some(Headers { count, pairs })
    }
}

impl<'a> Headers<'a> {
    /// Appends these headers as a Headers layout (count, then the pairs).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u32(out, self.count);
        out.extend_from_slice(self.pairs);
    }
}

// Firings (§6.5)

/// The smallest encoded Firing: four fixed words (flags, partition, time) and three empty strings.
const MIN_FIRING: usize = 4 + 4 + 8 + 4 + 4 + 4;

/// One timer firing of a Firings payload (ABI.md §6.5). Byte fields are views into the payload,
/// valid during the `on_timer` call that received it (copy what you keep).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Firing<'a> {
    /// Flags word: bit 0 ([`FIRING_EVENT_TIME`]) marks an event-time timer.
    pub flags: u32,
    /// The partition the timer belongs to.
    pub partition: u32,
    /// The time the timer was set for, ms since the epoch, in its domain.
    pub time: i64,
    /// The key the timer belongs to: the scope of the firing's state.
    pub key: &'a [u8],
    /// The timer's name.
    pub name: &'a [u8],
    /// The payload given when the timer was set (empty when none).
    pub payload: &'a [u8],
}

impl<'a> Firing<'a> {
    /// Whether the timer is an event-time timer (else processing time).
    pub fn event_time(&self) -> bool {
        self.flags & FIRING_EVENT_TIME != 0
    }

    /// The timer's time domain.
    pub fn domain(&self) -> crate::Domain {
        if self.event_time() {
            crate::Domain::EventTime
        } else {
            crate::Domain::ProcessingTime
        }
    }

    /// The key the timer belongs to.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The timer's name.
    pub fn name(&self) -> &'a [u8] {
        self.name
    }

    /// The timer's name as UTF-8 text.
    pub fn name_str(&self) -> Result<&'a str, Error> {
        Ok(std::str::from_utf8(self.name)?)
    }

    /// The time the timer was set for.
    pub fn time(&self) -> i64 {
        self.time
    }

    /// The payload given when the timer was set.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The partition the timer belongs to.
    pub fn partition(&self) -> u32 {
        self.partition
    }
}

impl std::fmt::Debug for Firing<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Firing")
            .field("flags", &self.flags)
            .field("partition", &self.partition)
            .field("time", &self.time)
            .field("key", &Bytes(self.key))
            .field("name", &Bytes(self.name))
            .field("payload", &Bytes(self.payload))
            .finish()
    }
}

fn read_firing<'a>(r: &mut Reader<'a>) -> Option<Firing<'a>> {
    Some(Firing {
        flags: r.u32()?,
        partition: r.u32()?,
        time: r.u64()? as i64,
        key: r.bytes()?,
        name: r.bytes()?,
        payload: r.bytes()?,
    })
}

/// A validated Firings payload (ABI.md §6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Firings<'a> {
    count: u32,
    firings: &'a [u8],
}

impl<'a> Firings<'a> {
    /// The number of firings.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the payload holds no firing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The firings in delivery order.
    pub fn iter(&self) -> FiringIter<'a> {
        FiringIter {
            r: Reader { b: self.firings },
            left: self.count,
        }
    }
}

/// Iterates over the firings of validated [`Firings`].
#[derive(Clone)]
pub struct FiringIter<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Iterator for FiringIter<'a> {
    type Item = Firing<'a>;

    fn next(&mut self) -> Option<Firing<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        read_firing(&mut self.r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for FiringIter<'_> {}

/// Decodes and validates a whole Firings layout; iterating over it then cannot fail.
pub fn decode_firings(b: &[u8]) -> Result<Firings<'_>, Error> {
    fn go(b: &[u8]) -> Option<Firings<'_>> {
        let mut r = Reader { b };
        let kind = r.u32()?;
        let count = r.u32()?;
        if kind != BATCH_FIRINGS || count as u64 * MIN_FIRING as u64 > r.b.len() as u64 {
            return None;
        }
        let firings = r.b;
        for _ in 0..count {
            read_firing(&mut r)?;
        }
        r.finish()?;
        Some(Firings { count, firings })
    }
    go(b).ok_or_else(|| malformed("Firings"))
}

/// Appends the kind and count that start a Firings layout; append `count` firings after it.
pub fn encode_firings_header(out: &mut Vec<u8>, count: u32) {
    put_u32(out, BATCH_FIRINGS);
    put_u32(out, count);
}

/// Appends one Firing.
pub fn encode_firing(out: &mut Vec<u8>, f: &Firing<'_>) {
    put_u32(out, f.flags);
    put_u32(out, f.partition);
    put_i64(out, f.time);
    put_bytes(out, f.key);
    put_bytes(out, f.name);
    put_bytes(out, f.payload);
}

// Tick (§6.6)

/// The argument of `wasmstream_on_tick` (ABI.md §6.6). `source` is a view into the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tick<'a> {
    /// The tick's partition.
    pub partition: u32,
    /// Processing time of the tick, ms since the epoch.
    pub now: i64,
    /// The partition's watermark, or -1.
    pub watermark: i64,
    /// The input name (file input name or Kafka topic).
    pub source: &'a [u8],
}

/// Decodes a Tick layout.
pub fn decode_tick(b: &[u8]) -> Result<Tick<'_>, Error> {
    fn go(b: &[u8]) -> Option<Tick<'_>> {
        let mut r = Reader { b };
        if r.u32()? != BATCH_TICK {
            return None;
        }
        let t = Tick {
            partition: r.u32()?,
            now: r.u64()? as i64,
            watermark: r.u64()? as i64,
            source: r.bytes()?,
        };
        r.finish()?;
        Some(t)
    }
    go(b).ok_or_else(|| malformed("Tick"))
}

/// Appends a Tick layout, kind included.
pub fn encode_tick(out: &mut Vec<u8>, t: &Tick<'_>) {
    put_u32(out, BATCH_TICK);
    put_u32(out, t.partition);
    put_i64(out, t.now);
    put_i64(out, t.watermark);
    put_bytes(out, t.source);
}

// Migrate (§6.7)

/// The argument of `wasmstream_migrate` (ABI.md §6.7): convert one key's state from state version
/// `from` to `to` (a downgrade when `from > to`). `key` is a view into the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration<'a> {
    /// The key's recorded state version.
    pub from: u32,
    /// The module's state version ([`Task::STATE_VERSION`](crate::Task::STATE_VERSION)).
    pub to: u32,
    /// The key's partition.
    pub partition: u32,
    /// The key to migrate: the scope of the call.
    pub key: &'a [u8],
}

/// Decodes a Migrate layout.
pub fn decode_migrate(b: &[u8]) -> Result<Migration<'_>, Error> {
    fn go(b: &[u8]) -> Option<Migration<'_>> {
        let mut r = Reader { b };
        if r.u32()? != BATCH_MIGRATE {
            return None;
        }
        let m = Migration {
            from: r.u32()?,
            to: r.u32()?,
            partition: r.u32()?,
            key: r.bytes()?,
        };
        r.finish()?;
        Some(m)
    }
    go(b).ok_or_else(|| malformed("Migrate"))
}

/// Appends a Migrate layout, kind included.
pub fn encode_migrate(out: &mut Vec<u8>, m: &Migration<'_>) {
    put_u32(out, BATCH_MIGRATE);
    put_u32(out, m.from);
    put_u32(out, m.to);
    put_u32(out, m.partition);
    put_bytes(out, m.key);
}

// KeyPage (§6.8)

/// A validated KeyPage written by `state_keys` (ABI.md §6.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPage<'a> {
    count: u32,
    more: bool,
    keys: &'a [u8],
}

impl<'a> KeyPage<'a> {
    /// The number of keys on the page.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the page holds no key.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether more keys follow the last one on this page.
    pub fn more(&self) -> bool {
        self.more
    }

    /// The keys, in ascending bytewise order.
    pub fn keys(&self) -> KeyIter<'a> {
        KeyIter {
            r: Reader { b: self.keys },
            left: self.count,
        }
    }
}

/// Iterates over the keys of a validated [`KeyPage`].
#[derive(Clone)]
pub struct KeyIter<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Iterator for KeyIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.r.bytes()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for KeyIter<'_> {}

/// Decodes and validates a KeyPage layout.
pub fn decode_key_page(b: &[u8]) -> Result<KeyPage<'_>, Error> {
    fn go(b: &[u8]) -> Option<KeyPage<'_>> {
        let mut r = Reader { b };
        let count = r.u32()?;
        let more = r.u32()?;
        if more > 1 || count as u64 * 4 > r.b.len() as u64 {
            return None;
        }
        let keys = r.b;
        for _ in 0..count {
            r.bytes()?;
        }
        r.finish()?;
        Some(KeyPage {
            count,
            more: more == 1,
            keys,
        })
    }
    go(b).ok_or_else(|| malformed("KeyPage"))
}

/// Appends a KeyPage layout.
pub fn encode_key_page(out: &mut Vec<u8>, keys: &[&[u8]], more: bool) {
    put_u32(out, keys.len() as u32);
    put_u32(out, more as u32);
    for k in keys {
        put_bytes(out, k);
    }
}

/// The bytes one key takes in a KeyPage.
pub fn key_size(key: &[u8]) -> usize {
    4 + key.len()
}

// HttpRequest (§6.9)

/// The `req` argument of `http_request` (ABI.md §6.9). Decoded byte fields are views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpRequest<'a> {
    /// The method, e.g. `GET` (upper case ASCII letters; the host checks it).
    pub method: &'a [u8],
    /// An absolute `http://` or `https://` URL (the host checks it).
    pub url: &'a [u8],
    /// The request headers, in order.
    pub headers: Headers<'a>,
    /// The request body.
    pub body: &'a [u8],
    /// The timeout in ms; 0 means the task's default.
    pub timeout_ms: u32,
}

/// Decodes an HttpRequest layout.
pub fn decode_http_request(b: &[u8]) -> Result<HttpRequest<'_>, Error> {
    fn go(b: &[u8]) -> Option<HttpRequest<'_>> {
        let mut r = Reader { b };
        let req = HttpRequest {
            method: r.bytes()?,
            url: r.bytes()?,
            headers: r.headers()?,
            body: r.bytes()?,
            timeout_ms: r.u32()?,
        };
        r.finish()?;
        Some(req)
    }
    go(b).ok_or_else(|| malformed("HttpRequest"))
}

/// Appends an HttpRequest layout.
pub fn encode_http_request(out: &mut Vec<u8>, req: &HttpRequest<'_>) {
    put_bytes(out, req.method);
    put_bytes(out, req.url);
    req.headers.encode(out);
    put_bytes(out, req.body);
    put_u32(out, req.timeout_ms);
}

// HttpResponse (§6.10)

/// An `http_request` result (ABI.md §6.10). Decoded byte fields are views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpResponse<'a> {
    /// The HTTP status code.
    pub status: u32,
    /// The response headers, in order.
    pub headers: Headers<'a>,
    /// The response body.
    pub body: &'a [u8],
}

/// Decodes an HttpResponse layout.
pub fn decode_http_response(b: &[u8]) -> Result<HttpResponse<'_>, Error> {
    fn go(b: &[u8]) -> Option<HttpResponse<'_>> {
        let mut r = Reader { b };
        let resp = HttpResponse {
            status: r.u32()?,
            headers: r.headers()?,
            body: r.bytes()?,
        };
        r.finish()?;
        Some(resp)
    }
    go(b).ok_or_else(|| malformed("HttpResponse"))
}

/// Appends an HttpResponse layout.
pub fn encode_http_response(out: &mut Vec<u8>, resp: &HttpResponse<'_>) {
    put_u32(out, resp.status);
    resp.headers.encode(out);
    put_bytes(out, resp.body);
}
