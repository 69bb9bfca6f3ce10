//! The runtime behind the exports that [`export_task!`](crate::export_task) generates. Not part of
//! the API: it is public only so the macro can reach it.

use crate::abi;
use crate::context::{Context, TickContext};
use crate::sys;
use crate::text;
use crate::Task;

/// Everything one instance keeps between calls: the task and the buffers reused for every record.
pub struct Runtime<T> {
    task: Option<T>,
    scratch: Vec<u8>,
    scan_buf: Vec<u8>,
    keys_buf: Vec<u8>,
}

impl<T> Runtime<T> {
    /// A runtime before `init`.
    pub const fn new() -> Runtime<T> {
        Runtime {
            task: None,
            scratch: Vec::new(),
            scan_buf: Vec::new(),
            keys_buf: Vec::new(),
        }
    }

    /// The task, once `init` succeeded.
    pub fn task(&self) -> Option<&T> {
        self.task.as_ref()
    }
}

impl<T: Task> Runtime<T> {
    /// Handles an Init payload: 0 on success; otherwise calls the host's `fail` and returns 1.
    pub fn init(&mut self, payload: &[u8]) -> i32 {
        let init = match abi::decode_init(payload) {
            Ok(init) => init,
            Err(e) => return fail_with("wasmstream: init: ", &e),
        };
        if init.version >> 16 != abi::VERSION_MAJOR {
            let mut msg = String::from("wasmstream: the host speaks ABI ");
            text::push_u64(&mut msg, (init.version >> 16) as u64);
            msg.push('.');
            text::push_u64(&mut msg, (init.version & 0xffff) as u64);
            msg.push_str(", this module ABI ");
            text::push_u64(&mut msg, abi::VERSION_MAJOR as u64);
            msg.push('.');
            text::push_u64(&mut msg, abi::VERSION_MINOR as u64);
            return fail(&msg);
        }
        match T::init(init.config) {
            Ok(task) => {
                self.task = Some(task);
                0
            }
            Err(e) => fail(&e.text()),
        }
    }

    /// Handles a Batch payload: runs the task on every record in order. 0 on success; on the
    /// first error calls the host's `fail` with `wasmstream: record <source>/<partition>@<offset>:
    /// <error>` and returns 1 (the batch fails).
    pub fn process(&mut self, payload: &[u8]) -> i32 {
        let task = match self.task.as_mut() {
            Some(t) => t,
            None => return fail("wasmstream: process called before a successful init"),
        };
        let batch = match abi::decode_batch(payload) {
            Ok(b) => b,
            Err(e) => return fail_with("wasmstream: batch: ", &e),
        };
        for rec in batch.records() {
            let mut ctx = Context::new(
                rec.key(),
                rec.timestamp(),
                &mut self.scratch,
                &mut self.scan_buf,
            );
            if let Err(e) = task.process(&rec, &mut ctx) {
                // The same form as the Go SDK: which record failed, then the task's message.
                let mut msg = String::from("wasmstream: record ");
                text::push_lossy(&mut msg, rec.source());
                msg.push('/');
                text::push_u64(&mut msg, rec.partition() as u64);
                msg.push('@');
                text::push_i64(&mut msg, rec.offset());
                msg.push_str(": ");
                msg.push_str(&e.text());
                return fail_err(&msg, &e);
            }
        }
        0
    }

    /// Handles a Firings payload (0.2): runs [`Task::on_timer`] on every firing in order. 0 on
    /// success; on the first error calls the host's `fail` with `wasmstream: timer "<name>" of key
    /// "<key>": <error>` and returns 1.
    pub fn on_timer(&mut self, payload: &[u8]) -> i32 {
        let task = match self.task.as_mut() {
            Some(t) => t,
            None => return fail("wasmstream: on_timer called before a successful init"),
        };
        let firings = match abi::decode_firings(payload) {
            Ok(f) => f,
            Err(e) => return fail_with("wasmstream: firings: ", &e),
        };
        for f in firings.iter() {
            // Outputs of an event-time firing carry its time; of a processing-time one, "now".
            let ts = if f.event_time() { f.time } else { -1 };
            let mut ctx = Context::new(f.key, ts, &mut self.scratch, &mut self.scan_buf);
            if let Err(e) = task.on_timer(&f, &mut ctx) {
                let mut msg = String::from("wasmstream: timer ");
                text::push_quoted(&mut msg, f.name);
                msg.push_str(" of key ");
                text::push_quoted(&mut msg, f.key);
                msg.push_str(": ");
                msg.push_str(&e.text());
                return fail_err(&msg, &e);
            }
        }
        0
    }

