//! The host functions of ABI.md §4 (0.1 and 0.2) behind safe, slice-based wrappers.
//!
//! On wasm32 they are the imports of module `wasmstream_v0`. Everywhere else they go to the
//! in-memory fake host of [`crate::testing`], so SDK and task logic can be tested natively.
//! Each returns the raw ABI status (`>= 0` success, `< 0` an error code).

#[cfg(target_arch = "wasm32")]
mod imp {
    #[link(wasm_import_module = "wasmstream_v0")]
    extern "C" {
        fn state_get(
            key_ptr: i32,
            key_len: i32,
            name_ptr: i32,
            name_len: i32,
            buf_ptr: i32,
            buf_cap: i32,
        ) -> i32;
        fn state_put(
            key_ptr: i32,
            key_len: i32,
            name_ptr: i32,
            name_len: i32,
            val_ptr: i32,
            val_len: i32,
        ) -> i32;
        fn state_delete(key_ptr: i32, key_len: i32, name_ptr: i32, name_len: i32) -> i32;
        #[allow(clippy::too_many_arguments)]
        fn state_scan(
            key_ptr: i32,
            key_len: i32,
            prefix_ptr: i32,
            prefix_len: i32,
            after_ptr: i32,
            after_len: i32,
            buf_ptr: i32,
            buf_cap: i32,
        ) -> i32;
        #[allow(clippy::too_many_arguments)]
        fn emit(
            out_ptr: i32,
            out_len: i32,
            key_ptr: i32,
            key_len: i32,
            val_ptr: i32,
            val_len: i32,
            hdr_ptr: i32,
            hdr_len: i32,
            ts: i64,
        ) -> i32;
        fn log(level: i32, msg_ptr: i32, msg_len: i32) -> i32;
        fn now_ms() -> i64;
        fn config_get(buf_ptr: i32, buf_cap: i32) -> i32;
        fn fail(msg_ptr: i32, msg_len: i32) -> i32;
        // ABI 0.2
        #[allow(clippy::too_many_arguments)]
        fn timer_set(
            key_ptr: i32,
            key_len: i32,
            name_ptr: i32,
            name_len: i32,
            domain: i32,
            time: i64,
            payload_ptr: i32,
            payload_len: i32,
        ) -> i32;
        fn timer_delete(key_ptr: i32, key_len: i32, name_ptr: i32, name_len: i32) -> i32;
        fn watermark_ms() -> i64;
        fn state_keys(after_ptr: i32, after_len: i32, buf_ptr: i32, buf_cap: i32) -> i32;
        fn http_request(req_ptr: i32, req_len: i32, buf_ptr: i32, buf_cap: i32) -> i32;
        fn http_response(buf_ptr: i32, buf_cap: i32) -> i32;
        // ABI 0.3
        fn metric_declare(
            kind: i32,
            name_ptr: i32,
            name_len: i32,
            labels_ptr: i32,
            labels_len: i32,
        ) -> i32;
        fn metric_add(id: i32, v: i64) -> i32;
        fn metric_set(id: i32, v: i64) -> i32;
        fn metric_declare_histogram(
            name_ptr: i32,
            name_len: i32,
            labels_ptr: i32,
            labels_len: i32,
            bounds_ptr: i32,
            bounds_len: i32,
        ) -> i32;
        fn metric_observe(id: i32, v: f64) -> i32;
        // ABI 0.4
        fn fail_permanent(msg_ptr: i32, msg_len: i32) -> i32;
    }

    // Pointers are offsets into the 32-bit linear memory; lengths of slices fit in an i32
    // because the memory is at most 4 GiB and the host rejects negative lengths.
    fn p(b: &[u8]) -> i32 {
        b.as_ptr() as usize as i32
    }
    fn l(b: &[u8]) -> i32 {
        b.len() as i32
    }

