//! The `fldemu` binary as a user runs it: for every subcommand, the options it accepts change
//! what it does (the counts, sizes, captures and counters it reports), and an option its
//! combination cannot honour is refused with a message naming it. Small workloads; two
//! processes meet on loopback UDP and TCP only.

use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A command line: `line`'s words, each `@` replaced by the next of `paths` (which may hold
/// spaces).
fn argv(line: &str, paths: &[&Path]) -> Vec<String> {
    let mut paths = paths.iter();
    let v: Vec<String> = line
        .split_whitespace()
        .map(|w| match w {
            "@" => paths.next().expect("a path per @").display().to_string(),
            w => w.to_owned(),
        })
        .collect();
    assert!(paths.next().is_none(), "a path without its @ in {line:?}");
    v
}

/// A command line without paths.
fn a(line: &str) -> Vec<String> {
    argv(line, &[])
}

fn fldemu(args: &[String]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fldemu"));
    c.args(args).stdin(Stdio::null()).env("RUST_LOG", "warn");
    c
}

fn run(args: &[String]) -> Output {
    fldemu(args).output().expect("fldemu runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `args`, which must succeed, and returns its standard output.
fn ok(args: &[String]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "fldemu {args:?} failed: {}\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// `out` as one JSON object (`sim` prints it over many lines), or its last line that is one.
fn last_json(out: &str) -> Value {
    let object = |s: &str| {
        serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object)
    };
    object(out)
        .or_else(|| out.lines().rev().find_map(object))
        .unwrap_or_else(|| panic!("no JSON object in {out:?}"))
}

/// The JSON object a finished run printed, whatever its verdict.
fn output_json(o: &Output) -> Value {
    let out = stdout(o);
    assert!(
        !out.trim().is_empty(),
        "no output ({}): {}",
        o.status,
        stderr(o)
    );
    last_json(&out)
}

/// Runs `args` (`--json` among them), which must succeed, and returns its JSON object.
fn json(args: &[String]) -> Value {
    last_json(&ok(args))
}

/// `args` must fail with a message that contains `names` (the option it refuses).
fn refused(args: &[String], names: &str) {
    let o = run(args);
    assert!(
        !o.status.success(),
        "fldemu {args:?} was accepted: {}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(
        err.contains(names),
        "fldemu {args:?}: the refusal does not name {names}: {err}"
    );
}

/// A fresh directory of this test under Cargo's scratch space.
fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{test}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// Frames in a pcap file.
fn frames(p: &Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut r = pcap_file::pcap::PcapReader::new(f).expect("a pcap file");
    let mut v = Vec::new();
    while let Some(pkt) = r.next_packet() {
        v.push(pkt.expect("a pcap record").data.into_owned());
    }
    v
}

/// RoCEv2 frames (IPv4, UDP to 4791) among `frames` from `src`, with at least `min_udp` bytes
/// of UDP datagram (BTH, payload and ICRC).
fn roce(frames: &[Vec<u8>], src: [u8; 4], min_udp: u16) -> usize {
    frames
        .iter()
        .filter(|f| {
            if f.len() < 42 || f[12..14] != [0x08, 0x00] || f[23] != 17 || f[26..30] != src {
                return false;
            }
            let udp = 14 + usize::from(f[14] & 0xf) * 4;
            let field = |at: usize| f.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
            field(udp + 2) == Some(4791) && field(udp + 4) >= Some(min_udp)
        })
        .count()
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free TCP port")
        .port()
}

/// Two ends of a loopback UDP link: (one end's `--link`, the other's).
fn udp_link() -> (String, String) {
    let (a, b) = (free_udp_port(), free_udp_port());
    (
        format!("udp:{a}:127.0.0.1:{b}"),
        format!("udp:{b}:127.0.0.1:{a}"),
    )
}

/// A counter of a JSON summary's `card_counters`.
fn counter(v: &Value, source: &str, name: &str) -> u64 {
    v["card_counters"][source][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no card_counters.{source:?}.{name} in {v}"))
}

/// A second process, killed if the test ends first.
struct Background(Option<Child>);

impl Background {
    fn spawn(args: &[String]) -> Self {
        let child = fldemu(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("fldemu starts");
        Background(Some(child))
    }

    /// Its output once it exits by itself.
    fn wait(mut self) -> Output {
        let child = self.0.take().expect("running");
        child.wait_with_output().expect("exit")
    }

    /// Its output once SIGTERM ended it.
    fn terminate(mut self) -> Output {
        let child = self.0.take().expect("running");
        // SAFETY: signals our own child, which has not been waited for yet.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        child.wait_with_output().expect("exit")
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn verilator() -> bool {
    fld_rtl::build::verilator_for_tests()
}

// ---- demo ----------------------------------------------------------------------------------

#[test]
fn demo_cpu_echo_sends_the_packets_and_sizes_asked_for() {
    let v = json(&a("demo --packets 37 --size 128 --json"));
    assert_eq!(v["packets_sent"], 37);
    assert_eq!(v["packets_received"], 37);
    assert_eq!((&v["size_min"], &v["size_max"]), (&128.into(), &128.into()));
    assert_eq!(v["accel"], "none");
    assert_eq!(v["rx_mode"], "striding");
    assert_eq!(v["verified"], true);
    assert_eq!(counter(&v, "client port", "tx_packets"), 37);
    assert_eq!(counter(&v, "client port", "tx_bytes"), 37 * 128);
    assert_eq!(counter(&v, "echo port", "rx_packets"), 37);
    let regular = json(&a("demo --packets 5 --rx-mode regular --json"));
    assert_eq!(regular["rx_mode"], "regular");
    assert_eq!(regular["packets_received"], 5);
}

#[test]
fn demo_flde_sweeps_sizes_captures_and_counts() {
    let pcap = scratch("demo-flde").join("echo.pcap");
    let v = json(&argv(
        "demo --accel echo --packets 25 --size 60 --size-max 200 --burst 4 --json --pcap @",
        &[&pcap],
    ));
    assert_eq!(v["packets_received"], 25);
    assert_eq!((&v["size_min"], &v["size_max"]), (&60.into(), &200.into()));
    assert_eq!(counter(&v, "FLD", "rx_packets"), 25);
    assert_eq!(counter(&v, "FLD", "tx_packets"), 25);
    assert_eq!(counter(&v, "echo", "echoed"), 25);
    // Every frame entering the eSwitch: the generator's 25 and the accelerator's 25.
    let f = frames(&pcap);
    assert_eq!(f.len(), 50);
    let sizes: Vec<usize> = f.iter().map(Vec::len).collect();
    assert!(sizes.iter().all(|l| (60..=200).contains(l)), "{sizes:?}");
    assert!(
        sizes.iter().min() < sizes.iter().max(),
        "a sweep: {sizes:?}"
    );

    let human = ok(&a("demo --accel echo --packets 10"));
    assert!(!human.contains("FLD vPort"), "{human}");
    let stats = ok(&a("demo --accel echo --packets 10 --stats"));
    let vport = stats
        .lines()
        .find(|l| l.trim_start().starts_with("FLD vPort"));
    assert!(
        vport.is_some_and(|l| l.contains("rx_packets 10,")),
        "{stats}"
    );
}

#[test]
fn demo_zuc_runs_the_operations_asked_for_and_counts_them() {
    let pcap = scratch("demo-zuc").join("zuc.pcap");
    let v = json(&argv(
        "demo --accel zuc --packets 12 --size 200 --json --pcap @",
        &[&pcap],
    ));
    assert_eq!(v["operations"], 12);
    // 200-byte frames less the Ethernet, IPv4, UDP and request headers.
    assert_eq!(v["data_bytes_per_op"], 200 - 14 - 20 - 8 - 64);
    assert_eq!(counter(&v, "zuc", "requests"), 12);
    assert_eq!(counter(&v, "client port", "tx_packets"), 12);
    assert_eq!(frames(&pcap).len(), 24);
    let stats = ok(&a("demo --accel zuc --packets 6 --stats"));
    assert!(stats.contains("requests 6,"), "{stats}");
}

#[test]
fn demo_defrag_and_iot_report_their_counters() {
    let v = json(&a("demo --accel defrag --packets 10 --size 3000 --json"));
    assert_eq!(v["messages"], 10);
    assert_eq!(v["message_bytes"], 3000);
    assert_eq!(v["delivered"], 10);
    // The generator's port received the reassembled datagrams.
    assert_eq!(counter(&v, "card", "rx_packets"), 10);
    let iot = ok(&a("demo --accel iot --packets 16 --stats"));
    assert!(iot.contains("  card "), "{iot}");
    assert!(iot.contains("VERIFIED"), "{iot}");
}

#[test]
fn demo_rdma_captures_the_client_card_and_counts_both_machines() {
    let pcap = scratch("demo-rdma").join("fldr.pcap");
    let v = json(&argv(
        "demo --accel echo --rdma --packets 15 --size 300 --json --pcap @",
        &[&pcap],
    ));
    assert_eq!(v["messages"], 15);
    assert_eq!(v["message_bytes"], 300);
    assert_eq!(v["verified"], true);
    // One packet per message, and one again per retransmission (a timer a loaded machine
    // let expire).
    let resent = counter(&v, "client qp", "retransmitted");
    assert_eq!(counter(&v, "client qp", "bytes_sent"), (15 + resent) * 300);
    assert_eq!(counter(&v, "server FLD", "tx_packets"), 15);
    assert_eq!(counter(&v, "accelerator", "echoed"), 15);
    // The client's requests are in the capture (a request again for each retransmission).
    assert_eq!(roce(&frames(&pcap), [10, 9, 0, 2], 300) as u64, 15 + resent);

    let zuc = json(&a(
        "demo --accel zuc --rdma --local --packets 10 --size 512 --burst 8 --json",
    ));
    assert_eq!(zuc["operations"], 10);
    assert_eq!(zuc["data_bytes_per_op"], 512);
    assert_eq!(counter(&zuc, "accelerator", "requests"), 10);
    let stats = ok(&a("demo --accel echo --rdma --local --packets 5 --stats"));
    assert!(stats.contains("client qp"), "{stats}");
    assert!(stats.contains("server FLD"), "{stats}");
}

#[test]
fn demo_refuses_what_its_path_cannot_honour() {
    let cases = [
        ("--accel zuc --size-max 2000", "--size-max"),
        ("--accel echo --rdma --size-max 2000", "--size-max"),
        ("--accel defrag --rx-mode regular", "--rx-mode"),
        ("--accel echo --rx-mode regular", "--rx-mode"),
        ("--accel iot --burst 4", "--burst"),
        ("--accel echo --rdma --burst 4", "--burst"),
        ("--accel zuc --burst 65", "--burst"),
        ("--rtl-clock-mhz 100", "--rtl-clock-mhz"),
        ("--vcd x.vcd", "--vcd"),
        ("--transport vfio-user --pcap x.pcap", "--pcap"),
        ("--transport vfio --accel zuc", "vfio"),
        ("--transport vfio-user --accel echo --rdma", "--rdma"),
        ("--socket-dir somewhere", "--socket-dir"),
        ("--server 127.0.0.1:1", "--link"),
        ("--accel echo --rdma --ip 10.0.0.9", "--link"),
        ("--accel zuc --rdma --size 16384", "--size"),
        ("--size 200 --size-max 100", "--size-max"),
        ("--size 20", "--size"),
        ("--rdma", "--rdma"),
        ("--local", "--rdma"),
    ];
    for (args, names) in cases {
        refused(&a(&format!("demo --packets 1 {args}")), names);
    }
}

// ---- benchmarks and paper quantities -------------------------------------------------------

#[test]
fn bench_measures_the_packets_asked_for() {
    let v = json(&a("bench --packets 2400 --json"));
    let rows = v["results"].as_array().expect("results");
    let packets: Vec<u64> = rows
        .iter()
        .map(|r| r["packets"].as_u64().unwrap())
        .collect();
    assert_eq!(packets, [2400, 2400, 1200, 1200]);
    assert!(rows.iter().all(|r| r["two_threads"].is_null()), "{v}");
    assert!(rows.iter().all(|r| r["verification_failures"] == 0), "{v}");
    // A warm-up of a twentieth, then the measurement.
    assert_eq!(counter(&v, "64 CPU: client port", "tx_packets"), 2400 + 121);
    assert_eq!(counter(&v, "1500 FLD-E: FLD", "rx_packets"), 1200 + 61);
    // Each path again with the card's engine on a thread of its own. Whether every frame
    // survives that on a loaded machine is the benchmark's verdict, not this test's.
    let two = output_json(&run(&a("bench --packets 1000 --threads 2 --json")));
    let rows = two["results"].as_array().expect("results");
    assert!(rows.iter().all(|r| r["two_threads"].is_object()), "{two}");
    assert!(
        two["cross_core_round_trip_ns"]
            .as_f64()
            .is_some_and(|ns| ns > 0.0),
        "{two}"
    );
    assert_eq!(
        counter(&two, "256 FLD-E: client port", "tx_packets"),
        2 * (1000 + 51)
    );
    let stats = ok(&a("bench --packets 1000 --stats"));
    assert!(stats.contains("datacenter-mix FLD-E: FLD"), "{stats}");
    assert!(!ok(&a("bench --packets 1000")).contains("FLD-E: FLD"));
    refused(&a("bench --threads 3"), "--threads");
}

#[test]
fn bench_accel_measures_the_messages_asked_for() {
    let v = json(&a("bench-accel --packets 150 --json"));
    let rows = v["results"].as_array().expect("results");
    let accels: Vec<&str> = rows.iter().map(|r| r["accel"].as_str().unwrap()).collect();
    assert_eq!(accels, ["zuc", "zuc", "zuc", "zuc", "defrag", "iot"]);
    assert!(
        rows.iter()
            .all(|r| r["messages"] == 150 && r["verified"] == true),
        "{v}"
    );
    assert_eq!(counter(&v, "zuc 4096 B: zuc", "requests"), 150);
    assert!(v["card_counters"]["iot: card"].is_object(), "{v}");
    let stats = ok(&a("bench-accel --packets 100 --stats"));
    assert!(stats.contains("zuc 64 B: FLD vPort"), "{stats}");
}

#[test]
fn bench_rtl_runs_the_design_at_the_clock_asked_for() {
    if !verilator() {
        return;
    }
    let v = json(&a("bench-rtl --packets 1000 --rtl-clock-mhz 100 --json"));
    assert_eq!(v["clock_hz"], 100e6);
    let rows = v["results"].as_array().expect("results");
    assert_eq!(rows.len(), 2);
    assert!(rows
        .iter()
        .all(|r| r["packets"] == 1000 && r["verification_failures"] == 0));
    assert!(counter(&v, "64 B RTL: rtl:echo", "cycles") > 0, "{v}");
    assert_eq!(counter(&v, "64 B Rust: FLD", "tx_packets"), 1000 + 51);
}

#[test]
fn bench_fldr_reports_each_set_up_and_draws_the_figures() {
    let dir = scratch("bench-fldr");
    let v = json(&argv(
        "bench-fldr --messages 1 --operations 20 --latency-messages 20 --json --plot @",
        &[&dir],
    ));
    assert_eq!(v["verified"], true);
    let zuc = v["figure_8a_zuc"].as_array().expect("figure 8a");
    // A tenth as warm-up, then the operations, at each request size.
    assert_eq!(
        counter(&v, "zuc: accelerator", "requests"),
        zuc.len() as u64 * 22
    );
    assert!(counter(&v, "remote echo: client qp", "packets_sent") > 0);
    assert!(counter(&v, "local echo: server FLD", "rx_packets") > 0);
    for f in ["fig7b-fldr.svg", "fig7c-fldr-latency.svg", "fig8a-zuc.svg"] {
        let svg = std::fs::read_to_string(dir.join(f)).expect(f);
        assert!(svg.contains("<svg"), "{f}");
    }
}

#[test]
fn model_measures_the_packets_asked_for() {
    let v = json(&a("model --packets 300 --json"));
    let rows = v["results"].as_array().expect("results");
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r["packets"] == 300), "{v}");
    // 200 packets of warm-up, then the measurement.
    assert_eq!(counter(&v, "64 B: FLD", "rx_packets"), 200 + 300);
    let human = ok(&a("model --packets 200"));
    assert!(human.contains("Figure 7a"), "{human}");
    assert!(!human.contains("64 B: FLD"), "{human}");
    assert!(ok(&a("model --packets 200 --stats")).contains("64 B: FLD"));
}

#[test]
fn memory_follows_its_parameters() {
    let base = json(&a("memory --json"));
    let fast = json(&a("memory --gbps 400 --queues 64 --json"));
    assert_eq!(fast["params"]["bandwidth_gbps"], 400.0);
    assert_eq!(fast["params"]["tx_queues"], 64);
    assert_ne!(base["software_total_bytes"], fast["software_total_bytes"]);
    assert!(base.get("figure4").is_none());
    // The NIC's read-ahead: four 16-byte WQEs for each RQ the setup created.
    let nic = &base["nic_on_chip"];
    assert!(nic["rqs"].as_u64().unwrap() >= 1, "{nic}");
    assert_eq!(
        nic["rx_read_ahead_bytes"],
        nic["rqs"].as_u64().unwrap() * 4 * 16
    );
    let sweep = json(&a("memory --sweep --json"));
    assert!(!sweep["figure4"].as_array().expect("figure 4").is_empty());
    refused(&a("memory --min-packet 32"), "min-packet");
}

// ---- replay, sim, rtl-init -----------------------------------------------------------------

#[test]
fn replay_writes_what_reaches_the_host() {
    let dir = scratch("replay");
    let (input, out) = (dir.join("in.pcap"), dir.join("out.pcap"));
    ok(&argv("demo --accel echo --packets 10 --pcap @", &[&input]));
    let replay = "replay --accel echo --in @ --out @ --json";
    let v = json(&argv(replay, &[&input, &out]));
    assert_eq!(v["injected"], 20);
    assert_eq!(v["delivered"], 20);
    assert_eq!(frames(&out).len(), 20);
    assert_eq!(counter(&v, "card", "tx_packets"), 0);
    // From the host function instead of the uplink: the host port sends them.
    let host = json(&argv(&format!("{replay} --inject host"), &[&input, &out]));
    assert_eq!(counter(&host, "card", "tx_packets"), 20);
    let config = dir.join("two-queues.toml");
    std::fs::write(&config, "host_queues = 2\n").unwrap();
    let two = json(&argv(
        &format!("{replay} --config @"),
        &[&input, &out, &config],
    ));
    assert_eq!(two["delivered_per_queue"].as_array().map(Vec::len), Some(2));
    refused(
        &argv(&format!("{replay} --burst 0"), &[&input, &out]),
        "--burst",
    );
}

#[test]
fn sim_follows_its_scenario_seed_and_plot() {
    let dir = scratch("sim");
    let scenario = dir.join("lossy.toml");
    std::fs::write(
        &scenario,
        "name = \"lossy\"\nseed = 1\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n\
         [[link]]\nends = [\"a\", \"b\"]\nloss = 0.05\n[[workload]]\nkind = \"write_latency\"\n\
         title = \"one-way\"\nclient = \"a\"\nserver = \"b\"\nsizes = [8, 64]\niterations = 50\n",
    )
    .unwrap();
    let points = |v: &Value| -> Vec<(u64, f64)> {
        v["results"]["workloads"][0]["points"]
            .as_array()
            .expect("points")
            .iter()
            .map(|p| {
                let mean = p["metrics"]["latency_mean_us"].as_f64().unwrap();
                (p["size"].as_u64().unwrap(), mean)
            })
            .collect()
    };
    let seven = json(&argv("sim @ --json --seed 7", &[&scenario]));
    assert_eq!(seven["results"]["seed"], 7);
    let sizes: Vec<u64> = points(&seven).iter().map(|p| p.0).collect();
    assert_eq!(sizes, [8, 64]);
    let again = json(&argv("sim @ --json --seed 7", &[&scenario]));
    assert_eq!(points(&seven), points(&again));
    let eight = json(&argv("sim @ --json --seed 8", &[&scenario]));
    assert_ne!(points(&seven), points(&eight));
    let svg = dir.join("chart.svg");
    let human = ok(&argv("sim @ --plot @", &[&scenario, &svg]));
    assert!(human.contains("one-way"), "{human}");
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

#[test]
fn rtl_init_names_the_module() {
    let dir = scratch("rtl-init");
    let accel = dir.join("accel");
    ok(&argv("rtl-init @ --name blinky", &[&accel]));
    let top = std::fs::read_to_string(accel.join("blinky.v")).expect("the top module");
    assert!(top.contains("module blinky"), "{top}");
    let list = std::fs::read_to_string(accel.join("files.f")).expect("the file list");
    assert!(list.contains("blinky.v"), "{list}");
    refused(&argv("rtl-init @", &[&accel]), "not empty");
    refused(
        &argv("rtl-init @ --name 1x", &[&dir.join("other")]),
        "identifier",
    );
}

#[test]
fn demo_rtl_writes_the_waveform_at_the_clock_asked_for() {
    if !verilator() {
        return;
    }
    let vcd = scratch("demo-rtl").join("echo.vcd");
    let design = fld_rtl::examples_dir().join("echo");
    let accel = format!("--accel=rtl:{}", design.display());
    let mut args = a("demo --packets 20 --rtl-clock-mhz 100 --json");
    args.extend([accel, "--vcd".into(), vcd.display().to_string()]);
    let v = json(&args);
    assert_eq!(v["packets_received"], 20);
    assert!(
        v["accelerator_counters"]["cycles"].as_u64() > Some(0),
        "{v}"
    );
    assert!(std::fs::metadata(&vcd).map(|m| m.len()).unwrap_or(0) > 0);
}

// ---- the vfio-user server and its clients --------------------------------------------------

#[test]
fn serve_offers_its_sockets_to_selftest_bench_transport_and_demo() {
    refused(&a("serve --rtl-clock-mhz 100"), "--rtl-clock-mhz");
    refused(&a("serve --vcd x.vcd"), "--vcd");
    let dir = scratch("serve");
    let server = Background::spawn(&argv("serve --accel echo --socket-dir @", &[&dir]));
    let deadline = Instant::now() + Duration::from_secs(20);
    let sockets = ["nic0.sock", "nic1.sock", "fld.sock"];
    while !sockets.iter().all(|n| dir.join(n).exists()) {
        assert!(Instant::now() < deadline, "fldemu serve made no sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    let remote = |line: &str| {
        argv(
            &format!("{line} --transport vfio-user --socket-dir @"),
            &[&dir],
        )
    };
    let check = ok(&remote("selftest --filter cpu_echo"));
    assert!(check.contains("test cpu_echo_byte_exact ... ok"), "{check}");
    assert!(check.contains("selftest: 1 checks, 0 failed"), "{check}");
    let t = json(&remote("bench-transport --iterations 40 --json"));
    assert_eq!(t["mmio_read"]["samples"], 40);
    let v = json(&remote("demo --accel echo --packets 30 --json"));
    assert_eq!(v["transport"], "vfio-user");
    assert_eq!(v["packets_received"], 30);
    assert_eq!(counter(&v, "FLD", "rx_packets"), 30);
    refused(&remote("selftest --filter no-such-check"), "--filter");
    drop(server);
    refused(&a("selftest --transport in-process"), "vfio");
    refused(&argv("selftest --socket-dir @", &[&dir]), "--socket-dir");
    refused(
        &argv("bench-transport --transport vfio --socket-dir @", &[&dir]),
        "--socket-dir",
    );
    refused(&a("bench-transport --iterations 0"), "--iterations");
}

// ---- RDMA tools ----------------------------------------------------------------------------

#[test]
fn rc_pingpong_two_processes_exchange_what_was_asked_with_faults_and_capture() {
    let pcap = scratch("rc-pingpong").join("server.pcap");
    let (server_link, client_link) = udp_link();
    let port = free_tcp_port();
    let common = format!("-p {port} -n 20 -s 256 --json --timeout 30");
    let server = Background::spawn(&argv(
        &format!("rc-pingpong --link {server_link} --ip 192.168.77.1 --pcap @ {common}"),
        &[&pcap],
    ));
    // -d and -l are accepted (and ignored) as ibv_rc_pingpong accepts them.
    let client = json(&a(&format!(
        "rc-pingpong 127.0.0.1 --link {client_link} --ip 192.168.77.2 {common} \
         --loss 0.2 --seed 3 -d mlx5_0 -l 0"
    )));
    let out = server.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let served = output_json(&out);
    for v in [&client, &served] {
        assert_eq!(v["iters"], 20);
        assert_eq!(v["size"], 256);
        assert_eq!(v["bytes"], 2 * 20 * 256);
    }
    // The client lost some of what it sent, and sent it again.
    assert!(counter(&client, "qp", "retransmitted") > 0, "{client}");
    // The server's capture holds every RoCE packet the server's queue pair sent.
    let sent = counter(&served, "qp", "packets_sent");
    assert_eq!(roce(&frames(&pcap), [192, 168, 77, 1], 0) as u64, sent);

    let remote = "rc-pingpong --transport vfio-user";
    refused(&a(&format!("{remote} --loss 0.1")), "--loss");
    refused(&a(&format!("{remote} --link {server_link}")), "--link");
    refused(&a(&format!("{remote} --pcap x.pcap")), "--pcap");
    refused(
        &a(&format!("rc-pingpong --link {server_link} --seed 2")),
        "--loss",
    );
    refused(
        &a(&format!("rc-pingpong --link {server_link} --socket-dir d")),
        "--socket-dir",
    );
    let help = ok(&a("rc-pingpong --help"));
    assert!(help.contains("accepted for compatibility with ibv_rc_pingpong and ignored"));
}

#[test]
fn rc_bw_measures_the_operations_and_sizes_asked_for() {
    let v = json(&a(
        "rc-bw --ops send --size-min 256 --size-max 512 --bytes 1 --qp-timeout 24 --json",
    ));
    let rows = v["results"].as_array().expect("results");
    let runs: Vec<(&str, u64, u64)> = rows
        .iter()
        .map(|r| {
            let op = r["op"].as_str().unwrap();
            (
                op,
                r["size"].as_u64().unwrap(),
                r["messages"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(runs, [("send", 256, 2000), ("send", 512, 2000)]);
    // Warm-ups of a twentieth and the measured runs. The ACK timer of 69 s never expires, even
    // on a loaded machine (with the default 67 ms it can, and card A sends again).
    assert_eq!(counter(&v, "card A qp", "retransmitted"), 0, "{v}");
    assert_eq!(
        counter(&v, "card B qp", "bytes_received"),
        2101 * (256 + 512)
    );
    assert!(rows.iter().all(|r| r["two_threads"].is_null()));
    assert!(v["cross_core_round_trip_ns"].is_null(), "{v}");
    refused(&a("rc-bw --ip 10.0.0.1"), "--link");
    refused(&a("rc-bw --timeout 3"), "--link");
    refused(&a("rc-bw 127.0.0.1"), "--link");
    refused(&a("rc-bw --ops write,swap"), "--ops");
    refused(&a("rc-bw --size-min 128 --size-max 64"), "--size-min");
    refused(&a("rc-bw --qp-timeout 0"), "--qp-timeout");
    refused(&a("rc-bw --qp-timeout 32"), "--qp-timeout");
}

/// `rc-bw --threads 2` measures each size a second time with card B's engine on a thread of its
/// own: every message of both runs arrives, and the WRITE's bytes are checked after each run.
#[test]
fn rc_bw_measures_again_with_the_second_card_on_a_thread_of_its_own() {
    let v = json(&a(
        "rc-bw --ops write --size-min 64 --size-max 128 --bytes 1 --threads 2 --qp-timeout 24 --json",
    ));
    let rows = v["results"].as_array().expect("results");
    assert_eq!(rows.len(), 2);
    let round_trip = v["cross_core_round_trip_ns"].as_f64();
    assert!(round_trip.is_some_and(|ns| ns > 0.0), "{v}");
    for r in rows {
        let t = &r["two_threads"];
        assert_eq!(t["messages"].as_u64(), Some(2000), "{r}");
        assert!(t["mmsgs_per_s"].as_f64().is_some_and(|m| m > 0.0), "{r}");
    }
    // Both runs of both sizes, each after its warm-up of a twentieth; the 69 s ACK timer never
    // expires, so nothing is sent again.
    assert_eq!(counter(&v, "card A qp", "retransmitted"), 0, "{v}");
    assert_eq!(
        counter(&v, "card B qp", "bytes_received"),
        2 * 2101 * (64 + 128)
    );
    refused(&a("rc-bw --threads 3"), "--threads");
    refused(
        &a("rc-bw --threads 2 --link udp:9000:127.0.0.1:9001"),
        "--threads",
    );
}

#[test]
fn rc_bw_two_processes_report_both_ends() {
    let (server_link, client_link) = udp_link();
    let common = format!("-p {} --timeout 30 --json", free_tcp_port());
    refused(
        &a(&format!("rc-bw --link {server_link} --ops write {common}")),
        "--ops",
    );
    let server = Background::spawn(&a(&format!(
        "rc-bw --link {server_link} --ip 10.8.0.1 {common}"
    )));
    let client = json(&a(&format!(
        "rc-bw 127.0.0.1 --link {client_link} --ip 10.8.0.2 {common} \
         --ops write --size-min 1024 --size-max 1024 --bytes 1 --qp-timeout 16"
    )));
    let out = server.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let served = output_json(&out);
    assert_eq!(served["served"], true);
    let rows = client["results"].as_array().expect("results");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (&rows[0]["op"], &rows[0]["size"]),
        (&"write".into(), &1024.into())
    );
    // Warm-up and run: 2101 WRITEs of one 1 KiB packet each, and the packets a UDP link
    // between two busy processes made the client send again.
    let retransmitted = counter(&client, "qp", "retransmitted");
    assert_eq!(
        counter(&client, "qp", "bytes_sent"),
        (2101 + retransmitted) * 1024
    );
    assert!(counter(&served, "qp", "bytes_received") >= 2101 * 1024);
}

/// `rc-bw --unload` between two processes: the client unloads the 64 and 128-byte WRITEs into
/// the server's staging slots and its CPU places them (CRC-checked by the run itself); the
/// 256-byte ones do not fit a slot and stay offloaded. The server took exactly the unloaded
/// ones from its slots; a READ is refused before anything connects.
#[test]
fn rc_bw_two_processes_unload_small_writes() {
    let (server_link, client_link) = udp_link();
    let common = format!("-p {} --timeout 30 --json --unload", free_tcp_port());
    refused(
        &a(&format!(
            "rc-bw 127.0.0.1 --link {client_link} {common} --ops read"
        )),
        "--unload",
    );
    let server = Background::spawn(&a(&format!(
        "rc-bw --link {server_link} --ip 10.8.0.1 {common}"
    )));
    let client = json(&a(&format!(
        "rc-bw 127.0.0.1 --link {client_link} --ip 10.8.0.2 {common} \
         --size-min 64 --size-max 256 --bytes 1"
    )));
    let out = server.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let served = output_json(&out);
    assert_eq!(served["served"], true);
    let rows = client["results"].as_array().expect("results");
    let sizes: Vec<_> = rows.iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [64, 128, 256]);
    // Warm-up and run per size: 2101 WRITEs; two sizes unloaded.
    assert_eq!(served["unloaded"], 2 * 2101, "{served}");
}

/// `rc-bw --receiver left` between two processes whose UDP link holds back 30 % of the
/// client's frames (LEFT §3): the server's reorder unit places the 1 KB WRITEs that arrive
/// ahead — no sequence NAK, every byte checked — where go-back-N on the same link NAKs and
/// resends several times as much. Multi-packet SENDs and READ requests reordered the same way
/// wait in the reorder buffer and are taken in order: every SEND's bytes arrive CRC-exact,
/// still without a sequence NAK.
#[test]
fn rc_bw_two_processes_with_a_reorder_unit_on_a_reordering_link() {
    let run = |receiver: &str, ops: &str| {
        let (server_link, client_link) = udp_link();
        let common = format!("-p {} --timeout 30 --json", free_tcp_port());
        let server = Background::spawn(&a(&format!(
            "rc-bw --link {server_link} --ip 10.8.0.1 --receiver {receiver} {common}"
        )));
        let client = json(&a(&format!(
            "rc-bw 127.0.0.1 --link {client_link} --ip 10.8.0.2 --reorder 0.3 {common} {ops}"
        )));
        let out = server.wait();
        assert!(out.status.success(), "{}", stderr(&out));
        (client, output_json(&out))
    };
    let sends = "--ops send,read --size-min 4096 --size-max 16384 --bytes 262144";
    let (_, served) = run("left", sends);
    assert_eq!(counter(&served, "qp", "out_of_sequence"), 0, "{served}");
    assert!(counter(&served, "port", "rx_out_of_order") > 0, "{served}");
    let writes = "--ops write --size-min 1024 --size-max 1024 --bytes 1048576";
    let (client, served) = run("left", writes);
    assert_eq!(counter(&served, "qp", "out_of_sequence"), 0, "{served}");
    // A datagram the busy machine's sockets lose costs a timeout and a resend either way.
    let left_resent = counter(&client, "qp", "retransmitted");
    let (client, served) = run("gbn", writes);
    assert!(counter(&served, "qp", "out_of_sequence") > 0, "{served}");
    let gbn_resent = counter(&client, "qp", "retransmitted");
    assert!(
        gbn_resent > 4 * left_resent.max(1),
        "{gbn_resent} against {left_resent}"
    );
}

/// `rc-pingpong --stateless`: the ping-pong over a StaR connection between two processes, with
/// loss on the client's side: the server's NIC served every request without a QP (no context
/// looked up), the client sent lost requests again, and both ends counted every message.
#[test]
fn rc_pingpong_two_processes_over_a_stateless_connection() {
    let (server_link, client_link) = udp_link();
    let common = format!(
        "-p {} -n 50 -s 1500 --json --timeout 30 --stateless",
        free_tcp_port()
    );
    let server = Background::spawn(&a(&format!(
        "rc-pingpong --link {server_link} --ip 192.168.77.1 {common}"
    )));
    let client = json(&a(&format!(
        "rc-pingpong 127.0.0.1 --link {client_link} --ip 192.168.77.2 {common} \
         --loss 0.1 --seed 5"
    )));
    let out = server.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let served = output_json(&out);
    for v in [&client, &served] {
        assert_eq!(v["iters"], 50);
        assert_eq!(v["bytes"], 2 * 50 * 1500);
    }
    assert!(counter(&served, "port", "star_served") >= 100, "{served}");
    assert_eq!(counter(&served, "port", "qp_cache_misses"), 0);
    assert_eq!(counter(&served, "port", "qp_cache_hits"), 0);
    assert!(counter(&client, "qp", "retransmitted") > 0, "{client}");
}

/// `--stateless`: a StaR connection between the two processes. The server's NIC serves the
/// client's WRITEs, READs and SENDs statelessly (its counters say so; its QP-context cache is
/// never consulted), every byte checked; one end alone asking for it is refused.
#[test]
fn rc_bw_two_processes_over_a_stateless_connection() {
    let (server_link, client_link) = udp_link();
    let common = format!("-p {} --timeout 30 --json", free_tcp_port());
    let server = Background::spawn(&a(&format!(
        "rc-bw --link {server_link} --ip 10.8.0.1 --stateless {common}"
    )));
    let client = json(&a(&format!(
        "rc-bw 127.0.0.1 --link {client_link} --ip 10.8.0.2 --stateless {common} \
         --size-min 2048 --size-max 2048 --bytes 1"
    )));
    let out = server.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let served = output_json(&out);
    let rows = client["results"].as_array().expect("results");
    assert_eq!(rows.len(), 3, "write, read and send");
    // 2,101 messages of each op (warm-up and run), at least one request each, all served
    // without a context.
    assert!(
        counter(&served, "port", "star_served") >= 3 * 2101,
        "{served}"
    );
    assert_eq!(counter(&served, "port", "qp_cache_misses"), 0);
    assert_eq!(counter(&client, "port", "star_tx_blocked"), 0);
    // One end alone asking for StaR is refused by the other.
    let (server_link, client_link) = udp_link();
    let common = format!("-p {} --timeout 10 --json", free_tcp_port());
    let server = Background::spawn(&a(&format!(
        "rc-bw --link {server_link} --ip 10.8.0.1 {common}"
    )));
    let lone = a(&format!(
        "rc-bw 127.0.0.1 --link {client_link} --ip 10.8.0.2 --stateless {common} \
         --ops write --size-min 64 --size-max 64 --bytes 1"
    ));
    refused(&lone, "--stateless");
    drop(server);
}

#[test]
fn rc_lat_measures_the_sizes_and_iterations_asked_for() {
    let v = json(&a("rc-lat --size-min 64 --size-max 128 -n 30 --json"));
    let rows = v["results"].as_array().expect("results");
    let runs: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["size"].as_u64().unwrap(),
                r["iterations"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(runs, [(64, 30), (128, 30)]);
    assert!(v["card_counters"]["card A qp"].is_object(), "{v}");
    let stats = ok(&a("rc-lat --size-min 8 --size-max 8 -n 10 --stats"));
    assert!(stats.contains("card B qp"), "{stats}");
    refused(&a("rc-lat --size-min 64 --size-max 8"), "--size-min");
}

#[test]
fn fldr_server_serves_a_demo_client_and_prints_its_counters_on_sigterm() {
    let (server_link, client_link) = udp_link();
    let listen = format!("127.0.0.1:{}", free_tcp_port());
    refused(&a(&format!("fldr-server --listen {listen}")), "--link");
    let server = Background::spawn(&a(&format!(
        "fldr-server --link {server_link} --listen {listen} --accel echo --stats"
    )));
    let v = json(&a(&format!(
        "demo --accel echo --rdma --link {client_link} --server {listen} \
         --packets 20 --size 700 --json"
    )));
    assert_eq!(v["messages"], 20);
    assert_eq!(v["message_bytes"], 700);
    assert_eq!(v["verified"], true);
    let resent = counter(&v, "client qp", "retransmitted");
    assert_eq!(counter(&v, "client qp", "bytes_sent"), (20 + resent) * 700);
    // The service is the other process's: this one has the client's counters only.
    assert!(v["card_counters"].get("server FLD").is_none(), "{v}");
    let out = server.terminate();
    let report = stdout(&out);
    assert!(out.status.success(), "{report}{}", stderr(&out));
    let fld = report
        .lines()
        .find(|l| l.trim_start().starts_with("server FLD"))
        .unwrap_or_else(|| panic!("no counters: {report}"));
    assert!(fld.contains("tx_packets 20,"), "{fld}");
}
