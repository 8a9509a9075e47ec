//! Reads the process's own figures for `/metrics` from `/proc/self` on Linux. Elsewhere they are absent. They
//! carry the names Prometheus's client libraries give them: `process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds` and `process_start_time_seconds`.

/// One reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ProcessFigures {
    /// User and system CPU time.
    pub(super) cpu_seconds: f64,
    /// Resident memory.
    pub(super) resident_bytes: u64,
    /// Open file descriptors.
    pub(super) open_fds: u64,
    /// When the process started, in Unix seconds.
    pub(super) start_time: u64,
}

/// Reads them. Returns `None` where `/proc` does not say.
pub(super) fn read() -> Option<ProcessFigures> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    parse(&stat, &boot, (rustix::param::clock_ticks_per_second(), rustix::param::page_size() as u64), open_fds)
}

/// The figures from `/proc/self/stat` and `/proc/stat`'s `btime`, with the clock's ticks per second and the
/// page size.
fn parse(stat: &str, boot: &str, (ticks, page): (u64, u64), open_fds: u64) -> Option<ProcessFigures> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses. So fields are counted
    // from the last `)`.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // After the name: state is field 3, so field n is fields[n - 3].
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = ticks.max(1);
    let (utime, stime, start, rss) = (field(14)?, field(15)?, field(22)?, field(24)?);
    let btime = boot.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse::<u64>().ok()?;
    Some(ProcessFigures {
        cpu_seconds: utime.saturating_add(stime) as f64 / ticks as f64,
        resident_bytes: rss.saturating_mul(page),
        open_fds,
        start_time: btime.saturating_add(start / ticks),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_by_field_after_a_name_with_spaces() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 12000 \
                    900000000 2500 18446744073709551615";
        let boot = "cpu  1 2 3\nbtime 1764720000\nprocesses 9\n";
        let figures = parse(stat, boot, (100, 4096), 17).unwrap();
        assert_eq!(figures.cpu_seconds, 3.0);
        assert_eq!(figures.resident_bytes, 2500 * 4096);
        assert_eq!(figures.start_time, 1_764_720_000 + 120);
        assert_eq!(figures.open_fds, 17);
        assert!(parse("garbage", boot, (100, 4096), 0).is_none());
    }

    #[test]
    fn this_process_reads_itself() {
        let figures = read().unwrap();
        assert!(figures.resident_bytes > 0 && figures.open_fds > 0 && figures.start_time > 1_700_000_000);
    }
}
