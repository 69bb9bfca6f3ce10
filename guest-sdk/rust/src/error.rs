//! Error codes of the ABI (ABI.md §5) and the error type every SDK call returns.

use std::fmt;

/// A status code of a wasmstream host function (ABI.md §5).
///
/// Codes are append-only in the ABI: a newer host may return a code this SDK has no name for; it
/// is kept as is and shown as `ERR_UNKNOWN(<code>)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(i32);

impl Errno {
    /// `OK` (0): success. Never carried by an [`Error`] the SDK returns.
    pub const OK: Errno = Errno(0);
    /// `ERR_NOT_FOUND` (-1): no such state entry.
    pub const NOT_FOUND: Errno = Errno(-1);
    /// `ERR_OUT_OF_BOUNDS` (-2): a pointer/length pair is outside guest memory.
    pub const OUT_OF_BOUNDS: Errno = Errno(-2);
    /// `ERR_KEY_NOT_IN_BATCH` (-3): state access to a key that is not in the current batch.
    pub const KEY_NOT_IN_BATCH: Errno = Errno(-3);
    /// `ERR_TOO_LARGE` (-4): a value, name, key or output is over the task's size limit.
    pub const TOO_LARGE: Errno = Errno(-4);
    /// `ERR_INVALID` (-5): a malformed argument (layout, level, unknown output). Also the code of
    /// errors made from a message ([`Error::new`]).
    pub const INVALID: Errno = Errno(-5);
    /// `ERR_NOT_ALLOWED` (-6): not allowed in this phase (e.g. state during init).
    pub const NOT_ALLOWED: Errno = Errno(-6);
    /// `ERR_LIMIT` (-7): too many writes or outputs in one call, or a new timer over the task's
    /// pending-timer limit.
    pub const LIMIT: Errno = Errno(-7);
    /// `ERR_BUFFER_TOO_SMALL` (-8): the buffer cannot hold even one scan entry.
    pub const BUFFER_TOO_SMALL: Errno = Errno(-8);
    /// `ERR_INTERNAL` (-9): the host failed (e.g. storage); the call should fail.
    pub const INTERNAL: Errno = Errno(-9);
    /// `ERR_UNAVAILABLE` (-10, ABI 0.2): an outbound request failed: connection, timeout, or the
    /// host is stopping.
    pub const UNAVAILABLE: Errno = Errno(-10);

    /// The code for a raw status value.
    pub const fn from_raw(code: i32) -> Errno {
        Errno(code)
    }

    /// The raw status value, e.g. -1 for `ERR_NOT_FOUND`.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The ABI name of the code, e.g. `"ERR_NOT_FOUND"`, or `None` for a code this SDK does not
    /// know.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "OK",
            -1 => "ERR_NOT_FOUND",
            -2 => "ERR_OUT_OF_BOUNDS",
            -3 => "ERR_KEY_NOT_IN_BATCH",
            -4 => "ERR_TOO_LARGE",
            -5 => "ERR_INVALID",
            -6 => "ERR_NOT_ALLOWED",
            -7 => "ERR_LIMIT",
            -8 => "ERR_BUFFER_TOO_SMALL",
            -9 => "ERR_INTERNAL",
            -10 => "ERR_UNAVAILABLE",
            _ => return None,
        })
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "ERR_UNKNOWN({})", self.0),
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The error of every fallible SDK call and of a task's `init` / `process`.
///
/// It carries an ABI error code ([`Errno`]) and, optionally, a message. Its `Display` is the
/// message when there is one, else the code's ABI name (`"ERR_NOT_FOUND"`, …). When a task
/// returns an error, the SDK passes that text to the host's `fail` and fails the call.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: Errno,
    msg: Option<Box<str>>,
    permanent: bool,
}

impl Error {
    /// An error with a message and the code `ERR_INVALID`: what a task returns for bad input or
    /// bad configuration.
    pub fn new(msg: impl Into<String>) -> Error {
        Error::with_code(Errno::INVALID, msg)
    }

