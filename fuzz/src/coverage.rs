//! What the fuzzer is shown of a run: the coverage of what the input made the card do, not that of
//! the work around it.
//!
//! Every input of a guest-surface target starts by returning a kept card to a known state and
//! ends with the recovery check (a reset, a bring-up, verified traffic). That work is the same
//! for every input and reaches thousands of edges, each of which libFuzzer's per-input feature
//! collection visits (about a third of a target's time went there), and its hit counts blur the
//! input's own: a function the check also calls lands in another counter bucket. Work run
//! through [`unobserved`] leaves the coverage counters as it found them — what AFL++ offers as
//! coverage-off regions — so its edges cost nothing to collect and tell the fuzzer nothing. A
//! panic inside still reports the input as the finding it is.
//!
//! Built without the fuzzer's instrumentation (`cargo check`, the tests), it only runs the work.

/// Runs `work` with the edges it covers hidden from the fuzzer.
pub fn unobserved<R>(work: impl FnOnce() -> R) -> R {
    #[cfg(fuzzing)]
    {
        let saved = counters::save();
        let result = work();
        counters::restore(saved);
        result
    }
    #[cfg(not(fuzzing))]
    work()
}

#[cfg(fuzzing)]
mod counters {
    // The inline 8-bit counters the SanitizerCoverage pass gives every instrumented edge, one
    // byte each, in one section of the binary; the linker names its bounds.
    extern "C" {
        #[link_name = "__start___sancov_cntrs"]
        static START: u8;
        #[link_name = "__stop___sancov_cntrs"]
        static STOP: u8;
    }

    fn bounds() -> (*mut u8, usize) {
        let start = &raw const START;
        let stop = &raw const STOP;
        (start.cast_mut(), stop as usize - start as usize)
    }

    thread_local! {
        /// Copies of the section no call holds now, kept for the next (a call inside another's
        /// work takes a second): a run of inputs allocates them once, not twice an input.
        static SPARE: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    pub fn save() -> Vec<u8> {
        let (start, len) = bounds();
        let mut copy = SPARE.with_borrow_mut(|s| s.pop()).unwrap_or_default();
        copy.clear();
        // SAFETY: `start..start + len` is the counters' section, mapped writable for the whole
        // run. The instrumented code writes it without synchronisation, as libFuzzer reads it;
        // the targets call this between the steps they drive on their own thread. Another
        // thread of theirs runs meanwhile only to poll for its next client (the vfio-user
        // servers'): a count it adds during the work may be lost, as libFuzzer's own reads race
        // such writes. The slice lives only for the copy.
        copy.extend_from_slice(unsafe { std::slice::from_raw_parts(start, len) });
        copy
    }

    pub fn restore(saved: Vec<u8>) {
        let (start, len) = bounds();
        assert_eq!(saved.len(), len);
        // SAFETY: as in `save`; `saved` is a copy of the same section, of the same length.
        unsafe { std::ptr::copy_nonoverlapping(saved.as_ptr(), start, len) };
        SPARE.with_borrow_mut(|s| s.push(saved));
    }
}
