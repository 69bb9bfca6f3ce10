//! Typed state: values, counters, maps and lists stored in a key's state with a fixed, documented
//! byte encoding that the Go SDK shares, so a task can be ported between the two and a test can
//! read what a task wrote.
//!
//! Encodings (all integers little-endian, like the ABI):
//!
//! | [`Codec`] type | value bytes |
//! |---|---|
//! | `i64` | 8 bytes, two's complement |
//! | `u64` | 8 bytes |
//! | `f64` | 8 bytes, the IEEE 754 bits |
//! | `bool` | 1 byte, 0 or 1 |
//! | `String` | the UTF-8 bytes as they are |
//! | `Vec<u8>` | the bytes as they are |
//!
//! | helper | state names it uses |
//! |---|---|
//! | [`Value<T>`] | `name` = the codec's bytes |
//! | [`Counter`] | `name` = 8-byte `i64`; missing means 0 |
//! | [`Map<V>`] | `name + "/" + entry key` = the codec's bytes, one state entry per map entry |
//! | [`List<V>`] | `name` = 8-byte `u64` number of appends, and `name + "/" +` 16 lowercase hex digits of the index = the codec's bytes, so a scan lists the items in append order |
//!
//! Give each helper its own name, and avoid a name that is another's name + `/` + something: a
//! `Map` or `List` named `m` owns every state name starting with `m/`.
//!
//! ```
//! use wasmstream::state::{Counter, List, Map, Value};
//!
//! static COUNT: Counter = Counter::new("count");
//! static LAST: Value<f64> = Value::new("last");
//! static SEEN: Map<bool> = Map::new("seen");
//! static RECENT: List<String> = List::new("recent");
//!
//! fn on_record(ctx: &mut wasmstream::Context, card: &str, amount: f64) -> Result<i64, wasmstream::Error> {
//!     LAST.set(ctx, &amount)?;
//!     SEEN.put(ctx, card, &true)?;
//!     RECENT.append(ctx, &card.to_string())?;
//!     COUNT.add(ctx, 1)
//! }
//! ```
//!
//! The helpers take any [`Store`]: a [`Context`](crate::Context), or in tests the read-only view
//! `testing::Harness::read` gives.

use std::borrow::Cow;
use std::marker::PhantomData;

use crate::context::Context;
use crate::error::Error;
use crate::text;

/// The state the typed helpers read and write: [`Context`] implements it, and so does the
/// read-only view of `testing::Harness::read`.
pub trait Store {
    /// The value of `name`, if any (a view valid until the next call).
    fn read(&mut self, name: &[u8]) -> Result<Option<&[u8]>, Error>;
    /// Sets `name` to `value`.
    fn write(&mut self, name: &[u8], value: &[u8]) -> Result<(), Error>;
    /// Removes `name`.
    fn remove(&mut self, name: &[u8]) -> Result<(), Error>;
    /// Every (name, value) whose name starts with `prefix`, in ascending bytewise name order.
    #[allow(clippy::type_complexity)]
    fn list(&mut self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error>;
}

impl Store for Context<'_> {
    fn read(&mut self, name: &[u8]) -> Result<Option<&[u8]>, Error> {
        self.get(name)
    }
    fn write(&mut self, name: &[u8], value: &[u8]) -> Result<(), Error> {
        self.put(name, value)
    }
    fn remove(&mut self, name: &[u8]) -> Result<(), Error> {
        self.delete(name)
    }
    fn list(&mut self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
        self.scan_all(prefix)
    }
}

/// Converts a type to and from the bytes of a state value (see the table above).
pub trait Codec: Sized {
    /// Appends the encoding of `self` to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Decodes `b`; a wrong length or content is an error.
    fn decode(b: &[u8]) -> Result<Self, Error>;
}

fn u64_of(b: &[u8], what: &str) -> Result<u64, Error> {
    if b.len() != 8 {
        let mut msg = String::from("state value is not an ");
        msg.push_str(what);
        msg.push_str(" (8 bytes little-endian): ");
        text::push_u64(&mut msg, b.len() as u64);
        msg.push_str(" bytes");
        return Err(Error::new(msg));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    Ok(u64::from_le_bytes(a))
}

impl Codec for i64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn decode(b: &[u8]) -> Result<i64, Error> {
        u64_of(b, "i64").map(|u| u as i64)
    }
}

impl Codec for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn decode(b: &[u8]) -> Result<u64, Error> {
        u64_of(b, "u64")
    }
}

impl Codec for f64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bits().to_le_bytes());
    }
    fn decode(b: &[u8]) -> Result<f64, Error> {
        u64_of(b, "f64").map(f64::from_bits)
    }
}