    /// An error with a given code and a message.
    pub fn with_code(code: Errno, msg: impl Into<String>) -> Error {
        Error {
            code,
            msg: Some(msg.into().into_boxed_str()),
            permanent: false,
        }
    }

    /// A permanent error with a message (ABI 0.4): returned from `process` (or `on_timer`,
    /// `on_tick`, `migrate`), it fails the call like any error, but the SDK tells the host with
    /// `fail_permanent` and the host does not retry it: the record goes to the dead letters at
    /// once with this message (or is skipped, or halts the task, as the task's
    /// `retry.on_exhausted` says). For a record that can never succeed (malformed, against a rule
    /// of the task), not for a failure that may pass.
    pub fn permanent(msg: impl Into<String>) -> Error {
        Error::new(msg).into_permanent()
    }

    /// This error, marked permanent (see [`Error::permanent`]): `Err(e.into_permanent())`, or
    /// `.map_err(|e| Error::from(e).into_permanent())?` on another library's result.
    pub fn into_permanent(mut self) -> Error {
        self.permanent = true;
        self
    }

    /// Whether the error is permanent ([`Error::permanent`], [`Error::into_permanent`]).
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// The error's ABI code.
    pub fn code(&self) -> Errno {
        self.code
    }

    /// The error's message, if it has one.
    pub fn message(&self) -> Option<&str> {
        self.msg.as_deref()
    }

    /// What `Display` shows, without going through `core::fmt`: the message, else the code's name.
    pub(crate) fn text(&self) -> std::borrow::Cow<'_, str> {
        match (&self.msg, self.code.name()) {
            (Some(m), _) => std::borrow::Cow::Borrowed(m),
            (None, Some(n)) => std::borrow::Cow::Borrowed(n),
            (None, None) => {
                let mut s = String::from("ERR_UNKNOWN(");
                crate::text::push_i64(&mut s, self.code.0 as i64);
                s.push(')');
                std::borrow::Cow::Owned(s)
            }
        }
    }
}

impl From<Errno> for Error {
    fn from(code: Errno) -> Error {
        Error {
            code,
            msg: None,
            permanent: false,
        }
    }
}

/// Any error converts into an [`Error`] with the code `ERR_INVALID` and the error's text as its
/// message, so `?` works on the results of other libraries (`str::parse`, `std::str::from_utf8`, a
/// task's own error types, …) as well as on `&str` and `String` messages.
///
/// Because of this blanket conversion, [`Error`] itself does not implement
/// `std::error::Error` (it would convert into itself); [`Error::into_std`] gives a boxed
/// `std::error::Error` where one is needed.
impl<E> From<E> for Error
where
    E: Into<Box<dyn std::error::Error>>,
{
    fn from(e: E) -> Error {
        let e: Box<dyn std::error::Error> = e.into();
        Error::new(e.to_string())
    }
}

impl Error {
    /// The error as a boxed `std::error::Error`, e.g. to return it from a function that uses
    /// `Box<dyn std::error::Error>`.
    pub fn into_std(self) -> Box<dyn std::error::Error + Send + Sync> {
        Box::new(StdError(self))
    }
}

/// An [`Error`] seen as a `std::error::Error`.
struct StdError(Error);

impl fmt::Debug for StdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for StdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for StdError {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.msg {
            Some(m) => f.write_str(m),
            None => fmt::Display::fmt(&self.code, f),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.msg {
            Some(m) => write!(f, "{}: {:?}", self.code, m)?,
            None => fmt::Display::fmt(&self.code, f)?,
        }
        if self.permanent {
            f.write_str(" (permanent)")?;
        }
        Ok(())
    }
}

/// Turns a host status into a result: `>= 0` is `Ok(status)`, `< 0` an [`Error`] with that code.
pub(crate) fn check(status: i32) -> Result<i32, Error> {
    if status >= 0 {
        Ok(status)
    } else {
        Err(Error::from(Errno(status)))
    }
}
