//! No allocation per packet: after warm-up, a bulk transfer over two paths runs thousands of
//! `poll_transmit` / `handle_datagram` / `handle_timeout` / `write` / `read` calls without a
//! single heap allocation inside the session (counted by a global allocator that only counts
//! while a session call runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use portable_atomic::AtomicU64;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use braid_proxy::session::{Event, FlowKind, PathConfig, Role, Session, SessionConfig, Target};
use braid_sched_core::{AnyScheduler, PathId, SchedulerKind, Timestamp};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counted<T>(f: impl FnOnce() -> T) -> T {
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    out
}

struct Wire {
    /// (arrival, to, path, bytes, len): buffers are allocated up front and recycled.
    in_flight: VecDeque<(Timestamp, usize, PathId, Vec<u8>, usize)>,
    spare: Vec<Vec<u8>>,
}

#[test]
fn session_send_path_does_not_allocate_after_warm_up() {
    let config = SessionConfig::default();
    let mut ends = [
        Session::new(
            config.clone(),
            Role::Client,
            AnyScheduler::with_defaults(SchedulerKind::MinRtt),
            Timestamp::ZERO,
        ),
        Session::new(
            config,
            Role::Server,
            AnyScheduler::with_defaults(SchedulerKind::MinRtt),
            Timestamp::ZERO,
        ),
    ];
    for s in &mut ends {
        s.add_path(PathId(0), PathConfig::default(), Timestamp::ZERO)
            .unwrap();
        s.add_path(PathId(1), PathConfig::default(), Timestamp::ZERO)
            .unwrap();
    }
    let flow = ends[0]
        .open_flow(
            FlowKind::Stream,
            Target::Addr("192.0.2.7:80".parse().unwrap()),
        )
        .unwrap();
    let mut wire = Wire {
        in_flight: VecDeque::with_capacity(100_000),
        spare: (0..100_000).map(|_| vec![0u8; 1500]).collect(),
    };
    let delays = [Duration::from_millis(10), Duration::from_millis(17)];
    let chunk = vec![0x5au8; 32 * 1024];
    let mut read_buf = vec![0u8; 64 * 1024];
    let mut out = vec![0u8; 1500];
    let mut now = Timestamp::ZERO;
    let mut packets = 0u64;
    let mut warm_allocations = 0;
    let mut received = 0u64;
    for tick in 0..4_000u32 {
        if tick == 1_000 {
            warm_allocations = ALLOCATIONS.load(Ordering::Relaxed);
            packets = 0;
        }
        // Application: keep the sender's buffer full, drain the receiver.
        counted(|| while ends[0].write(flow, &chunk).unwrap() > 0 {});
        counted(|| {
            while let Some(e) = ends[1].poll_event() {
                let _ = e == Event::FlowReadable(flow);
            }
            while let Ok(Some(n)) = ends[1].read(flow, &mut read_buf) {
                if n == 0 {
                    break;
                }
                received += n as u64;
            }
            while ends[0].poll_event().is_some() {}
        });
        // Transmit everything the windows allow.
        for (side, end) in ends.iter_mut().enumerate() {
            while let Some(t) = counted(|| end.poll_transmit(now, &mut out)) {
                let mut buf = wire.spare.pop().unwrap();
                buf[..t.len].copy_from_slice(&out[..t.len]);
                wire.in_flight.push_back((
                    now + delays[t.path.index()],
                    1 - side,
                    t.path,
                    buf,
                    t.len,
                ));
                packets += 1;
            }
        }
        now += Duration::from_micros(500);
        // Deliver what has arrived (the two delays keep each path's packets in order).
        let mut i = 0;
        while i < wire.in_flight.len() {
            if wire.in_flight[i].0 <= now {
                let (_, to, path, buf, len) = wire.in_flight.remove(i).unwrap();
                counted(|| ends[to].handle_datagram(path, &buf[..len], now)).unwrap();
                wire.spare.push(buf);
            } else {
                i += 1;
            }
        }
        for s in &mut ends {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                counted(|| s.handle_timeout(now));
            }
        }
    }
    let steady = ALLOCATIONS.load(Ordering::Relaxed) - warm_allocations;
    println!("{packets} packets after warm-up, {received} bytes received, {steady} allocations");
    assert!(
        warm_allocations > 0,
        "the counter saw the warm-up buffers being allocated"
    );
    assert!(
        packets > 10_000,
        "too few packets to mean anything: {packets}"
    );
    assert!(received > 10_000_000);
    assert_eq!(
        steady, 0,
        "session allocated {steady} times over {packets} packets"
    );
}
