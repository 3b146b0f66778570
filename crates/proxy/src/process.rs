//! The daemon process itself: its resident memory, CPU time, threads and open files for
//! `braid status` and the metrics endpoint, and giving heap memory that was freed back to the
//! system.
//!
//! glibc's allocator keeps what the daemon frees for later allocations: after a burst of load
//! (48 downloads at once through the client, then none), a server sat at 159 MiB resident with
//! one idle session, of which a `malloc_trim(0)` gave back all but 46 MiB. So each daemon runs
//! [`trim_loop`]: every [`TRIM_INTERVAL`] it asks the allocator how much it holds free
//! (`mallinfo2`), and when at least [`TRIM_THRESHOLD`] of it was freed since the last trim
//! ([`TrimPolicy`]) it trims the heap (on a blocking thread: the trim takes every arena's lock
//! in turn). Before each look it frees the flows' spare rings that sat unused for an interval
//! (`crate::session::release_spare_rings`; heaptrack found 33.5 MB of them live in an idle
//! server, when each thread kept its own pool of up to 16 MiB). Other C libraries (musl on
//! OpenWrt) give large blocks back by themselves; there the loop only frees the spare rings,
//! and the heap figures are absent.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often the daemon looks at the heap's free memory.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Free heap memory (bytes) at which the daemon gives it back to the system.
pub const TRIM_THRESHOLD: u64 = 8 << 20;

/// Trims done and bytes given back, process-wide (a trim is process-wide too).
static TRIMS: AtomicU64 = AtomicU64::new(0);
static RETURNED: AtomicU64 = AtomicU64::new(0);

/// The process, as `braid status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessReport {
    /// Resident memory (bytes).
    pub resident_bytes: u64,
    /// Virtual memory (bytes).
    pub virtual_bytes: u64,
    /// User and system CPU time since start (seconds).
    pub cpu_seconds: f64,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// Threads.
    pub threads: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The limit on open file descriptors (the soft `RLIMIT_NOFILE`).
    pub max_fds: u64,
    /// Heap memory the allocator holds free (glibc only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heap_free_bytes: Option<u64>,
    /// Heap trims done since start ([`trim_loop`]).
    pub heap_trims: u64,
    /// Resident bytes those trims gave back.
    pub heap_returned_bytes: u64,
}

impl ProcessReport {
    /// This process now; `None` where `/proc/self` cannot be read.
    pub fn now() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let stat = Stat::parse(&stat)?;
        let btime = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<u64>().ok())?;
        // SAFETY: `sysconf` only reads configuration values.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let ticks = u64::try_from(ticks).ok().filter(|&t| t > 0)? as f64;
        let page = u64::try_from(page).ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `getrlimit` writes the limit into `limit`, which lives through the call.
        let max_fds = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
            0 => limit.rlim_cur,
            _ => 0,
        };
        Some(ProcessReport {
            resident_bytes: stat.rss_pages.saturating_mul(page),
            virtual_bytes: stat.vsize,
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            start_time_seconds: btime as f64 + stat.starttime as f64 / ticks,
            threads: stat.threads,
            open_fds,
            max_fds,
            heap_free_bytes: heap_free_bytes(),
            heap_trims: TRIMS.load(Ordering::Relaxed),
            heap_returned_bytes: RETURNED.load(Ordering::Relaxed),
        })
    }
}

/// The fields of `/proc/self/stat` the report uses (proc(5) numbers them from 1).
#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    threads: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

impl Stat {
    /// Parses the text of `/proc/PID/stat`; the command name (field 2) may hold spaces and
    /// parentheses, so the fields are counted from after its last `)`.
    fn parse(text: &str) -> Option<Self> {
        let rest = &text[text.rfind(')')? + 1..];
        // `rest` starts at field 3 (the state).
        let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            utime: field(14)?,
            stime: field(15)?,
            threads: field(20)?,
            starttime: field(22)?,
            vsize: field(23)?,
            rss_pages: field(24)?,
        })
    }
}

/// Resident memory now (bytes), from `/proc/self/statm`.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_ascii_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: `sysconf` only reads a configuration value.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    Some(pages.saturating_mul(page))
}

/// Heap memory the allocator holds free, in every arena (glibc's `mallinfo2().fordblks`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn heap_free_bytes() -> Option<u64> {
    // SAFETY: `mallinfo2` takes no arguments and returns a plain struct.
    let info = unsafe { libc::mallinfo2() };
    Some(info.fordblks as u64)
}

/// Heap memory the allocator holds free: not known with this C library.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn heap_free_bytes() -> Option<u64> {
    None
}

/// Gives the heap's free memory back to the system now: returns the resident bytes given back
/// (counted in the report), or `None` where this C library cannot. Blocks while the allocator
/// trims (it takes every arena's lock in turn).
pub fn trim_heap() -> Option<u64> {
    heap_free_bytes()?;
    let before = resident_bytes()?;
    trim();
    let returned = before.saturating_sub(resident_bytes()?);
    TRIMS.fetch_add(1, Ordering::Relaxed);
    RETURNED.fetch_add(returned, Ordering::Relaxed);
    Some(returned)
}

/// When to trim. The allocator's free figure does not fall when a trim gives pages back (they
/// stay free chunks, only no longer resident), so "free memory above the threshold" alone would
/// trim every interval after the first burst of load. A trim is due when at least `threshold`
/// bytes are free and either the free memory rose by `threshold` from its lowest since the last
/// trim (memory was used and freed again), or the resident memory rose by `threshold` since
/// just after the last trim (free pages were touched again between two looks).
#[derive(Clone, Copy, Debug)]
pub struct TrimPolicy {
    threshold: u64,
    low_free: u64,
    resident_after: u64,
}

