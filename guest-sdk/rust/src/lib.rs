//! # wasmstream — the Rust guest SDK
//!
//! Write a stateful stream task as a WebAssembly module for the wasmstream host. Implement
//! [`Task`] and export it once with [`export_task!`]; the SDK implements the guest side of the
//! wasmstream ABI 0.5 (`ABI.md` in the repository): the exported functions, the input buffer, the
//! byte layouts and the host imports of module `wasmstream_v0`. A module built with it declares
//! 0.5, so it needs a 0.5 host.
//!
//! ```
//! use wasmstream::{Context, Error, Record, Task};
//!
//! /// Counts the records of each key and emits the running count.
//! struct Count;
//!
//! impl Task for Count {
//!     fn init(_config: &[u8]) -> Result<Self, Error> {
//!         Ok(Count)
//!     }
//!
//!     fn process(&mut self, rec: &Record, ctx: &mut Context) -> Result<(), Error> {
//!         let n = ctx.get_u64("n")?.unwrap_or(0) + 1;
//!         ctx.put_u64("n", n)?;
//!         ctx.emit("counts", rec.key(), n.to_string())
//!     }
//! }
//!
//! wasmstream::export_task!(Count);
//! ```
//!
//! Build with `cargo build --release --target wasm32-unknown-unknown` and a `cdylib` crate type.
//! On other targets the host functions go to an in-memory fake host, so the same task can be
//! tested natively with [`testing::Harness`].
//!
//! ## Semantics in brief
//!
//! - `process` runs once per record, in batch order; a batch may hold records of many keys, and
//!   the records of one key keep their order.
//! - State is `state[key][name] = value`, scoped to the current record's key ([`Context`]).
//! - Returning an error from `init` or `process` makes the SDK pass its text to the host's `fail`
//!   and fail the call: a failed `process` has no effects at all (no state writes, no outputs),
//!   and the host retries it. Fields of the task itself are *not* rolled back: keep what must
//!   survive a retry in state.
//! - Byte views (`Record`'s key, value, …) are valid during the call; copy what you keep.
//!
//! ## Helpers
//!
//! - [`json`]: read and write flat JSON objects of scalars (`{"card":"c-17","amount":123.45}`).
//! - [`state`]: typed values, counters, maps and lists in a key's state, with the byte encoding
//!   the Go SDK shares.
//! - [`window`]: tumbling, sliding and session windows in event time over typed state and
//!   timers, with late records sent to a late output; the Go SDK's `Windows` shares the layout.
//! - Any error type converts into [`Error`], so `?` works on other libraries' results.
//! - [`Context::emit`] stamps outputs with the time of what is handled (the record's timestamp,
//!   an event-time firing's time, else processing time), like the Go SDK's `Emit`.
//!
//! ## ABI 0.2: timers, ticks, migrations, HTTP
//!
//! [`Task`] has optional handlers with defaults, so a 0.1-style task compiles unchanged:
//!
//! - Timers: [`Context::set_timer`] / [`set_timer`] set a timer of a key in processing or event
//!   time ([`Domain`]); [`Task::on_timer`] receives each [`Firing`] with a context scoped to its
//!   key. A firing's timer is deleted when the call succeeds unless the handler sets it again; a
//!   failed call leaves it to fire again. Without an `on_timer` a firing fails the call.
//!   [`watermark`] is the partition's event-time watermark, and [`Record::late`] flags a record
//!   read below it.
//! - Ticks: [`Task::on_tick`] runs every configured interval per partition with a
//!   [`TickContext`] that lists the partition's keys. Default: does nothing.
//! - Migrations: [`Task::STATE_VERSION`] declares the state format the module writes;
//!   [`Task::migrate`] converts one key's state from another version. Default: version 0, and
//!   state is left as it is.
//! - HTTP: [`http_request`] sends an [`HttpRequest`] (needs a grant in the task's configuration).
//!
//! ## ABI 0.3 to 0.5: metrics, permanent errors, null keys and values
//!
//! - Metrics (0.3): [`MetricCounter`], [`MetricGauge`] and [`MetricHistogram`], declared in
//!   `init`, exported by the host as Prometheus metrics.
//! - Permanent errors (0.4): [`Error::permanent`] or [`Error::into_permanent`] fails the record
//!   without retries: the host dead-letters it at once.
//! - Null keys (0.4): a Kafka record without a key has the key [`NULL_KEY`] and
//!   [`Record::key_null`]; emitting it as a key gives the output a null key.
//! - Null values (0.5): a Kafka tombstone has an empty value and [`Record::value_null`];
//!   [`Context::emit_tombstone`] and [`Context::emit_tombstone_with`] emit one.

#![deny(missing_docs)]

pub mod abi;
mod context;
mod error;
mod http;
pub mod json;
mod metric;
#[doc(hidden)]
pub mod rt;
pub mod state;
mod sys;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod text;
mod timer;
pub mod window;

