//! Algorithms 1–3 of LEFT on crafted sequences, the pool's block accounting, exhaustion (§3.5)
//! and the on-chip memory of Figure 7.

use super::gather::{GatherConfig, GatherQueues};
use super::pool::{Access, BitmapPool, PoolConfig, Recorded};
use super::*;

const BDP: u32 = 512;
const R: u32 = 1000;

/// Algorithm 1: a connection's first out-of-order packet takes an empty cache; once the
/// caches are taken, shallow reordering is recorded in the pool (a walk of 15 ns plus 5 ns per
/// further block) and deep reordering swaps the connection into the least-occupied cache, whose
/// bitmap goes back to the pool.
#[test]
fn algorithm_1_caches_first_then_the_pool_then_a_swap() {
    let cfg = PoolConfig::left(BDP);
    assert_eq!((cfg.caches, cfg.cache_bits, cfg.block_bits), (3, 256, 8));
    let mut p = BitmapPool::new(cfg);
    for conn in 1..=3 {
        assert_eq!(p.record(conn, R + 5, R), Recorded::New(Access::Cache, 10));
    }
    // Conn 1 gets a second packet: its cache now holds two.
    assert_eq!(p.record(1, R + 6, R), Recorded::New(Access::Cache, 10));
    // No cache left: 5 ahead is in the first block, 40 ahead in the sixth.
    assert_eq!(p.record(4, R + 5, R), Recorded::New(Access::Pool(1), 15));
    assert_eq!(p.record(4, R + 40, R), Recorded::New(Access::Pool(6), 40));
    assert_eq!(
        p.record(4, R + 40, R),
        Recorded::Duplicate(Access::Pool(6), 40)
    );
    assert_eq!(cfg.blocks - p.free_blocks(), 6);
    // 200 ahead: T_pool = 5 x 200 / 8 = 125 ns >= 40: conn 5 swaps into the least-occupied
    // cache (conn 2's, one packet; conn 1's has two), whose one block is written back.
    assert_eq!(
        p.record(5, R + 200, R),
        Recorded::New(
            Access::Swap {
                read: 0,
                written: 1
            },
            25
        )
    );
    assert!(p.in_cache(5) && !p.in_cache(2) && p.in_cache(1));
    // Conn 4 reordered deep too: its six blocks are read into the least-occupied cache —
    // conn 5's, one packet like conn 3's and found first — whose packet 200 ahead is written
    // back as 26 blocks; the longer walk of the two is the cost.
    assert_eq!(
        p.record(4, R + 130, R),
        Recorded::New(
            Access::Swap {
                read: 6,
                written: 26
            },
            15 + 25 * 5 + 10
        )
    );
    assert!(p.in_cache(4) && !p.in_cache(5) && p.in_cache(3));
}

/// As `RCV_NXT` passes recorded packets the bitmap gives them up, whole blocks go back to the
/// pool, and a connection with nothing left out of order leaves its cache: after every
/// connection has caught up, every block taken was returned.
#[test]
fn catching_up_returns_every_block_and_cache() {
    let mut p = BitmapPool::new(PoolConfig::left(BDP));
    // Three connections fill the caches; two more live in the pool.
    for conn in 1..=5 {
        for k in [1, 2, 3, 17, 18, 40] {
            assert!(matches!(p.record(conn, R + k, R), Recorded::New(..)));
        }
    }
    assert!(p.free_blocks() < 256);
    for conn in 1..=5 {
        // PSN R arrives: RCV_NXT runs over 1..3 and stops at the gap at 4.
        assert_eq!(p.advance(conn, R + 1), R + 4);
        // The gap fills up to 16: on to 19, then to 41 once 19..39 came.
        assert_eq!(p.advance(conn, R + 17), R + 19);
        assert_eq!(p.advance(conn, R + 40), R + 41);
        assert!(!p.has_bitmap(conn), "nothing left out of order");
    }
    assert_eq!(p.free_blocks(), 256);
    assert_eq!(p.taken, p.returned);
    assert!(p.taken > 0);
}

/// §3.5: a packet beyond what a cache holds is refused (the receiver drops it and NAKs), and so
/// is every later one of that connection until its disorder has cleared; other connections go
/// on. A pool out of blocks refuses the same way.
#[test]
fn exhaustion_refuses_until_the_connection_recovers() {
    let mut p = BitmapPool::new(PoolConfig::left(BDP));
    assert_eq!(p.record(1, R + 10, R), Recorded::New(Access::Cache, 10));
    assert_eq!(
        p.record(1, R + 300, R),
        Recorded::Refused,
        "past the cache's 256"
    );
    assert_eq!(
        p.record(1, R + 11, R),
        Recorded::Refused,
        "no new bitmap meanwhile"
    );
    assert_eq!(p.record(2, R + 3, R), Recorded::New(Access::Cache, 10));
    // Recovered once RCV_NXT passed the refused packet.
    assert_eq!(p.advance(1, R + 301), R + 301);
    assert!(matches!(p.record(1, R + 305, R + 301), Recorded::New(..)));

    let tiny = PoolConfig {
        blocks: 2,
        ..PoolConfig::pool_only(BDP)
    };
    let mut p = BitmapPool::new(tiny);
    assert_eq!(p.record(7, R + 1, R), Recorded::New(Access::Pool(1), 15));
    assert_eq!(p.record(7, R + 12, R), Recorded::New(Access::Pool(2), 20));
    assert_eq!(p.record(7, R + 40, R), Recorded::Refused, "a third block");
    assert_eq!(
        p.record(8, R + 1, R),
        Recorded::Refused,
        "none left for another"
    );
    p.forget(7);
    assert_eq!(p.free_blocks(), 2);
    assert_eq!(p.taken, p.returned);
}

