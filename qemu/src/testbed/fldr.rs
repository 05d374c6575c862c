//! FLD-R on two emulated machines (paper §8.1.2, §8.2.1): a server card whose NIC function 0
//! and FLD run the FLD-R control plane as an RDMA server with an accelerator behind FLD (echo
//! or ZUC), and client cards that connect to it through the verbs API. The server machine runs
//! on its own thread — its control plane accepts clients over TCP while the accelerator works —
//! and the client machine on the caller's; their uplinks share a cable in this process, or a
//! UDP link between two processes ([`serve_on`]).

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fld_abi::fld::Stat;
use fld_device::accel::rdma::RdmaEcho;
use fld_device::accel::zuc_accel::{ZucAccel, MAX_RDMA_REQUEST};
use fld_device::accel::Accelerator;
use fld_device::card::{Card, CardConfig};
use fld_device::nic::NicConfig;
use fld_device::wire::link;
use fld_driver::inprocess::{EngineThread, InProcessHost};
use fld_host::fldr::{ClientConfig, FldR, FldrClient, FldrEvent, FldrServer};
use fld_host::verbs::Context;

/// The accelerator behind the FLD-R service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServiceAccel {
    /// Every message back whole (§8.1.2).
    Echo,
    /// The disaggregated ZUC cipher (§7).
    Zuc,
}

impl ServiceAccel {
    fn build(self) -> Box<dyn Accelerator> {
        match self {
            ServiceAccel::Echo => Box::new(RdmaEcho::new(MAX_RDMA_REQUEST, 4096)),
            ServiceAccel::Zuc => Box::new(ZucAccel::new(fld_abi::wire::zuc::ZUC_UDP_PORT, 0)),
        }
    }
}

