//! One point of a workload's sweep: its label, its cases, the network and workload it runs on,
//! and what it reports ([`super::run`] walks the points).

use super::*;

/// How a workload's results are labelled: title, kind, plotted metric and x axis, and the
/// paper's values beside them.
pub(super) struct Header<'a> {
    pub title: String,
    pub kind: &'static str,
    pub metric: &'a str,
    pub x: &'static str,
    pub reference: Vec<Reference>,
}

impl<'a> Header<'a> {
    pub fn of(spec: &'a WorkloadSpec) -> Self {
        let (default_title, kind, metric, x) = match spec {
            WorkloadSpec::WriteLatency { .. } => {
                ("RDMA WRITE latency", "write_latency", "latency_us", "size")
            }
            WorkloadSpec::EchoLatency { metric, .. } => (
                "Ethernet echo round trip",
                "echo_latency",
                metric.as_str(),
                "size",
            ),
            WorkloadSpec::EchoRate { metric, .. } => {
                ("Ethernet echo rate", "echo_rate", metric.as_str(), "size")
            }
            WorkloadSpec::FldrEcho { metric, loads, .. } => (
                "FLD-R echo",
                "fldr_echo",
                metric.as_str(),
                if loads.is_empty() { "size" } else { "load" },
            ),
            WorkloadSpec::TenantShaping { .. } => (
                "Tenants sharing an accelerator",
                "tenant_shaping",
                "gbps",
                "load",
            ),
            WorkloadSpec::ZucModel { .. } => {
                ("Disaggregated ZUC throughput", "zuc_model", "gbps", "size")
            }
            WorkloadSpec::FldModel { metric, .. } => {
                ("Ethernet echo rate", "fld_model", metric.as_str(), "size")
            }
            WorkloadSpec::WriteRate { x, .. } => (
                "RDMA WRITE message rate",
                "write_rate",
                if x == "rtt_ratio" {
                    "throughput_ratio"
                } else {
                    "mops"
                },
                match x.as_str() {
                    "connections" => "connections",
                    "rtt_ratio" => "rtt_ratio",
                    _ => "size",
                },
            ),
            WorkloadSpec::Flows { metric, .. } => {
                ("Open-loop flows", "flows", metric.as_str(), "load")
            }
            WorkloadSpec::UnloadLatency { .. } => (
                "RDMA WRITE round trip over regions",
                "unload_latency",
                "rtt_us",
                "regions",
            ),
            WorkloadSpec::RpcRate { .. } => ("RPC rate", "rpc_rate", "mrps", "connections"),
            WorkloadSpec::ReorderMemory { .. } => (
                "On-chip reorder memory",
                "reorder_memory",
                "memory_kb",
                "connections",
            ),
        };
        let (title, reference) = match spec {
            WorkloadSpec::WriteLatency {
                title, reference, ..
            }
            | WorkloadSpec::EchoLatency {
                title, reference, ..
            }
            | WorkloadSpec::EchoRate {
                title, reference, ..
            }
            | WorkloadSpec::FldrEcho {
                title, reference, ..
            }
            | WorkloadSpec::TenantShaping {
                title, reference, ..
            }
            | WorkloadSpec::ZucModel {
                title, reference, ..
            }
            | WorkloadSpec::FldModel {
                title, reference, ..
            }
            | WorkloadSpec::WriteRate {
                title, reference, ..
            }
            | WorkloadSpec::Flows {
                title, reference, ..
            }
            | WorkloadSpec::UnloadLatency {
                title, reference, ..
            }
            | WorkloadSpec::RpcRate {
                title, reference, ..
            }
            | WorkloadSpec::ReorderMemory {
                title, reference, ..
            } => (title, reference),
        };
        Header {
            title: title.clone().unwrap_or_else(|| default_title.into()),
            kind,
            metric,
            x,
            reference: reference.clone(),
        }
    }
}

/// The index of the host named `name` (checked by `resolve`).
fn host_index(r: &Resolved, name: &str) -> usize {
    r.hosts
        .iter()
        .position(|h| h.0 == name)
        .expect("checked by resolve")
}

