//! `cargo xtask test-rxe`: the proof that real RDMA software accepts the card's RoCEv2. The guest
//! boots with two virtio-net NICs — one on a `-netdev dgram` link whose other end is a running
//! `fldemu rc-pingpong` card (UDP, one Ethernet frame per datagram), one on QEMU's user network
//! for the TCP address exchange — loads Linux soft-RoCE (`rdma_rxe`) on the first, and runs
//! rdma-core's own `ibv_rc_pingpong` against `fldemu rc-pingpong` in both directions, from 1 B
//! to 64 KiB, polling and with `-e`, and once with loss injected on fldemu's side of the link.
//! One run is captured and dissected by tshark: RoCE, nothing malformed, the opcodes, QPNs and
//! PSNs the exchange announced.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::child::{self, Echo};
use crate::guest::{self, GuestPaths, Result};
use crate::prereq::{self, Host, Port};

/// fldemu's end of the dgram link and the guest's.
const FLD_UDP: u16 = 47911;
const GUEST_UDP: u16 = 47912;
/// The host port forwarded to the guest's ibv_rc_pingpong server.
const FORWARDED_TCP: u16 = 18516;
const FLD_IP: &str = "192.168.77.1";
const GUEST_IP: &str = "192.168.77.2";
const GUEST_RDMA_MAC: &str = "52:54:00:77:00:02";
const GUEST_CTL_MAC: &str = "52:54:00:00:00:02";

/// The ports test-rxe binds on 127.0.0.1.
const PORTS: [Port; 3] = [
    Port {
        udp: true,
        number: FLD_UDP,
        user: "fldemu's end of the dgram link",
    },
    Port {
        udp: true,
        number: GUEST_UDP,
        user: "QEMU's end of the dgram link",
    },
    Port {
        udp: false,
        number: FORWARDED_TCP,
        user: "forwarded to the guest's ibv_rc_pingpong",
    },
];

/// What test-rxe needs before it builds and boots anything.
pub fn prerequisites(paths: &GuestPaths) -> Result<()> {
    prereq::test_rxe(
        &Host::current(),
        paths,
        guest::rdma_installed(paths),
        &PORTS,
    )
}

/// One ibv_rc_pingpong run against one fldemu rc-pingpong run.
#[derive(Clone, Debug)]
struct Case {
    guest_server: bool,
    size: usize,
    iters: u64,
    events: bool,
    loss: f64,
    capture: bool,
}

impl Case {
    fn name(&self) -> String {
        format!(
            "rxe_{}_{}B{}{}",
            if self.guest_server {
                "guest_server"
            } else {
                "guest_client"
            },
            self.size,
            if self.events { "_events" } else { "" },
            if self.loss > 0.0 {
                format!("_loss{}pct", (self.loss * 100.0).round())
            } else {
                String::new()
            }
        )
    }
}

fn cases() -> Vec<Case> {
    let mut v = vec![Case {
        guest_server: false,
        size: 4096,
        iters: 20,
        events: false,
        loss: 0.0,
        capture: true,
    }];
    for guest_server in [false, true] {
        for events in [false, true] {
            for (size, iters) in [(1, 200), (1024, 200), (4096, 100), (65536, 20)] {
                v.push(Case {
                    guest_server,
                    size,
                    iters,
                    events,
                    loss: 0.0,
                    capture: false,
                });
            }
        }
    }
    for guest_server in [false, true] {
        v.push(Case {
            guest_server,
            size: 4096,
            iters: 100,
            events: false,
            loss: 0.02,
            capture: false,
        });
    }
    v
}

