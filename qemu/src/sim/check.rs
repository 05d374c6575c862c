//! What a scenario's workloads must satisfy before anything runs: hosts they name exist, options
//! are among the ones understood and numbers are in range ([`Scenario::resolve`] calls
//! [`check`] for every workload). A refusal names the option and what it accepts.

use super::*;

/// Refuses `w` when it names an unknown host or sets an option out of range.
pub(super) fn check(
    w: &WorkloadSpec,
    names: &[&str],
    links: &[([String; 2], LinkParams)],
) -> Result<(), SimError> {
    match w {
        WorkloadSpec::EchoLatency { .. }
        | WorkloadSpec::EchoRate { .. }
        | WorkloadSpec::TenantShaping { .. }
        | WorkloadSpec::FldModel { .. } => check_ethernet(w, names),
        WorkloadSpec::WriteLatency { .. }
        | WorkloadSpec::WriteRate { .. }
        | WorkloadSpec::RpcRate { .. }
        | WorkloadSpec::FldrEcho { .. } => check_rdma(w, names, links),
        WorkloadSpec::Flows { .. }
        | WorkloadSpec::UnloadLatency { .. }
        | WorkloadSpec::ZucModel { .. }
        | WorkloadSpec::ReorderMemory { .. } => check_fabric(w, names),
    }
}

/// Whether a host named `n` exists.
fn known_host(names: &[&str], n: &str) -> Result<(), SimError> {
    match names.contains(&n) {
        true => Ok(()),
        false => Err(SimError::Scenario(format!(
            "workload names unknown host {n:?}"
        ))),
    }
}

/// The Ethernet echoes, the tenants sharing an accelerator and the FLD model.
fn check_ethernet(w: &WorkloadSpec, names: &[&str]) -> Result<(), SimError> {
    let known = |n: &str| known_host(names, n);
    match w {
        WorkloadSpec::EchoLatency {
            client,
            server,
            echo,
            local,
            metric,
            accel,
            accel_mhz,
            accel_mpps,
            ..
        } => {
            known(client)?;
            known(server)?;
            let metrics = ["rtt_us", "mean_us", "median_us", "p99_us", "p999_us"];
            check_echo(echo, *local, metric, &metrics)?;
            check_accel(accel, *accel_mhz, *accel_mpps)?;
        }
        WorkloadSpec::EchoRate {
            client,
            server,
            echo,
            local,
            metric,
            sizes,
            mix,
            accel,
            accel_mhz,
            accel_mpps,
            ..
        } => {
            known(client)?;
            known(server)?;
            check_echo(echo, *local, metric, &["gbps", "mpps"])?;
            check_accel(accel, *accel_mhz, *accel_mpps)?;
            if sizes.is_empty() == mix.is_empty() {
                return Err(SimError::Scenario("echo_rate: either sizes or mix".into()));
            }
        }
        WorkloadSpec::TenantShaping {
            client,
            server,
            offered_gbps,
            accel_gbps,
            limit_gbps,
            duration_us,
            ..
        } => {
            known(client)?;
            known(server)?;
            let positive = |g: &f64| *g > 0.0 && g.is_finite();
            if offered_gbps.is_empty()
                || offered_gbps.len() > 16
                || !offered_gbps.iter().all(positive)
                || !positive(accel_gbps)
                || !limit_gbps.as_ref().is_none_or(positive)
                || *duration_us == 0
            {
                return Err(SimError::Scenario(
                    "tenant_shaping: 1 to 16 offered rates, an accelerator rate and any \
                     limit > 0, a duration"
                        .into(),
                ));
            }
        }
        WorkloadSpec::FldModel {
            ethernet_gbps,
            pcie_gbps,
            metric,
            ..
        } => {
            if !(*ethernet_gbps > 0.0 && *pcie_gbps > 0.0) {
                return Err(SimError::Scenario(
                    "fld_model: ethernet_gbps and pcie_gbps > 0".into(),
                ));
            }
            check_echo("flde", false, metric, &["gbps", "mpps"])?;
        }
        _ => unreachable!("check dispatches each workload to its family"),
    }
    Ok(())
}

