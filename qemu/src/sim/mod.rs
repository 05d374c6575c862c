//! The virtual-time runner (`fldemu sim`): the same card model as every other runner, advanced
//! by a discrete-event loop with one virtual clock in one thread. The runner decides when each
//! card's engine and each application runs and what each step costs ([`card`], [`network`]);
//! the model decides what happens. A run is a pure function of its scenario file and seed: the
//! same scenario gives byte-identical results.
//!
//! A scenario (TOML, `docs/simulation.md`) names hosts, switches and links with their cost
//! parameters ([`params`]) and workloads ([`workload`]) swept over message sizes and connection
//! counts; every point of a sweep is a fresh network of fresh cards.
//!
//! FLD is timed as the second engine of each card ([`card`]), with the accelerator behind it
//! (ZUC's modules, an RTL design's cycles, or a capacity); FlexDriver's FLD-E echoes run in
//! [`echo`], FLD-R's echo and ZUC service in [`fldr`], tenants sharing an accelerator in
//! [`tenants`]. Left out: the defragmentation and IoT accelerators' own processing time (they
//! answer within FLD's step), host interrupts (applications poll), clock drift between cards.

pub mod card;
mod check;
pub mod echo;
pub mod events;
pub mod fldr;
pub mod network;
pub mod params;
mod point;
pub mod tenants;
#[cfg(test)]
mod tests;
pub mod unload_latency;
pub mod workload;

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use card::{CardTiming, SimHost};
use echo::{EchoAccel, EchoBy, EchoLatency, EchoRate};
use events::{Event, EventQueue, Ps, PS_PER_NS};
use fld_abi::nic::mtu_code;
use fld_device::nic::reorder::ReceiverMode;
use fld_host::verbs::star::ConnectionMode;
use fldr::{FldrEcho, Offer, Service};
use network::{Network, NetworkReport};
use params::*;
use unload_latency::{UnloadLatency, UnloadPath, UnloadShape};
use workload::{reorder_memory, Computed, Flows, RpcRate, Workload, WriteLatency, WriteRate};

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("scenario: {0}")]
    Scenario(String),
    #[error(transparent)]
    Topology(#[from] network::TopologyError),
    #[error(transparent)]
    Verbs(#[from] fld_host::verbs::VerbsError),
    #[error("{0}")]
    Failed(String),
}

/// Parameter tables that apply to every element unless it sets its own keys.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default)]
    pub link: toml::Table,
    #[serde(default)]
    pub pcie: toml::Table,
    #[serde(default)]
    pub nic: toml::Table,
    #[serde(default)]
    pub host: toml::Table,
    #[serde(default)]
    pub switch: toml::Table,
    #[serde(default)]
    pub fld: toml::Table,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    pub name: String,
    #[serde(default)]
    pub nic: toml::Table,
    #[serde(default)]
    pub pcie: toml::Table,
    #[serde(default)]
    pub host: toml::Table,
    #[serde(default)]
    pub fld: toml::Table,
}

#[derive(Clone, Debug, Deserialize)]
pub struct SwitchSpec {
    pub name: String,
    #[serde(flatten)]
    pub params: toml::Table,
}

#[derive(Clone, Debug, Deserialize)]
pub struct LinkSpec {
    pub ends: [String; 2],
    /// How many parallel links join the two ends (each a path of its own).
    #[serde(default = "one")]
    pub count: u32,
    #[serde(flatten)]
    pub params: toml::Table,
}

fn one() -> u32 {
    1
}