/// Each point of `spec`: its message size and which client each connection runs from.
pub(super) fn cases(spec: &WorkloadSpec, r: &Resolved) -> Vec<(usize, Vec<usize>)> {
    let mut cases: Vec<(usize, Vec<usize>)> = Vec::new();
    match spec {
        WorkloadSpec::WriteLatency { sizes, .. }
        | WorkloadSpec::EchoLatency { sizes, .. }
        | WorkloadSpec::FldModel { sizes, .. }
        | WorkloadSpec::ZucModel { sizes, .. } => {
            cases.extend(sizes.iter().map(|&s| (s, Vec::new())))
        }
        WorkloadSpec::TenantShaping {
            offered_gbps, size, ..
        } => cases.extend(offered_gbps.iter().map(|_| (*size, Vec::new()))),
        WorkloadSpec::FldrEcho { sizes, loads, .. } => match loads.is_empty() {
            true => cases.extend(sizes.iter().map(|&s| (s, Vec::new()))),
            false => cases.extend(loads.iter().map(|_| (sizes[0], Vec::new()))),
        },
        WorkloadSpec::EchoRate { sizes, mix, .. } => match mix.is_empty() {
            true => cases.extend(sizes.iter().map(|&s| (s, Vec::new()))),
            false => cases.push((mix.iter().sum::<usize>() / mix.len(), Vec::new())),
        },
        WorkloadSpec::WriteRate {
            sizes,
            qps_per_client,
            connections,
            clients,
            rtt_ratios,
            ..
        } => {
            let cs: Vec<usize> = clients.iter().map(|c| host_index(r, c)).collect();
            if !rtt_ratios.is_empty() {
                let q = qps_per_client.first().copied().unwrap_or(1).max(1) as usize;
                let per: Vec<usize> = cs.iter().flat_map(|&c| std::iter::repeat_n(c, q)).collect();
                let size = sizes.first().copied().unwrap_or(1024);
                cases.extend(rtt_ratios.iter().map(|_| (size, per.clone())));
            } else if connections.is_empty() {
                for &q in qps_per_client {
                    let per: Vec<usize> = cs
                        .iter()
                        .flat_map(|&c| std::iter::repeat_n(c, q.max(1) as usize))
                        .collect();
                    cases.extend(sizes.iter().map(|&s| (s, per.clone())));
                }
            } else {
                for &n in connections {
                    cases.extend(sizes.iter().map(|&s| (s, deal(&cs, n.max(1)))));
                }
            }
        }
        WorkloadSpec::RpcRate {
            clients,
            connections,
            request,
            ..
        } => {
            let cs: Vec<usize> = clients.iter().map(|c| host_index(r, c)).collect();
            cases.extend(connections.iter().map(|&n| (*request, deal(&cs, n))));
        }
        WorkloadSpec::ReorderMemory { connections, .. } => {
            cases.extend(connections.iter().map(|&n| (0, vec![0; n as usize])));
        }
        WorkloadSpec::Flows { senders, loads, .. } => {
            let cs: Vec<usize> = senders.iter().map(|c| host_index(r, c)).collect();
            cases.extend(loads.iter().map(|_| (0, cs.clone())));
        }
        WorkloadSpec::UnloadLatency { regions, size, .. } => {
            cases.extend(regions.iter().map(|_| (*size, Vec::new())));
        }
    }
    cases
}

/// The seed of point `point` of workload `workload`. Open-loop flows compare curves on the same
/// arrivals (common random numbers): their seed is the point's alone, whatever the workload; so
/// do uRDMA's region draws.
pub(super) fn seed(spec: &WorkloadSpec, scenario_seed: u64, workload: usize, point: usize) -> u64 {
    match spec {
        WorkloadSpec::Flows { .. } | WorkloadSpec::UnloadLatency { .. } => {
            point_seed(scenario_seed, usize::MAX >> 32, point)
        }
        _ => point_seed(scenario_seed, workload, point),
    }
}

/// What one point runs with.
pub(super) struct Case<'a> {
    pub r: &'a Resolved,
    pub seed: u64,
    pub limit_ms: u64,
    /// The point's place in its sweep.
    pub point: usize,
    pub size: usize,
    /// The host each connection's client runs on.
    pub clients: &'a [usize],
}

impl Case<'_> {
    /// Connections of the point (at least one).
    fn connections(&self) -> u64 {
        self.clients.len().max(1) as u64
    }
}

/// The network and the workload of one point.
pub(super) fn build(spec: &WorkloadSpec, c: &Case) -> Result<(Sim, Box<dyn Workload>), SimError> {
    match spec {
        WorkloadSpec::EchoLatency { .. }
        | WorkloadSpec::EchoRate { .. }
        | WorkloadSpec::TenantShaping { .. } => ethernet_point(spec, c),
        WorkloadSpec::WriteLatency { .. }
        | WorkloadSpec::WriteRate { .. }
        | WorkloadSpec::RpcRate { .. }
        | WorkloadSpec::FldrEcho { .. } => rdma_point(spec, c),
        WorkloadSpec::Flows { .. }
        | WorkloadSpec::UnloadLatency { .. }
        | WorkloadSpec::ZucModel { .. }
        | WorkloadSpec::FldModel { .. }
        | WorkloadSpec::ReorderMemory { .. } => fabric_point(spec, c),
    }
}

