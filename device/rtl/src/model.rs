//! A loaded design: one Verilator model behind the shim's C ABI (`hdl/fld_rtl_shim.cpp`).
//! [`Model::cycle`] applies the inputs with the clock low, returns what the module drives during
//! the cycle, then raises the clock.

use std::ffi::{c_char, c_int, CString};
use std::path::Path;

use crate::build::{RtlDesign, RtlError};

/// The shim ABI this crate speaks (`fld_rtl_abi_version`).
pub const ABI_VERSION: u32 = 3;

/// What FLD drives into the module for one cycle. Multi-word buses are little-endian 32-bit
/// words: word 0 holds bits 31..0, so byte lane `i` is byte `i % 4` of word `i / 4`. The rx
/// data, keep and user signals reach the module only in cycles with `rx_tvalid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    pub rx_tdata: [u32; 16],
    pub rx_tkeep: u64,
    pub rx_tuser: [u32; 5],
    pub credit_packets: u32,
    pub credit_bytes: u32,
    pub rst: u8,
    pub rx_tvalid: u8,
    pub rx_tlast: u8,
    pub tx_tready: u8,
}

/// What the module drives during a cycle. `tx_tdata`, `tx_tkeep` and `tx_tuser` are updated
/// only in cycles with `tx_tvalid` (otherwise they keep the last beat's values).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outputs {
    pub tx_tdata: [u32; 16],
    pub tx_tkeep: u64,
    pub tx_tuser: [u32; 6],
    pub credit_queue: u16,
    pub tx_tvalid: u8,
    pub tx_tlast: u8,
    pub rx_tready: u8,
}

/// What the bridge clocks: a Verilator model ([`Model`]), or in tests and fuzzing a scripted
/// stand-in that drives arbitrary outputs (a module can do anything; the bridge must cope).
pub trait ClockedModel: Send {
    /// One clock cycle: `inputs` applied, `outputs` what the module drives during the cycle.
    fn cycle(&mut self, inputs: &Inputs, outputs: &mut Outputs);
    /// Up to `max` cycles with the same `inputs`, stopping after the first one in which the
    /// module offers a tx beat or names another queue than `credit_queue`; returns the cycles
    /// run (at least 1 when `max` > 0), `outputs` being the last one's.
    fn cycles_quiet(
        &mut self,
        inputs: &Inputs,
        outputs: &mut Outputs,
        max: u64,
        credit_queue: u16,
    ) -> u64 {
        let mut n = 0;
        while n < max {
            self.cycle(inputs, outputs);
            n += 1;
            if outputs.tx_tvalid != 0 || outputs.credit_queue != credit_queue {
                break;
            }
        }
        n
    }
    /// Writes buffered waveform data out.
    fn flush(&mut self) {}
}

#[repr(C)]
struct Handle {
    _private: [u8; 0],
}

type NewFn = unsafe extern "C" fn(*const c_char, u64) -> *mut Handle;
type CycleFn = unsafe extern "C" fn(*mut Handle, *const Inputs, *mut Outputs);
type HandleFn = unsafe extern "C" fn(*mut Handle);
type QuietFn = unsafe extern "C" fn(*mut Handle, *const Inputs, *mut Outputs, u64, u16) -> u64;

/// One instance of a design.
pub struct Model {
    handle: *mut Handle,
    cycle: CycleFn,
    quiet: QuietFn,
    flush: HandleFn,
    free: HandleFn,
    // Last: the code above lives in it.
    _library: libloading::Library,
}

// The model is a plain C++ object without threads of its own (single-threaded Verilator
// model); it is used by one thread at a time (FLD's lock), which may change between calls.
unsafe impl Send for Model {}

