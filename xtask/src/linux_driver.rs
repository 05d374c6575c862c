//! `cargo xtask test-linux-driver`: the card's Linux kernel driver (`driver/linux/fldnic`) built
//! for the guest's own kernel and loaded in the guest on the card (docs/linux-driver.md).
//!
//! 1. The guest root gets the guest kernel's headers, gcc, make and ethtool, once (cached with
//!    the root, see [`guest::setup_driver_build`]).
//! 2. The module is built in the root (a chroot: the same compiler and headers Debian built the
//!    kernel with), and the rdma-core provider against Debian's rdma-core source there; both
//!    land in `target/release/linux/`, which the guest sees as `/opt/linux/`.
//! 3. The guest boots with the card attached and runs [`SCRIPT`]: the module binds both NIC
//!    functions, each gets a netdev with the card's MAC and `ethtool -i` says `fldnic`, and a
//!    RoCE device whose GID table follows the netdev's IPv4 addresses, which stock
//!    `ibv_devices` and `ibv_devinfo` see through the provider; the two functions in two
//!    network namespaces reach each other through the card's eSwitch (ARP, `ping` at MTU 1500
//!    and 9000, `iperf3`); a send the card refuses (debugfs fault injection) is recovered.
//! 4. RDMA between the functions through the provider: `verbs_checks`
//!    (`driver/rdma-core/tests`) with its good input (data, immediates and atomics compared)
//!    and its bad input (unknown keys, out-of-range addresses, missing rights, long messages,
//!    a QP number nobody has, refused requests), each answered with its completion status or
//!    errno, and the card's `rdma statistic` counting the packets to the missing QP; stock
//!    `ibv_rc_pingpong` (polling and `-e`, data checked with `-c`), `ibv_srq_pingpong`, and
//!    perftest's `ib_write_bw`, `ib_send_bw`, `ib_read_bw`, `ib_atomic_bw`, `ib_read_lat`
//!    and `ib_write_lat`, with the card's sent-packet counter following them; `rping` and
//!    perftest `-R` through rdma_cm (the driver's software QP1); then the same tools between
//!    a function and Linux soft-RoCE on a virtio NIC across the card's uplink.
//! 5. The device goes away under running programs: a function reset, then `rmmod`, while
//!    perftest streams; nothing hangs and the device comes back and carries RDMA again. Both
//!    functions are reset while bound; the module is removed and loaded again three times;
//!    `dmesg` shows no BUG, Oops or WARNING and every command was answered.
//! 6. QEMU is killed under RDMA traffic (boot 2); the next guest's RDMA works on the same card
//!    (boot 3).

use std::path::Path;
use std::time::Duration;

use crate::child::{self, Echo};
use crate::guest::{self, GuestPaths, RunOptions};

/// Shell functions every guest script of this test starts with.
const HELPERS: &str = r#"
fail() { echo "FAIL: $*"; dmesg | tail -30; exit 1; }
functions() { ls -d /sys/bus/pci/drivers/fldnic/0000:* 2>/dev/null | wc -l; }
# Loads the RoCE core and the module; both NIC functions must bind.
load() {
    modprobe ib_core && modprobe ib_uverbs && modprobe rdma_ucm || fail "modprobe ib_core ib_uverbs rdma_ucm"
    # libibverbs finds the provider by path (the root is not changed).
    export RDMAV_DRIVERS=/opt/linux/libfldnic
    insmod /opt/linux/fldnic.ko || fail "insmod"
    [ "$(functions)" = 2 ] || fail "bound $(functions) NIC functions, not 2"
}
netdevs() { for f in /sys/bus/pci/drivers/fldnic/0000:*; do ls "$f/net"; done; }
roce_dev() { for d in $(ls /sys/class/infiniband); do
    [ "$(cat /sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/0 2>/dev/null)" = "$1" ] && echo $d; done; }
