//! Buffers that chunks and packets are split off (`BytesMut::split`) and reused once every
//! view of them is gone: at most `N` allocations, the most recently used first, instead of a
//! fresh one per chunk. A 256 KiB allocation freed and made again per chunk cost page faults (glibc gives the
//! top of its heap back and faults it in again): some 34,000 per GiB in bench `e2e/goodput`,
//! from the relay's socket reads, the driver's packet buffer and its chunks for the relay.

use bytes::BytesMut;

/// Up to `N` buffers of at least `size` bytes, allocated as chunks stay out.
#[derive(Debug)]
pub(crate) struct Arena<const N: usize> {
    bufs: [BytesMut; N],
    current: usize,
    size: usize,
}

impl<const N: usize> Arena<N> {
    /// No memory until the first [`Arena::room`].
    pub fn new(size: usize) -> Self {
        Arena {
            bufs: std::array::from_fn(|_| BytesMut::new()),
            current: 0,
            size,
        }
    }

    /// The current buffer with room for at least `want` more bytes. When it has less, and holds
    /// no bytes not yet split off, a buffer every chunk of which has been dropped is taken
    /// again (`BytesMut::try_reclaim`), the current one first (its memory is the likeliest to be
    /// in cache), then the others in turn; only when each still has chunks out does the next
    /// one get a new allocation (the old one is freed with its last chunk).
    pub fn room(&mut self, want: usize) -> &mut BytesMut {
        let current = self.current;
        let buf = &mut self.bufs[current];
        if buf.capacity() - buf.len() >= want {
            return &mut self.bufs[current];
        }
        let size = self.size.max(want);
        if !buf.is_empty() {
            buf.reserve(want);
            return &mut self.bufs[current];
        }
        for i in 0..N {
            let k = (current + i) % N;
            if self.bufs[k].try_reclaim(size) {
                self.current = k;
                return &mut self.bufs[k];
            }
        }
        self.current = (current + 1) % N;
        let buf = &mut self.bufs[self.current];
        buf.reserve(size);
        buf
    }
}

impl<const N: usize> Arena<N> {
    /// The current buffer (where the last [`Arena::room`] made room).
    pub fn current(&mut self) -> &mut BytesMut {
        &mut self.bufs[self.current]
    }

    /// Lets go of every buffer but the current one (their memory is freed with their last
    /// chunk): for a reader about to wait, so that an idle one holds a single buffer.
    pub fn keep_one(&mut self) {
        for (k, buf) in self.bufs.iter_mut().enumerate() {
            if k != self.current {
                *buf = BytesMut::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_a_buffer_once_its_chunks_are_dropped() {
        let mut arena = Arena::<2>::new(1024);
        let first = {
            let buf = arena.room(1024);
            buf.extend_from_slice(&[1; 1000]);
            buf.split().freeze()
        };
        let first_ptr = first.as_ptr();
        // 24 bytes left in the first buffer: the second is taken.
        let second = {
            let buf = arena.room(100);
            buf.extend_from_slice(&[2; 1000]);
            buf.split().freeze()
        };
        assert_ne!(second.as_ptr(), first_ptr);
        drop(first);
        // Back to the first buffer, now unshared: its allocation again.
        let third = {
            let buf = arena.room(100);
            buf.extend_from_slice(&[3; 10]);
            buf.split().freeze()
        };
        assert_eq!(third.as_ptr(), first_ptr);
        assert_eq!(&third[..], &[3; 10]);
        assert_eq!(&second[..3], &[2; 3]);
    }

    #[test]
    fn reuses_the_current_buffer_first() {
        let mut arena = Arena::<3>::new(256);
        let mut ptrs = Vec::new();
        for _ in 0..4 {
            let buf = arena.room(256);
            buf.extend_from_slice(&[7; 200]);
            let chunk = buf.split().freeze();
            ptrs.push(chunk.as_ptr());
        }
        // Each chunk was dropped before the next was asked for: one allocation throughout.
        assert!(ptrs.iter().all(|&p| p == ptrs[0]));
    }

    #[test]
    fn keep_one_lets_go_of_the_others() {
        let mut arena = Arena::<3>::new(64);
        let chunks: Vec<_> = (0..3)
            .map(|i| {
                let buf = arena.room(64);
                buf.extend_from_slice(&[i; 32]);
                buf.split().freeze()
            })
            .collect();
        // Three allocations, each with 32 bytes left.
        assert_eq!(arena.bufs.iter().filter(|b| b.capacity() > 0).count(), 3);
        arena.keep_one();
        let held = arena.bufs.iter().filter(|b| b.capacity() > 0).count();
        assert!(held <= 1);
        // The chunks are untouched; the current buffer is still used for the next one.
        assert_eq!(chunks.iter().map(|c| c[0]).collect::<Vec<_>>(), [0, 1, 2]);
        drop(chunks);
        let buf = arena.room(10);
        buf.extend_from_slice(b"0123456789");
        assert_eq!(&arena.current()[..], b"0123456789");
    }

    #[test]
    fn allocates_while_chunks_are_alive_and_keeps_unsplit_bytes() {
        let mut arena = Arena::<2>::new(64);
        let a = {
            let buf = arena.room(64);
            buf.extend_from_slice(&[1; 64]);
            buf.split().freeze()
        };
        let b = {
            let buf = arena.room(64);
            buf.extend_from_slice(&[2; 64]);
            buf.split().freeze()
        };
        // Both buffers still have live chunks: a new allocation, the chunks untouched.
        let buf = arena.room(64);
        buf.extend_from_slice(&[3; 10]);
        // Bytes not split off stay where they are when more room is asked for.
        let buf = arena.room(1000);
        assert_eq!(&buf[..], &[3; 10]);
        assert!(buf.capacity() >= 1010);
        assert_eq!((&a[..2], &b[..2]), (&[1u8, 1][..], &[2u8, 2][..]));
    }
}