impl Model {
    /// Instantiates `design` with a clock period of `period_ps`; with `vcd`, every signal is
    /// dumped there (the design must have been built with tracing).
    pub fn new(design: &RtlDesign, period_ps: u64, vcd: Option<&Path>) -> Result<Self, RtlError> {
        if vcd.is_some() && !design.trace {
            return Err(RtlError::NoTrace(design.library.clone()));
        }
        let path = &design.library;
        let load = |e| RtlError::Load(path.clone(), e);
        // SAFETY: the library is one this crate built from the shim; loading runs Verilator's
        // static constructors, which have no preconditions.
        let library = unsafe { libloading::Library::new(path) }.map_err(load)?;
        // SAFETY: the symbols have the shim's signatures, checked by its ABI version.
        unsafe {
            let abi: libloading::Symbol<unsafe extern "C" fn() -> u32> =
                library.get(b"fld_rtl_abi_version").map_err(load)?;
            let abi = abi();
            if abi != ABI_VERSION {
                return Err(RtlError::Abi(path.clone(), abi, ABI_VERSION));
            }
            let has_trace: libloading::Symbol<unsafe extern "C" fn() -> c_int> =
                library.get(b"fld_rtl_has_trace").map_err(load)?;
            if vcd.is_some() && has_trace() == 0 {
                return Err(RtlError::NoTrace(path.clone()));
            }
            let new: NewFn = *library.get::<NewFn>(b"fld_rtl_new").map_err(load)?;
            let cycle: CycleFn = *library.get::<CycleFn>(b"fld_rtl_cycle").map_err(load)?;
            let quiet: QuietFn = *library
                .get::<QuietFn>(b"fld_rtl_cycles_quiet")
                .map_err(load)?;
            let flush: HandleFn = *library.get::<HandleFn>(b"fld_rtl_flush").map_err(load)?;
            let free: HandleFn = *library.get::<HandleFn>(b"fld_rtl_free").map_err(load)?;
            let vcd =
                vcd.map(|p| CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default());
            let handle = new(
                vcd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                period_ps,
            );
            Ok(Model {
                handle,
                cycle,
                quiet,
                flush,
                free,
                _library: library,
            })
        }
    }
}

impl ClockedModel for Model {
    #[inline]
    fn cycle(&mut self, inputs: &Inputs, outputs: &mut Outputs) {
        // SAFETY: `handle` is live until drop; the structs match the shim's layout.
        unsafe { (self.cycle)(self.handle, inputs, outputs) }
    }

    fn cycles_quiet(
        &mut self,
        inputs: &Inputs,
        outputs: &mut Outputs,
        max: u64,
        credit_queue: u16,
    ) -> u64 {
        // SAFETY: as in `cycle`.
        unsafe { (self.quiet)(self.handle, inputs, outputs, max, credit_queue) }
    }

    fn flush(&mut self) {
        // SAFETY: as in `cycle`.
        unsafe { (self.flush)(self.handle) }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: `handle` came from `fld_rtl_new` and is freed once.
        unsafe { (self.free)(self.handle) }
    }
}

/// A module that drives whatever a script says, cycle by cycle: the adversary of the bridge's
/// property test and fuzz target (a user's RTL can do anything on its outputs). Each cycle takes
/// a few bytes of the script for `rx_tready`, `tx_tvalid`, `tx_tlast`, TKEEP (full, a run from
/// lane 0, or arbitrary), TUSER (any operation code, queue and table), `credit_queue` and the
/// data; once the script is spent it either goes quiet or, if the script's first byte says so,
/// repeats its last outputs forever (a module that never stops streaming).
pub struct ScriptedModel {
    script: Vec<u8>,
    at: usize,
    forever: bool,
    last: Outputs,
}

impl ScriptedModel {
    pub fn new(script: &[u8]) -> Self {
        ScriptedModel {
            forever: script.first().is_some_and(|b| b & 1 != 0),
            script: script.to_vec(),
            at: 1,
            last: Outputs::default(),
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let b = self.script.get(self.at).copied();
        self.at += 1;
        b
    }
}

impl ClockedModel for ScriptedModel {
    fn cycle(&mut self, _inputs: &Inputs, outputs: &mut Outputs) {
        let Some(ctl) = self.byte() else {
            if !self.forever {
                self.last.tx_tvalid = 0;
                self.last.rx_tready = 1;
            }
            *outputs = self.last;
            return;
        };
        let o = &mut self.last;
        o.rx_tready = u8::from(ctl & 0x80 == 0);
        o.tx_tvalid = ctl & 1;
        o.tx_tlast = (ctl >> 1) & 1;
        let k = self.byte().unwrap_or(0);
        self.last.tx_tkeep = match ctl >> 2 & 3 {
            0 => u64::MAX,
            1 => (1u64 << (k % 64)).wrapping_sub(1).max(1),
            2 => u64::from(k) * 0x0101_0101_0101_0101,
            _ => 0,
        };
        if ctl & 0x10 != 0 {
            let u = self.byte().unwrap_or(0);
            self.last.tx_tuser[0] = u32::from(u & 3) | u32::from(u) << 24;
            self.last.tx_tuser[1] = u32::from(u >> 4);
        }
        if ctl & 0x20 != 0 {
            self.last.credit_queue = u16::from(self.byte().unwrap_or(0) & 3);
        }
        if ctl & 0x40 != 0 {
            let d = self.byte().unwrap_or(0);
            self.last.tx_tdata = [u32::from(d) * 0x0101_0101; 16];
        }
        *outputs = self.last;
    }
}