/// MELO+ has no caches: however deep, every packet walks the pool, and the walk grows with the
/// distance (what makes it slow in Figure 6).
#[test]
fn without_caches_every_packet_walks_the_pool() {
    let mut p = BitmapPool::new(PoolConfig::pool_only(BDP));
    assert_eq!(p.record(1, R + 1, R), Recorded::New(Access::Pool(1), 15));
    assert_eq!(
        p.record(1, R + 511, R),
        Recorded::New(Access::Pool(64), 15 + 63 * 5)
    );
    p.forget(1);
    assert_eq!(p.free_blocks(), 256);
}

/// Algorithm 2: a connection's packets gather in its FIFO until `out_cnt`; a connection that
/// finds no FIFO takes the fullest, whose packets go on first; the timeout releases the rest.
#[test]
fn algorithm_2_gathers_releases_and_resolves_conflicts() {
    let mut g = GatherQueues::new(GatherConfig {
        fifos: 2,
        out_cnt: 3,
        timeout_ns: 1_000,
    });
    assert!(g.push(1, 'a', 0).is_empty());
    assert!(g.push(1, 'b', 10).is_empty());
    assert!(g.push(2, 'x', 20).is_empty());
    // Conn 3 finds both FIFOs taken: conn 1's (two packets) is the fullest and goes on.
    let out = g.push(3, 'p', 30);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].conn, out[0].packets.clone()), (1, vec!['a', 'b']));
    assert_eq!(g.conflicts, 1);
    // Conn 3 reaches out_cnt.
    assert!(g.push(3, 'q', 40).is_empty());
    let out = g.push(3, 'r', 50);
    assert_eq!(
        (out[0].conn, out[0].packets.clone()),
        (3, vec!['p', 'q', 'r'])
    );
    // Conn 2's packet has waited since 20: released at 1,020.
    assert_eq!(g.next_deadline(), Some(1_020));
    assert!(g.expire(1_019).is_empty());
    let out = g.expire(1_020);
    assert_eq!((out[0].conn, out[0].packets.clone()), (2, vec!['x']));
    assert_eq!(g.held(), 0);
}

/// Algorithm 3: in-order packets and those a short pool walk away take the fast path; with
/// 8-packet blocks and T_max = 40 ns the slow path starts 64 packets ahead.
#[test]
fn algorithm_3_fast_until_the_walk_reaches_t_max() {
    let cfg = PoolConfig::left(BDP);
    assert_eq!(select_path(&cfg, 0), Path::Fast);
    assert_eq!(select_path(&cfg, 1), Path::Fast);
    assert_eq!(select_path(&cfg, 63), Path::Fast);
    assert_eq!(select_path(&cfg, 64), Path::Slow);
    assert_eq!(select_path(&cfg, 500), Path::Slow);
}

/// Figure 7's shape: IRN's per-connection bitmaps grow 5 BDP a connection; the pooled modes
/// grow by a pointer and a PSN, LEFT's caches and gather queues adding a constant; at 5,000
/// connections LEFT needs under 2 % of IRN's memory (the paper: 1.7 %).
#[test]
fn figure_7_on_chip_memory_by_mode() {
    let kb = |m, n| on_chip_bits(m, n, BDP).kilobytes();
    for n in [1, 100, 1000, 5000] {
        assert!(kb(ReceiverMode::Left, n) > kb(ReceiverMode::LeftMinus, n));
        assert!(kb(ReceiverMode::LeftMinus, n) > kb(ReceiverMode::MeloPlus, n));
    }
    assert!(
        kb(ReceiverMode::Irn, 1) < kb(ReceiverMode::Left, 1),
        "one connection"
    );
    let left = kb(ReceiverMode::Left, 5000);
    let irn = kb(ReceiverMode::Irn, 5000);
    assert!(left / irn < 0.02, "{left} KB against {irn} KB");
    // The extras are constants: LEFT minus LEFT- is the gather queues at any count.
    let extra = |n| kb(ReceiverMode::Left, n) - kb(ReceiverMode::LeftMinus, n);
    assert!((extra(10) - extra(5000)).abs() < 0.01);
    let g = on_chip_bits(ReceiverMode::Left, 5000, BDP);
    assert_eq!(g.gather, 8 * (8 * (24 + 24 + 64 + 16) + 13 + 4 + 32));
    assert_eq!(g.pool, 256 * (8 + 9) + 256);
    assert_eq!(g.connections, 5000 * (9 + 24));
}

/// IRN's receive path: any connection records up to 5 BDP ahead at the ideal 10 ns, and
/// nothing beyond (its own bitmap ends there); the ideal reorderer has no such end.
#[test]
fn irn_reaches_five_bdp_ahead_and_no_further() {
    let mut irn = ReorderUnit::new(ReceiverMode::Irn, 64, 40).expect("a unit");
    assert!(matches!(irn.record(1, R + 319, R), Recorded::New(_, 10)));
    assert_eq!(irn.record(1, R + 320, R), Recorded::Refused);
    assert_eq!(irn.counters.refused, 1);
    let mut ideal = ReorderUnit::new(ReceiverMode::Ideal, 64, 40).expect("a unit");
    assert!(matches!(ideal.record(1, R + 5000, R), Recorded::New(_, 10)));
    assert!(ReorderUnit::new(ReceiverMode::GoBackN, 64, 40).is_none());
}
