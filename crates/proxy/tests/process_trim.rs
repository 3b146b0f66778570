//! The daemons give freed heap memory back to the system (`braid_proxy::process`). Alone in its
//! test binary: it reads the process's resident memory, which other tests running beside it
//! would move.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use braid_proxy::process;

/// 96 MiB freed in 64 KiB blocks (below glibc's mmap threshold, so from an arena) while the
/// last block stays allocated: the allocator keeps the pages resident until the heap is
/// trimmed, and the trim gives most of them back.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn a_trim_gives_freed_heap_memory_back() {
    const BLOCK: usize = 64 << 10;
    const BLOCKS: usize = 1536;
    // A thread of its own, as the daemon's workers allocate in their own arenas.
    let (returned, held, resident_freed) = std::thread::spawn(|| {
        let mut blocks: Vec<Vec<u8>> = (0..BLOCKS)
            .map(|i| {
                let mut b = vec![0u8; BLOCK];
                // Every page written, so that it is resident.
                for page in b.chunks_mut(4096) {
                    page[0] = i as u8 | 1;
                }
                b
            })
            .collect();
        let keep = blocks.pop().expect("a block");
        drop(blocks);
        let held = process::heap_free_bytes().expect("glibc reports its free memory");
        let resident_freed = process::resident_bytes().expect("/proc/self/statm");
        let returned = process::trim_heap();
        assert_eq!(keep[BLOCK - 1], 0);
        (returned, held, resident_freed)
    })
    .join()
    .unwrap();
    let freed = ((BLOCKS - 1) * BLOCK) as u64;
    assert!(held >= freed, "free heap {held} B after freeing {freed} B");
    let returned = returned.expect("glibc trims");
    assert!(
        returned >= freed / 2,
        "the trim gave back {returned} B of {freed} B freed (resident {resident_freed} B before)"
    );
    let report = process::ProcessReport::now().unwrap();
    assert_eq!(report.heap_trims, 1);
    assert_eq!(report.heap_returned_bytes, returned);
}