/// An Ethernet echo or an accelerator shared by tenants (FlexDriver §8): the network and the workload of one point.
fn ethernet_point(spec: &WorkloadSpec, c: &Case) -> Result<(Sim, Box<dyn Workload>), SimError> {
    let r = c.r;
    let seed = c.seed;
    let size = c.size;
    let pi = c.point;
    let index = |name: &str| host_index(c.r, name);
    let (sim, w): (Sim, Box<dyn Workload>) = match spec {
        WorkloadSpec::EchoLatency {
            client,
            server,
            iterations,
            inline_max,
            echo,
            local,
            accel,
            accel_mhz,
            accel_mpps,
            ..
        } => {
            let (mut sim, by, accel) = echo_sim(
                r,
                (seed, c.limit_ms),
                *local,
                (echo, accel, *accel_mhz, *accel_mpps),
            )?;
            let w = EchoLatency::new(
                &mut sim.hosts,
                (index(client), index(server)),
                (by, &accel, *local),
                size,
                *iterations,
                *inline_max,
            )?;
            for (h, mac) in w.macs() {
                sim.net.add_host_mac(h, mac);
            }
            (sim, Box::new(w))
        }
        WorkloadSpec::EchoRate {
            client,
            server,
            echo,
            local,
            mix,
            packets,
            window,
            inline_max,
            accel,
            accel_mhz,
            accel_mpps,
            client_cpu,
            ..
        } => {
            let gen = if *local { server } else { client };
            let point_r = with_client_cpu(r, gen, client_cpu)?;
            let (mut sim, by, accel) = echo_sim(
                &point_r,
                (seed, c.limit_ms),
                *local,
                (echo, accel, *accel_mhz, *accel_mpps),
            )?;
            let sizes = match mix.is_empty() {
                true => vec![size],
                false => mix.clone(),
            };
            let w = EchoRate::new(
                &mut sim.hosts,
                (index(client), index(server)),
                (by, &accel, *local),
                &sizes,
                (*packets, *window),
                *inline_max,
            )?;
            for (h, mac) in w.macs() {
                sim.net.add_host_mac(h, mac);
            }
            (sim, Box::new(w))
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
            let mut sim = Sim::new(r, seed, c.limit_ms, 4, 0)?;
            let setup = tenants::ShapingSetup {
                offered_gbps: offered_gbps.clone(),
                accel_gbps: *accel_gbps,
                limit_gbps: *limit_gbps,
                size,
                duration_us: *duration_us,
            };
            let srv = index(server);
            let w = tenants::TenantShaping::new(&mut sim.hosts, (index(client), srv), &setup, pi)?;
            for (h, mac) in w.routes(srv) {
                sim.net.add_host_mac(h, mac);
            }
            (sim, Box::new(w))
        }
        _ => unreachable!("build dispatches each workload to its family"),
    };
    Ok((sim, w))
}