pub use abi::{is_null_key, Firing, Headers, HeadersBuilder, Migration, Record, Tick, NULL_KEY};
pub use context::{config, format_u64, log, now_ms, parse_u64, Context, Level, Scan, TickContext};
pub use error::{Errno, Error};
pub use http::{http_request, HttpRequest, HttpResponse};
pub use metric::{MetricCounter, MetricGauge, MetricHistogram};
pub use timer::{delete_timer, set_timer, watermark, Domain};

/// A stream task: built once per instance from its configuration, then called for each record.
pub trait Task: Sized {
    /// Builds the task from its configuration bytes: the task's JSON config object (`{}` when it
    /// has none). An error fails the instance's start; its text is reported by the host.
    /// State and outputs are not available here (`ERR_NOT_ALLOWED`); logging is.
    fn init(config: &[u8]) -> Result<Self, Error>;

    /// Handles one record. `ctx` reaches the record key's state, the outputs and the log. An
    /// error fails the whole batch: the SDK reports its text with the host's `fail`.
    fn process(&mut self, rec: &Record<'_>, ctx: &mut Context<'_>) -> Result<(), Error>;

    /// The version of the state format this module writes (ABI 0.2, `wasmstream_state_version`;
    /// must be below 2^31). Before the module touches a key whose state was written under another
    /// version, the host calls [`migrate`](Task::migrate). Default 0.
    const STATE_VERSION: u32 = 0;

    /// Handles one timer firing (ABI 0.2). `ctx` is scoped to the firing's key; its
    /// [`emit`](Context::emit) stamps outputs with the firing's time for an event-time timer and
    /// with processing time for a processing-time one. Per key, firings come in order of time,
    /// then name. The timer is deleted when the call succeeds, unless the handler sets it again
    /// (then the new setting stands). An error fails the call like a failed batch: none of its
    /// state writes, timer changes or outputs take effect and the timers fire again.
    ///
    /// Default: fails the call, naming the timer: a task that sets timers must implement it.
    fn on_timer(&mut self, firing: &Firing<'_>, ctx: &mut Context<'_>) -> Result<(), Error> {
        let _ = (firing, ctx);
        Err(Error::with_code(
            Errno::NOT_ALLOWED,
            "a timer fired but the task has no timer handler: implement Task::on_timer",
        ))
    }

    /// The periodic partition callback (ABI 0.2): runs every configured interval for each
    /// partition, while no other call of the partition runs; missed ticks coalesce into one.
    /// `ctx` reaches every key of the partition. An error fails the tick (no effects).
    ///
    /// Default: does nothing.
    fn on_tick(&mut self, tick: &Tick<'_>, ctx: &mut TickContext<'_>) -> Result<(), Error> {
        let _ = (tick, ctx);
        Ok(())
    }

    /// Converts one key's state from state version `m.from` to `m.to` (ABI 0.2; a downgrade when
    /// `from > to`). `ctx` is scoped to the key. The migration and the calls that follow it are
    /// one unit of work: an error fails all of it, and the key's work is retried (and eventually
    /// dead-lettered), so a task that cannot downgrade returns an error naming the versions.
    ///
    /// Default: does nothing (the task runs on the state as it is).
    fn migrate(&mut self, m: &Migration<'_>, ctx: &mut Context<'_>) -> Result<(), Error> {
        let _ = (m, ctx);
        Ok(())
    }
}

/// Exports a [`Task`] type as the module's task: generates the ABI's exports
/// `wasmstream_abi_version`, `wasmstream_alloc`, `wasmstream_init`, `wasmstream_process` and the
/// optional 0.2 exports `wasmstream_on_timer`, `wasmstream_on_tick`, `wasmstream_state_version`
/// and `wasmstream_migrate` (always exported; the [`Task`] defaults make them safe).
///
/// Invoke it exactly once, at the top level of a `cdylib` crate: `wasmstream::export_task!(MyTask);`.
/// On targets other than wasm32 it only checks that the type implements [`Task`].
#[macro_export]
macro_rules! export_task {
    ($task:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            static SLOT: $crate::rt::Slot<$task> = $crate::rt::slot::<$task>();

            #[no_mangle]
            pub extern "C" fn wasmstream_abi_version() -> i32 {
                $crate::rt::abi_version()
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_alloc(size: i32) -> i32 {
                $crate::rt::alloc(size)
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_init(ptr: i32, len: i32) -> i32 {
                $crate::rt::init::<$task>(&SLOT, ptr, len)
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_process(ptr: i32, len: i32) -> i32 {
                $crate::rt::process::<$task>(&SLOT, ptr, len)
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_on_timer(ptr: i32, len: i32) -> i32 {
                $crate::rt::on_timer::<$task>(&SLOT, ptr, len)
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_on_tick(ptr: i32, len: i32) -> i32 {
                $crate::rt::on_tick::<$task>(&SLOT, ptr, len)
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_state_version() -> i32 {
                $crate::rt::state_version::<$task>()
            }

            #[no_mangle]
            pub extern "C" fn wasmstream_migrate(ptr: i32, len: i32) -> i32 {
                $crate::rt::migrate::<$task>(&SLOT, ptr, len)
            }
        };

        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn assert_task<T: $crate::Task>() {}
            let _ = assert_task::<$task>;
        };
    };
}
