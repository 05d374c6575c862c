//! RSS groups: a Toeplitz key, the header fields it hashes and an indirection table of RQs
//! (Microsoft RSS). Each indirection slot holds a reference on its RQ.

use super::{created, fail, input, object, Cmd, CmdResult, Handler};
use crate::nic::eswitch::RssGroup;
use crate::nic::rss::Toeplitz;
use fld_abi::nic::*;

pub(super) const HANDLERS: &[(u16, Handler)] = &[
    (op::CREATE_RSS_GROUP, create_rss_group),
    (op::DESTROY_RSS_GROUP, destroy_rss_group),
];

fn create_rss_group(c: &mut Cmd<'_, '_>, body: &[u8], out: &mut [u8]) -> CmdResult {
    let i: CreateRssGroupIn = input(body)?;
    let n = i.indirection_len.get();
    if n == 0 || n > RSS_MAX_INDIRECTION || !n.is_power_of_two() {
        return fail(CmdStatus::BadParam, bad_param::RSS_INDIRECTION_LEN);
    }
    if i.hash_fields == 0 || i.hash_fields & !rss_fields::ALL != 0 {
        return fail(CmdStatus::BadParam, bad_param::RSS_HASH_FIELDS);
    }
    let rqns: Vec<u32> = CreateRssGroupIn::indirection(body, n).collect();
    if rqns.len() != n as usize {
        return fail(CmdStatus::BadInputLength, n as u32);
    }
    if let Some(bad) = rqns
        .iter()
        .find(|&&r| c.core.rqs.owned(r, c.function).is_err())
    {
        return fail(CmdStatus::BadResource, *bad);
    }
    let groups = &c.core.eswitch.rss_groups;
    let free = groups.iter().position(|g| g.is_none());
    if free.is_none() && groups.len() as u32 >= c.core.config.max_rss_groups {
        return fail(CmdStatus::ExceedLimit, 0);
    }
    for r in &rqns {
        c.core.rqs.add_ref(*r);
    }
    let group = RssGroup {
        owner: c.function,
        hash_fields: i.hash_fields,
        toeplitz: Toeplitz::new(&i.key),
        indirection: rqns,
    };
    let groups = &mut c.core.eswitch.rss_groups;
    let id = match free {
        Some(f) => {
            groups[f] = Some(group);
            f
        }
        None => {
            groups.push(Some(group));
            groups.len() - 1
        }
    };
    created(out, Some(id as u32))
}

/// Refused while a FWD_RSS entry names the group (RESOURCE_BUSY with their count).
fn destroy_rss_group(c: &mut Cmd<'_, '_>, body: &[u8], _out: &mut [u8]) -> CmdResult {
    let id = object(body)?;
    let es = &mut c.core.eswitch;
    if es
        .rss_groups
        .get(id as usize)
        .and_then(|g| g.as_ref())
        .is_none_or(|g| g.owner != c.function)
    {
        return fail(CmdStatus::BadResource, id);
    }
    let users = es
        .tables
        .iter()
        .flatten()
        .flat_map(|t| t.entries.iter())
        .filter(|e| e.actions & action::FWD_RSS != 0 && e.dest == id)
        .count();
    if users != 0 {
        return fail(CmdStatus::ResourceBusy, users as u32);
    }
    if let Some(g) = es.rss_groups[id as usize].take() {
        for r in g.indirection {
            c.core.rqs.drop_ref(r);
        }
    }
    Ok(0)
}