/// An RDMA workload between verbs contexts or through FLD-R: one point's network and workload.
fn rdma_point(spec: &WorkloadSpec, c: &Case) -> Result<(Sim, Box<dyn Workload>), SimError> {
    let r = c.r;
    let seed = c.seed;
    let size = c.size;
    let pi = c.point;
    let connections = c.connections();
    let conn_clients = c.clients;
    let index = |name: &str| host_index(c.r, name);
    let (sim, w): (Sim, Box<dyn Workload>) = match spec {
        WorkloadSpec::WriteLatency {
            client,
            server,
            iterations,
            inline,
            ..
        } => {
            let mut sim = Sim::new(r, seed, c.limit_ms, 4, 2 * size)?;
            let w = WriteLatency::new(
                &mut sim.hosts,
                index(client),
                index(server),
                size,
                *iterations,
                *inline,
            )?;
            (sim, Box::new(w))
        }
        WorkloadSpec::WriteRate {
            server,
            outstanding,
            messages,
            per_connection,
            stateless,
            rtt_ratios,
            slow_link,
            receiver,
            ..
        } => {
            let messages = (*messages).max(per_connection * connections);
            let conns = connections as usize;
            let mut point_r = match (rtt_ratios.get(pi), slow_link) {
                (Some(&ratio), Some(ends)) => slower_path(r, ends, ratio),
                _ => r.clone(),
            };
            set_receiver(&mut point_r, receiver.as_deref());
            let mut sim = Sim::new(
                &point_r,
                seed,
                c.limit_ms,
                conns,
                conns * size.next_multiple_of(64),
            )?;
            let w = WriteRate::new(
                &mut sim.hosts,
                conn_clients,
                index(server),
                size,
                *outstanding,
                messages,
                stateless.mode(),
            )?;
            (sim, Box::new(w))
        }
        WorkloadSpec::RpcRate {
            server,
            request,
            response,
            rpcs,
            per_connection,
            mtu,
            stateless,
            ..
        } => {
            let rpcs = (*rpcs).max(per_connection * connections);
            let conns = connections as usize;
            let per = 2 * (request + response).next_multiple_of(64);
            let mut sim = Sim::new(r, seed, c.limit_ms, conns, conns * per)?;
            let w = RpcRate::new(
                &mut sim.hosts,
                conn_clients,
                index(server),
                (*request, *response),
                rpcs,
                mtu_code(*mtu).expect("checked by resolve"),
                stateless.mode(),
            )?;
            (sim, Box::new(w))
        }
        WorkloadSpec::FldrEcho {
            client,
            server,
            local,
            loads,
            line_gbps,
            messages,
            window,
            mtu,
            client_cpu,
            service,
            ..
        } => {
            let point_r = with_client_cpu(r, if *local { server } else { client }, client_cpu)?;
            let mut sim = Sim::new(&point_r, seed, c.limit_ms, 4, 2 * *window as usize * size)?;
            let srv = index(server);
            let cli = if *local { srv } else { index(client) };
            let offer = match loads.get(pi) {
                Some(&load) => Offer::Load {
                    load,
                    line_gbps: *line_gbps,
                    window: *window,
                },
                None => Offer::Window(*window),
            };
            // FLD-R's function has an address of its own beside the verbs context's.
            let ip = [10, 1, (srv / 250) as u8, (srv % 250) as u8 + 1];
            let code = mtu_code(*mtu).expect("checked by resolve");
            let w = FldrEcho::new(
                &mut sim.hosts,
                (cli, srv),
                ip,
                (size, *messages, code),
                (Service::parse(service).expect("checked by resolve"), offer),
                seed,
            )?;
            let (h, mac) = w.route();
            sim.net.add_host_mac(h, mac);
            (sim, Box::new(w))
        }
        _ => unreachable!("build dispatches each workload to its family"),
    };
    Ok((sim, w))
}