impl Codec for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }
    fn decode(b: &[u8]) -> Result<bool, Error> {
        match b {
            [0] => Ok(false),
            [1] => Ok(true),
            _ => {
                let mut msg = String::from("state value is not a bool (1 byte, 0 or 1): ");
                text::push_u64(&mut msg, b.len() as u64);
                msg.push_str(" bytes");
                Err(Error::new(msg))
            }
        }
    }
}

impl Codec for String {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.as_bytes());
    }
    fn decode(b: &[u8]) -> Result<String, Error> {
        String::from_utf8(b.to_vec()).map_err(|_| Error::new("state value is not UTF-8 text"))
    }
}

impl Codec for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }
    fn decode(b: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(b.to_vec())
    }
}

/// Prefixes a decoding error with the state name it came from.
fn named(name: &[u8], e: Error) -> Error {
    let mut msg = String::from("state ");
    text::push_quoted(&mut msg, name);
    msg.push_str(": ");
    msg.push_str(&e.text());
    Error::with_code(e.code(), msg)
}

fn get_typed<T: Codec, S: Store + ?Sized>(st: &mut S, name: &[u8]) -> Result<Option<T>, Error> {
    match st.read(name)? {
        None => Ok(None),
        Some(b) => T::decode(b).map(Some).map_err(|e| named(name, e)),
    }
}

fn set_typed<T: Codec, S: Store + ?Sized>(st: &mut S, name: &[u8], v: &T) -> Result<(), Error> {
    let mut b = Vec::new();
    v.encode(&mut b);
    st.write(name, &b)
}

fn sub_name(name: &str, k: &[u8]) -> Vec<u8> {
    let mut n = Vec::with_capacity(name.len() + 1 + k.len());
    n.extend_from_slice(name.as_bytes());
    n.push(b'/');
    n.extend_from_slice(k);
    n
}

/// One typed state entry: `static LAST: Value<f64> = Value::new("last");`.
pub struct Value<T> {
    name: Cow<'static, str>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Value<T> {
    /// The entry named `name`.
    pub const fn new(name: &'static str) -> Value<T> {
        Value {
            name: Cow::Borrowed(name),
            _t: PhantomData,
        }
    }

    /// The entry named `name`, for names made at run time.
    pub fn named(name: impl Into<String>) -> Value<T> {
        Value {
            name: Cow::Owned(name.into()),
            _t: PhantomData,
        }
    }
}

impl<T: Codec> Value<T> {
    /// The value, if set; a stored value that does not decode is an error naming the entry.
    pub fn get<S: Store + ?Sized>(&self, st: &mut S) -> Result<Option<T>, Error> {
        get_typed(st, self.name.as_bytes())
    }

    /// Stores `v`.
    pub fn set<S: Store + ?Sized>(&self, st: &mut S, v: &T) -> Result<(), Error> {
        set_typed(st, self.name.as_bytes(), v)
    }

    /// Removes the value.
    pub fn delete<S: Store + ?Sized>(&self, st: &mut S) -> Result<(), Error> {
        st.remove(self.name.as_bytes())
    }
}

/// An `i64` counter under one state name (8 bytes little-endian); a missing counter is 0.
pub struct Counter {
    name: Cow<'static, str>,
}

impl Counter {
    /// The counter named `name`.
    pub const fn new(name: &'static str) -> Counter {
        Counter {
            name: Cow::Borrowed(name),
        }
    }

    /// The counter named `name`, for names made at run time.
    pub fn named(name: impl Into<String>) -> Counter {
        Counter {
            name: Cow::Owned(name.into()),
        }
    }

    /// The counter (0 when never added to).
    pub fn get<S: Store + ?Sized>(&self, st: &mut S) -> Result<i64, Error> {
        Ok(get_typed::<i64, S>(st, self.name.as_bytes())?.unwrap_or(0))
    }

    /// Adds `delta` (may be negative; wraps around on overflow, like Go) and returns the new
    /// value.
    pub fn add<S: Store + ?Sized>(&self, st: &mut S, delta: i64) -> Result<i64, Error> {
        let n = self.get(st)?.wrapping_add(delta);
        set_typed(st, self.name.as_bytes(), &n)?;
        Ok(n)
    }

    /// Deletes the counter, so it reads 0 again.
    pub fn reset<S: Store + ?Sized>(&self, st: &mut S) -> Result<(), Error> {
        st.remove(self.name.as_bytes())
    }
}

/// A map from string keys to typed values, one state entry per map entry named
/// `name + "/" + key`: `static SEEN: Map<bool> = Map::new("seen");`.
pub struct Map<V> {
    name: Cow<'static, str>,
    _v: PhantomData<fn() -> V>,
}

