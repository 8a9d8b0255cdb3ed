//! `cnpool doctor`: audits a live cluster against cnpool's invariants
//! (DESIGN §3) and, with `--fix`, repairs what can be repaired safely.
//!
//! 1. [`snapshot::read`] lists every kind once (pool pods, claims, claim
//!    sets, pools), the cutover record, and the CN stores of each pool's
//!    HAKeeper — LIST and GET only.
//! 2. [`checks::findings`] judges the snapshot with the operator's own
//!    decision core, so the audit and the operator agree on what is wrong.
//! 3. Every finding is confirmed: the objects it names are read again
//!    ([`snapshot::reread`]) and the checks run again; only findings seen
//!    both times are reported (a running operator may have repaired the
//!    rest meanwhile).
//! 4. With `--fix`, [`fix::apply`] makes the findings' writes: only the
//!    operator's own guarded transitions and the claim writes that mark a
//!    misbound claim Lost, each over the version just confirmed.

pub mod checks;
mod finding;
pub mod fix;
pub mod report;
pub mod snapshot;

use std::collections::HashSet;

use cnpool_registry::StoreRegistry;

pub use checks::Settings;
pub use finding::{Check, Finding, Fix, FixBy, ObjectRef, Owner, Severity, Write};
pub use report::Report;
pub use snapshot::{ReadError, Scope, Snapshot};

/// Reads, judges, confirms and (with `fix`) repairs; the report of it.
pub async fn run<R: StoreRegistry>(
    client: &kube::Client,
    scope: &Scope,
    registry: &impl Fn(&str) -> R,
    settings: &Settings,
    fix: bool,
) -> Result<Report, ReadError> {
    let first = snapshot::read(client, scope, registry).await?;
    let candidates = checks::findings(&first, settings);
    // Information needs no confirmation: at a cutover every Go binding is
    // one, and reading each again would cost a GET apiece.
    let serious = |finding: &&Finding| finding.severity == Severity::Finding;
    if !candidates.iter().any(|finding| serious(&finding)) {
        return Ok(Report::new(scope.namespace.clone(), &first, candidates, Vec::new()));
    }
    let mut named: Vec<ObjectRef> =
        candidates.iter().filter(serious).flat_map(|finding| finding.objects.iter().cloned()).collect();
    named.sort();
    named.dedup();
    let confirmed = snapshot::reread(client, scope, registry, &first, &named).await?;
    let seen: HashSet<_> = candidates.iter().map(Finding::key).collect();
    let findings: Vec<Finding> =
        checks::findings(&confirmed, settings).into_iter().filter(|finding| seen.contains(&finding.key())).collect();
    let fixes = if fix { fix::apply(client, &confirmed, &findings).await } else { Vec::new() };
    Ok(Report::new(scope.namespace.clone(), &confirmed, findings, fixes))
}
