//! Guest metrics (ABI 0.3): counters, gauges and histograms declared by name with fixed label values, kept by
//! the host per task and exported beside its own metrics as `wasmstream_guest_<name>` (counters
//! with a `_total` suffix) with a `task` label.

use crate::error::{check, Error};
use crate::sys;

const COUNTER: i32 = 0;
const GAUGE: i32 = 1;

/// The labels as a Headers layout (ABI.md §6.3); empty for none.
pub(crate) fn labels_layout(labels: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    if labels.is_empty() {
        return b;
    }
    b.extend_from_slice(&(labels.len() as u32).to_le_bytes());
    for (n, v) in labels {
        b.extend_from_slice(&(n.len() as u32).to_le_bytes());
        b.extend_from_slice(n.as_bytes());
        b.extend_from_slice(&(v.len() as u32).to_le_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b
}

fn declare(kind: i32, name: &str, labels: &[(&str, &str)]) -> Result<i32, Error> {
    check(sys::host_metric_declare(
        kind,
        name.as_bytes(),
        &labels_layout(labels),
    ))
}

/// A count that only goes up. Declare it in [`Task::init`](crate::Task::init) (the only place
/// the host accepts declarations) and keep it in the task.
#[derive(Debug, Clone, Copy)]
pub struct MetricCounter {
    id: i32,
}

impl MetricCounter {
    /// Declares the counter `name` (`[a-zA-Z_][a-zA-Z0-9_]*`) with fixed `(name, value)` labels
    /// (at most 8; not `task`). The host refuses more than 64 series per task, and a name
    /// declared before with another kind or other label names: an error to return from `init`.
    pub fn new(name: &str, labels: &[(&str, &str)]) -> Result<MetricCounter, Error> {
        Ok(MetricCounter {
            id: declare(COUNTER, name, labels)?,
        })
    }

    /// Adds `n` (>= 0; a negative `n` is `ERR_INVALID`). One host call, nothing allocated; not
    /// undone when the call fails.
    pub fn add(&self, n: i64) -> Result<(), Error> {
        check(sys::host_metric_add(self.id, n)).map(|_| ())
    }

    /// Adds 1.
    pub fn inc(&self) {
        let _ = self.add(1);
    }
}

/// A value that goes up and down. Declare it in [`Task::init`](crate::Task::init).
#[derive(Debug, Clone, Copy)]
pub struct MetricGauge {
    id: i32,
}

impl MetricGauge {
    /// Declares the gauge `name` with fixed `(name, value)` labels; the rules of [`MetricCounter::new`].
    pub fn new(name: &str, labels: &[(&str, &str)]) -> Result<MetricGauge, Error> {
        Ok(MetricGauge {
            id: declare(GAUGE, name, labels)?,
        })
    }

    /// Sets the gauge to `v`.
    pub fn set(&self, v: i64) {
        let _ = sys::host_metric_set(self.id, v);
    }

    /// Adds `d`, which may be negative.
    pub fn add(&self, d: i64) {
        let _ = sys::host_metric_add(self.id, d);
    }
}

/// A histogram: observations counted into buckets by value, with their count and sum, exported
/// as a Prometheus histogram. Declare it in [`Task::init`](crate::Task::init).
#[derive(Debug, Clone, Copy)]
pub struct MetricHistogram {
    id: i32,
}

impl MetricHistogram {
    /// Declares the histogram `name` whose buckets have the upper `bounds` given (1 to 32, finite,
    /// strictly increasing; the host adds +Inf) with fixed `(name, value)` labels; the rules of
    /// [`MetricCounter::new`], and every series of one name has the same bounds.
    pub fn new(
        name: &str,
        bounds: &[f64],
        labels: &[(&str, &str)],
    ) -> Result<MetricHistogram, Error> {
        let mut b = Vec::with_capacity(8 * bounds.len());
        for x in bounds {
            b.extend_from_slice(&x.to_le_bytes());
        }
        Ok(MetricHistogram {
            id: check(sys::host_metric_declare_histogram(
                name.as_bytes(),
                &labels_layout(labels),
                &b,
            ))?,
        })
    }

    /// Records one observation of `v`: the first bucket whose bound is >= `v` counts it, and the
    /// sum grows by `v`. NaN is `ERR_INVALID`. One host call, nothing allocated.
    pub fn observe(&self, v: f64) -> Result<(), Error> {
        check(sys::host_metric_observe(self.id, v)).map(|_| ())
    }
}
