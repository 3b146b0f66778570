//! Send and receive halves of a stream in isolation.

use super::*;

const T0: Timestamp = Timestamp::ZERO;
const RTT: Duration = Duration::from_millis(100);

#[test]
fn send_stream_retransmits_lost_ranges_then_frees_acked_bytes() {
    let mut s = SendStream::new(100, 1_000);
    assert_eq!(s.write(&[7; 150]), 100, "buffer bounds writes");
    let a = s.peek(40, u64::MAX).unwrap();
    assert_eq!((a.offset, a.len, a.retransmit), (0, 40, false));
    s.on_sent(a);
    let b = s.peek(40, u64::MAX).unwrap();
    s.on_sent(b);
    assert_eq!(s.on_lost(0..40, false), 40);
    let r = s.peek(100, u64::MAX).unwrap();
    assert_eq!((r.offset, r.len, r.retransmit), (0, 40, true));
    // The original arrives after all: nothing to resend, bytes freed.
    assert_eq!(s.on_acked(0..40, false), 40);
    assert!(!s.has_lost());
    assert_eq!(s.writable(), 40);
    s.on_acked(40..80, false);
    assert_eq!(s.writable(), 80);
}

#[test]
fn send_stream_respects_credit_and_carries_fin() {
    let mut s = SendStream::new(100, 10);
    s.write(&[1; 30]);
    let c = s.peek(100, u64::MAX).unwrap();
    assert_eq!(c.len, 10, "flow credit");
    s.on_sent(c);
    assert!(s.peek(100, u64::MAX).is_none());
    s.max_data = 100;
    assert_eq!(s.peek(100, 5).unwrap().len, 5, "session credit");
    s.finish();
    let last = s.peek(100, u64::MAX).unwrap();
    assert!(last.fin && last.len == 20);
    s.on_sent(last);
    s.on_lost(10..30, true);
    let again = s.peek(100, u64::MAX).unwrap();
    assert!(again.fin && again.retransmit);
    s.on_sent(again);
    s.on_acked(0..10, false);
    s.on_acked(10..30, true);
    assert!(s.is_done());
}

#[test]
fn recv_stream_reorders_and_enforces_limits() {
    let mut r = RecvStream::new(64);
    let got = r.on_data(10, &[2; 10], false).unwrap();
    assert!(got.out_of_order && got.new_bytes == 10);
    assert_eq!(r.readable(), 0);
    r.on_data(0, &[1; 10], false).unwrap();
    let dup = r.on_data(5, &[1; 10], false).unwrap();
    assert_eq!(dup.duplicate_bytes, 10);
    let mut out = [0u8; 32];
    assert_eq!(r.read(&mut out), 20);
    assert_eq!(&out[..20], &[[1u8; 10], [2u8; 10]].concat()[..]);
    assert_eq!(
        r.on_data(60, &[0; 10], false),
        Err(RecvViolation::FlowControl {
            offset: 70,
            limit: 64
        })
    );
    r.on_data(20, &[3; 5], true).unwrap();
    assert_eq!(
        r.on_data(20, &[3; 6], false),
        Err(RecvViolation::FinalSize {
            offset: 26,
            final_size: 25
        })
    );
    assert_eq!(r.read(&mut out), 5);
    assert!(r.is_finished());
}

#[test]
fn recv_window_moves_after_a_fraction_is_read() {
    let mut r = RecvStream::new(100);
    r.on_data(0, &[0; 60], false).unwrap();
    assert_eq!(r.window_update(T0, RTT), None);
    let mut out = [0u8; 60];
    let step = 100 / CREDIT_UPDATE_FRACTION as usize;
    // One byte short of the fraction: no update yet.
    assert_eq!(r.read(&mut out[..step - 1]), step - 1);
    assert_eq!(r.window_update(T0, RTT), None);
    assert_eq!(r.read(&mut out[step - 1..60]), 61 - step);
    assert_eq!(r.window_update(T0, RTT), Some(160));
    // The ring wraps around without corrupting data.
    let data: Vec<u8> = (0..100).collect();
    r.on_data(60, &data, false).unwrap();
    let mut back = [0u8; 100];
    assert_eq!(r.read(&mut back), 100);
    assert_eq!(&back[..], &data[..]);
}