/// Open-loop flows, unloaded WRITEs, and the curves computed rather than run: one point.
fn fabric_point(spec: &WorkloadSpec, c: &Case) -> Result<(Sim, Box<dyn Workload>), SimError> {
    let r = c.r;
    let seed = c.seed;
    let size = c.size;
    let pi = c.point;
    let connections = c.connections();
    let index = |name: &str| host_index(c.r, name);
    let (sim, w): (Sim, Box<dyn Workload>) = match spec {
        WorkloadSpec::Flows {
            senders,
            receivers,
            sizes,
            loads,
            flows,
            receiver,
            path,
            ..
        } => {
            let mut point_r = r.clone();
            set_receiver(&mut point_r, receiver.as_deref());
            if let Some(p) = path {
                for sw in &mut point_r.switches {
                    sw.1.path = *p;
                }
            }
            let pairs: Vec<(usize, usize)> = senders
                .iter()
                .enumerate()
                .map(|(i, h)| (index(h), index(&receivers[i % receivers.len()])))
                .collect();
            let line = line_gbps(r, &senders[0]);
            let largest = sizes.iter().copied().max().unwrap_or(1);
            let mut sim = Sim::new(
                &point_r,
                seed,
                c.limit_ms,
                2 * pairs.len(),
                2 * pairs.len() * largest.next_multiple_of(4096),
            )?;
            let w = Flows::new(
                &mut sim.hosts,
                &pairs,
                sizes,
                (loads[pi], line),
                *flows,
                seed,
            )?;
            (sim, Box::new(w))
        }
        WorkloadSpec::UnloadLatency {
            client,
            server,
            path,
            regions,
            skew,
            hot,
            warmup,
            iterations,
            prime,
            mtt_miss_reads,
            ..
        } => {
            let mut point_r = r.clone();
            if let Some(n) = mtt_miss_reads {
                for h in &mut point_r.hosts {
                    h.1.mtt_miss_reads = *n;
                }
            }
            let mut sim = Sim::new(&point_r, seed, c.limit_ms, 4, 1 << 20)?;
            let shape = UnloadShape {
                regions: regions[pi],
                size,
                skew: *skew,
                hot: *hot,
                warmup: *warmup,
                iterations: *iterations,
                prime: *prime,
            };
            let w = UnloadLatency::new(
                &mut sim.hosts,
                (index(client), index(server)),
                UnloadPath::parse(path).expect("checked by resolve"),
                shape,
                seed,
            )?;
            (sim, Box::new(w))
        }
        WorkloadSpec::ZucModel {
            curve,
            line_gbps,
            mtu,
            cpu_ns_per_byte,
            ..
        } => {
            let sim = Sim::new(r, seed, c.limit_ms, 1, 0)?;
            let gbps = match curve.as_str() {
                "bound" => {
                    let ops = fld_device::fld::perf_model::zuc_rdma_ops_bound(
                        size as u32,
                        true,
                        *line_gbps,
                        *mtu,
                    );
                    ops * size as f64 * 8.0 / 1e9
                }
                _ => 8.0 / cpu_ns_per_byte,
            };
            (sim, Box::new(Computed::new(vec![("gbps", gbps)])))
        }
        WorkloadSpec::FldModel {
            ethernet_gbps,
            pcie_gbps,
            ..
        } => {
            let sim = Sim::new(r, seed, c.limit_ms, 1, 0)?;
            let w = echo::fld_model(size, *ethernet_gbps, *pcie_gbps);
            (sim, Box::new(w))
        }
        WorkloadSpec::ReorderMemory { mode, bdp, .. } => {
            let sim = Sim::new(r, seed, c.limit_ms, 1, 0)?;
            let mode = ReceiverMode::from_series(mode).expect("checked by resolve");
            let w = reorder_memory(mode, connections, *bdp);
            (sim, Box::new(w))
        }
        _ => unreachable!("build dispatches each workload to its family"),
    };
    Ok((sim, w))
}

/// The point's results once its run ended: the workload's metrics, the figure's x, each card's
/// timing and the network's counters.
pub(super) fn finish(
    spec: &WorkloadSpec,
    c: &Case,
    sim: &mut Sim,
    w: &dyn Workload,
    virtual_ps: Ps,
    series: String,
) -> Point {
    let mut metrics: BTreeMap<String, f64> = w
        .metrics()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let rtt_ratio = match spec {
        WorkloadSpec::WriteRate {
            rtt_ratios, server, ..
        } => rtt_ratios.get(c.point).map(|&ratio| {
            // Goodput as a fraction of the receiver's line (Figure 6's y).
            let line = line_gbps(c.r, server);
            let gbps = metrics.get("gbps").copied().unwrap_or(0.0);
            metrics.insert("throughput_ratio".into(), gbps / line);
            ratio
        }),
        _ => None,
    };
    let load = match spec {
        WorkloadSpec::Flows { loads, .. } | WorkloadSpec::FldrEcho { loads, .. } => {
            loads.get(c.point).copied()
        }
        WorkloadSpec::TenantShaping { offered_gbps, .. } => offered_gbps.get(c.point).copied(),
        _ => None,
    };
    let regions = match spec {
        WorkloadSpec::UnloadLatency { regions, .. } => regions.get(c.point).copied(),
        _ => None,
    };
    let cards: BTreeMap<String, CardTiming> = sim
        .hosts
        .iter_mut()
        .map(|h| {
            h.note_reorder();
            (h.name.clone(), h.timing)
        })
        .collect();
    if let WorkloadSpec::Flows { receivers, .. } = spec {
        // Figure 1's other quantity: the share of the receivers' packets that came out
        // of order.
        let (ahead, all) = receivers
            .iter()
            .filter_map(|r| cards.get(r))
            .fold((0, 0), |a, c| {
                (a.0 + c.rx_out_of_order, a.1 + c.roce_packets_received)
            });
        metrics.insert(
            "out_of_order_share".into(),
            ahead as f64 / all.max(1) as f64,
        );
    }
    Point {
        size: c.size,
        connections: c.connections(),
        rtt_ratio,
        load,
        regions,
        series,
        metrics,
        virtual_ns: virtual_ps / PS_PER_NS,
        events: sim.events(),
        cards,
        network: sim.network(),
    }
}
