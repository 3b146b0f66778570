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

#[test]
fn send_stream_keeps_written_bytes_and_reads_across_them() {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let mut s = SendStream::new(8_000, 1 << 20);
    let chunk = bytes::Bytes::copy_from_slice(&data[..3000]);
    assert_eq!(s.write_bytes(&chunk), 3000);
    assert_eq!(s.write(&data[3000..3100]), 100);
    let rest = bytes::Bytes::copy_from_slice(&data[3100..]);
    assert_eq!(s.write_bytes(&rest), 4900, "bounded by the buffer");
    let mut out = vec![0u8; 5000];
    s.read_chunk(2500, &mut out);
    assert_eq!(&out[..], &data[2500..7500]);
    // Acknowledging frees whole segments only; what is left still reads back.
    s.on_acked(0..3050, false);
    assert_eq!(s.writable(), 3050);
    let mut tail = vec![0u8; 4950];
    s.read_chunk(3050, &mut tail);
    assert_eq!(&tail[..], &data[3050..8000]);
    assert!(s.allocated() < 16_000);
}

#[test]
fn recv_stream_keeps_in_order_slices_and_settles_them() {
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let packet = |r: std::ops::Range<usize>| bytes::Bytes::copy_from_slice(&data[r]);
    let mut r = RecvStream::new(1 << 20);
    // In order: kept as slices, nothing copied into the ring.
    let a = packet(0..1000);
    r.on_data_from(0, &a, Some(&a), false).unwrap();
    let b = packet(1000..2000);
    r.on_data_from(1000, &b[..500], Some(&b), false).unwrap();
    assert_eq!(r.queued(), 1500);
    // Out of order: the ring; and a frame filling the hole goes to the ring too.
    let c = packet(3000..4000);
    let got = r.on_data_from(3000, &c, Some(&c), false).unwrap();
    assert!(got.out_of_order);
    let d = packet(1500..3000);
    r.on_data_from(1500, &d, Some(&d), false).unwrap();
    assert_eq!(r.queued(), 1500);
    assert_eq!(r.readable(), 4000);
    let mut out = vec![0u8; 1200];
    assert_eq!(r.read(&mut out), 1200);
    assert_eq!(&out[..], &data[..1200]);
    // Reading past the queue and through the ring.
    let mut out = vec![0u8; 2800];
    assert_eq!(r.read(&mut out), 2800);
    assert_eq!(&out[..], &data[1200..4000]);
    assert_eq!(r.queued(), 0);
    // Nothing held: in-order bytes are queued again, then settled into the ring.
    let e = packet(4000..9000);
    r.on_data_from(4000, &e, Some(&e), false).unwrap();
    assert_eq!(r.queued(), 5000);
    r.settle();
    assert_eq!(r.queued(), 0);
    let f = packet(9000..10_000);
    r.on_data_from(9000, &f, Some(&f), false).unwrap();
    assert_eq!(
        r.queued(),
        0,
        "the ring holds bytes: no slices until it is drained"
    );
    let mut out = vec![0u8; 6000];
    assert_eq!(r.read(&mut out), 6000);
    assert_eq!(&out[..], &data[4000..10_000]);
    // A duplicate of queued bytes changes nothing.
    let g = packet(10_000..12_000);
    r.on_data_from(10_000, &g, Some(&g), false).unwrap();
    let dup = r.on_data_from(10_000, &g[..1000], Some(&g), false).unwrap();
    assert_eq!((dup.new_bytes, dup.duplicate_bytes), (0, 1000));
    let mut out = vec![0u8; 2000];
    assert_eq!(r.read(&mut out), 2000);
    assert_eq!(&out[..], &data[10_000..12_000]);
}