/// What the server machine reports when it stops.
#[derive(Clone, Debug, Default)]
pub struct ServiceReport {
    pub events: Vec<FldrEvent>,
    pub fld_rx_packets: u64,
    pub fld_tx_messages: u64,
    pub fld_accelerator_drops: u64,
    pub accelerator: Vec<(&'static str, u64)>,
    /// The server port's counters (RoCE drops by reason, Ethernet drops) when it stopped.
    pub port: Vec<(&'static str, u64)>,
    /// FLD's statistics by name when it stopped.
    pub fld: Vec<(&'static str, u64)>,
}

/// The FLD-R server machine running on its own thread.
pub struct Service {
    pub addr: SocketAddr,
    pub ip: Ipv4Addr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<ServiceReport, String>>>,
}

impl Service {
    /// Stops the machine and returns its report.
    pub fn stop(mut self) -> Result<ServiceReport, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err("the FLD-R server thread panicked".into()),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the FLD-R server on `card` (its uplink already connected) until `stop`: the control
/// plane on NIC function 0 with address `ip` and `queues` FLD-R queues, `accel` behind FLD,
/// clients accepted on `listener`. `ready` gets the listening address once it serves. `host`
/// is the card's in-process host when another user of the card made it already.
#[allow(clippy::too_many_arguments)]
pub fn serve_on(
    card: Arc<Card>,
    host: Option<Arc<InProcessHost>>,
    ip: Ipv4Addr,
    accel: ServiceAccel,
    queues: u16,
    listener: TcpListener,
    stop: &AtomicBool,
    ready: impl FnOnce(SocketAddr),
) -> Result<ServiceReport, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    card.fld.set_accelerator(accel.build());
    let host = match host {
        Some(h) => h,
        None => InProcessHost::new(card.clone(), 64 << 20).map_err(|e| err(&e))?,
    };
    let nic = card.nic.function_id(0).ok_or("no NIC function")?;
    let cp = FldR::open(host.device(nic), host.device(card.fld.id()), ip, 0, queues)
        .map_err(|e| err(&e))?;
    let mut server = FldrServer::new(cp, listener).map_err(|e| err(&e))?;
    ready(server.local_addr().map_err(|e| err(&e))?);
    let mut report = ServiceReport::default();
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        server.poll(&mut report.events).map_err(|e| err(&e))?;
        // The machine runs until it has nothing to do; then it naps a little, so a client
        // on the same cores gets them.
        let mut work = 0;
        for _ in 0..64 {
            let w = card.poll();
            work += w;
            if w == 0 {
                break;
            }
        }
        idle = if work == 0 { idle + 1 } else { 0 };
        if idle > 64 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let fld = &card.fld;
    report.fld_rx_packets = fld.stat(Stat::RxPackets);
    report.fld_tx_messages = fld.stat(Stat::TxPackets);
    report.fld_accelerator_drops = fld.stat(Stat::RxAcceleratorDrops);
    report.accelerator = fld.accelerator_counters().map(|c| c.1).unwrap_or_default();
    let cp = server.control_plane();
    report.port = cp.context().port_counters().map_err(|e| err(&e))?;
    report.fld = cp.fld().named_stats();
    Ok(report)
}

/// One client machine: its card, the verbs context on its NIC function, and the runner that
/// keeps the card going while the application does other things — a NIC acknowledges and
/// retransmits whether or not its application is calling it, and a peer whose ACKs wait for
/// the application's next call times out (retry count exceeded).
pub struct ClientMachine {
    pub card: Arc<Card>,
    _host: Arc<InProcessHost>,
    pub ctx: Context,
    pub ip: Ipv4Addr,
    _runner: EngineThread,
}

impl ClientMachine {
    /// Connects an FLD-R client to the service at `server`.
    pub fn connect(
        &mut self,
        server: SocketAddr,
        cfg: ClientConfig,
    ) -> Result<FldrClient, fld_host::fldr::FldrError> {
        FldrClient::connect(&mut self.ctx, server, cfg)
    }
}

fn machine(card_id: u16) -> Arc<Card> {
    Card::new(CardConfig {
        nic: NicConfig {
            card_id,
            ..Default::default()
        },
        ..Default::default()
    })
}

/// A client machine with address `ip` whose uplink is already connected by the caller.
pub fn client_machine(card: Arc<Card>, ip: Ipv4Addr) -> Result<ClientMachine, String> {
    let host = InProcessHost::new(card.clone(), 128 << 20).map_err(|e| e.to_string())?;
    client_on(card, host, 0, ip)
}

/// The client on NIC function `function` of `card`, reached through `host`.
fn client_on(
    card: Arc<Card>,
    host: Arc<InProcessHost>,
    function: u16,
    ip: Ipv4Addr,
) -> Result<ClientMachine, String> {
    let nic = card
        .nic
        .function_id(function)
        .ok_or("no such NIC function")?;
    let mut ctx = Context::open(host.device(nic)).map_err(|e| e.to_string())?;
    ctx.add_ip(ip.into()).map_err(|e| e.to_string())?;
    let runner = host
        .spawn_background_stepper(Duration::from_micros(100))
        .map_err(|e| e.to_string())?;
    Ok(ClientMachine {
        _runner: runner,
        card,
        _host: host,
        ctx,
        ip,
    })
}

/// Two machines in this process joined by a cable: the FLD-R service with `accel` and
/// `queues` queues on its own thread (listening on loopback TCP), and a client machine.
pub fn two_machines(accel: ServiceAccel, queues: u16) -> Result<(Service, ClientMachine), String> {
    let (server_ip, client_ip) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
    let server_card = machine(1);
    let client_card = machine(2);
    let (a, b) = link(8192);
    server_card.nic.set_uplink(Box::new(a));
    client_card.nic.set_uplink(Box::new(b));
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let service = spawn_service(server_card, None, server_ip, accel, queues, listener)?;
    let client = client_machine(client_card, client_ip)?;
    Ok((service, client))
}

/// The paper's local set-up (§8, "local experiments"): the client is the same card's second
/// NIC function, so its queue pair and the FLD-R one meet in the NIC's eSwitch, and the
/// traffic crosses PCIe to the host and to FLD but no wire.
pub fn one_machine(accel: ServiceAccel, queues: u16) -> Result<(Service, ClientMachine), String> {
    let (server_ip, client_ip) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 3));
    let card = machine(1);
    let host = InProcessHost::new(card.clone(), 192 << 20).map_err(|e| e.to_string())?;
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let service = spawn_service(
        card.clone(),
        Some(host.clone()),
        server_ip,
        accel,
        queues,
        listener,
    )?;
    let client = client_on(card, host, 1, client_ip)?;
    Ok((service, client))
}

/// Starts [`serve_on`] on a thread of its own; returns once it listens.
pub fn spawn_service(
    card: Arc<Card>,
    host: Option<Arc<InProcessHost>>,
    ip: Ipv4Addr,
    accel: ServiceAccel,
    queues: u16,
    listener: TcpListener,
) -> Result<Service, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("fldr-server".into())
        .spawn(move || {
            serve_on(card, host, ip, accel, queues, listener, &flag, |a| {
                let _ = tx.send(a);
            })
        })
        .map_err(|e| e.to_string())?;
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(addr) => Ok(Service {
            addr,
            ip,
            stop,
            thread: Some(thread),
        }),
        Err(_) => {
            stop.store(true, Ordering::Relaxed);
            Err(match thread.join() {
                Ok(Err(e)) => e,
                _ => "the FLD-R server did not start".into(),
            })
        }
    }
}
