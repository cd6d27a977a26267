//! The process metrics every Prometheus client library exports and dashboards expect
//! (`process_resident_memory_bytes`, CPU, open files, start time, threads), read at each scrape.
//! Without the `sandcap_` prefix, as client_golang names them.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = metrics_process::collector::collect();
        if let Some(seconds) = now.cpu_seconds_total {
            let counter = ConstCounter::new(seconds);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges = [
            ("process_open_fds", "Number of open file descriptors.", now.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors.", now.max_fds),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", now.virtual_memory_bytes),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes.",
                // An unlimited address space reads as 0: left out, as no limit.
                now.virtual_memory_max_bytes.filter(|&max| max > 0),
            ),
            ("process_resident_memory_bytes", "Resident memory size in bytes.", now.resident_memory_bytes),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                now.start_time_seconds,
            ),
            ("process_threads", "Number of OS threads in the process.", now.threads),
        ];
        for (name, help, value) in gauges {
            // A value the platform does not report is left out, as client_golang leaves it.
            let Some(value) = value.and_then(|v| i64::try_from(v).ok()) else { continue };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}