/// The guest's side: the NICs up, soft-RoCE on the dgram NIC, the GID index of its RoCEv2
/// IPv4 GID, then every case in order.
fn guest_script(cases: &[Case]) -> String {
    let mut s = format!(
        "modprobe virtio_net; modprobe rdma_rxe; modprobe ib_uverbs\n\
         sleep 1\n\
         ifname() {{ for i in /sys/class/net/*; do [ \"$(cat $i/address)\" = \"$1\" ] && basename $i; done; }}\n\
         RDMA_IF=$(ifname {GUEST_RDMA_MAC}); CTL_IF=$(ifname {GUEST_CTL_MAC})\n\
         ip link set lo up; ip link set $RDMA_IF up; ip addr add {GUEST_IP}/24 dev $RDMA_IF\n\
         ip link set $CTL_IF up; ip addr add 10.0.2.15/24 dev $CTL_IF; ip route add default via 10.0.2.2\n\
         rdma link add rxe0 type rxe netdev $RDMA_IF; echo \"fldemu-rxe: rdma link add exit $?\"\n\
         GIDX=\n\
         for t in $(seq 1 50); do\n\
           for n in $(seq 0 15); do\n\
             g=$(cat /sys/class/infiniband/rxe0/ports/1/gids/$n 2>/dev/null)\n\
             ty=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$n 2>/dev/null)\n\
             [ \"$g\" = \"0000:0000:0000:0000:0000:ffff:c0a8:4d02\" ] && [ \"$ty\" = \"RoCE v2\" ] && GIDX=$n\n\
           done\n\
           [ -n \"$GIDX\" ] && break; sleep 0.2\n\
         done\n\
         echo \"fldemu-rxe: rxe0 on $RDMA_IF, RoCEv2 GID index $GIDX\"\n\
         ibv_devinfo -d rxe0 | grep -E 'state|active_mtu' | head -2\n"
    );
    for (i, c) in cases.iter().enumerate() {
        let opts = format!(
            "-d rxe0 -g $GIDX -s {} -n {}{}",
            c.size,
            c.iters,
            if c.events { " -e" } else { "" }
        );
        // A run that cannot finish (a peer gone while rxe, which retries for ever at retry
        // count 7, still waits for an ACK) fails after 3 minutes instead of holding the guest.
        let run = if c.guest_server {
            format!("timeout 180 ibv_rc_pingpong {opts} 2>&1; rc=$?")
        } else {
            // The host's server may not listen yet: connect again, as a user would.
            format!(
                "for try in $(seq 1 120); do out=$(timeout 180 ibv_rc_pingpong {opts} 10.0.2.2 2>&1); rc=$?; \
                 case \"$out\" in *\"Couldn't connect\"*) sleep 0.5;; *) break;; esac; done; echo \"$out\""
            )
        };
        s.push_str(&format!(
            "echo 'fldemu-rxe: case {i} begin'\n{run}\necho \"fldemu-rxe: case {i} exit $rc\"\n"
        ));
    }
    s
}

/// The guest's output of its soft-RoCE set-up (everything before the first case), and what
/// went wrong there: `rdma link add` failed, or rxe0 has no RoCEv2 GID for the guest's address.
fn guest_setup(output: &str) -> (String, Option<String>) {
    let section: Vec<&str> = output
        .lines()
        .take_while(|l| !l.starts_with("fldemu-rxe: case 0 begin"))
        .collect();
    let link = section
        .iter()
        .find_map(|l| l.strip_prefix("fldemu-rxe: rdma link add exit "))
        .map(str::trim);
    let gid = section
        .iter()
        .find_map(|l| l.split_once("RoCEv2 GID index ").map(|(_, g)| g.trim()))
        .filter(|g| !g.is_empty());
    let problem = match (link, gid) {
        (Some("0"), Some(_)) => None,
        (Some("0"), None) => Some("rxe0 has no RoCEv2 GID for the guest's address".to_string()),
        (Some(code), _) => Some(format!("`rdma link add rxe0 type rxe` exited with {code}")),
        (None, _) => Some("it never reached `rdma link add`".to_string()),
    };
    (section.join("\n"), problem)
}