impl TrimPolicy {
    /// A policy starting from the heap's free bytes and the resident bytes now.
    pub fn new(threshold: u64, free: u64, resident: u64) -> Self {
        TrimPolicy {
            threshold,
            low_free: free,
            resident_after: resident,
        }
    }

    /// Whether a trim is due, given the heap's free bytes and the resident bytes now.
    pub fn due(&mut self, free: u64, resident: u64) -> bool {
        self.low_free = self.low_free.min(free);
        free >= self.threshold
            && (free - self.low_free >= self.threshold
                || resident >= self.resident_after.saturating_add(self.threshold))
    }

    /// A trim was done; `free` and `resident` are the figures just after it.
    pub fn trimmed(&mut self, free: u64, resident: u64) {
        self.low_free = free;
        self.resident_after = resident;
    }
}

/// Frees the flows' spare rings idle for an interval (`crate::session::release_spare_rings`),
/// then looks at the heap and trims it when `policy` says so; returns the bytes given back.
fn trim_when_due(policy: &mut TrimPolicy) -> Option<u64> {
    crate::session::release_spare_rings(TRIM_INTERVAL);
    let (free, resident) = (heap_free_bytes()?, resident_bytes()?);
    if !policy.due(free, resident) {
        return None;
    }
    let returned = trim_heap()?;
    policy.trimmed(heap_free_bytes()?, resident_bytes()?);
    Some(returned)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: `malloc_trim` only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// Every [`TRIM_INTERVAL`], gives the heap's free memory back to the system when
/// [`TrimPolicy`] says a trim is due (at least [`TRIM_THRESHOLD`] free and freed since the
/// last one). Runs until its task is aborted (the daemon's shutdown).
pub async fn trim_loop() {
    let (Some(free), Some(resident)) = (heap_free_bytes(), resident_bytes()) else {
        // No heap figures (not glibc): the spare rings are still freed when idle.
        let mut tick = tokio::time::interval(TRIM_INTERVAL);
        loop {
            tick.tick().await;
            crate::session::release_spare_rings(TRIM_INTERVAL);
        }
    };
    let mut policy = TrimPolicy::new(TRIM_THRESHOLD, free, resident);
    let mut tick = tokio::time::interval(TRIM_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let looked = tokio::task::spawn_blocking(move || {
            let returned = trim_when_due(&mut policy);
            (policy, returned)
        })
        .await;
        let Ok((after, returned)) = looked else {
            return;
        };
        policy = after;
        if let Some(returned) = returned {
            tracing::debug!(returned, "heap trimmed");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_stat_fields_are_counted_after_the_command_name() {
        // A command name with spaces and a parenthesis, as a process may name itself.
        let text = "4242 (braid (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 150 25 0 0 20 0 \
                    3 0 98765 123456789 4321 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 \
                    17 1 0 0 0 0 0";
        assert_eq!(
            Stat::parse(text),
            Some(Stat {
                utime: 150,
                stime: 25,
                threads: 3,
                starttime: 98765,
                vsize: 123456789,
                rss_pages: 4321,
            })
        );
        assert_eq!(Stat::parse("4242 (braid) S 1 2"), None);
        assert_eq!(Stat::parse("no parenthesis"), None);
    }

    #[test]
    fn a_trim_is_due_once_per_release_of_memory() {
        const T: u64 = 8 << 20;
        const MB: u64 = 1 << 20;
        let mut p = TrimPolicy::new(T, MB, 10 * MB);
        // Load: memory in use, little free.
        assert!(!p.due(2 * MB, 60 * MB));
        // The load ends: 40 MB freed.
        assert!(p.due(42 * MB, 60 * MB));
        p.trimmed(42 * MB, 20 * MB);
        // Idle: the free figure stays where it was and nothing is due, look after look.
        for _ in 0..3 {
            assert!(!p.due(42 * MB, 20 * MB));
        }
        // A little freed: below the threshold.
        assert!(!p.due(45 * MB, 20 * MB));
        // A burst between two looks: the free figure is back where it was, but its pages were
        // touched (resident +30 MB): due.
        assert!(p.due(42 * MB, 50 * MB));
        p.trimmed(42 * MB, 20 * MB);
        // Load again, with little free: nothing to give back.
        assert!(!p.due(5 * MB, 55 * MB));
        // Under that load: 9 MB free, the pages touched again since the last trim: due once.
        assert!(p.due(9 * MB, 55 * MB));
        p.trimmed(9 * MB, 52 * MB);
        assert!(!p.due(9 * MB, 55 * MB));
        // The load ends: freed from the lowest free figure since the trim.
        assert!(!p.due(6 * MB, 55 * MB));
        assert!(p.due(30 * MB, 55 * MB));
        // Never with less than the threshold free, whatever the resident memory did.
        let mut small = TrimPolicy::new(T, 0, 0);
        assert!(!small.due(T - 1, 1 << 40));
    }

    #[test]
    fn this_process_reports_itself() {
        let report = ProcessReport::now().unwrap();
        assert!(report.resident_bytes > 1 << 20, "{report:?}");
        assert!(report.virtual_bytes >= report.resident_bytes, "{report:?}");
        assert!(report.threads >= 1 && report.open_fds >= 3, "{report:?}");
        assert!(report.max_fds >= report.open_fds, "{report:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        // Started within the last day (the test binary), not in the future.
        assert!(
            report.start_time_seconds <= now + 1.0 && report.start_time_seconds > now - 86_400.0,
            "{report:?} at {now}"
        );
        assert!(
            report.heap_free_bytes.is_some() == cfg!(target_env = "gnu"),
            "{report:?}"
        );
    }
}
