//! The standard `process_*` metrics of the running process, read from
//! Linux's /proc at each scrape: CPU seconds, resident and virtual memory,
//! open and allowed file descriptors, start time. Where /proc cannot be read
//! (another OS), the metrics are left out rather than reported as zero.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The kernel's unit of the times in /proc/PID/stat (`USER_HZ`), 100 on
/// every architecture Linux runs cnpool on.
const TICKS_PER_SECOND: f64 = 100.0;

/// Adds the `process_*` metrics to `registry`.
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

#[derive(Debug)]
struct ProcessCollector;

/// What one scrape reads of the process.
#[derive(Debug, Default, PartialEq)]
struct Sample {
    cpu_seconds: Option<f64>,
    start_time_seconds: Option<f64>,
    resident_bytes: Option<i64>,
    virtual_bytes: Option<i64>,
    open_fds: Option<i64>,
    max_fds: Option<i64>,
}

impl Sample {
    fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().map(stat_fields).unwrap_or_default();
        let boot_time = std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(boot_time);
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let status_bytes = |key: &str| status.as_deref().and_then(|status| kilobytes(status, key)).map(|kb| kb * 1024);
        Self {
            cpu_seconds: cpu_seconds(),
            start_time_seconds: boot_time.zip(seconds(&fields, STARTTIME)).map(|(boot, since)| boot + since),
            resident_bytes: status_bytes("VmRSS:"),
            virtual_bytes: status_bytes("VmSize:"),
            open_fds: std::fs::read_dir("/proc/self/fd").ok().and_then(|entries| i64::try_from(entries.count()).ok()),
            max_fds: std::fs::read_to_string("/proc/self/limits").ok().as_deref().and_then(max_open_files),
        }
    }
}

// Indexes into the fields after the command name of /proc/PID/stat (the
// third field of proc(5) is index 0).
const UTIME: usize = 11;
const STIME: usize = 12;
const STARTTIME: usize = 19;

/// The fields of /proc/PID/stat after the command name, which may hold
/// spaces and parentheses itself.
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default()
}

/// The CPU time this process has spent, user and system, in seconds.
pub fn cpu_seconds() -> Option<f64> {
    cpu(&stat_fields(&std::fs::read_to_string("/proc/self/stat").ok()?))
}

fn cpu(fields: &[&str]) -> Option<f64> {
    Some(seconds(fields, UTIME)? + seconds(fields, STIME)?)
}

/// A field of /proc/PID/stat counted in clock ticks, in seconds.
fn seconds(fields: &[&str], index: usize) -> Option<f64> {
    fields.get(index)?.parse::<f64>().ok().map(|ticks| ticks / TICKS_PER_SECOND)
}

/// `btime` of /proc/stat: the boot time, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines().find_map(|line| line.strip_prefix("btime ")).and_then(|value| value.trim().parse().ok())
}

/// A `KEY: N kB` line of /proc/PID/status.
fn kilobytes(status: &str, key: &str) -> Option<i64> {
    let line = status.lines().find_map(|line| line.strip_prefix(key))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The soft limit of open files, from /proc/PID/limits.
fn max_open_files(limits: &str) -> Option<i64> {
    let line = limits.lines().find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sample = Sample::read();
        if let Some(seconds) = sample.cpu_seconds {
            let counter = ConstCounter::new(seconds);
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                "User and system CPU time spent, in seconds",
                None,
                counter.metric_type(),
            )?;
            counter.encode(metric)?;
        }
        let gauges: [(&str, &str, Option<f64>); 5] = [
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch, in seconds",
                sample.start_time_seconds,
            ),
            ("process_resident_memory_bytes", "Resident memory size, in bytes", sample.resident_bytes.map(as_f64)),
            ("process_virtual_memory_bytes", "Virtual memory size, in bytes", sample.virtual_bytes.map(as_f64)),
            ("process_open_fds", "Open file descriptors", sample.open_fds.map(as_f64)),
            ("process_max_fds", "Most file descriptors the process may open", sample.max_fds.map(as_f64)),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

fn as_f64(value: i64) -> f64 {
    value as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let stat = "4242 (tokio (x) 1) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 150 0 0 20 0 7 0 123456 99 42";
        let fields = stat_fields(stat);
        assert_eq!(cpu(&fields), Some(4.0));
        assert_eq!(seconds(&fields, STARTTIME), Some(1234.56));
    }

    #[test]
    fn limits_and_status_lines_are_read_by_their_key() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(kilobytes("VmSize:\t  20480 kB\nVmRSS:\t    5120 kB\n", "VmRSS:"), Some(5120));
        assert_eq!(boot_time("cpu  1 2 3\nbtime 1764892800\n"), Some(1_764_892_800.0));
    }

    #[test]
    fn this_process_reads_as_alive() {
        let sample = Sample::read();
        assert!(sample.resident_bytes.is_some_and(|bytes| bytes > 0), "{sample:?}");
        assert!(sample.open_fds.is_some_and(|fds| fds > 0), "{sample:?}");
        let started = sample.start_time_seconds.unwrap_or_default();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
        assert!(started > 0.0 && started <= now + 1.0, "{sample:?}");
    }
}