/// Reads everything readable and returns the window update, at `now`.
fn drain(r: &mut RecvStream, now: Timestamp) -> Option<u64> {
    let mut out = vec![0u8; 1 << 16];
    while r.read(&mut out) > 0 {}
    r.window_update(now, RTT)
}

/// Stores `len` bytes at `*at` in pieces of `piece`, the reader taking each as it comes, at
/// `now`.
fn keep_up(r: &mut RecvStream, at: &mut u64, len: u64, piece: u64, now: Timestamp) {
    let end = *at + len;
    while *at < end {
        let n = piece.min(end - *at);
        r.on_data(*at, &vec![1; n as usize], false).unwrap();
        *at += n;
        drain(r, now);
    }
}

#[test]
fn a_window_grows_while_the_reader_keeps_up_and_never_past_its_largest() {
    let ms = Timestamp::from_millis;
    let mut r = RecvStream::new(1000).growing_to(3000);
    assert_eq!(r.window(), 1000);
    let mut at = 0;
    // The first read starts the measure, at 0 ms.
    assert_eq!(drain(&mut r, ms(0)), None);
    // A whole window (1000 bytes) read as it came, by 150 ms, under two round trips: the
    // window doubles and the new credit covers it at once.
    keep_up(&mut r, &mut at, 1000, 250, ms(150));
    assert_eq!((r.window(), r.max_data), (2000, 1000 + 2000));
    // Bytes beyond the first window's reach are now taken; 2000 more by 300 ms: doubled
    // again, but to the largest only.
    keep_up(&mut r, &mut at, 2000, 250, ms(300));
    assert_eq!((r.window(), r.max_data), (3000, 3000 + 3000));
    keep_up(&mut r, &mut at, 3000, 250, ms(310));
    assert_eq!((r.window(), r.max_data), (3000, 6000 + 3000));

    // A reader that let half a window or more wait does not grow it, however quickly it then
    // reads: the application held the flow back, not the window.
    let mut lagging = RecvStream::new(1000).growing_to(8000);
    drain(&mut lagging, ms(0));
    lagging.on_data(0, &[7; 1000], false).unwrap();
    assert_eq!(drain(&mut lagging, ms(10)), Some(2000));
    assert_eq!(lagging.window(), 1000);

    // A reader that takes longer than two round trips over each window keeps the first.
    let mut slow = RecvStream::new(1000).growing_to(8000);
    let mut at = 0;
    for step in 0..20u64 {
        slow.on_data(at, &[5; 250], false).unwrap();
        at += 250;
        drain(&mut slow, ms(step * 60));
    }
    assert_eq!(slow.window(), 1000, "1000 bytes per 240 ms");
    // Without a largest above the first, the window stays whatever the pace.
    let mut fixed = RecvStream::new(1000);
    fixed.on_data(0, &[6; 1000], false).unwrap();
    drain(&mut fixed, ms(0));
    fixed.on_data(1000, &[6; 1000], false).unwrap();
    assert_eq!(drain(&mut fixed, ms(1)), Some(3000));
    assert_eq!(fixed.window(), 1000);
}