/// RDMA between verbs contexts and through FLD-R.
fn check_rdma(
    w: &WorkloadSpec,
    names: &[&str],
    links: &[([String; 2], LinkParams)],
) -> Result<(), SimError> {
    let known = |n: &str| known_host(names, n);
    match w {
        WorkloadSpec::WriteLatency { client, server, .. } => {
            known(client)?;
            known(server)?;
        }
        WorkloadSpec::WriteRate {
            clients,
            server,
            x,
            rtt_ratios,
            slow_link,
            receiver,
            ..
        } => {
            for c in clients {
                known(c)?;
            }
            check_receiver(receiver.as_deref())?;
            known(server)?;
            if x != "size" && x != "connections" && x != "rtt_ratio" {
                return Err(SimError::Scenario(format!(
                    "x = {x:?}: \"size\", \"connections\" or \"rtt_ratio\""
                )));
            }
            if !rtt_ratios.is_empty() {
                let joins = |l: &&([String; 2], LinkParams), e: &[String; 2]| {
                    (l.0[0] == e[0] && l.0[1] == e[1]) || (l.0[0] == e[1] && l.0[1] == e[0])
                };
                let n = slow_link
                    .as_ref()
                    .map_or(0, |e| links.iter().filter(|l| joins(l, e)).count());
                if n < 2 || rtt_ratios.iter().any(|r| r.is_nan() || *r < 1.0) {
                    return Err(SimError::Scenario(
                        "rtt_ratios (each >= 1) need slow_link naming two nodes joined \
                         by two links or more"
                            .into(),
                    ));
                }
            }
            if clients.is_empty() {
                return Err(SimError::Scenario("a workload without clients".into()));
            }
        }
        WorkloadSpec::RpcRate {
            clients,
            server,
            connections,
            mtu,
            ..
        } => {
            for c in clients {
                known(c)?;
            }
            known(server)?;
            if mtu_code(*mtu).is_none() {
                return Err(SimError::Scenario(format!(
                    "mtu = {mtu}: 256, 512, 1024, 2048 or 4096"
                )));
            }
            if connections.contains(&0) || clients.is_empty() {
                return Err(SimError::Scenario(
                    "an RPC workload needs clients and connections > 0".into(),
                ));
            }
        }
        WorkloadSpec::FldrEcho {
            client,
            server,
            sizes,
            loads,
            line_gbps,
            mtu,
            metric,
            service,
            ..
        } => {
            known(client)?;
            known(server)?;
            if Service::parse(service).is_none() {
                return Err(SimError::Scenario(format!(
                    "service = {service:?}: \"echo\" or \"zuc\""
                )));
            }
            if sizes.is_empty() || sizes.iter().any(|&s| s < 8) {
                return Err(SimError::Scenario(
                    "fldr_echo: sizes of 8 bytes or more".into(),
                ));
            }
            if loads.iter().any(|l| !(*l > 0.0 && *l <= 2.0)) || *line_gbps <= 0.0 {
                return Err(SimError::Scenario(
                    "fldr_echo: loads in (0, 2], line_gbps > 0".into(),
                ));
            }
            if mtu_code(*mtu).is_none() {
                return Err(SimError::Scenario(format!(
                    "mtu = {mtu}: 256, 512, 1024, 2048 or 4096"
                )));
            }
            let metrics = ["gbps", "mpps", "median_us", "p99_us"];
            if !metrics.contains(&metric.as_str()) {
                return Err(SimError::Scenario(format!(
                    "metric = {metric:?}: one of {metrics:?}"
                )));
            }
        }
        _ => unreachable!("check dispatches each workload to its family"),
    }
    Ok(())
}

/// Open-loop flows, unloaded WRITEs and the computed curves.
fn check_fabric(w: &WorkloadSpec, names: &[&str]) -> Result<(), SimError> {
    let known = |n: &str| known_host(names, n);
    match w {
        WorkloadSpec::Flows {
            senders,
            receivers,
            sizes,
            loads,
            receiver,
            metric,
            ..
        } => {
            for h in senders.iter().chain(receivers) {
                known(h)?;
            }
            if senders.is_empty() || receivers.is_empty() || sizes.is_empty() || sizes.contains(&0)
            {
                return Err(SimError::Scenario(
                    "flows need senders, receivers and sizes > 0".into(),
                ));
            }
            if loads.iter().any(|l| !(*l > 0.0 && *l <= 1.0)) {
                return Err(SimError::Scenario("flows: loads in (0, 1]".into()));
            }
            check_receiver(receiver.as_deref())?;
            let metrics = [
                "flow_rate_ratio",
                "throughput_ratio",
                "fct_avg_us",
                "fct_p99_us",
            ];
            if !metrics.contains(&metric.as_str()) {
                return Err(SimError::Scenario(format!(
                    "metric = {metric:?}: one of {metrics:?}"
                )));
            }
        }
        WorkloadSpec::UnloadLatency {
            client,
            server,
            path,
            regions,
            skew,
            ..
        } => {
            known(client)?;
            known(server)?;
            if UnloadPath::parse(path).is_none() {
                return Err(SimError::Scenario(format!(
                    "path = {path:?}: offload, unload, hint, frequency or rnic"
                )));
            }
            if regions.is_empty() || regions.iter().any(|&r| r == 0 || r > 1 << 24) {
                return Err(SimError::Scenario(
                    "unload_latency: regions between 1 and 2^24".into(),
                ));
            }
            if !(*skew > 0.0 && skew.is_finite()) {
                return Err(SimError::Scenario("unload_latency: skew > 0".into()));
            }
        }
        WorkloadSpec::ZucModel {
            curve,
            sizes,
            mtu,
            cpu_ns_per_byte,
            ..
        } => {
            if curve != "bound" && curve != "cpu" {
                return Err(SimError::Scenario(format!(
                    "curve = {curve:?}: \"bound\" or \"cpu\""
                )));
            }
            if sizes.is_empty() || mtu_code(*mtu).is_none() || *cpu_ns_per_byte <= 0.0 {
                return Err(SimError::Scenario(
                    "zuc_model: sizes, an MTU of 256 … 4096 and cpu_ns_per_byte > 0".into(),
                ));
            }
        }
        WorkloadSpec::ReorderMemory { mode, .. } => {
            if ReceiverMode::from_series(mode).is_none() {
                return Err(SimError::Scenario(format!(
                    "mode = {mode:?}: gbn, irn, melo+, left-, left or ideal"
                )));
            }
        }
        _ => unreachable!("check dispatches each workload to its family"),
    }
    Ok(())
}
