//! ABI 0.3 in the SDK and the native harness: guest metrics (counters, gauges, histograms).

use wasmstream::testing::Histogram;
use wasmstream::testing::{Harness, TestRecord};
use wasmstream::{
    Context, Errno, Error, MetricCounter, MetricGauge, MetricHistogram, Record, Task,
};

/// Counts records and remembers the last value's length.
struct Metered {
    seen: MetricCounter,
    last: MetricGauge,
    sizes: MetricHistogram,
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
        let bads: [&[f64]; 4] = [&[], &[2.0, 1.0], &[1.0, f64::NAN], &[f64::INFINITY]];
        for bad in bads.iter() {
            assert_eq!(
                MetricHistogram::new("h", bad, &[]).unwrap_err().code(),
                Errno::INVALID
            );
        }
        assert_eq!(
            MetricHistogram::new("h", &[0.5; 33], &[])
                .unwrap_err()
                .code(),
            Errno::LIMIT
        );
        Ok(Metered {
            sizes: MetricHistogram::new("value_bytes", &[1.0, 2.0], &[("stage", "demo")])?,
            seen: MetricCounter::new("records_seen", &[("stage", "demo")])?,
            last: MetricGauge::new("last_value_bytes", &[])?,
        })
    }

    fn process(&mut self, rec: &Record, _: &mut Context) -> Result<(), Error> {
        self.seen.inc();
        self.last.set(rec.value().len() as i64);
        self.sizes.observe(rec.value().len() as f64)?;
        assert_eq!(
            self.sizes.observe(f64::NAN).unwrap_err().code(),
            Errno::INVALID
        );
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
    assert_eq!(
        h.histogram("value_bytes", &[("stage", "demo")]),
        Some(Histogram {
            bounds: vec![1.0, 2.0],
            counts: vec![0, 1, 1],
            count: 2,
            sum: 5.0
        })
    );
}
