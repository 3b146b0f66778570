//! Reading the text files a user names (configurations, scenarios, traces) with a size cap.

use std::path::Path;

/// The largest configuration, scenario or emulator file read: far above any real one, and it
/// keeps a wrong path (`/dev/zero`, a disk image) from being read until memory runs out.
pub const MAX_INPUT_FILE_BYTES: u64 = 1 << 20;

/// Reads `file` as UTF-8 text of at most `max` bytes; a longer file is an
/// [`std::io::ErrorKind::InvalidData`] error that says so, before more than `max + 1` bytes
/// are read.
pub fn read_text_capped(file: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(file)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn reads_up_to_the_cap_and_refuses_more() {
        let dir = std::env::temp_dir().join(format!("braid-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f.toml");
        std::fs::write(&file, "a = 1\n").unwrap();
        assert_eq!(read_text_capped(&file, 6).unwrap(), "a = 1\n");
        let e = read_text_capped(&file, 5).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "larger than 5 bytes");
        std::fs::write(&file, [b'a', 0xff]).unwrap();
        let e = read_text_capped(&file, 6).unwrap_err();
        assert!(e.to_string().contains("UTF-8"), "{e}");
        let e = read_text_capped(&dir, 6).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        // An endless file stops at the cap.
        let e = read_text_capped(Path::new("/dev/zero"), MAX_INPUT_FILE_BYTES).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("larger than {MAX_INPUT_FILE_BYTES} bytes")
        );
    }
}
