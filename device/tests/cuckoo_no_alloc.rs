//! Checks that the cuckoo table never allocates after construction.
use fld_device::fld::cuckoo::{CuckooTable, RingKey};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn no_allocation_after_construction() {
    let mut t = CuckooTable::new(64, 42);
    let before = allocs();
    let mut x = 1u32;
    let mut stalls = 0u32;
    for i in 0..100_000u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let k = RingKey::new((x >> 16) as u16 & 7, x as u16 & 63);
        match x % 4 {
            0 | 1 => stalls += t.insert(k, i).is_err() as u32,
            2 => {
                let _ = t.remove(k);
            }
            _ => {
                let _ = t.lookup(k);
                let _ = t.relocate((x % 5) as usize);
            }
        }
        let _ = (t.len(), t.stash_len(), t.stats(), t.memory_bytes(512, 2048));
    }
    let after = allocs();
    assert_eq!(after - before, 0, "table operations allocated");
    assert!(t.len() <= t.capacity() + 4);
    let _ = stalls;
}
