//! Send and receive halves of a stream in isolation.

use super::*;

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
    assert_eq!(r.window_update(), None);
    let mut out = [0u8; 60];
    let step = 100 / CREDIT_UPDATE_FRACTION as usize;
    // One byte short of the fraction: no update yet.
    assert_eq!(r.read(&mut out[..step - 1]), step - 1);
    assert_eq!(r.window_update(), None);
    assert_eq!(r.read(&mut out[step - 1..60]), 61 - step);
    assert_eq!(r.window_update(), Some(160));
    // The ring wraps around without corrupting data.
    let data: Vec<u8> = (0..100).collect();
    r.on_data(60, &data, false).unwrap();
    let mut back = [0u8; 100];
    assert_eq!(r.read(&mut back), 100);
    assert_eq!(&back[..], &data[..]);
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