    /// Handles a Tick payload (0.2): runs [`Task::on_tick`]. 0 on success; on error calls the
    /// host's `fail` with `wasmstream: tick of <source>/<partition>: <error>` and returns 1.
    pub fn on_tick(&mut self, payload: &[u8]) -> i32 {
        let task = match self.task.as_mut() {
            Some(t) => t,
            None => return fail("wasmstream: on_tick called before a successful init"),
        };
        let tick = match abi::decode_tick(payload) {
            Ok(t) => t,
            Err(e) => return fail_with("wasmstream: tick: ", &e),
        };
        let mut ctx = TickContext::new(&mut self.scratch, &mut self.scan_buf, &mut self.keys_buf);
        if let Err(e) = task.on_tick(&tick, &mut ctx) {
            let mut msg = String::from("wasmstream: tick of ");
            text::push_lossy(&mut msg, tick.source);
            msg.push('/');
            text::push_u64(&mut msg, tick.partition as u64);
            msg.push_str(": ");
            msg.push_str(&e.text());
            return fail_err(&msg, &e);
        }
        0
    }

    /// Handles a Migrate payload (0.2): runs [`Task::migrate`]. 0 on success; on error calls the
    /// host's `fail` with `wasmstream: migrating key "<key>" from state version <from> to <to>:
    /// <error>` and returns 1.
    pub fn migrate(&mut self, payload: &[u8]) -> i32 {
        let task = match self.task.as_mut() {
            Some(t) => t,
            None => return fail("wasmstream: migrate called before a successful init"),
        };
        let m = match abi::decode_migrate(payload) {
            Ok(m) => m,
            Err(e) => return fail_with("wasmstream: migrate: ", &e),
        };
        let mut ctx = Context::new(m.key, -1, &mut self.scratch, &mut self.scan_buf);
        if let Err(e) = task.migrate(&m, &mut ctx) {
            let mut msg = String::from("wasmstream: migrating key ");
            text::push_quoted(&mut msg, m.key);
            msg.push_str(" from state version ");
            text::push_u64(&mut msg, m.from as u64);
            msg.push_str(" to ");
            text::push_u64(&mut msg, m.to as u64);
            msg.push_str(": ");
            msg.push_str(&e.text());
            return fail_err(&msg, &e);
        }
        0
    }
}

/// What `wasmstream_state_version` returns for a task: its [`Task::STATE_VERSION`].
pub fn state_version<T: Task>() -> i32 {
    T::STATE_VERSION as i32
}

impl<T> Default for Runtime<T> {
    fn default() -> Runtime<T> {
        Runtime::new()
    }
}

fn fail_with(prefix: &str, e: &crate::Error) -> i32 {
    let mut msg = String::from(prefix);
    msg.push_str(&e.text());
    fail(&msg)
}

fn fail(msg: &str) -> i32 {
    sys::host_fail(msg.as_bytes());
    1
}

/// `fail` for a task's error `e`: a permanent one goes to the host's `fail_permanent` (0.4), and
/// the host does not retry the call.
fn fail_err(msg: &str, e: &crate::Error) -> i32 {
    if e.is_permanent() {
        sys::host_fail_permanent(msg.as_bytes());
        return 1;
    }
    fail(msg)
}

/// The input buffer `wasmstream_alloc` hands out: one growable allocation, reused for every call.
/// A payload written into it is valid until the following `init`/`process` returns (ABI.md §3).
pub struct InputBuf {
    buf: Vec<u8>,
}

impl InputBuf {
    /// An empty buffer (nothing allocated yet).
    pub const fn new() -> InputBuf {
        InputBuf { buf: Vec::new() }
    }

    /// Makes room for `size` bytes and returns where the host writes them, or `None` when
    /// `size` is negative or memory runs out. The previous payload is gone.
    pub fn alloc(&mut self, size: i64) -> Option<*mut u8> {
        if size < 0 || size > isize::MAX as i64 {
            return None;
        }
        // Never hand out a dangling pointer, even for size 0.
        let size = (size as usize).max(64);
        if self.buf.capacity() < size {
            // Free the old buffer first (its contents are dead), then grow at least twice as
            // large so slowly growing batches do not reallocate every time; if memory is too
            // tight for that, take exactly what is asked.
            let doubled = size.max(self.buf.capacity().saturating_mul(2));
            self.buf = Vec::new();
            if self.buf.try_reserve_exact(doubled).is_err() {
                self.buf.try_reserve_exact(size).ok()?;
            }
        }
        Some(self.buf.as_mut_ptr())
    }

    /// The `len` payload bytes at `ptr`, if `ptr` is what [`alloc`](InputBuf::alloc) returned
    /// and `len` fits in the buffer.
    pub fn payload(&self, ptr: usize, len: i64) -> Option<&[u8]> {
        if self.buf.capacity() == 0
            || ptr != self.buf.as_ptr() as usize
            || len < 0
            || len as u64 > self.buf.capacity() as u64
        {
            return None;
        }
        // SAFETY: the range lies inside the buffer's allocation, which the host has just written
        // (bytes it did not write are still plain memory of the linear memory); the buffer is not
        // touched again until the next alloc, which the host only calls after this call returns.
        Some(unsafe { std::slice::from_raw_parts(self.buf.as_ptr(), len as usize) })
    }
}