v2_gid() { for g in /sys/class/infiniband/$1/ports/1/gids/*; do
    i=$(basename $g)
    grep -q "$2" $g && grep -q 'RoCE v2' /sys/class/infiniband/$1/ports/1/gid_attrs/types/$i 2>/dev/null && echo $i && return
    done; }
# namespaces IF_A IF_B: the two functions' netdevs into namespaces a and b (10.77.0.1 and .2;
# the root is read-only, so namespaces are named under a tmpfs), and their RoCE devices and
# RoCEv2 GID indices as da/ga and db/gb.
namespaces() {
    mount | grep -q ' /run ' || mount -t tmpfs run /run || fail "tmpfs on /run"
    for ns in a b; do [ -e /run/netns/$ns ] || ip netns add $ns || fail "netns $ns"; done
    ip link set "$1" netns a && ip link set "$2" netns b || fail "move to netns"
    ip -n a addr add 10.77.0.1/24 dev "$1" && ip -n a link set "$1" up && ip -n a link set lo up
    ip -n b addr add 10.77.0.2/24 dev "$2" && ip -n b link set "$2" up && ip -n b link set lo up
    sleep 1
    da=$(roce_dev "$1"); db=$(roce_dev "$2")
    ga=$(v2_gid "$da" ffff:0a4d:0001); gb=$(v2_gid "$db" ffff:0a4d:0002)
    [ -n "$ga" ] && [ -n "$gb" ] || fail "RoCE v2 GIDs of 10.77.0.1 ($da: $ga) and 10.77.0.2 ($db: $gb)"
    echo "roce $da gid $ga, $db gid $gb"
}
stat() { rdma statistic show link "$1/1" | tr ' ' '\n' | grep -A1 -x "$2" | tail -1; }
# pair_run SERVER_NS SERVER_DEV SERVER_GID CLIENT_NS CLIENT_DEV CLIENT_GID SERVER_IP TOOL GID_OPT
# ARGS...: TOOL's server, then its client; both must exit 0. card_pair TOOL GID_OPT ARGS...: the
# server on function b, the client on function a.
# in_ns NS COMMAND...: COMMAND in namespace NS, or in the initial one for "root".
in_ns() { ns=$1; shift; if [ "$ns" = root ]; then "$@"; else ip netns exec "$ns" "$@"; fi; }
pair_run() {
    sns=$1 sdev=$2 sgid=$3 cns=$4 cdev=$5 cgid=$6 sip=$7 tool=$8 gopt=$9; shift 9
    in_ns $sns timeout 60 $tool -d "$sdev" $gopt "$sgid" "$@" > /tmp/server.txt 2>&1 &
    server=$!
    sleep 1
    in_ns $cns timeout 60 $tool -d "$cdev" $gopt "$cgid" "$@" $sip > /tmp/client.txt 2>&1
    client=$?
    wait $server
    serverrc=$?
    cat /tmp/client.txt
    [ $client = 0 ] && [ $serverrc = 0 ] || { cat /tmp/server.txt; fail "$tool $* $cdev -> $sdev (client $client, server $serverrc)"; }
}
card_pair() { pair_run b "$db" "$gb" a "$da" "$ga" 10.77.0.2 "$@"; }
# rping_pair SERVER_NS SERVER_IP CLIENT_NS: rping -v over rdma_cm, ten pings, each checked.
rping_pair() {
    in_ns $1 timeout 60 rping -s -a $2 -v -C 10 > /tmp/server.txt 2>&1 &
    server=$!
    sleep 1
    in_ns $3 timeout 60 rping -c -a $2 -v -C 10 > /tmp/client.txt 2>&1
    client=$?
    wait $server
    serverrc=$?
    tail -2 /tmp/client.txt
    [ $client = 0 ] && [ $serverrc = 0 ] && grep -q 'ping data: rdma-ping-9: JKLMNOP' /tmp/client.txt ||
        { cat /tmp/client.txt /tmp/server.txt; fail "rping to $2 (client $client, server $serverrc)"; }
}
"#;

/// What the guest runs first; it ends by printing [`PASSED`] when every check held.
const SCRIPT: &str = r#"
load
macs=""
ifcs=""
bdfs=""
for f in /sys/bus/pci/drivers/fldnic/0000:*; do
    ifc=$(ls "$f/net") || fail "no netdev under $f"
    mac=$(cat "/sys/class/net/$ifc/address")
    echo "netdev $ifc $(basename "$f") $mac"
    ethtool -i "$ifc" | grep -qx 'driver: fldnic' || fail "ethtool -i $ifc"
    ethtool -i "$ifc" | grep -qx "bus-info: $(basename "$f")" || fail "bus-info of $ifc"
    ip link set "$ifc" up || fail "ip link set $ifc up"
    [ "$(cat /sys/class/net/$ifc/carrier)" = 1 ] || fail "$ifc has no carrier"
    case " $macs " in *" $mac "*) fail "two functions with MAC $mac" ;; esac
    macs="$macs $mac"
    ifcs="$ifcs $ifc"
    bdfs="$bdfs $(basename "$f")"
done
# A RoCE device on each function, linked to its netdev; an IPv4 address on the netdev becomes
# a RoCEv2 GID (::ffff:a.b.c.d) the driver writes into the card's RoCE address table, and
# leaves it with the address.
set -- $ifcs
[ "$(ls /sys/class/infiniband | grep -c fldnic)" = 2 ] || fail "two RoCE devices"
rdma link show | grep -q "netdev $1" || fail "rdma link: no device on $1"
dev=$(ls /sys/class/infiniband/ | while read d; do
    [ "$(cat /sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/0 2>/dev/null)" = "$1" ] && echo $d; done)
[ -n "$dev" ] || fail "no RoCE device on $1"
[ "$(cat /sys/class/infiniband/$dev/ports/1/state)" = "4: ACTIVE" ] || fail "port of $dev not ACTIVE"
ip addr add 10.78.0.1/24 dev "$1" || fail "address on $1"
sleep 1
v2gid() { grep -l '0000:0000:0000:0000:0000:ffff:0a4e:0001' /sys/class/infiniband/$dev/ports/1/gids/* 2>/dev/null | head -1; }
g=$(v2gid)
[ -n "$g" ] || fail "no GID for 10.78.0.1 on $dev"
grep -q 'RoCE v2' "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$(basename "$g")" ||
    grep -rl 'RoCE v2' /sys/class/infiniband/$dev/ports/1/gid_attrs/types/ >/dev/null || fail "no RoCE v2 GID"
echo "gid $dev $(basename "$g") $(cat "$g")"
# Stock rdma-core tools through the provider: the devices, the port, the GID.
ibv_devices | tee /tmp/devices.txt
[ "$(grep -c fldnic_ /tmp/devices.txt)" = 2 ] || fail "ibv_devices does not list both devices"
ibv_devinfo -v -d "$dev" > /tmp/devinfo.txt || fail "ibv_devinfo -d $dev"
grep -E 'vendor_id|state:|link_layer|fw_ver|GID\[' /tmp/devinfo.txt
grep -q 'vendor_id:.*0xfff0' /tmp/devinfo.txt || fail "ibv_devinfo: vendor"
grep -q 'state:.*PORT_ACTIVE' /tmp/devinfo.txt || fail "ibv_devinfo: port not active"
grep -q 'link_layer:.*Ethernet' /tmp/devinfo.txt || fail "ibv_devinfo: link layer"
grep -q '::ffff:10.78.0.1, RoCE v2' /tmp/devinfo.txt || fail "ibv_devinfo: no RoCE v2 GID"
ip addr del 10.78.0.1/24 dev "$1"
sleep 1
[ -z "$(v2gid)" ] || fail "GID of 10.78.0.1 stayed after the address went"
# The two functions in two namespaces, through the card's eSwitch: ARP, ping, iperf3.
# (The root is read-only: namespaces are named under a tmpfs.)
set -- $ifcs
namespaces "$1" "$2"
ip netns exec a ping -c 5 -i 0.2 -W 3 10.77.0.2 || fail "ping between the functions"
ip netns exec a ping -c 3 -s 8000 -M do -W 3 10.77.0.2 && fail "8000 B went through a 1500 B MTU"
ip -n a link set "$1" mtu 9000 && ip -n b link set "$2" mtu 9000 || fail "MTU 9000"
ip netns exec a ping -c 3 -s 8000 -M do -W 3 10.77.0.2 || fail "ping of 8000 B at MTU 9000"
ip netns exec a ethtool -k "$1" | grep -q '^tx-checksumming: on' || fail "send checksum offload off"
ip netns exec b iperf3 -s -1 -D -B 10.77.0.2 || fail "iperf3 server"
sleep 1
ip netns exec a iperf3 -c 10.77.0.2 -t 3 -f m | tee /tmp/iperf3.txt || fail "iperf3"
grep -q receiver /tmp/iperf3.txt || fail "iperf3 summary"
# The card's own counters of the receiving vPort (ethtool -S, QUERY_VPORT) saw the run.
ip netns exec b ethtool -S "$2" | tee /tmp/stats.txt
rx=$(awk '/ rx_packets:/ {print $2}' /tmp/stats.txt)
[ "${rx:-0}" -gt 10000 ] || fail "the card counted ${rx:-no} received packets"
# Several channels: ethtool -L makes four, the card's RSS group spreads parallel TCP streams
# over their receive queues (the per-channel counters say so), and iperf3 still runs.
ip netns exec b ethtool -l "$2" | tee /tmp/channels.txt
[ "$(grep -m1 'Combined:' /tmp/channels.txt | awk '{print $2}')" -ge 2 ] || fail "ethtool -l: one channel at most"
ip netns exec a ethtool -L "$1" combined 4 && ip netns exec b ethtool -L "$2" combined 4 || fail "ethtool -L combined 4"
[ "$(ip netns exec b ethtool -l "$2" | grep 'Combined:' | tail -1 | awk '{print $2}')" = 4 ] || fail "four channels"
ip netns exec b iperf3 -s -1 -D -B 10.77.0.2 || fail "iperf3 server"
sleep 1
ip netns exec a iperf3 -c 10.77.0.2 -t 3 -P 8 -f m > /tmp/iperf3.txt || { cat /tmp/iperf3.txt; fail "iperf3 -P 8 over four channels"; }
grep SUM /tmp/iperf3.txt | tail -2
ip netns exec b ethtool -S "$2" | grep -E 'rx[0-9]_packets' | tee /tmp/queues.txt
[ "$(awk '$2 > 100' /tmp/queues.txt | wc -l)" -ge 2 ] || fail "RSS used fewer than two receive queues"
# A send the card refuses (debugfs fault injection: a WQE with a key it does not know) puts
# the send queue in ERROR; the driver recovers it (MODIFY_SQ) and traffic goes on.
mount -t debugfs none /sys/kernel/debug || fail "debugfs"
first_bdf=$(echo $bdfs | cut -d' ' -f1)
echo 1 > "/sys/kernel/debug/fldnic/$first_bdf/inject_send_error" || fail "inject a send error"
ip netns exec a ping -c 3 -i 0.3 -W 2 10.77.0.2 > /dev/null
ip netns exec a ping -c 3 -W 3 10.77.0.2 || fail "no traffic after a send error"
dmesg | grep -q "$1: send error, syndrome" || fail "the injected send error was not seen"
dmesg | grep -q "$1: send queue recovered" || fail "the send queue was not recovered"
dmesg | grep -E "send error|send queue recovered"
# RDMA between the two functions, each RoCE device used from its netdev's namespace, through
# the provider: a verbs program's good and bad input, then rdma-core's and perftest's tools.
unknown_before=$(stat "$db" rx_unknown_qp)
# Until here every command succeeded; verbs_checks asks for things the card refuses.
if dmesg | grep -E 'fldnic.*command .*status'; then fail "a command failed"; fi
ip netns exec a timeout 120 /opt/linux/verbs_checks "$da" "$ga" "$db" "$gb" || fail "verbs_checks"
[ $(( $(stat "$db" rx_unknown_qp) - unknown_before )) -ge 3 ] ||
    fail "the card did not count the packets to a QP that does not exist"
card_pair ibv_rc_pingpong -g -n 500 -c
grep -q '500 iters' /tmp/client.txt || fail "ibv_rc_pingpong: 500 iterations"
card_pair ibv_rc_pingpong -g -n 500 -c -e -s 65536
card_pair ibv_srq_pingpong -g -n 200 -q 8
sent_before=$(stat "$da" sent_pkts)
for t in ib_write_bw ib_send_bw ib_read_bw ib_atomic_bw; do
    card_pair $t -x -D 2
    bw=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $4 }' /tmp/client.txt | tail -1)
    awk -v bw="${bw:-0}" 'BEGIN { exit !(bw > 0) }' || fail "$t: no bandwidth in its report"
done
card_pair ib_read_lat -x -D 2
lat=$(awk '$1 == 2 && NF >= 4 { print $3 }' /tmp/client.txt | tail -1)
awk -v lat="${lat:-0}" 'BEGIN { exit !(lat > 0) }' || fail "ib_read_lat: no latency in its report"
card_pair ib_write_lat -x -n 2000
[ $(( $(stat "$da" sent_pkts) - sent_before )) -gt 100000 ] || fail "the card's sent_pkts did not follow perftest"
# Connections by the kernel's connection manager (rdma_cm), its MADs through QP1 — the
# driver's GSI on the netdev: rping, and perftest with -R.
rping_pair b 10.77.0.2 a
card_pair ib_send_bw -x -D 2 -R
card_pair ib_read_lat -x -n 1000 -R
rdma resource show qp | grep -q 'qpn 1 type GSI' || fail "no QP1 on the RoCE devices"
[ "$(stat "$db" gsi_received)" -gt 0 ] && [ "$(stat "$da" gsi_sent)" -gt 0 ] ||
    fail "QP1's counters did not see the connection manager's datagrams"
echo "QP1 of $da: sent $(stat "$da" gsi_sent), received $(stat "$da" gsi_received), dropped $(stat "$da" gsi_dropped)"
rdma statistic show link "$da/1"
# The RoCE device goes away under running programs: a function reset, then rmmod, while
# perftest streams. The programs end (their doorbells unmapped, their objects destroyed by
# the core), nothing hangs, and the device comes back and works.
# A program whose device went away is left in user space (its doorbells unmapped, its
# verbs failing): a killable process, which `timeout` ends, never a task stuck in the kernel.
traffic() {
    ip netns exec b timeout 12 ib_write_bw -d "$db" -x "$gb" -D 6 > /dev/null 2>&1 &
    sleep 1
    ip netns exec a timeout 12 ib_write_bw -d "$da" -x "$ga" -D 6 10.77.0.2 > /dev/null 2>&1 &
    sleep 2
}
traffic
bdf_b=$(basename "$(readlink -f /sys/class/infiniband/$db/device)")
echo 1 > "/sys/bus/pci/devices/$bdf_b/reset" || fail "function reset of $bdf_b under RDMA traffic"
wait
[ "$(ls /sys/class/infiniband | grep -c fldnic)" = 2 ] || fail "two RoCE devices after the reset under traffic"
sleep 1
db=$(roce_dev "$2"); gb=$(v2_gid "$db" ffff:0a4d:0002)
[ -n "$gb" ] || fail "no GID on $db after the reset"
card_pair ibv_rc_pingpong -g -n 100 -c
# One end on the card, the other Linux soft-RoCE (rxe) on a virtio NIC across the card's uplink
# (the eSwitch sends frames for unknown MACs there; a UDP link carries them to QEMU's NIC).
modprobe virtio_net && modprobe rdma_rxe || fail "virtio_net, rdma_rxe"
sleep 1
up_if=$(for i in /sys/class/net/*; do [ "$(cat $i/address)" = "52:54:00:77:00:03" ] && basename $i; done)
[ -n "$up_if" ] || fail "no NIC on the card's uplink"
rdma link add rxe0 type rxe netdev "$up_if" || fail "rdma link add rxe0"
ip addr add 10.77.0.3/24 dev "$up_if" && ip link set "$up_if" up || fail "address on $up_if"
for t in $(seq 1 50); do gc=$(v2_gid rxe0 ffff:0a4d:0003); [ -n "$gc" ] && break; sleep 0.2; done
[ -n "$gc" ] || fail "no RoCE v2 GID on rxe0"
ip netns exec a ping -c 3 -i 0.3 -W 3 10.77.0.3 || fail "ping across the card's uplink"
iperf3 -s -1 -D -B 10.77.0.3 || fail "iperf3 server beyond the uplink"
sleep 1
ip netns exec a iperf3 -c 10.77.0.3 -t 2 -f m | grep -E 'sender|receiver' || fail "iperf3 across the card's uplink"
pair_run root rxe0 "$gc" a "$da" "$ga" 10.77.0.3 ibv_rc_pingpong -g -n 500 -c
pair_run a "$da" "$ga" root rxe0 "$gc" 10.77.0.1 ibv_rc_pingpong -g -n 500 -c -e -s 16384
pair_run root rxe0 "$gc" a "$da" "$ga" 10.77.0.3 ib_send_bw -x -D 2
pair_run a "$da" "$ga" root rxe0 "$gc" 10.77.0.1 ib_write_bw -x -D 2
pair_run root rxe0 "$gc" a "$da" "$ga" 10.77.0.3 ib_read_lat -x -n 1000 -o 16
rping_pair root 10.77.0.3 a
rping_pair a 10.77.0.1 root
pair_run root rxe0 "$gc" a "$da" "$ga" 10.77.0.3 ib_write_bw -x -D 2 -R
rdma link delete rxe0
traffic
rmmod fldnic || fail "rmmod under RDMA traffic"
wait
insmod /opt/linux/fldnic.ko || fail "insmod after rmmod under traffic"
[ "$(functions)" = 2 ] || fail "bound $(functions) after rmmod under traffic"
ifcs=$(for f in /sys/bus/pci/drivers/fldnic/0000:*; do ls "$f/net"; done)
set -- $ifcs
ip link set "$1" up && ip link set "$2" up || fail "netdevs up again"
for f in /sys/bus/pci/drivers/fldnic/0000:*; do
    bdf=$(basename "$f")
    echo 1 > "/sys/bus/pci/devices/$bdf/reset" || fail "function reset of $bdf"
done
[ "$(dmesg | grep -c 'function reset done')" = 3 ] || fail "both functions back after a reset"
# Unload and load again, three rounds, each under RDMA traffic between the functions and a
# ping flood across the namespaces.
for i in 1 2 3; do
    set -- $(netdevs)
    namespaces "$1" "$2"
    traffic
    ip netns exec a timeout 10 ping -f -c 100000 -W 1 10.77.0.2 > /dev/null 2>&1 &
    sleep 1
    rmmod fldnic || fail "rmmod under traffic, round $i"
    [ "$(functions)" = 0 ] || fail "still bound after rmmod"
    wait
    insmod /opt/linux/fldnic.ko || fail "insmod, round $i"
    [ "$(ls /sys/class/infiniband | grep -c fldnic)" = 2 ] || fail "RoCE devices, round $i"
    [ "$(functions)" = 2 ] || fail "bound $(functions) after insmod, round $i"
done
rmmod fldnic || fail "last rmmod"
if dmesg | grep -E 'BUG|Oops|WARNING|Call Trace|general protection'; then fail "dmesg"; fi
if dmesg | grep -E 'fldnic.*command .*(no answer|not delivered)'; then fail "a command was not answered"; fi
dmesg | grep -E 'fldnic' | tail -4
echo LINUX-DRIVER-PASSED
"#;

/// The second boot: RDMA traffic between the functions until QEMU is killed under it.
const TRAFFIC_UNTIL_KILLED: &str = r#"
load
set -- $(netdevs)
namespaces "$1" "$2"
ip netns exec b ib_write_bw -d "$db" -x "$gb" -D 600 > /dev/null 2>&1 &
sleep 1
ip netns exec a ib_write_bw -d "$da" -x "$ga" -D 600 10.77.0.2 > /dev/null 2>&1 &
sleep 3
[ "$(stat "$da" sent_pkts)" -gt 0 ] || fail "no RDMA traffic"
echo TRAFFIC-RUNNING
wait
"#;

/// The third boot, after the kill: the card serves the new guest's RDMA as before.
const AFTER_KILL: &str = r#"
load
set -- $(netdevs)
namespaces "$1" "$2"
ip netns exec a timeout 120 /opt/linux/verbs_checks "$da" "$ga" "$db" "$gb" || fail "verbs_checks"
card_pair ibv_rc_pingpong -g -n 200 -c
if dmesg | grep -E 'BUG|Oops|WARNING|Call Trace|general protection'; then fail "dmesg"; fi
echo AFTER-KILL-PASSED
"#;

const PASSED: &str = "LINUX-DRIVER-PASSED";

/// A UDP port of 127.0.0.1 nobody holds now: the two ends of the card's uplink take one each,
/// so test runs beside each other (or beside test-rxe) do not collide.
fn free_udp_port() -> Result<u16, String> {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("a free UDP port: {e}"))
}
/// The guest's NIC on the card's uplink, where soft-RoCE runs ([`SCRIPT`] finds it by this).
const UPLINK_PEER_MAC: &str = "52:54:00:77:00:03";

/// Builds the module in the guest root for `release`; it lands in `target/release/linux/`.
fn build_module(paths: &GuestPaths, workspace: &Path, release: &str) -> Result<(), String> {
    let scratch = paths.root.join("tmp/fldnic-build");
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&workspace.join("driver/linux"), &scratch)?;
    let log = child::fresh_log(&crate::logs(), "linux-driver-build")?;
    let kdir = format!("/usr/src/linux-headers-{release}");
    child::run(
        &mut guest::in_root(
            paths,
            &["make", "-C", &kdir, "M=/tmp/fldnic-build/fldnic", "modules"],
        ),
        "build the kernel module",
        &log,
        Echo::Quiet,
    )?;
    let dest = workspace.join("target/release/linux");
    std::fs::create_dir_all(&dest).map_err(|e| e.to_string())?;
    std::fs::copy(scratch.join("fldnic/fldnic.ko"), dest.join("fldnic.ko"))
        .map_err(|e| format!("fldnic.ko: {e}"))?;
    println!("xtask: built fldnic.ko for {release}");
    Ok(())
}

/// rdma-core's version in the guest root's Debian (its providers' private ABI is 34): the
/// provider is built against this source and loads into Debian's own libibverbs.
const RDMA_CORE: &str = "rdma-core-56.1";
const RDMA_CORE_TARBALL: &str = "rdma-core_56.1.orig.tar.gz";
/// The layouts the kernel driver and the provider exchange through uverbs (udata).
const UVERBS_HEADER: &str = "driver/linux/fldnic_uverbs.h";

/// Builds `libfldnic-rdmav34.so` (driver/rdma-core/fldnic) in the guest root against rdma-core's
/// Debian source, fetched once with `apt-get source` (its `.dsc` answers 404; the tarball is
/// all the build needs) and configured once; lands in `target/release/linux/`.
fn build_provider(paths: &GuestPaths, workspace: &Path) -> Result<(), String> {
    let src_dir = paths.root.join("tmp/rdma-src");
    let tree = src_dir.join(RDMA_CORE);
    let log = child::fresh_log(&crate::logs(), "rdma-provider-build")?;
    let run = |args: &[&str], what: &str| {
        child::run(&mut guest::in_root(paths, args), what, &log, Echo::Quiet).map(drop)
    };
    if !src_dir.join(RDMA_CORE_TARBALL).exists() {
        let sources = paths.root.join("etc/apt/sources.list.d/fldemu-src.sources");
        std::fs::write(
            &sources,
            "Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\n\
             Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
        )
        .map_err(|e| format!("{}: {e}", sources.display()))?;
        run(&["apt-get", "update", "-q"], "apt-get update (sources)")?;
        std::fs::create_dir_all(&src_dir).map_err(|e| e.to_string())?;
        // The .dsc 404s, so apt-get fails after fetching the tarball: the tarball decides
        // (apt's output is in the log).
        child::run_logged(
            &mut guest::in_root(
                paths,
                &[
                    "sh",
                    "-c",
                    "cd /tmp/rdma-src && apt-get source --download-only rdma-core",
                ],
            ),
            "apt-get source rdma-core",
            &log,
            Echo::Quiet,
        )?;
        if !src_dir.join(RDMA_CORE_TARBALL).exists() {
            return Err(format!(
                "{RDMA_CORE_TARBALL} was not fetched (log: {})",
                log.display()
            ));
        }
    }
    if !tree.join("CMakeLists.txt").exists() {
        run(
            &[
                "tar",
                "-C",
                "/tmp/rdma-src",
                "-xzf",
                &format!("/tmp/rdma-src/{RDMA_CORE_TARBALL}"),
            ],
            "unpack rdma-core",
        )?;
    }
    // The provider and the headers it includes (as ../../linux/ from its directory).
    let provider = tree.join("providers/fldnic");
    let _ = std::fs::remove_dir_all(&provider);
    copy_dir(&workspace.join("driver/rdma-core/fldnic"), &provider)?;
    std::fs::create_dir_all(tree.join("linux")).map_err(|e| e.to_string())?;
    for header in [crate::cheader::HEADER, UVERBS_HEADER] {
        let name = Path::new(header).file_name().unwrap_or_default();
        std::fs::copy(workspace.join(header), tree.join("linux").join(name))
            .map_err(|e| format!("{header}: {e}"))?;
    }
    let lists = tree.join("CMakeLists.txt");
    let text = std::fs::read_to_string(&lists).map_err(|e| e.to_string())?;
    if !text.contains("providers/fldnic") {
        let patched = text.replacen(
            "add_subdirectory(providers/efa)\n",
            "add_subdirectory(providers/efa)\nadd_subdirectory(providers/fldnic)\n",
            1,
        );
        std::fs::write(&lists, patched).map_err(|e| e.to_string())?;
    }
    let build = format!("/tmp/rdma-src/{RDMA_CORE}/build");
    if !paths.root.join(&build[1..]).join("build.ninja").exists() {
        run(
            &[
                "sh",
                "-c",
                &format!(
                    "mkdir -p {build} && cd {build} && cmake -GNinja -DNO_PYVERBS=1 \
                     -DNO_MAN_PAGES=1 -DCMAKE_POLICY_VERSION_MINIMUM=3.5 .."
                ),
            ],
            "configure rdma-core",
        )?;
    }
    run(
        &[
            "sh",
            "-c",
            &format!("cd {build} && ninja lib/libfldnic-rdmav34.so"),
        ],
        "build the provider",
    )?;
    let dest = workspace.join("target/release/linux");
    std::fs::create_dir_all(&dest).map_err(|e| e.to_string())?;
    std::fs::copy(
        paths
            .root
            .join(&build[1..])
            .join("lib/libfldnic-rdmav34.so"),
        dest.join("libfldnic-rdmav34.so"),
    )
    .map_err(|e| format!("libfldnic-rdmav34.so: {e}"))?;
    println!("xtask: built libfldnic-rdmav34.so against {RDMA_CORE}");

    // verbs_checks, a plain libibverbs program: rdma-core's headers, Debian's libibverbs.
    let tests = paths.root.join("tmp/fldnic-tests");
    let _ = std::fs::remove_dir_all(&tests);
    copy_dir(&workspace.join("driver/rdma-core/tests"), &tests)?;
    run(
        &[
            "gcc",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            "/tmp/fldnic-tests/verbs_checks",
            &format!("-I{build}/include"),
            "/tmp/fldnic-tests/verbs_checks.c",
            "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        ],
        "build verbs_checks",
    )?;
    std::fs::copy(tests.join("verbs_checks"), dest.join("verbs_checks"))
        .map_err(|e| format!("verbs_checks: {e}"))?;
    Ok(())
}

/// Copies the files of `from` into `to` (recursively).
fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    for entry in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// The whole test; whether it passed.
pub fn test_linux_driver(workspace: &Path, timeout: u64) -> Result<bool, String> {
    let paths = GuestPaths::new();
    let qemu = guest::setup(&paths)?;
    guest::setup_rdma(&paths)?;
    let release = guest::setup_driver_build(&paths)?;
    // The committed C header must be the one fld-abi gives.
    if !crate::cheader::run(workspace, true)? {
        return Ok(false);
    }
    build_module(&paths, workspace, &release)?;
    build_provider(&paths, workspace)?;
    crate::build_fldemu()?;
    // The card's end of its uplink (UDP, one frame per datagram) and the guest NIC's end.
    let card_udp = free_udp_port()?;
    let guest_udp = loop {
        let p = free_udp_port()?;
        if p != card_udp {
            break p;
        }
    };
    let mut served = guest::ServedCard::start_with(
        paths,
        qemu,
        workspace,
        "echo",
        &[
            "--uplink".into(),
            format!("udp:127.0.0.1:{card_udp}:127.0.0.1:{guest_udp}"),
        ],
    )?;
    let uplink_nic = [
        "-netdev".to_string(),
        format!(
            "dgram,id=uplink,local.type=inet,local.host=127.0.0.1,local.port={guest_udp},\
             remote.type=inet,remote.host=127.0.0.1,remote.port={card_udp}"
        ),
        "-device".to_string(),
        format!("virtio-net-pci,netdev=uplink,mac={UPLINK_PEER_MAC}"),
    ];
    let run = |script: &str, kill_after: Option<Duration>| RunOptions {
        command: Some(format!("{HELPERS}{script}")),
        timeout: Duration::from_secs(timeout),
        kill_after,
        reset_during: None,
    };
    let first = served.boot_with(&run(SCRIPT, None), &uplink_nic)?;
    print!("{}", first.output);
    let mut passed = first.exit_code == Some(0) && first.output.contains(PASSED);
    if !passed {
        first.show_logs();
    }
    if passed {
        eprintln!("xtask: boot 2: QEMU killed under RDMA traffic between the functions");
        let killed = served.boot(&run(TRAFFIC_UNTIL_KILLED, Some(Duration::from_secs(30))))?;
        let running = killed.output.contains("TRAFFIC-RUNNING");
        let alive = served.server_alive();
        println!(
            "killed under RDMA traffic: traffic ran {running}, QEMU killed {}, card still served {alive}",
            killed.killed()
        );
        passed = running && killed.killed() && alive;
        if !passed {
            killed.show_logs();
        }
    }
    if passed {
        eprintln!("xtask: boot 3: the next guest's RDMA on the same card");
        let again = served.boot(&run(AFTER_KILL, None))?;
        print!("{}", again.output);
        passed = again.exit_code == Some(0) && again.output.contains("AFTER-KILL-PASSED");
        if !passed {
            again.show_logs();
        }
    }
    println!(
        "test-linux-driver: {}",
        if passed { "passed" } else { "FAILED" }
    );
    Ok(passed)
}

/// What `bench-linux-driver` runs in the guest: perftest between the functions over the
/// kernel driver and the provider, one line per point; `fldemu rc-bw` and `rc-lat` on two
/// in-process cards in the same guest (their JSON lines); perftest's READ latency; iperf3 with
/// one stream and with eight over four channels.
const BENCH: &str = r#"
load
set -- $(netdevs)
namespaces "$1" "$2"
for op in write send read; do
    for size in 64 1024 4096 16384 65536; do
        card_pair ib_${op}_bw -x -s $size -D 2 --report_gbits > /dev/null
        gbps=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $4 }' /tmp/client.txt | tail -1)
        echo "bench perftest $op $size ${gbps:-0}"
    done
done
echo "bench rc-bw $(fldemu rc-bw --ops write,send,read --size-min 64 --size-max 65536 --bytes 16777216 --json | tail -1)"
# Latency: READ needs no CPU at the responder, so two programs on one vCPU do not take turns.
for size in 64 4096; do
    card_pair ib_read_lat -x -s $size -n 2000 > /dev/null
    lat=$(awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $5 }' /tmp/client.txt | tail -1)
    echo "bench perftest-lat read $size ${lat:-0}"
done
echo "bench rc-lat $(fldemu rc-lat --size-min 64 --size-max 4096 --iters 2000 --json | tail -1)"
ip netns exec b iperf3 -s -D -B 10.77.0.2 || fail "iperf3 server"
sleep 1
ip netns exec a iperf3 -c 10.77.0.2 -t 5 -J > /tmp/one.json || fail "iperf3"
ip netns exec a ethtool -L "$1" combined 4 && ip netns exec b ethtool -L "$2" combined 4 || fail "ethtool -L"
sleep 1
ip netns exec b iperf3 -s -D -B 10.77.0.2 -p 5202 || fail "iperf3 server"
sleep 1
ip netns exec a iperf3 -c 10.77.0.2 -p 5202 -t 5 -P 8 -J > /tmp/eight.json || fail "iperf3 -P 8"
echo "bench iperf3 1 $(grep -A8 '"sum_received"' /tmp/one.json | awk -F: '/bits_per_second/ { gsub(/[ ,]/, "", $2); print $2; exit }')"
echo "bench iperf3 8 $(grep -A8 '"sum_received"' /tmp/eight.json | awk -F: '/bits_per_second/ { gsub(/[ ,]/, "", $2); print $2; exit }')"
echo BENCH-DONE
"#;

/// One perftest point: operation, message size, Gbit/s.
struct PerftestPoint {
    op: String,
    size: u64,
    gbps: f64,
}

/// `bench-linux-driver`: builds as [`test_linux_driver`] does, boots once with [`BENCH`], and
/// prints perftest's bandwidth through the guest's own stack beside `rc-bw`'s in the same guest
/// and iperf3's, as a table or one JSON object.
pub fn bench_linux_driver(workspace: &Path, timeout: u64, json: bool) -> Result<bool, String> {
    let paths = GuestPaths::new();
    let qemu = guest::setup(&paths)?;
    guest::setup_rdma(&paths)?;
    let release = guest::setup_driver_build(&paths)?;
    build_module(&paths, workspace, &release)?;
    build_provider(&paths, workspace)?;
    crate::build_fldemu()?;
    let mut served = guest::ServedCard::start(paths, qemu, workspace, "echo")?;
    let out = served.boot(&RunOptions {
        command: Some(format!("{HELPERS}{BENCH}")),
        timeout: Duration::from_secs(timeout),
        kill_after: None,
        reset_during: None,
    })?;
    if out.exit_code != Some(0) || !out.output.contains("BENCH-DONE") {
        print!("{}", out.output);
        out.show_logs();
        return Ok(false);
    }
    let mut perftest = Vec::new();
    let mut rc_bw = serde_json::Value::Null;
    let mut iperf = Vec::new();
    let mut read_lat = Vec::new();
    let mut rc_lat = serde_json::Value::Null;
    for line in out.output.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["bench", "perftest", op, size, gbps] => perftest.push(PerftestPoint {
                op: op.to_string(),
                size: size.parse().unwrap_or(0),
                gbps: gbps.parse().unwrap_or(0.0),
            }),
            ["bench", "rc-bw", ..] => {
                rc_bw = serde_json::from_str(line.trim_start_matches("bench rc-bw "))
                    .unwrap_or(serde_json::Value::Null)
            }
            ["bench", "perftest-lat", _, size, us] => read_lat.push((
                size.parse::<u64>().unwrap_or(0),
                us.parse::<f64>().unwrap_or(0.0),
            )),
            ["bench", "rc-lat", ..] => {
                rc_lat = serde_json::from_str(line.trim_start_matches("bench rc-lat "))
                    .unwrap_or(serde_json::Value::Null)
            }
            ["bench", "iperf3", streams, bps] => {
                iperf.push((streams.to_string(), bps.parse::<f64>().unwrap_or(0.0) / 1e9))
            }
            _ => {}
        }
    }
    let rc_point = |op: &str, size: u64| {
        rc_bw["results"].as_array().and_then(|r| {
            r.iter()
                .find(|p| p["op"] == op && p["size"] == size)
                .and_then(|p| p["gbps"].as_f64())
        })
    };
    if json {
        let points: Vec<serde_json::Value> = perftest
            .iter()
            .map(|p| {
                serde_json::json!({ "op": p.op, "size": p.size, "perftest_gbps": p.gbps,
                                    "rc_bw_in_guest_gbps": rc_point(&p.op, p.size) })
            })
            .collect();
        let iperf: Vec<serde_json::Value> = iperf
            .iter()
            .map(|(n, g)| serde_json::json!({ "streams": n, "gbps": g }))
            .collect();
        let lat: Vec<serde_json::Value> = read_lat
            .iter()
            .map(|(size, us)| serde_json::json!({ "size": size, "ib_read_lat_typical_us": us }))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "perftest": points, "ib_read_lat": lat, "iperf3": iperf,
                                "rc_bw": rc_bw, "rc_lat": rc_lat })
        );
    } else {
        println!(
            "{:>6} {:>7} {:>16} {:>20} {:>8}",
            "op", "size", "perftest Gbit/s", "rc-bw in guest Gbit/s", "ratio"
        );
        for p in &perftest {
            let rc = rc_point(&p.op, p.size);
            let ratio = rc.filter(|r| *r > 0.0).map(|r| p.gbps / r);
            println!(
                "{:>6} {:>7} {:>16.2} {:>20} {:>8}",
                p.op,
                p.size,
                p.gbps,
                rc.map_or("-".into(), |r| format!("{r:.3}")),
                ratio.map_or("-".into(), |r| format!("{r:.1}"))
            );
        }
        for (size, us) in &read_lat {
            let rc = rc_lat["results"].as_array().and_then(|r| {
                r.iter()
                    .find(|p| p["size"] == *size)
                    .and_then(|p| p["median_us"].as_f64())
            });
            println!(
                "ib_read_lat {size} B: {us:.2} us typical; rc-lat (SEND, one way) in guest: {}",
                rc.map_or("-".into(), |r| format!("{r:.2} us median"))
            );
        }
        for (streams, gbps) in &iperf {
            println!("iperf3 through the netdev, {streams} stream(s): {gbps:.2} Gbit/s");
        }
    }
    Ok(true)
}
