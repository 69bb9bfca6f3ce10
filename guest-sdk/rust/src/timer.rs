//! Timers and watermarks (ABI 0.2, ABI.md §4.10–4.12).

use crate::error::{check, Error};
use crate::sys;

/// The time domain of a timer (ABI.md §4.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Domain {
    /// Fires when the host's clock ([`now_ms`](crate::now_ms)) reaches the timer's time.
    ProcessingTime = 0,
    /// Fires when the partition's watermark ([`watermark`]) reaches the timer's time.
    EventTime = 1,
}

/// Sets the timer `name` of `key` to fire at `at` (ms since the epoch) in `domain`, with `payload`
/// handed back in the [`Firing`](crate::Firing) (empty for none). A timer is identified by its
/// partition, key and name: setting one that exists replaces its domain, time and payload. A time
/// already past fires soon after the call succeeds.
///
/// Like state writes, timer changes take effect only if the current call succeeds, atomically
/// with its state writes. `key` must be in the call's scope: the key of a record of the batch, of
/// a firing, of a migration, or any key of the partition during a tick; any other key fails with
/// `ERR_KEY_NOT_IN_BATCH`. Other errors: `ERR_NOT_ALLOWED` during init or in a stateless task,
/// `ERR_TOO_LARGE` for a name or payload over the task's limit, `ERR_LIMIT` for too many writes
/// and timer operations in one call or for a new timer while the task has
/// `time.max_pending_timers` pending (replacing a pending timer is always allowed).
pub fn set_timer(
    key: impl AsRef<[u8]>,
    name: impl AsRef<[u8]>,
    domain: Domain,
    at: i64,
    payload: impl AsRef<[u8]>,
) -> Result<(), Error> {
    check(sys::host_timer_set(
        key.as_ref(),
        name.as_ref(),
        domain as i32,
        at,
        payload.as_ref(),
    ))
    .map(|_| ())
}

/// Deletes the timer `name` of `key`, in whichever domain it is; deleting a missing timer is not
/// an error. It takes effect, and fails, like [`set_timer`].
pub fn delete_timer(key: impl AsRef<[u8]>, name: impl AsRef<[u8]>) -> Result<(), Error> {
    check(sys::host_timer_delete(key.as_ref(), name.as_ref())).map(|_| ())
}

/// The event-time watermark of the current call's partition in ms since the epoch: the highest
/// record timestamp the host has read from the partition minus the task's allowed lateness, never
/// decreasing. -1 before any timestamped record and during init.
pub fn watermark() -> i64 {
    sys::host_watermark_ms()
}
