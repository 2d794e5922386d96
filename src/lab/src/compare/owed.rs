//! What every guest is owed, and what it got: the no-starvation figure of `lab compare`.
//!
//! A guest's *entitlement* is the scenario's `entitlement` or, as the host assigns it, an equal
//! split of what the configured ones leave of the link. Its *demand* is its offered load on the
//! wire: orders per second x clients x reply size, with a header per packet (a closed loop's
//! is unbounded). It is *owed* the lesser of the two, and it *got* its transmit rate on the
//! wire after the interference starts (the monitor's bytes per report period, with a header
//! per MTU). A guest that demands its entitlement and gets less than 0.9 of it is starved.

use crate::result::LabResult;
use resex_scenario::{GuestSpec, Role, Scenario};
use serde::Serialize;

/// One guest's line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwedRow {
    /// The guest.
    pub name: String,
    /// Its role (the evaluator's).
    pub role: Role,
    /// Its entitlement, Mb/s on the wire.
    pub entitled_mbps: f64,
    /// Its offered load, Mb/s on the wire (`None`: a closed loop, unbounded).
    pub demand_mbps: Option<f64>,
    /// What it sent, Mb/s on the wire, after the interference starts.
    pub mbps: f64,
    /// That over the lesser of its demand and its entitlement.
    pub kept: f64,
}

/// Wire bytes per payload byte of a message of `len` bytes.
fn wire_factor(len: u64, mtu: u64, header: u64) -> f64 {
    let packets = len.div_ceil(mtu.max(1)).max(1);
    (len + packets * header) as f64 / len.max(1) as f64
}

/// Every guest's entitlement, Mb/s, as the host assigns it ([`resex_pricing::entitlement::split`]).
pub fn entitlements(s: &Scenario) -> Vec<f64> {
    let link = crate::link_of(s).bits_per_sec as f64;
    resex_pricing::entitlement::split(s.guests.iter().map(|g| g.entitlement.map(|e| e.0)), link)
        .into_iter()
        .map(|b| b / 1e6)
        .collect()
}

/// A guest's offered load on the wire, Mb/s (`None`: a closed loop), its larger phase's if
/// it turns.
pub fn demand(s: &Scenario, g: &GuestSpec) -> Option<f64> {
    let d = phase_demand(s, g, g.benchex.buffer.0, g.benchex.rate)?;
    match &g.turns {
        Some(t) => Some(d.max(phase_demand(s, g, t.buffer.0, t.rate)?)),
        None => Some(d),
    }
}

/// A phase's offered load on the wire, Mb/s (`None`: a closed loop).
fn phase_demand(s: &Scenario, g: &GuestSpec, buffer: u64, rate: f64) -> Option<f64> {
    let w = &g.benchex;
    let l = crate::link_of(s);
    let message = if w.chunk.0 > 0 { w.chunk.0 } else { buffer };
    let wire = wire_factor(message, u64::from(l.mtu), u64::from(l.header_bytes));
    (rate > 0.0).then(|| rate * f64::from(w.clients) * buffer as f64 * 8.0 / 1e6 * wire)
}

/// What a guest is owed on average over `[from_s, to_s]`, Mb/s: the lesser of its demand and
/// its entitlement, phase by phase (a guest that turns counts each phase for its time).
pub fn owed_over(s: &Scenario, g: &GuestSpec, entitled: f64, from_s: f64, to_s: f64) -> f64 {
    let owed = |d: Option<f64>| d.map_or(entitled, |d| d.min(entitled));
    let first = owed(phase_demand(s, g, g.benchex.buffer.0, g.benchex.rate));
    let Some(t) = &g.turns else { return first };
    let span = (to_s - from_s).max(1e-9);
    let before = (t.at_s.clamp(from_s, to_s) - from_s) / span;
    let after = owed(phase_demand(s, g, t.buffer.0, t.rate));
    before * first + (1.0 - before) * after
}

/// Every guest's line for a run.
pub fn rows(s: &Scenario, r: &LabResult, start_s: f64) -> Vec<OwedRow> {
    let l = crate::link_of(s);
    let wire = wire_factor(
        u64::from(l.mtu),
        u64::from(l.mtu),
        u64::from(l.header_bytes),
    );
    let ent = entitlements(s);
    s.guests
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mbps = r
                .series
                .as_ref()
                .and_then(|se| super::mean_of(se, i, start_s, |v| &v.mbps))
                .unwrap_or(r.vms[i].tx_mbps)
                * wire;
            let demand_mbps = demand(s, g);
            let owed = owed_over(s, g, ent[i], start_s, r.duration_s);
            OwedRow {
                name: g.name.clone(),
                role: g.role(),
                entitled_mbps: ent[i],
                demand_mbps,
                mbps,
                kept: if owed > 0.0 { mbps / owed } else { 1.0 },
            }
        })
        .collect()
}

/// The least any guest that demands its entitlement kept of it.
pub fn least(rows: &[OwedRow]) -> Option<f64> {
    rows.iter()
        .filter(|o| o.demand_mbps.is_none_or(|d| d >= o.entitled_mbps))
        .map(|o| o.kept)
        .fold(None, |m: Option<f64>, k| Some(m.map_or(k, |m| m.min(k))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_that_turns_bulk_is_owed_each_phase_for_its_time() {
        let s = Scenario::from_toml(
            r#"
name = "t"
[[guest]]
name = "switcher"
[guest.benchex]
buffer = "64KiB"
rate = 1000.0
[guest.turns]
at_s = 5.0
buffer = "2MiB"
rate = 0.0
[[guest]]
name = "other"
[guest.benchex]
buffer = "1MiB"
rate = 0.0
"#,
        )
        .unwrap();
        let e = entitlements(&s)[0];
        let g = &s.guests[0];
        let light = phase_demand(&s, g, 64 << 10, 1000.0).unwrap();
        assert!(light < e, "{light} {e}");
        // From 2 s to 10 s: 3 s light, 5 s bulk (owed its entitlement).
        let owed = owed_over(&s, g, e, 2.0, 10.0);
        assert!(
            (owed - (3.0 * light + 5.0 * e) / 8.0).abs() < 1e-6,
            "{owed}"
        );
        // Without a turn, the lesser of demand and entitlement.
        assert_eq!(owed_over(&s, &s.guests[1], e, 2.0, 10.0), e);
    }
}
