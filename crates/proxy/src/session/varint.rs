//! QUIC variable-length integers (RFC 9000 §16) and the bounds-checked byte cursors the frame
//! codec reads and writes with. Nothing here allocates; every read past the end is an error.

use super::error::FrameError;

/// The largest value a varint can hold (2^62 - 1).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Bytes the varint encoding of `v` takes (1, 2, 4 or 8).
pub const fn varint_len(v: u64) -> usize {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// Reads fields out of a received packet; every accessor names the field it was reading when
/// the input ran out.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader positioned at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not read yet, without consuming them.
    pub fn peek_rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Reads one byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(FrameError::Truncated { field })?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads a big-endian u16.
    pub fn u16(&mut self, field: &'static str) -> Result<u16, FrameError> {
        let b = self.bytes(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Reads a varint.
    pub fn varint(&mut self, field: &'static str) -> Result<u64, FrameError> {
        let first = self.u8(field)?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for _ in 1..len {
            v = (v << 8) | u64::from(self.u8(field)?);
        }
        Ok(v)
    }

    /// Reads a varint that must fit in `u32` (lengths, counts, µs budgets).
    pub fn varint_u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        let v = self.varint(field)?;
        u32::try_from(v).map_err(|_| FrameError::ValueTooLarge { field, value: v })
    }

    /// Borrows the next `len` bytes.
    pub fn bytes(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], FrameError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or(FrameError::Truncated { field })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
}

/// Writes fields into a caller-provided buffer; fails (without writing past the end) when the
/// buffer is too small.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// A writer at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, pos: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.pos
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// Room left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Writes one byte.
    pub fn u8(&mut self, v: u8) -> Result<(), FrameError> {
        self.bytes(&[v])
    }

    /// Writes a big-endian u16.
    pub fn u16(&mut self, v: u16) -> Result<(), FrameError> {
        self.bytes(&v.to_be_bytes())
    }

    /// Writes a varint; values above [`VARINT_MAX`] are an error.
    pub fn varint(&mut self, v: u64) -> Result<(), FrameError> {
        if v > VARINT_MAX {
            return Err(FrameError::ValueTooLarge {
                field: "varint",
                value: v,
            });
        }
        match varint_len(v) {
            1 => self.u8(v as u8),
            2 => self.bytes(&((v as u16) | 0x4000).to_be_bytes()),
            4 => self.bytes(&((v as u32) | 0x8000_0000).to_be_bytes()),
            _ => self.bytes(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
        }
    }

    /// Hands out the next `n` bytes for the caller to fill (e.g. straight from a flow's ring).
    pub fn reserve(&mut self, n: usize) -> Result<&mut [u8], FrameError> {
        let start = self.pos;
        let end = start + n;
        if end > self.buf.len() {
            return Err(FrameError::BufferTooSmall {
                needed: end,
                available: self.buf.len(),
            });
        }
        self.pos = end;
        Ok(&mut self.buf[start..end])
    }

    /// Copies `data` in.
    pub fn bytes(&mut self, data: &[u8]) -> Result<(), FrameError> {
        self.reserve(data.len())?.copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        for v in [
            0,
            63,
            64,
            16_383,
            16_384,
            (1 << 30) - 1,
            1 << 30,
            VARINT_MAX,
        ] {
            let mut buf = [0u8; 8];
            let mut w = Writer::new(&mut buf);
            w.varint(v).unwrap();
            let n = w.len();
            assert_eq!(n, varint_len(v));
            let mut r = Reader::new(&buf[..n]);
            assert_eq!(r.varint("v").unwrap(), v);
            assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let mut buf = [0u8; 8];
        assert!(matches!(
            Writer::new(&mut buf).varint(VARINT_MAX + 1),
            Err(FrameError::ValueTooLarge { .. })
        ));
        assert!(matches!(
            Writer::new(&mut buf[..1]).varint(64),
            Err(FrameError::BufferTooSmall { .. })
        ));
        assert_eq!(
            Reader::new(&[0x40]).varint("offset"),
            Err(FrameError::Truncated { field: "offset" })
        );
        assert!(Reader::new(&[1, 2]).bytes(3, "data").is_err());
    }
}