/// The guest's output of case `i`, between its markers.
fn guest_case(output: &str, i: usize) -> String {
    let begin = format!("fldemu-rxe: case {i} begin");
    let end = format!("fldemu-rxe: case {i} exit ");
    output
        .lines()
        .skip_while(|l| *l != begin)
        .skip(1)
        .take_while(|l| !l.starts_with(&end))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What fldemu's end of one case did.
struct HostRun {
    exit_ok: bool,
    json: Option<Value>,
    output: String,
    /// How it failed (exit status, its log's tail), if it did.
    failure: Option<String>,
}

/// fldemu's end of every case, in order, each after the previous one ended.
fn host_side(cases: Vec<Case>, fldemu: PathBuf, dir: PathBuf) -> Vec<HostRun> {
    let mut out = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let mut cmd = Command::new(&fldemu);
        cmd.arg("rc-pingpong");
        if c.guest_server {
            cmd.args(["127.0.0.1", "-p", &FORWARDED_TCP.to_string()]);
        }
        cmd.args([
            "--link",
            &format!("udp:127.0.0.1:{FLD_UDP}:127.0.0.1:{GUEST_UDP}"),
            "--ip",
            FLD_IP,
            "-s",
            &c.size.to_string(),
            "-n",
            &c.iters.to_string(),
            "--timeout",
            "240",
            "--json",
        ]);
        if c.events {
            cmd.arg("-e");
        }
        if c.loss > 0.0 {
            cmd.args([
                "--loss",
                &c.loss.to_string(),
                "--seed",
                &(i as u64 + 1).to_string(),
            ]);
        }
        if c.capture {
            cmd.arg("--pcap").arg(dir.join("capture.pcap"));
        }
        let log = dir.join(format!("fldemu-case{i}.log"));
        let _ = std::fs::remove_file(&log);
        let what = format!("fldemu rc-pingpong (case {i}, {})", c.name());
        let run = child::run_logged(&mut cmd, &what, &log, Echo::Quiet);
        let (exit_ok, failure, stdout) = match &run {
            Ok(r) if r.status.success() => (true, None, r.stdout.as_str()),
            Ok(r) => (false, Some(r.failure()), r.stdout.as_str()),
            Err(e) => (false, Some(e.clone()), ""),
        };
        let json = stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok());
        out.push(HostRun {
            exit_ok,
            json,
            output: std::fs::read_to_string(&log).unwrap_or_default(),
            failure,
        });
    }
    out
}

/// tshark installed from the distribution if missing (the prerequisites made sure this is
/// root with apt-get); apt-get's output goes to `log`.
fn ensure_tshark(log: &Path) -> Result<()> {
    if Host::current().find(prereq::TSHARK.program).is_some() {
        return Ok(());
    }
    prereq::apt_install(&prereq::TSHARK, log)
}

/// The capture as tshark dissects it: no malformed packet, RoCE only with the opcodes of SENDs
/// and ACKs, both QPNs, and each direction's SEND PSNs consecutive from the announced PSN.
/// A tshark that fails is an error with its exit status and its log's last lines (`tshark.log`
/// beside the capture).
fn check_capture(pcap: &Path, host: &Value) -> Result<(bool, String)> {
    let log = pcap.with_file_name("tshark.log");
    let _ = std::fs::remove_file(&log);
    let malformed = child::run(
        Command::new("tshark")
            .arg("-r")
            .arg(pcap)
            .args(["-Y", "_ws.malformed"]),
        "tshark -Y _ws.malformed",
        &log,
        Echo::Quiet,
    )?
    .lines()
    .count();
    let fields = child::run(
        Command::new("tshark")
            .arg("-r")
            .arg(pcap)
            .args(["-Y", "infiniband", "-T", "fields"])
            .args(["-e", "infiniband.bth.opcode"])
            .args(["-e", "infiniband.bth.destqp"])
            .args(["-e", "infiniband.bth.psn"]),
        "tshark -T fields",
        &log,
        Echo::Quiet,
    )?;
    let num = |s: &str| {
        let s = s.trim();
        s.strip_prefix("0x").map_or_else(
            || s.parse::<u64>().ok(),
            |h| u64::from_str_radix(h, 16).ok(),
        )
    };
    let packets: Vec<(u64, u64, u64)> = fields
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some((num(f.next()?)?, num(f.next()?)?, num(f.next()?)?))
        })
        .collect();
    let (local_qpn, remote_qpn) = (
        host["local_qpn"].as_u64().unwrap_or(0),
        host["remote_qpn"].as_u64().unwrap_or(0),
    );
    let (local_psn, remote_psn) = (
        host["local_psn"].as_u64().unwrap_or(0),
        host["remote_psn"].as_u64().unwrap_or(0),
    );
    let opcodes_ok = packets.iter().all(|p| matches!(p.0, 0 | 1 | 2 | 4 | 17));
    let qpns_ok = packets
        .iter()
        .all(|p| p.1 == local_qpn || p.1 == remote_qpn);
    // SENDs towards the guest carry our PSNs; towards us, the guest's.
    let consecutive = |dest: u64, first: u64| {
        let psns: Vec<u64> = packets
            .iter()
            .filter(|p| p.1 == dest && p.0 != 17)
            .map(|p| p.2)
            .collect();
        !psns.is_empty()
            && psns
                .iter()
                .enumerate()
                .all(|(i, p)| *p == (first + i as u64) & 0xff_ffff)
    };
    let ours = consecutive(remote_qpn, local_psn);
    let theirs = consecutive(local_qpn, remote_psn);
    let acks = packets.iter().filter(|p| p.0 == 17).count();
    let ok = malformed == 0 && opcodes_ok && qpns_ok && ours && theirs && acks > 0;
    Ok((
        ok,
        format!(
            "({} RoCE packets, {malformed} malformed, {acks} ACKs, opcodes ok {opcodes_ok}, \
             QPNs ok {qpns_ok}, our PSNs consecutive {ours}, the guest's {theirs})",
            packets.len()
        ),
    ))
}