/// Values quoted from a paper, drawn beside ours.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Reference {
    pub label: String,
    /// `[x, y]` pairs in the workload's plotted metric.
    pub points: Vec<[f64; 2]>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkloadSpec {
    WriteLatency {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        client: String,
        server: String,
        sizes: Vec<usize>,
        #[serde(default = "default_iterations")]
        iterations: u64,
        /// WRITEs of up to 220 bytes carry their data in the WQE (perftest's default).
        #[serde(default = "yes")]
        inline: bool,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    EchoLatency {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        client: String,
        server: String,
        sizes: Vec<usize>,
        #[serde(default = "default_iterations")]
        iterations: u64,
        /// Frames up to this many bytes travel inline in their send WQE (`PortConfig::
        /// tx_inline_max`); 0 gathers every frame's data by DMA.
        #[serde(default = "default_echo_inline")]
        inline_max: u16,
        /// Who echoes on the server: "cpu" (an application's core) or "flde" (FLD-E's echo
        /// accelerator).
        #[serde(default = "default_echo_by")]
        echo: String,
        /// FlexDriver's local setup: the generator on a third NIC function of the server's card
        /// (`client` is then ignored).
        #[serde(default)]
        local: bool,
        /// The metric plotted: "rtt_us" (the median), "mean_us", "p99_us" or "p999_us".
        #[serde(default = "default_echo_metric")]
        metric: String,
        /// FLD-E's accelerator: "echo" (the Rust model) or "rtl:DIR" (a Verilog design, timed
        /// by its cycles at `accel_mhz`).
        #[serde(default = "default_accel")]
        accel: String,
        #[serde(default = "default_accel_mhz")]
        accel_mhz: f64,
        /// The Rust echo's capacity, million packets a second (0: none).
        #[serde(default)]
        accel_mpps: f64,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// FlexDriver's Figure 7b (left column): a generator keeps `window` frames in flight to the
    /// echo and counts the verified echoes per second; one point per size, or one point for a
    /// repeating `mix` of sizes.
    EchoRate {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        client: String,
        server: String,
        #[serde(default)]
        sizes: Vec<usize>,
        /// A repeating list of frame sizes, run as one point (x: its mean size).
        #[serde(default)]
        mix: Vec<usize>,
        #[serde(default = "default_echo_by")]
        echo: String,
        #[serde(default)]
        local: bool,
        #[serde(default = "default_messages")]
        packets: u64,
        #[serde(default = "default_echo_window")]
        window: usize,
        #[serde(default = "default_echo_inline")]
        inline_max: u16,
        /// "gbps" (frame bytes echoed) or "mpps".
        #[serde(default = "default_rate_metric")]
        metric: String,
        #[serde(default = "default_accel")]
        accel: String,
        #[serde(default = "default_accel_mhz")]
        accel_mhz: f64,
        /// The Rust echo's capacity, million packets a second (0: none).
        #[serde(default)]
        accel_mpps: f64,
        /// The client host's CPU keys for this workload only (a generator on several cores,
        /// say: `{ post_ns = 10 }`).
        #[serde(default)]
        client_cpu: toml::Table,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// FlexDriver's FLD-R echo (§8.1.2): a client queue pair SENDs messages to a queue pair FLD
    /// owns; the echo behind FLD sends each back whole. Closed loop over `sizes` (Figure 7b's
    /// right column), or open loop over `loads` at the first size (Figure 7c).
    FldrEcho {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        client: String,
        server: String,
        /// The client's queue pair on the server's own card (NIC function 0, looped to FLD-R's
        /// function 1 by the eSwitch); `client` is then ignored.
        #[serde(default)]
        local: bool,
        sizes: Vec<usize>,
        /// Offered loads, each a share of `line_gbps` in wire bits (RoCEv2 headers included).
        #[serde(default)]
        loads: Vec<f64>,
        #[serde(default = "default_line_gbps")]
        line_gbps: f64,
        #[serde(default = "default_messages")]
        messages: u64,
        /// Messages in flight at most.
        #[serde(default = "default_fldr_window")]
        window: u32,
        /// Path MTU in bytes (256 … 4096).
        #[serde(default = "default_mtu")]
        mtu: u32,
        /// What FLD serves: "echo" (§8.1.2) or "zuc" (the disaggregated ZUC cipher of §7:
        /// EEA3 requests of `size` data bytes; Gbit/s counts the data).
        #[serde(default = "default_accel")]
        service: String,
        /// "gbps", "mpps", "median_us" or "p99_us".
        #[serde(default = "default_rate_metric")]
        metric: String,
        /// The client host's CPU keys for this workload only.
        #[serde(default)]
        client_cpu: toml::Table,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// FlexDriver §8.2.3's isolation: tenants send constant-rate flows (`offered_gbps`, one
    /// each, its own IPv4 source) through their own `accelerate` rules to an FLD-E accelerator
    /// that takes `accel_gbps`; `limit_gbps` puts a NIC meter on each tenant. One point per
    /// tenant: x is its offered rate, the metric its admitted Gbit/s.
    TenantShaping {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        client: String,
        server: String,
        offered_gbps: Vec<f64>,
        accel_gbps: f64,
        #[serde(default)]
        limit_gbps: Option<f64>,
        #[serde(default = "default_shaping_size")]
        size: usize,
        #[serde(default = "default_shaping_us")]
        duration_us: u64,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// Figure 8a's other two curves at the sizes given, computed: "bound", the rate the line
    /// carries ZUC requests and responses at over FLD-R (`zuc_rdma_ops_bound`), or "cpu", one
    /// core encrypting with software ZUC at `cpu_ns_per_byte`. Nothing runs.
    ZucModel {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        curve: String,
        sizes: Vec<usize>,
        #[serde(default = "default_line_gbps")]
        line_gbps: f64,
        #[serde(default = "default_mtu")]
        mtu: u32,
        /// One CPU core's software ZUC (EEA3), ns per byte: fitted, by default, to Figure 8a's
        /// statement that FLD reaches "4x higher than the CPU throughput" at 17.6 Gbit/s
        /// (4.4 Gbit/s: 1.82 ns a byte).
        #[serde(default = "default_zuc_cpu_ns_per_byte")]
        cpu_ns_per_byte: f64,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// Figure 7a's performance model at the sizes given: the FLD-E echo's bound from the TLPs
    /// each packet costs on FLD's link, beside the Ethernet line. Nothing runs.
    FldModel {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        sizes: Vec<usize>,
        ethernet_gbps: f64,
        /// FLD's PCIe link, Gbit/s of TLP bytes (Gen3 x8: 63).
        #[serde(default = "default_fld_pcie")]
        pcie_gbps: f64,
        #[serde(default = "default_rate_metric")]
        metric: String,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    WriteRate {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        clients: Vec<String>,
        server: String,
        sizes: Vec<usize>,
        #[serde(default = "default_qps")]
        qps_per_client: Vec<u32>,
        /// Total connections per point, dealt to the clients in turn (instead of
        /// `qps_per_client`).
        #[serde(default)]
        connections: Vec<u32>,
        /// StaR connections: the server keeps no state on its NIC (§16 of
        /// `docs/nic-interface.md`); `"auto"`: only those its QP-context cache has no room for
        /// (§16.7).
        #[serde(default)]
        stateless: StatelessKey,
        #[serde(default = "default_outstanding")]
        outstanding: u32,
        #[serde(default = "default_messages")]
        messages: u64,
        /// At least this many WRITEs per connection (a point runs `max(messages, this x
        /// connections)`), so that many connections still reach their steady state.
        #[serde(default)]
        per_connection: u64,
        /// The plotted x axis: "size" (message bytes), "connections" or "rtt_ratio".
        #[serde(default = "default_axis")]
        x: String,
        /// LEFT's Figure 6: one point per ratio, the last link between the two nodes of
        /// `slow_link` made that many times slower (propagation) than the first one; the
        /// first size and QP count are used.
        #[serde(default)]
        rtt_ratios: Vec<f64>,
        #[serde(default)]
        slow_link: Option<[String; 2]>,
        /// Every card's receiver for this workload (`nic.receiver`'s values), so one scenario
        /// compares receivers side by side.
        #[serde(default)]
        receiver: Option<String>,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// LEFT's Figure 7: the on-chip memory a receiver keeps for its connections, counted from
    /// the reorder structures the NIC builds for that receiver (no traffic runs).
    ReorderMemory {
        #[serde(default)]
        title: Option<String>,
        /// The receiver: "gbn", "irn", "melo+", "left-", "left" or "ideal"; it names the curve
        /// unless `series` does.
        mode: String,
        #[serde(default)]
        series: Option<String>,
        connections: Vec<u32>,
        /// The bandwidth-delay product in packets (the bitmaps' sizing).
        #[serde(default = "default_bdp")]
        bdp: u32,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// Open-loop flows (LEFT Figure 1; Figures 4–5 in spirit): sender `senders[i]` has one RC
    /// connection to `receivers[i % len]` and starts flows (one WRITE each, of a size drawn from
    /// `sizes`) as a Poisson process at each of `loads` of its line rate.
    Flows {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        senders: Vec<String>,
        receivers: Vec<String>,
        sizes: Vec<usize>,
        loads: Vec<f64>,
        /// Flows per sender per point.
        #[serde(default = "default_flows")]
        flows: usize,
        /// Every card's receiver (as `write_rate`'s).
        #[serde(default)]
        receiver: Option<String>,
        /// Every switch's path choice for this workload: "ecmp", "flowlet", "spray", "random"
        /// or "adaptive" (the switches' own otherwise).
        #[serde(default)]
        path: Option<PathChoice>,
        /// The metric plotted: "flow_rate_ratio" (each flow's size over its completion time,
        /// as a share of the line rate, averaged), "throughput_ratio" (throughput got over
        /// offered), "fct_avg_us" or "fct_p99_us".
        #[serde(default = "default_flow_metric")]
        metric: String,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// uRDMA's Figure 3 (§4): sequential small inline WRITEs from `client` to one of `regions`
    /// 4 KiB regions of `server` drawn from Zipf(`skew`), each answered by a 32-bit WRITE back;
    /// the round trip by the path `path` picks: "offload", "unload", "hint", "frequency" or
    /// "rnic" (`unload_latency.rs`).
    UnloadLatency {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        client: String,
        server: String,
        path: String,
        regions: Vec<u64>,
        #[serde(default = "default_unload_size")]
        size: usize,
        #[serde(default = "default_skew")]
        skew: f64,
        /// Regions the hint and frequency policies keep offloaded.
        #[serde(default = "default_hot")]
        hot: usize,
        #[serde(default = "default_unload_warmup")]
        warmup: u64,
        #[serde(default = "default_unload_iterations")]
        iterations: u64,
        /// Draws the frequency monitor counts before the run.
        #[serde(default = "default_prime")]
        prime: u64,
        /// Every card's `nic.mtt_miss_reads` for this workload, so one scenario shows the
        /// calibrated model beside a costlier translation miss.
        #[serde(default)]
        mtt_miss_reads: Option<u32>,
        #[serde(default)]
        reference: Vec<Reference>,
    },
    /// StaR §4.2's RPC test: one RPC outstanding per connection, request and answer by SEND.
    RpcRate {
        #[serde(default)]
        title: Option<String>,
        #[serde(default)]
        series: Option<String>,
        clients: Vec<String>,
        server: String,
        /// Total connections per point, dealt to the clients in turn.
        connections: Vec<u32>,
        #[serde(default = "default_request")]
        request: usize,
        #[serde(default = "default_response")]
        response: usize,
        #[serde(default = "default_messages")]
        rpcs: u64,
        /// At least this many RPCs per connection (as `per_connection` of `write_rate`).
        #[serde(default)]
        per_connection: u64,
        /// Path MTU in bytes (256 … 4096).
        #[serde(default = "default_mtu")]
        mtu: u32,
        /// StaR connections (as `write_rate`'s).
        #[serde(default)]
        stateless: StatelessKey,
        #[serde(default)]
        reference: Vec<Reference>,
    },
}

/// A workload's `stateless` key: `true`, `false` or `"auto"`.
#[derive(Deserialize, Clone, Copy, Debug, Default)]
#[serde(try_from = "RawStateless")]
pub struct StatelessKey(ConnectionMode);

#[derive(Deserialize)]
#[serde(untagged)]
enum RawStateless {
    Flag(bool),
    Word(String),
}

impl TryFrom<RawStateless> for StatelessKey {
    type Error = String;
    fn try_from(raw: RawStateless) -> Result<Self, String> {
        Ok(StatelessKey(match raw {
            RawStateless::Flag(false) => ConnectionMode::Stateful,
            RawStateless::Flag(true) => ConnectionMode::Stateless,
            RawStateless::Word(w) if w == "auto" => ConnectionMode::Auto,
            RawStateless::Word(w) => {
                return Err(format!("stateless is true, false or \"auto\", not {w:?}"))
            }
        }))
    }
}

impl StatelessKey {
    fn mode(&self) -> ConnectionMode {
        self.0
    }
}

impl WorkloadSpec {
    /// The curve this workload's points belong to (`series` in the JSON); workloads with the
    /// same title share a chart panel.
    fn series(&self) -> String {
        let s = match self {
            WorkloadSpec::WriteLatency { series, .. }
            | WorkloadSpec::EchoLatency { series, .. }
            | WorkloadSpec::EchoRate { series, .. }
            | WorkloadSpec::FldModel { series, .. }
            | WorkloadSpec::FldrEcho { series, .. }
            | WorkloadSpec::ZucModel { series, .. }
            | WorkloadSpec::TenantShaping { series, .. }
            | WorkloadSpec::WriteRate { series, .. }
            | WorkloadSpec::RpcRate { series, .. }
            | WorkloadSpec::Flows { series, .. } => series,
            WorkloadSpec::UnloadLatency { series, path, .. } => {
                return series.clone().unwrap_or_else(|| path.clone())
            }
            WorkloadSpec::ReorderMemory { series, mode, .. } => {
                return series.clone().unwrap_or_else(|| mode.clone())
            }
        };
        s.clone().unwrap_or_else(|| "fldemu sim".into())
    }
}

/// Connection `i` of a point with `n` connections runs from client `i mod clients`.
fn deal(clients: &[usize], n: u32) -> Vec<usize> {
    (0..n as usize)
        .map(|i| clients[i % clients.len()])
        .collect()
}

fn default_echo_by() -> String {
    "cpu".into()
}
fn default_shaping_size() -> usize {
    1024
}
fn default_shaping_us() -> u64 {
    2000
}
fn default_zuc_cpu_ns_per_byte() -> f64 {
    8.0 / (17.6 / 4.0)
}
fn default_line_gbps() -> f64 {
    25.0
}
fn default_fldr_window() -> u32 {
    64
}
fn default_accel() -> String {
    "echo".into()
}
/// FLD's and the paper's accelerators' clock (Table 5).
fn default_accel_mhz() -> f64 {
    250.0
}
fn default_echo_metric() -> String {
    "rtt_us".into()
}
fn default_rate_metric() -> String {
    "gbps".into()
}
fn default_echo_window() -> usize {
    256
}
fn default_fld_pcie() -> f64 {
    FldParams::default().pcie_gbps
}

/// Checks FLD-E's accelerator key.
fn check_accel(accel: &str, mhz: f64, mpps: f64) -> Result<(), SimError> {
    match EchoAccel::parse(accel, mhz, mpps) {
        Some(_) => Ok(()),
        None => Err(SimError::Scenario(format!(
            "accel = {accel:?} at {mhz} MHz, {mpps} Mpps: \"echo\" (accel_mpps >= 0), or \
             \"rtl:DIR\" with 0 < accel_mhz <= 2000"
        ))),
    }
}

/// Checks an echo workload's `echo`, `local` and plotted metric.
fn check_echo(by: &str, local: bool, metric: &str, metrics: &[&str]) -> Result<(), SimError> {
    match EchoBy::parse(by) {
        None => Err(SimError::Scenario(format!(
            "echo = {by:?}: \"cpu\" or \"flde\""
        ))),
        Some(EchoBy::Cpu) if local => Err(SimError::Scenario(
            "a local echo needs echo = \"flde\" (one core per host: a CPU echo and its \
             generator would share it)"
                .into(),
        )),
        _ if !metrics.contains(&metric) => Err(SimError::Scenario(format!(
            "metric = {metric:?}: one of {metrics:?}"
        ))),
        _ => Ok(()),
    }
}

fn default_unload_size() -> usize {
    16
}
fn default_skew() -> f64 {
    0.5
}
fn default_hot() -> usize {
    4096
}
fn default_unload_warmup() -> u64 {
    50_000
}
fn default_unload_iterations() -> u64 {
    20000
}
fn default_prime() -> u64 {
    1 << 22
}
fn default_request() -> usize {
    2800
}
fn default_response() -> usize {
    1400
}
fn default_bdp() -> u32 {
    512
}

fn default_mtu() -> u32 {
    1024
}
fn default_iterations() -> u64 {
    1000
}
/// The echo inlines what a lone WQE-by-MMIO buffer holds whole (160 bytes), as mlx5's DPDK
/// driver inlines small frames when inlining is engaged (`txq_inline_max`).
fn default_echo_inline() -> u16 {
    160
}
fn yes() -> bool {
    true
}
fn default_qps() -> Vec<u32> {
    vec![1]
}
fn default_outstanding() -> u32 {
    128
}
fn default_messages() -> u64 {
    20_000
}
fn default_axis() -> String {
    "size".into()
}

/// A scenario file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// A point that has not finished after this much virtual time fails.
    #[serde(default = "default_limit_ms")]
    pub limit_ms: u64,
    #[serde(default)]
    pub defaults: Defaults,
    pub host: Vec<HostSpec>,
    #[serde(default)]
    pub switch: Vec<SwitchSpec>,
    pub link: Vec<LinkSpec>,
    pub workload: Vec<WorkloadSpec>,
}

fn default_seed() -> u64 {
    1
}
fn default_limit_ms() -> u64 {
    1000
}

/// Parameters of type `T`: its defaults, overridden key by key by each of `layers` in turn.
fn layered<T: Serialize + DeserializeOwned + Default>(
    what: &str,
    layers: &[&toml::Table],
) -> Result<T, SimError> {
    let mut t = toml::Table::try_from(T::default())
        .map_err(|e| SimError::Scenario(format!("{what}: {e}")))?;
    for l in layers {
        for (k, v) in l.iter() {
            t.insert(k.clone(), v.clone());
        }
    }
    T::deserialize(toml::Value::Table(t)).map_err(|e| SimError::Scenario(format!("{what}: {e}")))
}

/// A workload's `receiver` key, if any, names a receiver mode.
fn check_receiver(receiver: Option<&str>) -> Result<(), SimError> {
    match receiver {
        Some(m) if ReceiverMode::from_series(m).is_none() => Err(SimError::Scenario(format!(
            "receiver = {m:?}: gbn, irn, melo+, left-, left or ideal"
        ))),
        _ => Ok(()),
    }
}

/// Every card of `r` gets the workload's `receiver`, if it names one.
/// A point's network for an Ethernet echo (a third NIC function per card when the generator is
/// local) and the echo's two choices, checked by `resolve`.
fn echo_sim(
    r: &Resolved,
    (seed, limit_ms): (u64, u64),
    local: bool,
    (echo, accel, accel_mhz, accel_mpps): (&str, &str, f64, f64),
) -> Result<(Sim, EchoBy, EchoAccel), SimError> {
    let functions = if local { 3 } else { 2 };
    let sim = Sim::with_functions(r, seed, limit_ms, 4, 0, functions)?;
    let by = EchoBy::parse(echo).expect("checked by resolve");
    let accel = EchoAccel::parse(accel, accel_mhz, accel_mpps).expect("checked by resolve");
    Ok((sim, by, accel))
}

/// `r` with host `client`'s CPU keys overridden by `cpu` (a workload's `client_cpu`).
fn with_client_cpu(r: &Resolved, client: &str, cpu: &toml::Table) -> Result<Resolved, SimError> {
    let mut r = r.clone();
    if cpu.is_empty() {
        return Ok(r);
    }
    for h in r.hosts.iter_mut().filter(|h| h.0 == client) {
        let mut base =
            toml::Table::try_from(&h.3).map_err(|e| SimError::Scenario(e.to_string()))?;
        base.extend(cpu.clone());
        h.3 = layered(&format!("client_cpu of {client}"), &[&base])?;
    }
    Ok(r)
}

fn set_receiver(r: &mut Resolved, receiver: Option<&str>) {
    if let Some(m) = receiver {
        for h in &mut r.hosts {
            h.1.receiver = m.into();
        }
    }
}

/// The line rate of `host`'s link, Gbit/s.
fn line_gbps(r: &Resolved, host: &str) -> f64 {
    r.links
        .iter()
        .find(|l| l.0.iter().any(|e| e == host))
        .map_or(f64::NAN, |l| l.1.gbps)
}

/// `r` with the last link between the two nodes of `ends` `ratio` times as slow (propagation)
/// as the first one between them.
fn slower_path(r: &Resolved, ends: &[String; 2], ratio: f64) -> Resolved {
    let mut r = r.clone();
    let joins = |l: &([String; 2], LinkParams)| {
        (l.0[0] == ends[0] && l.0[1] == ends[1]) || (l.0[0] == ends[1] && l.0[1] == ends[0])
    };
    let base = r
        .links
        .iter()
        .find(|l| joins(l))
        .map(|l| l.1.propagation_ns);
    if let (Some(base), Some(last)) = (base, r.links.iter_mut().rev().find(|l| joins(l))) {
        last.1.propagation_ns = (base as f64 * ratio).round() as u64;
    }
    r
}

/// Every element's resolved parameters.
#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    pub hosts: Vec<(String, NicParams, PcieParams, HostParams, FldParams)>,
    pub switches: Vec<(String, SwitchParams)>,
    pub links: Vec<([String; 2], LinkParams)>,
}

impl Scenario {
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let s: Scenario = toml::from_str(text).map_err(|e| SimError::Scenario(e.to_string()))?;
        s.resolve()?;
        Ok(s)
    }

    pub fn resolve(&self) -> Result<Resolved, SimError> {
        let d = &self.defaults;
        let mut hosts = Vec::new();
        for h in &self.host {
            let what = format!("host {}", h.name);
            hosts.push((
                h.name.clone(),
                layered(&what, &[&d.nic, &h.nic])?,
                layered(&what, &[&d.pcie, &h.pcie])?,
                layered(&what, &[&d.host, &h.host])?,
                layered(&what, &[&d.fld, &h.fld])?,
            ));
        }
        let mut switches = Vec::new();
        for s in &self.switch {
            switches.push((
                s.name.clone(),
                layered(&format!("switch {}", s.name), &[&d.switch, &s.params])?,
            ));
        }
        let mut links = Vec::new();
        for l in &self.link {
            let p: LinkParams = layered(&format!("link {:?}", l.ends), &[&d.link, &l.params])?;
            for _ in 0..l.count.max(1) {
                links.push((l.ends.clone(), p.clone()));
            }
        }
        let names: Vec<&str> = hosts.iter().map(|h| h.0.as_str()).collect();
        for w in &self.workload {
            check::check(w, &names, &links)?;
        }
        Ok(Resolved {
            hosts,
            switches,
            links,
        })
    }
}

/// One simulation: a network of fresh cards and its event loop.
pub struct Sim {
    queue: EventQueue,
    net: Network,
    pub hosts: Vec<SimHost>,
    now: Ps,
    limit: Ps,
}

fn default_flows() -> usize {
    200
}

fn default_flow_metric() -> String {
    "flow_rate_ratio".into()
}

/// Host memory of a simulated machine: room for the rings of `qps` queue pairs and buffers.
fn memory_for(qps: usize, buffers: usize) -> usize {
    (64 << 20) + qps * (48 << 10) + 2 * buffers
}

impl Sim {
    pub fn new(
        r: &Resolved,
        seed: u64,
        limit_ms: u64,
        qps: usize,
        buffers: usize,
    ) -> Result<Self, SimError> {
        Self::with_functions(r, seed, limit_ms, qps, buffers, 2)
    }

    /// [`Sim::new`] with `functions` NIC host functions on every card (a third one gives a
    /// local generator a vPort of its own beside FLD-E's, as FlexDriver's local experiments
    /// do, §8).
    pub fn with_functions(
        r: &Resolved,
        seed: u64,
        limit_ms: u64,
        qps: usize,
        buffers: usize,
        functions: u16,
    ) -> Result<Self, SimError> {
        let names: Vec<String> = r.hosts.iter().map(|h| h.0.clone()).collect();
        let mut net = Network::new(&names, &r.switches, &r.links, seed)?;
        let mut hosts = Vec::new();
        for (i, (name, nic, pcie, cpu, fld)) in r.hosts.iter().enumerate() {
            let ip = [10, 0, (i / 250) as u8, (i % 250) as u8 + 1];
            let h = SimHost::new(
                name,
                i as u16 + 1,
                ip,
                memory_for(qps, buffers),
                (nic.clone(), pcie.clone(), cpu.clone(), fld.clone()),
                net.pool.clone(),
                (functions, seed),
            )?;
            net.add_host_mac(i, h.mac);
            hosts.push(h);
        }
        Ok(Sim {
            queue: EventQueue::default(),
            net,
            hosts,
            now: 0,
            limit: limit_ms * 1_000_000 * PS_PER_NS,
        })
    }

    fn wake_engine(&mut self, host: usize, at: Ps) {
        let h = &mut self.hosts[host];
        if h.nic_wake.is_some_and(|w| w <= at) {
            return;
        }
        h.nic_wake = Some(at);
        self.queue.schedule(at, Event::NicRuns { host });
    }

    fn wake_fld(&mut self, host: usize, at: Ps) {
        let h = &mut self.hosts[host];
        if h.fld_wake.is_some_and(|w| w <= at) {
            return;
        }
        h.fld_wake = Some(at);
        self.queue.schedule(at, Event::FldRuns { host });
    }

    fn wake_app(&mut self, host: usize, at: Ps) {
        let h = &mut self.hosts[host];
        if h.app_wake.is_some_and(|w| w <= at) {
            return;
        }
        h.app_wake = Some(at);
        self.queue.schedule(at, Event::AppWakes { host });
    }

    /// Runs `w` until it finishes; returns the virtual time it took.
    pub fn run(&mut self, w: &mut dyn Workload) -> Result<Ps, SimError> {
        for h in &mut self.hosts {
            h.settle();
        }
        // Every card looks at its doorbells once at the start: the set-up may have posted work
        // (a StaR server's receive WQEPs, say) that no application step will ring again.
        for h in 0..self.hosts.len() {
            self.wake_engine(h, 0);
        }
        for h in w.starters() {
            self.wake_app(h, 0);
        }
        while !w.finished() {
            let Some((t, ev)) = self.queue.pop() else {
                return Err(SimError::Failed(format!(
                    "nothing left to happen at {} ns and the workload is not done",
                    self.now / PS_PER_NS
                )));
            };
            if t > self.limit {
                return Err(SimError::Failed(format!(
                    "not done after {} ms of virtual time",
                    self.limit / PS_PER_NS / 1_000_000
                )));
            }
            self.now = t;
            self.step(t, ev, w)?;
        }
        Ok(self.now)
    }

    fn step(&mut self, t: Ps, ev: Event, w: &mut dyn Workload) -> Result<(), SimError> {
        match ev {
            Event::FrameArrives { node, frame } => {
                log::trace!(
                    "{} ns: {} B arrive at node {node}",
                    t / PS_PER_NS,
                    frame.len()
                );
                if let Some(d) = self.net.arrive(&mut self.queue, t, node, frame) {
                    self.hosts[d.host].deliver(d.frame);
                    self.wake_engine(d.host, t);
                }
            }
            Event::QueueDrained { node, port, bytes } => self.net.drained(node, port, bytes),
            Event::NicRuns { host } => {
                if self.hosts[host].nic_wake != Some(t) {
                    return Ok(());
                }
                self.hosts[host].nic_wake = None;
                let free = self.hosts[host].engine_free;
                if t < free {
                    self.wake_engine(host, free);
                    return Ok(());
                }
                let mut batch = self.hosts[host].run_engine(t);
                log::trace!(
                    "{} ns: card {host} batch: work {} frames {:?} from {} ns, free at {} ns, host sees {:?}",
                    t / PS_PER_NS,
                    batch.work,
                    batch.frames.frames.iter().map(|f| f.len()).collect::<Vec<_>>(),
                    batch.frames.first / PS_PER_NS,
                    batch.engine_free / PS_PER_NS,
                    batch.host_sees.map(|x| x / PS_PER_NS)
                );
                for (ready, f) in batch.frames.drain() {
                    self.net.transmit(&mut self.queue, host, 0, f, ready);
                }
                self.hosts[host].recycle(batch.frames);
                if batch.work {
                    self.wake_engine(host, batch.engine_free);
                } else if let Some(timer) = batch.next_timer.filter(|&x| x > t) {
                    self.wake_engine(host, timer);
                }
                if let Some(at) = batch.host_sees {
                    let h = &mut self.hosts[host];
                    h.writes_visible = h.writes_visible.max(at);
                    self.wake_app(host, at);
                }
                if let Some(at) = batch.fld_sees {
                    self.wake_fld(host, at);
                }
            }
            Event::FldRuns { host } => {
                if self.hosts[host].fld_wake != Some(t) {
                    return Ok(());
                }
                self.hosts[host].fld_wake = None;
                let free = self.hosts[host].fld_free;
                if t < free {
                    self.wake_fld(host, free);
                    return Ok(());
                }
                let step = self.hosts[host].run_fld(t);
                if step.work {
                    self.wake_fld(host, step.free);
                }
                if let Some(at) = step.nic_sees {
                    self.wake_engine(host, at);
                }
            }
            Event::AppWakes { host } => {
                if self.hosts[host].app_wake != Some(t) {
                    return Ok(());
                }
                self.hosts[host].app_wake = None;
                // The model writes host memory when a batch runs, so a later batch's writes may
                // already be in memory when an earlier one's land: the application looks once
                // they have all landed — deferred once, so a stream of batches cannot starve it.
                // An application continuing its own work (more to post) is not held back.
                let h = &mut self.hosts[host];
                let visible = h.writes_visible;
                let continuing = h.app_continues_at.take() == Some(t);
                if !continuing && t < visible && !std::mem::replace(&mut h.app_deferred, true) {
                    self.wake_app(host, visible);
                    return Ok(());
                }
                self.hosts[host].app_deferred = false;
                let core_free = self.hosts[host].cpu_free;
                if w.waits_for_core() && core_free > t {
                    self.hosts[host].app_continues_at = Some(core_free);
                    self.wake_app(host, core_free);
                    return Ok(());
                }
                let again = w.wake(host, t, &mut self.hosts)?;
                log::trace!(
                    "{} ns: app {host} ran until {} ns, doorbell {:?}",
                    t / PS_PER_NS,
                    self.hosts[host].cpu_free / PS_PER_NS,
                    self.hosts[host].doorbell.map(|x| x / PS_PER_NS)
                );
                let h = &mut self.hosts[host];
                if let Some(db) = h.doorbell.take() {
                    let at = db + h.pcie.write_latency_ns * PS_PER_NS;
                    self.wake_engine(host, at);
                }
                if let Some(at) = again {
                    self.hosts[host].app_continues_at = Some(at);
                    self.wake_app(host, at);
                }
            }
        }
        Ok(())
    }

    pub fn events(&self) -> u64 {
        self.queue.processed
    }

    pub fn network(&self) -> NetworkReport {
        self.net.report()
    }
}

/// One point of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub size: usize,
    pub connections: u64,
    /// LEFT Figure 6's x: how many times slower the slow path is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_ratio: Option<f64>,
    /// LEFT Figure 1's x: the offered load as a share of the senders' line rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// uRDMA Figure 3's x: the regions the WRITEs are spread over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regions: Option<u64>,
    /// The curve the point belongs to (the workload's `series`).
    pub series: String,
    pub metrics: BTreeMap<String, f64>,
    pub virtual_ns: u64,
    pub events: u64,
    pub cards: BTreeMap<String, CardTiming>,
    pub network: NetworkReport,
}

/// A workload's sweep.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadResult {
    pub title: String,
    pub series: String,
    pub kind: String,
    /// The metric a plot draws and the x axis it draws it over.
    pub metric: String,
    pub x: String,
    pub points: Vec<Point>,
    pub reference: Vec<Reference>,
}

/// A whole run's results: a pure function of the scenario (no wall-clock figure in it).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub parameters: Resolved,
    pub workloads: Vec<WorkloadResult>,
}

/// How fast the runner ran (wall clock; not part of the results).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Speed {
    pub events: u64,
    pub virtual_us: f64,
    pub wall_seconds: f64,
}

impl Speed {
    pub fn events_per_second(&self) -> f64 {
        self.events as f64 / self.wall_seconds.max(1e-9)
    }
    pub fn virtual_us_per_wall_second(&self) -> f64 {
        self.virtual_us / self.wall_seconds.max(1e-9)
    }
}

/// A seed of its own for each point, derived from the scenario's.
fn point_seed(seed: u64, workload: usize, point: usize) -> u64 {
    seed ^ ((workload as u64) << 32 | point as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Runs every workload of `s`, calling `progress` after each point.
pub fn run(
    s: &Scenario,
    mut progress: impl FnMut(&str, &Point),
) -> Result<(Report, Speed), SimError> {
    let r = s.resolve()?;
    let mut speed = Speed::default();
    let wall = Instant::now();
    let mut workloads = Vec::new();
    for (wi, spec) in s.workload.iter().enumerate() {
        let header = point::Header::of(spec);
        let series = spec.series();
        let mut points = Vec::new();
        for (pi, (size, clients)) in point::cases(spec, &r).iter().enumerate() {
            let case = point::Case {
                r: &r,
                seed: point::seed(spec, s.seed, wi, pi),
                limit_ms: s.limit_ms,
                point: pi,
                size: *size,
                clients,
            };
            let (mut sim, mut w) = point::build(spec, &case)?;
            let virtual_ps = sim.run(w.as_mut())?;
            let p = point::finish(
                spec,
                &case,
                &mut sim,
                w.as_ref(),
                virtual_ps,
                series.clone(),
            );
            speed.events += p.events;
            speed.virtual_us += p.virtual_ns as f64 / 1000.0;
            progress(&header.title, &p);
            points.push(p);
        }
        workloads.push(WorkloadResult {
            title: header.title,
            series,
            kind: header.kind.into(),
            metric: header.metric.into(),
            x: header.x.into(),
            points,
            reference: header.reference,
        });
    }
    speed.wall_seconds = wall.elapsed().as_secs_f64();
    Ok((
        Report {
            scenario: s.name.clone(),
            seed: s.seed,
            parameters: r,
            workloads,
        },
        speed,
    ))
}