    pub fn host_state_get(key: &[u8], name: &[u8], buf: &mut [u8]) -> i32 {
        let bp = buf.as_mut_ptr() as usize as i32;
        unsafe { state_get(p(key), l(key), p(name), l(name), bp, buf.len() as i32) }
    }
    pub fn host_state_put(key: &[u8], name: &[u8], value: &[u8]) -> i32 {
        unsafe { state_put(p(key), l(key), p(name), l(name), p(value), l(value)) }
    }
    pub fn host_state_delete(key: &[u8], name: &[u8]) -> i32 {
        unsafe { state_delete(p(key), l(key), p(name), l(name)) }
    }
    pub fn host_state_scan(key: &[u8], prefix: &[u8], after: Option<&[u8]>, buf: &mut [u8]) -> i32 {
        let (ap, al) = match after {
            Some(a) => (p(a), l(a)),
            None => (0, -1),
        };
        let bp = buf.as_mut_ptr() as usize as i32;
        unsafe {
            state_scan(
                p(key),
                l(key),
                p(prefix),
                l(prefix),
                ap,
                al,
                bp,
                buf.len() as i32,
            )
        }
    }
    pub fn host_emit(output: &[u8], key: &[u8], value: &[u8], headers: &[u8], ts: i64) -> i32 {
        unsafe {
            emit(
                p(output),
                l(output),
                p(key),
                l(key),
                p(value),
                l(value),
                p(headers),
                l(headers),
                ts,
            )
        }
    }
    pub fn host_emit_null(output: &[u8], key: &[u8], headers: &[u8], ts: i64) -> i32 {
        unsafe {
            emit(
                p(output),
                l(output),
                p(key),
                l(key),
                0,
                crate::abi::EMIT_NULL_VALUE,
                p(headers),
                l(headers),
                ts,
            )
        }
    }
    pub fn host_log(level: i32, msg: &[u8]) -> i32 {
        unsafe { log(level, p(msg), l(msg)) }
    }
    pub fn host_now_ms() -> i64 {
        unsafe { now_ms() }
    }
    pub fn host_config_get(buf: &mut [u8]) -> i32 {
        let bp = buf.as_mut_ptr() as usize as i32;
        unsafe { config_get(bp, buf.len() as i32) }
    }
    pub fn host_fail(msg: &[u8]) -> i32 {
        unsafe { fail(p(msg), l(msg)) }
    }
    pub fn host_fail_permanent(msg: &[u8]) -> i32 {
        unsafe { fail_permanent(p(msg), l(msg)) }
    }
    pub fn host_timer_set(key: &[u8], name: &[u8], domain: i32, time: i64, payload: &[u8]) -> i32 {
        unsafe {
            timer_set(
                p(key),
                l(key),
                p(name),
                l(name),
                domain,
                time,
                p(payload),
                l(payload),
            )
        }
    }
    pub fn host_timer_delete(key: &[u8], name: &[u8]) -> i32 {
        unsafe { timer_delete(p(key), l(key), p(name), l(name)) }
    }
    pub fn host_watermark_ms() -> i64 {
        unsafe { watermark_ms() }
    }
    pub fn host_state_keys(after: Option<&[u8]>, buf: &mut [u8]) -> i32 {
        let (ap, al) = match after {
            Some(a) => (p(a), l(a)),
            None => (0, -1),
        };
        let bp = buf.as_mut_ptr() as usize as i32;
        unsafe { state_keys(ap, al, bp, buf.len() as i32) }
    }
    pub fn host_http_request(req: &[u8], buf: &mut [u8]) -> i32 {
        let bp = buf.as_mut_ptr() as usize as i32;
        unsafe { http_request(p(req), l(req), bp, buf.len() as i32) }
    }
    pub fn host_http_response(buf: &mut [u8]) -> i32 {
        let bp = buf.as_mut_ptr() as usize as i32;
        unsafe { http_response(bp, buf.len() as i32) }
    }
    pub fn host_metric_declare(kind: i32, name: &[u8], labels: &[u8]) -> i32 {
        unsafe { metric_declare(kind, p(name), l(name), p(labels), l(labels)) }
    }
    pub fn host_metric_add(id: i32, v: i64) -> i32 {
        unsafe { metric_add(id, v) }
    }
    pub fn host_metric_set(id: i32, v: i64) -> i32 {
        unsafe { metric_set(id, v) }
    }
    pub fn host_metric_declare_histogram(name: &[u8], labels: &[u8], bounds: &[u8]) -> i32 {
        unsafe {
            metric_declare_histogram(p(name), l(name), p(labels), l(labels), p(bounds), l(bounds))
        }
    }
    pub fn host_metric_observe(id: i32, v: f64) -> i32 {
        unsafe { metric_observe(id, v) }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use crate::testing::with_host;

    pub fn host_state_get(key: &[u8], name: &[u8], buf: &mut [u8]) -> i32 {
        with_host(|h| h.state_get(key, name, buf))
    }
    pub fn host_state_put(key: &[u8], name: &[u8], value: &[u8]) -> i32 {
        with_host(|h| h.state_put(key, name, value))
    }
    pub fn host_state_delete(key: &[u8], name: &[u8]) -> i32 {
        with_host(|h| h.state_delete(key, name))
    }
    pub fn host_state_scan(key: &[u8], prefix: &[u8], after: Option<&[u8]>, buf: &mut [u8]) -> i32 {
        with_host(|h| h.state_scan(key, prefix, after, buf))
    }
    pub fn host_emit(output: &[u8], key: &[u8], value: &[u8], headers: &[u8], ts: i64) -> i32 {
        with_host(|h| h.emit(output, key, Some(value), headers, ts))
    }
    pub fn host_emit_null(output: &[u8], key: &[u8], headers: &[u8], ts: i64) -> i32 {
        with_host(|h| h.emit(output, key, None, headers, ts))
    }
    pub fn host_log(level: i32, msg: &[u8]) -> i32 {
        with_host(|h| h.log(level, msg))
    }
    pub fn host_now_ms() -> i64 {
        with_host(|h| h.now_ms())
    }
    pub fn host_config_get(buf: &mut [u8]) -> i32 {
        with_host(|h| h.config_get(buf))
    }
    pub fn host_fail(msg: &[u8]) -> i32 {
        with_host(|h| h.fail(msg))
    }
    pub fn host_fail_permanent(msg: &[u8]) -> i32 {
        with_host(|h| h.fail_permanent(msg))
    }
    pub fn host_timer_set(key: &[u8], name: &[u8], domain: i32, time: i64, payload: &[u8]) -> i32 {
        with_host(|h| h.timer_set(key, name, domain, time, payload))
    }
    pub fn host_timer_delete(key: &[u8], name: &[u8]) -> i32 {
        with_host(|h| h.timer_delete(key, name))
    }
    pub fn host_watermark_ms() -> i64 {
        with_host(|h| h.watermark_ms())
    }
    pub fn host_state_keys(after: Option<&[u8]>, buf: &mut [u8]) -> i32 {
        with_host(|h| h.state_keys(after, buf))
    }
    pub fn host_http_request(req: &[u8], buf: &mut [u8]) -> i32 {
        // The stub runs outside the fake host's borrow: it may be any test code.
        crate::testing::http_request(req, buf)
    }
    pub fn host_http_response(buf: &mut [u8]) -> i32 {
        with_host(|h| h.http_response(buf))
    }
    pub fn host_metric_declare(kind: i32, name: &[u8], labels: &[u8]) -> i32 {
        with_host(|h| h.metric_declare(kind, name, labels))
    }
    pub fn host_metric_add(id: i32, v: i64) -> i32 {
        with_host(|h| h.metric_update(id, v, false))
    }
    pub fn host_metric_set(id: i32, v: i64) -> i32 {
        with_host(|h| h.metric_update(id, v, true))
    }
    pub fn host_metric_declare_histogram(name: &[u8], labels: &[u8], bounds: &[u8]) -> i32 {
        with_host(|h| h.metric_declare_histogram(name, labels, bounds))
    }
    pub fn host_metric_observe(id: i32, v: f64) -> i32 {
        with_host(|h| h.metric_observe(id, v))
    }
}

pub(crate) use imp::*;