impl Default for InputBuf {
    fn default() -> InputBuf {
        InputBuf::new()
    }
}

#[cfg(target_arch = "wasm32")]
pub use self::wasm::*;

#[cfg(target_arch = "wasm32")]
mod wasm {
    use super::{fail, InputBuf, Runtime};
    use crate::Task;
    use std::cell::UnsafeCell;

    /// A cell for the instance's global state. A wasm32 module without the threads proposal runs
    /// on one thread and the host never re-enters it, so a plain cell is enough.
    pub struct Global<T>(UnsafeCell<T>);

    // SAFETY: wasm32 without atomics has exactly one thread, and the host never calls an export
    // while another is running (ABI.md §1: no re-entrancy).
    unsafe impl<T> Sync for Global<T> {}

    impl<T> Global<T> {
        pub const fn new(v: T) -> Global<T> {
            Global(UnsafeCell::new(v))
        }

        #[allow(clippy::mut_from_ref)]
        fn get(&self) -> &mut T {
            // SAFETY: see `Sync` above; no export keeps a reference past its return.
            unsafe { &mut *self.0.get() }
        }
    }

    static INPUT: Global<InputBuf> = Global::new(InputBuf::new());

    /// A task's slot, declared by `export_task!`.
    pub type Slot<T> = Global<Runtime<T>>;

    /// Creates a slot.
    pub const fn slot<T>() -> Slot<T> {
        Global::new(Runtime::new())
    }

    /// `wasmstream_abi_version`.
    pub fn abi_version() -> i32 {
        crate::abi::VERSION as i32
    }

    /// `wasmstream_alloc`.
    pub fn alloc(size: i32) -> i32 {
        match INPUT.get().alloc(size as i64) {
            Some(p) => p as usize as i32,
            None => 0,
        }
    }

    fn payload(ptr: i32, len: i32) -> Option<&'static [u8]> {
        INPUT.get().payload(ptr as u32 as usize, len as i64)
    }

    /// `wasmstream_init`.
    pub fn init<T: Task>(slot: &Slot<T>, ptr: i32, len: i32) -> i32 {
        #[cfg(feature = "panic-message")]
        install_panic_hook();
        match payload(ptr, len) {
            Some(p) => slot.get().init(p),
            None => fail("wasmstream: init payload is not in the buffer from wasmstream_alloc"),
        }
    }

    /// `wasmstream_process`.
    pub fn process<T: Task>(slot: &Slot<T>, ptr: i32, len: i32) -> i32 {
        match payload(ptr, len) {
            Some(p) => slot.get().process(p),
            None => fail("wasmstream: batch payload is not in the buffer from wasmstream_alloc"),
        }
    }

    /// `wasmstream_on_timer`.
    pub fn on_timer<T: Task>(slot: &Slot<T>, ptr: i32, len: i32) -> i32 {
        match payload(ptr, len) {
            Some(p) => slot.get().on_timer(p),
            None => fail("wasmstream: firings payload is not in the buffer from wasmstream_alloc"),
        }
    }

    /// `wasmstream_on_tick`.
    pub fn on_tick<T: Task>(slot: &Slot<T>, ptr: i32, len: i32) -> i32 {
        match payload(ptr, len) {
            Some(p) => slot.get().on_tick(p),
            None => fail("wasmstream: tick payload is not in the buffer from wasmstream_alloc"),
        }
    }

    /// `wasmstream_migrate`.
    pub fn migrate<T: Task>(slot: &Slot<T>, ptr: i32, len: i32) -> i32 {
        match payload(ptr, len) {
            Some(p) => slot.get().migrate(p),
            None => fail("wasmstream: migrate payload is not in the buffer from wasmstream_alloc"),
        }
    }

    /// Makes a panic give its message to the host (`log` at error level and `fail`) before the
    /// module traps; without it the host sees only "unreachable".
    #[cfg(feature = "panic-message")]
    fn install_panic_hook() {
        static DONE: Global<bool> = Global::new(false);
        if !*DONE.get() {
            *DONE.get() = true;
            std::panic::set_hook(Box::new(|info| {
                // Built by hand: `format!("{}", info)` would pull in several KB of `core::fmt`.
                let mut msg = String::from("panic");
                if let Some(loc) = info.location() {
                    msg.push_str(" at ");
                    msg.push_str(loc.file());
                    msg.push(':');
                    crate::text::push_u64(&mut msg, loc.line() as u64);
                    msg.push(':');
                    crate::text::push_u64(&mut msg, loc.column() as u64);
                }
                let payload = info.payload();
                let text = match payload.downcast_ref::<&str>() {
                    Some(s) => Some(*s),
                    None => payload.downcast_ref::<String>().map(|s| s.as_str()),
                };
                if let Some(t) = text {
                    msg.push_str(": ");
                    msg.push_str(t);
                }
                crate::sys::host_log(3, msg.as_bytes());
                crate::sys::host_fail(msg.as_bytes());
            }));
        }
    }
}