pub fn test_rxe(workspace: &Path, timeout: u64) -> Result<bool> {
    let paths = GuestPaths::new();
    let qemu = guest::setup(&paths)?;
    guest::setup_rdma(&paths)?;
    let release = workspace.join("target/release");
    let fldemu = release.join("fldemu");
    let dir = workspace.join("target/rxe");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    ensure_tshark(&dir.join("apt-get-tshark.log"))?;
    let cases = cases();
    let host = {
        let (c, f, d) = (cases.clone(), fldemu.clone(), dir.clone());
        std::thread::spawn(move || host_side(c, f, d))
    };
    let devices: Vec<String> = [
        "-netdev",
        &format!(
            "dgram,id=rdma,local.type=inet,local.host=127.0.0.1,local.port={GUEST_UDP},\
             remote.type=inet,remote.host=127.0.0.1,remote.port={FLD_UDP}"
        ),
        "-device",
        &format!("virtio-net-pci,netdev=rdma,mac={GUEST_RDMA_MAC}"),
        "-netdev",
        &format!("user,id=ctl,hostfwd=tcp:127.0.0.1:{FORWARDED_TCP}-:18515"),
        "-device",
        &format!("virtio-net-pci,netdev=ctl,mac={GUEST_CTL_MAC}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    eprintln!(
        "xtask: booting the guest: soft-RoCE on a dgram link to fldemu rc-pingpong, {} runs",
        cases.len()
    );
    let side_log = dir.join("fldemu.log");
    let outcome = guest::boot_vm(
        &paths,
        &qemu,
        &release,
        &dir.join("boot"),
        &devices,
        &side_log,
        &guest::RunOptions {
            command: Some(guest_script(&cases)),
            timeout: Duration::from_secs(timeout),
            kill_after: None,
            reset_during: None,
        },
    )?;
    let host_runs = host.join().map_err(|_| "the host side panicked")?;
    let _ = std::fs::write(
        &side_log,
        host_runs
            .iter()
            .map(|r| r.output.clone())
            .collect::<Vec<_>>()
            .join("\n----\n"),
    );
    let guest_exit = |i: usize| {
        outcome
            .output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("fldemu-rxe: case {i} exit ")))
            .and_then(|r| r.trim().parse::<i32>().ok())
    };
    let mut results: Vec<(String, bool, String)> = Vec::new();
    let mut case_ok = Vec::new();
    for (i, (c, h)) in cases.iter().zip(&host_runs).enumerate() {
        let g = guest_exit(i);
        let iters = h.json.as_ref().and_then(|j| j["iters"].as_u64());
        let usec = h
            .json
            .as_ref()
            .and_then(|j| j["usec_per_iter"].as_f64())
            .unwrap_or(0.0);
        let ok = g == Some(0) && h.exit_ok && iters == Some(c.iters);
        case_ok.push(ok);
        results.push((
            c.name(),
            ok,
            format!(
                "(ibv_rc_pingpong exit {g:?}, fldemu {}, {} iters, {usec:.0} us/iter)",
                if h.exit_ok { "ok" } else { "failed" },
                iters.unwrap_or(0)
            ),
        ));
        if c.capture {
            let (ok, detail) = match &h.json {
                Some(j) => check_capture(&dir.join("capture.pcap"), j).unwrap_or_else(|e| {
                    eprintln!("xtask: {e}");
                    (
                        false,
                        "(tshark failed: its exit status and last lines are above)".into(),
                    )
                }),
                None => (false, "(no capture: the run failed)".into()),
            };
            results.push(("rxe_capture_dissected_by_tshark".into(), ok, detail));
        }
    }
    for (name, ok, detail) in &results {
        println!(
            "rxe test {name} ... {} {detail}",
            if *ok { "ok" } else { "FAILED" }
        );
    }
    let passed = results.iter().filter(|r| r.1).count();
    println!(
        "test-rxe: {passed} passed, {} failed",
        results.len() - passed
    );
    let all_ok = passed == results.len();
    if !all_ok {
        let guest_log = outcome.output_log.display();
        let (setup, setup_problem) = guest_setup(&outcome.output);
        if let Some(problem) = setup_problem {
            eprintln!(
                "---- soft-RoCE set-up in the guest failed: {problem} ----\n{}",
                child::tail_of(&format!("{guest_log} (set-up)"), &setup)
            );
        }
        for (i, (c, h)) in cases.iter().zip(&host_runs).enumerate() {
            if case_ok.get(i).copied().unwrap_or(false) {
                continue;
            }
            let fldemu_end = h.failure.clone().unwrap_or_else(|| {
                format!(
                    "fldemu rc-pingpong exited successfully\n{}",
                    child::tail(&dir.join(format!("fldemu-case{i}.log")))
                )
            });
            let ibv = match guest_exit(i) {
                Some(code) => format!("ibv_rc_pingpong exited with {code}"),
                None => "ibv_rc_pingpong never finished".to_string(),
            };
            eprintln!(
                "---- case {i} ({}) ----\n{ibv}\n{}\n{fldemu_end}",
                c.name(),
                child::tail_of(
                    &format!("{guest_log} (case {i})"),
                    &guest_case(&outcome.output, i)
                )
            );
        }
        eprintln!("---- the guest ----\n{}", outcome.report());
    }
    Ok(all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETUP_OK: &str = "fldemu-rxe: rdma link add exit 0\n\
        fldemu-rxe: rxe0 on enp0s2, RoCEv2 GID index 1\n";

    #[test]
    fn a_failed_rxe_set_up_is_named() {
        let out = "error: Could not add link\nfldemu-rxe: rdma link add exit 255\n\
                   fldemu-rxe: rxe0 on enp0s2, RoCEv2 GID index \n\
                   fldemu-rxe: case 0 begin\n";
        let (section, problem) = guest_setup(out);
        assert_eq!(
            problem.as_deref(),
            Some("`rdma link add rxe0 type rxe` exited with 255")
        );
        assert_eq!(
            section,
            "error: Could not add link\nfldemu-rxe: rdma link add exit 255\n\
             fldemu-rxe: rxe0 on enp0s2, RoCEv2 GID index "
        );
        let no_gid =
            "fldemu-rxe: rdma link add exit 0\nfldemu-rxe: rxe0 on enp0s2, RoCEv2 GID index \n";
        assert_eq!(
            guest_setup(no_gid).1.as_deref(),
            Some("rxe0 has no RoCEv2 GID for the guest's address")
        );
        assert_eq!(
            guest_setup("modprobe: FATAL\n").1.as_deref(),
            Some("it never reached `rdma link add`")
        );
        assert_eq!(guest_setup(SETUP_OK).1, None);
    }

    #[test]
    fn a_case_s_guest_output_is_found_between_its_markers() {
        let out = format!(
            "{SETUP_OK}fldemu-rxe: case 0 begin\nfirst\nfldemu-rxe: case 0 exit 0\n\
             fldemu-rxe: case 1 begin\nCouldn't connect\nsecond\nfldemu-rxe: case 1 exit 1\n"
        );
        assert_eq!(guest_case(&out, 1), "Couldn't connect\nsecond");
        assert_eq!(guest_case(&out, 0), "first");
        assert_eq!(guest_case(&out, 2), "");
    }

    #[test]
    fn the_guest_script_reports_the_rxe_set_up() {
        let script = guest_script(&cases());
        assert!(script.contains(
            "rdma link add rxe0 type rxe netdev $RDMA_IF; echo \"fldemu-rxe: rdma link add exit $?\""
        ));
    }
}