#[test]
fn a_grown_window_and_its_ring_shrink_back_once_the_reader_slows() {
    const K: u64 = 1024;
    let ms = Timestamp::from_millis;
    let mut r = RecvStream::new(16 * K).growing_to(128 * K);
    let mut at = 0;
    let feed = |r: &mut RecvStream, at: &mut u64, len: u64| {
        r.on_data(*at, &vec![9; len as usize], false).unwrap();
        *at += len;
    };
    // A reader that keeps up: 16, 32, 64 KiB windows each read in 50 ms.
    drain(&mut r, ms(0));
    for (step, len) in [16 * K, 32 * K, 64 * K].into_iter().enumerate() {
        keep_up(&mut r, &mut at, len, 4 * K, ms(50 * (step as u64 + 1)));
    }
    assert_eq!(r.window(), 128 * K);
    // The sender fills the window; the ring grows to hold it.
    let credit = r.max_data - at;
    feed(&mut r, &mut at, credit);
    let grown = r.allocated();
    assert!(grown >= 128 * K, "{grown}");
    // Now 1 KiB read every 100 ms from 300 ms on: less than a window in four round trips
    // (400 ms), the window halves, and again every 500 ms (at the next read), never below the
    // first.
    let mut out = [0u8; 1024];
    let mut windows = Vec::new();
    for step in 1..=60u64 {
        r.read(&mut out);
        r.window_update(ms(200 + step * 100), RTT);
        windows.push(r.window());
    }
    // (The measure began at the last growth, at 150 ms.)
    assert_eq!(windows[2], 128 * K, "{windows:?}");
    assert_eq!(windows[3], 64 * K, "{windows:?}");
    assert_eq!(windows[7], 64 * K, "{windows:?}");
    assert_eq!(windows[8], 32 * K, "{windows:?}");
    assert_eq!(windows[12], 32 * K, "{windows:?}");
    assert_eq!(windows[13], 16 * K, "{windows:?}");
    assert_eq!(*windows.last().unwrap(), 16 * K, "{windows:?}");
    // The credit granted was not taken back: no update until the reader is past it.
    assert_eq!(r.max_data, at);
    // Once the bytes held fit the smaller window, the ring shrinks with it, bytes intact.
    while r.readable() > 16 * K {
        r.read(&mut out);
    }
    r.window_update(ms(10_000), RTT);
    assert!(r.allocated() < grown / 2, "{} of {grown}", r.allocated());
    let left = r.readable() as usize;
    let mut rest = vec![0u8; left];
    assert_eq!(r.read(&mut rest), left);
    assert!(rest.iter().all(|&b| b == 9));
}

/// Writes `len` bytes of `byte`, sends them and has them all acknowledged.
fn pass_through(s: &mut SendStream, len: usize, byte: u8) {
    assert_eq!(s.write(&vec![byte; len]), len);
    while let Some(c) = s.peek(1200, u64::MAX) {
        s.on_sent(c);
        s.on_acked(c.offset..c.offset + u64::from(c.len), false);
    }
}

#[test]
fn a_send_buffer_grows_with_the_credit_up_to_its_largest() {
    let mut s = SendStream::new(100, 100).growing_to(400);
    assert_eq!(s.writable(), 100, "credit 100: the capacity");
    s.max_data = 1000;
    assert_eq!(s.writable(), 100, "credit, but nothing acknowledged yet");
    pass_through(&mut s, 100, 0);
    pass_through(&mut s, 100, 0);
    assert_eq!(s.writable(), 200, "as far as the bytes acknowledged");
    pass_through(&mut s, 100, 0);
    assert_eq!(s.writable(), 300);
    assert_eq!(s.write(&[1; 500]), 300);
    let c = s.peek(100, u64::MAX).unwrap();
    s.on_sent(c);
    s.on_acked(300..400, false);
    assert_eq!(s.writable(), 200, "at most the largest, 400, held");
    assert_eq!(s.write(&[2; 500]), 200);
    // The bytes written survive the ring's growth.
    let mut out = [0u8; 400];
    s.read_chunk(400, &mut out);
    assert_eq!(&out[..200], &[1; 200]);
    assert_eq!(&out[200..], &[2; 200]);
    s.max_data = 700;
    assert_eq!(
        s.writable(),
        0,
        "credit 300 beyond the acknowledged bytes, 400 held"
    );

    // Once the peer's credit falls back, so does the ring grown for it.
    const K: u64 = 1024;
    let mut big = SendStream::new(16 * K, 16 * K).growing_to(128 * K);
    big.max_data = 1 << 30;
    while big.writable() < 128 * K {
        pass_through(&mut big, 16 * K as usize, 3);
    }
    assert_eq!(big.write(&vec![3; 128 * K as usize]), 128 * K as usize);
    let grown = big.allocated();
    assert!(grown >= 128 * K, "{grown}");
    big.max_data = big.write_offset;
    while let Some(c) = big.peek(1200, u64::MAX) {
        big.on_sent(c);
        big.on_acked(c.offset..c.offset + u64::from(c.len), false);
    }
    assert_eq!(
        big.writable(),
        16 * K,
        "no credit beyond the bytes acknowledged"
    );
    assert!(
        big.allocated() < grown / 4,
        "{} of {grown}",
        big.allocated()
    );
    let end = big.write_offset;
    assert_eq!(big.write(&vec![4; 16 * K as usize]), 16 * K as usize);
    let mut back = vec![0u8; 16 * K as usize];
    big.read_chunk(end, &mut back);
    assert!(back.iter().all(|&b| b == 4));
    // A buffer that may not grow keeps its capacity whatever the credit.
    let mut fixed = SendStream::new(100, 1000);
    assert_eq!(fixed.writable(), 100);
    fixed.max_data = 5000;
    assert_eq!(fixed.writable(), 100);
}