impl<V> Map<V> {
    /// The map named `name`.
    pub const fn new(name: &'static str) -> Map<V> {
        Map {
            name: Cow::Borrowed(name),
            _v: PhantomData,
        }
    }

    /// The map named `name`, for names made at run time.
    pub fn named(name: impl Into<String>) -> Map<V> {
        Map {
            name: Cow::Owned(name.into()),
            _v: PhantomData,
        }
    }
}

impl<V: Codec> Map<V> {
    /// The value of `k`, if any.
    pub fn get<S: Store + ?Sized>(&self, st: &mut S, k: &str) -> Result<Option<V>, Error> {
        get_typed(st, &sub_name(&self.name, k.as_bytes()))
    }

    /// Sets `k` to `v`.
    pub fn put<S: Store + ?Sized>(&self, st: &mut S, k: &str, v: &V) -> Result<(), Error> {
        set_typed(st, &sub_name(&self.name, k.as_bytes()), v)
    }

    /// Removes `k`; removing a missing key is not an error.
    pub fn delete<S: Store + ?Sized>(&self, st: &mut S, k: &str) -> Result<(), Error> {
        st.remove(&sub_name(&self.name, k.as_bytes()))
    }

    /// Every (key, value), in ascending bytewise key order.
    pub fn entries<S: Store + ?Sized>(&self, st: &mut S) -> Result<Vec<(String, V)>, Error> {
        let prefix = sub_name(&self.name, b"");
        let mut out = Vec::new();
        for (n, v) in st.list(&prefix)? {
            let v = V::decode(&v).map_err(|e| named(&n, e))?;
            out.push((String::from_utf8_lossy(&n[prefix.len()..]).into_owned(), v));
        }
        Ok(out)
    }

    /// Removes every entry.
    pub fn clear<S: Store + ?Sized>(&self, st: &mut S) -> Result<(), Error> {
        for (n, _) in st.list(&sub_name(&self.name, b""))? {
            st.remove(&n)?;
        }
        Ok(())
    }
}

/// An append-only list (or bag) of typed items: the state name `name` holds the number of
/// appends (8-byte `u64`) and each item is the entry `name + "/" +` its index as 16 lowercase hex
/// digits, so items list in append order: `static RECENT: List<String> = List::new("recent");`.
pub struct List<V> {
    name: Cow<'static, str>,
    _v: PhantomData<fn() -> V>,
}

impl<V> List<V> {
    /// The list named `name`.
    pub const fn new(name: &'static str) -> List<V> {
        List {
            name: Cow::Borrowed(name),
            _v: PhantomData,
        }
    }

    /// The list named `name`, for names made at run time.
    pub fn named(name: impl Into<String>) -> List<V> {
        List {
            name: Cow::Owned(name.into()),
            _v: PhantomData,
        }
    }

    fn item_name(&self, i: u64) -> Vec<u8> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut d = [0u8; 16];
        for (j, c) in d.iter_mut().enumerate() {
            *c = HEX[((i >> (4 * (15 - j))) & 15) as usize];
        }
        sub_name(&self.name, &d)
    }
}

impl<V: Codec> List<V> {
    /// The number of items.
    pub fn len<S: Store + ?Sized>(&self, st: &mut S) -> Result<u64, Error> {
        Ok(get_typed::<u64, S>(st, self.name.as_bytes())?.unwrap_or(0))
    }

    /// Adds `v` at the end.
    pub fn append<S: Store + ?Sized>(&self, st: &mut S, v: &V) -> Result<(), Error> {
        let n = self.len(st)?;
        set_typed(st, &self.item_name(n), v)?;
        set_typed(st, self.name.as_bytes(), &(n + 1))
    }

    /// Item `i` (0-based), if it exists.
    pub fn get<S: Store + ?Sized>(&self, st: &mut S, i: u64) -> Result<Option<V>, Error> {
        get_typed(st, &self.item_name(i))
    }

    /// Every item, in append order.
    pub fn items<S: Store + ?Sized>(&self, st: &mut S) -> Result<Vec<V>, Error> {
        let mut out = Vec::new();
        for (n, v) in st.list(&sub_name(&self.name, b""))? {
            out.push(V::decode(&v).map_err(|e| named(&n, e))?);
        }
        Ok(out)
    }

    /// Removes every item and the length.
    pub fn clear<S: Store + ?Sized>(&self, st: &mut S) -> Result<(), Error> {
        for (n, _) in st.list(&sub_name(&self.name, b""))? {
            st.remove(&n)?;
        }
        st.remove(self.name.as_bytes())
    }
}
