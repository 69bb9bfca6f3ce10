//! ABI 0.3 in the SDK and the native harness: guest metrics.

use wasmstream::testing::{Harness, TestRecord};
use wasmstream::{Context, Errno, Error, MetricCounter, MetricGauge, Record, Task};

/// Counts records and remembers the last value's length.
struct Metered {
    seen: MetricCounter,
    last: MetricGauge,
}

impl Task for Metered {
    fn init(_: &[u8]) -> Result<Self, Error> {
        // The host's rules: a reserved label and a bad name are refused.
        assert_eq!(
            MetricCounter::new("x", &[("task", "t")])
                .unwrap_err()
                .code(),
            Errno::INVALID
        );
        assert_eq!(
            MetricGauge::new("9x", &[]).unwrap_err().code(),
            Errno::INVALID
        );
        Ok(Metered {
            seen: MetricCounter::new("records_seen", &[("stage", "demo")])?,
            last: MetricGauge::new("last_value_bytes", &[])?,
        })
    }

    fn process(&mut self, rec: &Record, _: &mut Context) -> Result<(), Error> {
        self.seen.inc();
        self.last.set(rec.value().len() as i64);
        assert_eq!(self.seen.add(-1).unwrap_err().code(), Errno::INVALID);
        // Declarations belong in init.
        assert_eq!(
            MetricCounter::new("late", &[]).unwrap_err().code(),
            Errno::NOT_ALLOWED
        );
        Ok(())
    }
}

#[test]
fn metrics_recorded_by_the_harness() {
    let mut h = Harness::<Metered>::new("{}").unwrap();
    h.process(&[TestRecord::new("a", "xyz"), TestRecord::new("b", "xy")])
        .unwrap();
    assert_eq!(h.metric("records_seen", &[("stage", "demo")]), Some(2));
    assert_eq!(h.metric("last_value_bytes", &[]), Some(2));
    assert_eq!(h.metric("records_seen", &[]), None);
}
