// C ABI around the Verilator model of an accelerator top module (the ports of fld_accel.vh).
// Compiled with the design: FLD_RTL_TRACE selects VCD support, the model's class is Vfld_top
// (verilator --prefix Vfld_top). One call runs one clock cycle, so the bridge needs one foreign
// call per cycle and no knowledge of Verilator's C++ types.
#include <cstdint>
#include <cstring>

#include "Vfld_top.h"
#include "verilated.h"
#if FLD_RTL_TRACE
#include "verilated_vcd_c.h"
#endif

// The ports' widths are the contract's: a mismatch is a build error here, not a wrong copy.
static_assert(sizeof(((Vfld_top*)nullptr)->rx_tdata) == 64, "rx_tdata must be 512 bits");
static_assert(sizeof(((Vfld_top*)nullptr)->tx_tdata) == 64, "tx_tdata must be 512 bits");
static_assert(sizeof(((Vfld_top*)nullptr)->rx_tkeep) == 8, "rx_tkeep must be 64 bits");
static_assert(sizeof(((Vfld_top*)nullptr)->tx_tkeep) == 8, "tx_tkeep must be 64 bits");
static_assert(sizeof(((Vfld_top*)nullptr)->rx_tuser) == 20, "rx_tuser must be 160 bits");
static_assert(sizeof(((Vfld_top*)nullptr)->tx_tuser) == 24, "tx_tuser must be 192 bits");

extern "C" {

// Mirrors `ffi::Inputs` and `ffi::Outputs` in the bridge (repr(C)).
struct FldRtlInputs {
    uint32_t rx_tdata[16];
    uint64_t rx_tkeep;
    uint32_t rx_tuser[5];
    uint32_t credit_packets;
    uint32_t credit_bytes;
    uint8_t rst;
    uint8_t rx_tvalid;
    uint8_t rx_tlast;
    uint8_t tx_tready;
};

struct FldRtlOutputs {
    uint32_t tx_tdata[16];
    uint64_t tx_tkeep;
    uint32_t tx_tuser[6];
    uint16_t credit_queue;
    uint8_t tx_tvalid;
    uint8_t tx_tlast;
    uint8_t rx_tready;
};

struct FldRtl {
    VerilatedContext ctx;
    Vfld_top* top;
#if FLD_RTL_TRACE
    VerilatedVcdC* vcd;
#endif
    uint64_t half_period_ps;
    uint64_t now_ps;
};

uint32_t fld_rtl_abi_version(void) { return 3; }

int fld_rtl_has_trace(void) { return FLD_RTL_TRACE; }

// `vcd_path` may be null (no waveform); it is ignored when built without trace support.
FldRtl* fld_rtl_new(const char* vcd_path, uint64_t period_ps) {
    FldRtl* m = new FldRtl();
    m->half_period_ps = period_ps / 2 ? period_ps / 2 : 1;
    m->now_ps = 0;
    m->ctx.timeunit(-12);
    m->ctx.timeprecision(-12);
#if FLD_RTL_TRACE
    m->vcd = nullptr;
    if (vcd_path) m->ctx.traceEverOn(true);
#else
    (void)vcd_path;
#endif
    m->top = new Vfld_top(&m->ctx, "fld_top");
#if FLD_RTL_TRACE
    if (vcd_path) {
        m->vcd = new VerilatedVcdC();
        m->top->trace(m->vcd, 99);
        m->vcd->open(vcd_path);
    }
#endif
    m->top->clk = 0;
    m->top->eval();
    return m;
}

// One cycle: inputs applied with the clock low, outputs read (what the module drives during
// the cycle), then the rising edge.
void fld_rtl_cycle(FldRtl* m, const FldRtlInputs* in, FldRtlOutputs* out) {
    Vfld_top* t = m->top;
    t->clk = 0;
    t->rst = in->rst;
    // A stream's data, keep and user signals move only with a beat: without TVALID they keep
    // their last values (the module must not look at them then), which saves the copies.
    if (in->rx_tvalid) {
        for (int i = 0; i < 16; i++) t->rx_tdata[i] = in->rx_tdata[i];
        t->rx_tkeep = in->rx_tkeep;
        for (int i = 0; i < 5; i++) t->rx_tuser[i] = in->rx_tuser[i];
    }
    t->rx_tvalid = in->rx_tvalid;
    t->rx_tlast = in->rx_tlast;
    t->tx_tready = in->tx_tready;
    t->credit_packets = in->credit_packets;
    t->credit_bytes = in->credit_bytes;
    t->eval();
#if FLD_RTL_TRACE
    if (m->vcd) m->vcd->dump(m->now_ps);
#endif
    out->tx_tvalid = t->tx_tvalid;
    if (out->tx_tvalid) {
        for (int i = 0; i < 16; i++) out->tx_tdata[i] = t->tx_tdata[i];
        out->tx_tkeep = t->tx_tkeep;
        for (int i = 0; i < 6; i++) out->tx_tuser[i] = t->tx_tuser[i];
    }
    out->credit_queue = t->credit_queue;
    out->tx_tlast = t->tx_tlast;
    out->rx_tready = t->rx_tready;
    m->now_ps += m->half_period_ps;
    t->clk = 1;
    t->eval();
#if FLD_RTL_TRACE
    if (m->vcd) m->vcd->dump(m->now_ps);
#endif
    m->now_ps += m->half_period_ps;
}

// Up to `max` cycles with the same inputs (no rx beat), stopping after the first cycle in which
// the module offers a tx beat or names another credit queue than `credit_queue`: the quiet
// stretches (idle tails, gaps between paced packets) without a foreign call per cycle. Returns
// the cycles run; `out` holds the last one's outputs.
uint64_t fld_rtl_cycles_quiet(FldRtl* m, const FldRtlInputs* in, FldRtlOutputs* out,
                              uint64_t max, uint16_t credit_queue) {
    uint64_t n = 0;
    while (n < max) {
        fld_rtl_cycle(m, in, out);
        n++;
        if (out->tx_tvalid || out->credit_queue != credit_queue) break;
    }
    return n;
}

void fld_rtl_flush(FldRtl* m) {
#if FLD_RTL_TRACE
    if (m->vcd) m->vcd->flush();
#else
    (void)m;
#endif
}

void fld_rtl_free(FldRtl* m) {
    if (!m) return;
    m->top->final();
#if FLD_RTL_TRACE
    if (m->vcd) {
        m->vcd->close();
        delete m->vcd;
    }
#endif
    delete m->top;
    delete m;
}

}  // extern "C"