#[test]
fn rings_start_small_and_grow_without_losing_bytes() {
    // Send side: a few bytes allocate a small ring; writing more (after part was acknowledged,
    // so the live bytes wrap) grows it, and every unacknowledged byte reads back unchanged.
    let window = 1 << 20;
    let mut s = SendStream::new(window, window);
    s.write(&[9; 8]);
    assert!(s.allocated() < 16 * 1024, "8 bytes take a small ring");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    s.write(&data[..5000]);
    s.on_acked(0..4000, false);
    s.write(&data[5000..]);
    let mut out = vec![0u8; data.len() - 3992];
    s.read_chunk(4000, &mut out);
    assert_eq!(&out[..1008], &data[3992..5000]);
    assert_eq!(&out[1008..], &data[5000..]);
    assert!(s.allocated() <= window + 4096);
    // Receive side: out-of-order data far ahead grows the ring; earlier bytes survive.
    let mut r = RecvStream::new(window);
    r.on_data(0, &data[..3000], false).unwrap();
    let mut head = [0u8; 1000];
    assert_eq!(r.read(&mut head), 1000);
    r.on_data(200_000, &data[200_000..201_000], false).unwrap();
    r.on_data(3000, &data[3000..200_000], false).unwrap();
    let mut back = vec![0u8; 200_000];
    assert_eq!(r.read(&mut back), 200_000);
    assert_eq!(&back[..], &data[1000..201_000]);
    // A FIN without data far ahead, then a frame filling a hole: the ring covers both.
    let mut f = RecvStream::new(window);
    f.on_data(100_000, &[], true).unwrap();
    f.on_data(0, &data[..100_000], false).unwrap();
    let mut all = vec![0u8; 100_000];
    assert_eq!(f.read(&mut all), 100_000);
    assert_eq!(&all[..], &data[..100_000]);
    assert!(f.is_finished());
}

/// A spare ring is reused until it has sat in the pool for `max_age`, then freed. (Other tests
/// share the pool; the ring's odd size keeps theirs from being taken for it.)
#[test]
fn spare_rings_are_freed_once_idle_for_the_age_given() {
    const SIZE: usize = 77_777;
    give_back_ring(vec![0xab; SIZE]);
    // Not idle for a minute yet: kept.
    release_spare_rings(Duration::from_secs(60));
    let reused = take_ring(SIZE, SIZE);
    assert_eq!(reused.len(), SIZE);
    assert!(
        reused.iter().all(|&b| b == 0xab),
        "the spare ring was not reused"
    );
    give_back_ring(reused);
    assert!(release_spare_rings(Duration::ZERO) >= SIZE);
    let fresh = take_ring(SIZE, SIZE);
    assert!(
        fresh.iter().all(|&b| b == 0),
        "a freed ring was handed out again"
    );
}
