//! # wasmstream — the Rust guest SDK
//!
//! Write a stateful stream task as a WebAssembly module for the wasmstream host. Implement
//! [`Task`] and export it once with [`export_task!`]; the SDK implements the guest side of the
//! wasmstream ABI 0.1 (`ABI.md` in the repository): the exported functions, the input buffer, the
//! byte layouts and the host imports of module `wasmstream_v0`.
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

#![deny(missing_docs)]

pub mod abi;
mod context;
mod error;
#[doc(hidden)]
pub mod rt;
mod sys;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod text;

pub use abi::{Headers, HeadersBuilder, Record};
pub use context::{config, format_u64, log, now_ms, parse_u64, Context, Level, Scan};
pub use error::{Errno, Error};

/// A stream task: built once per instance from its configuration, then called for each record.
pub trait Task: Sized {
    /// Builds the task from its configuration bytes: the task's JSON config object (`{}` when it
    /// has none). An error fails the instance's start; its text is reported by the host.
    /// State and outputs are not available here (`ERR_NOT_ALLOWED`); logging is.
    fn init(config: &[u8]) -> Result<Self, Error>;

    /// Handles one record. `ctx` reaches the record key's state, the outputs and the log. An
    /// error fails the whole batch: the SDK reports its text with the host's `fail`.
    fn process(&mut self, rec: &Record<'_>, ctx: &mut Context<'_>) -> Result<(), Error>;
}

/// Exports a [`Task`] type as the module's task: generates the ABI's exports
/// `wasmstream_abi_version`, `wasmstream_alloc`, `wasmstream_init` and `wasmstream_process`.
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
        };

        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn assert_task<T: $crate::Task>() {}
            let _ = assert_task::<$task>;
        };
    };
}
