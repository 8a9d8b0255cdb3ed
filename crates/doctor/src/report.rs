//! The doctor's output: a short table for people, worst first, with one
//! summary line; or the same as JSON (schema in docs/runbook.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::finding::{Finding, FixBy, Severity};
use crate::fix::Applied;
use crate::snapshot::{Snapshot, Unread};

/// The JSON document's schema version; raised on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything one run found and did.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub schema_version: u32,
    /// The namespace audited; `null` for all.
    pub namespace: Option<String>,
    pub read: Counts,
    /// What could not be read: the audit is incomplete (exit 2).
    pub unread: Vec<Unread>,
    pub findings: Vec<Finding>,
    /// The writes of `--fix`, in order; empty without it.
    pub fixes: Vec<Applied>,
    /// The doctor's Kubernetes API requests by verb (`get`, `list`, ...).
    pub requests: BTreeMap<String, u64>,
    pub summary: Summary,
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub pods: usize,
    pub claims: usize,
    pub claim_sets: usize,
    pub pools: usize,
    pub stores: usize,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub findings: usize,
    pub information: usize,
    /// 0: nothing but information; 1: findings; 2: the cluster could not be
    /// read in full.
    pub exit_code: i32,
}

impl Report {
    pub fn new(namespace: Option<String>, snapshot: &Snapshot, findings: Vec<Finding>, fixes: Vec<Applied>) -> Self {
        let unread = snapshot.unread();
        let stores = snapshot.stores.values().filter_map(|stores| match stores {
            crate::snapshot::Stores::Listed { hakeeper, stores } => Some((hakeeper, stores.len())),
            crate::snapshot::Stores::Unread { .. } => None,
        });
        // Pools sharing a HAKeeper share its listing: count it once.
        let stores: BTreeMap<&String, usize> = stores.collect();
        let read = Counts {
            pods: snapshot.pods.len(),
            claims: snapshot.claims.len(),
            claim_sets: snapshot.claim_sets.len(),
            pools: snapshot.pools.len(),
            stores: stores.values().sum(),
        };
        let serious = findings.iter().filter(|finding| finding.severity == Severity::Finding).count();
        let exit_code = if !unread.is_empty() {
            2
        } else if serious > 0 {
            1
        } else {
            0
        };
        let summary = Summary { findings: serious, information: findings.len() - serious, exit_code };
        Self {
            schema_version: SCHEMA_VERSION,
            namespace,
            read,
            unread,
            findings,
            fixes,
            requests: BTreeMap::new(),
            summary,
        }
    }

    /// The table for people.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.findings.is_empty() {
            let _ = writeln!(out, "{:<10} {:<21} WHAT", "INVARIANT", "CHECK");
        }
        for finding in &self.findings {
            let _ = writeln!(out, "{:<10} {:<21} {}", finding.invariant, finding.check.as_str(), finding.summary);
            let _ = writeln!(out, "{:<32} why: {}", "", finding.why);
            let by = match finding.fix.by {
                FixBy::Doctor => "fix (--fix)",
                FixBy::Operator => "fix (the operator)",
                FixBy::Person => "fix (you)",
                FixBy::Nothing => "next",
            };
            let _ = writeln!(out, "{:<32} {by}: {}", "", finding.fix.action);
        }
        for unread in &self.unread {
            let _ = writeln!(out, "not read: {}: {}", unread.what, unread.why);
        }
        for fix in &self.fixes {
            let detail = if fix.detail.is_empty() { String::new() } else { format!(" ({})", fix.detail) };
            let _ = writeln!(out, "wrote: {}: {:?}{detail}", fix.write, fix.outcome);
        }
        let _ = writeln!(out, "{}", self.summary_line());
        out
    }

    fn summary_line(&self) -> String {
        let mut by_invariant: BTreeMap<&str, usize> = BTreeMap::new();
        for finding in self.findings.iter().filter(|finding| finding.severity == Severity::Finding) {
            *by_invariant.entry(finding.invariant).or_default() += 1;
        }
        let invariants: Vec<String> = by_invariant.iter().map(|(name, count)| format!("{name} {count}")).collect();
        let found = if self.summary.findings == 0 {
            "no findings".to_owned()
        } else {
            let plural = if self.summary.findings == 1 { "" } else { "s" };
            format!("{} finding{plural} ({})", self.summary.findings, invariants.join(", "))
        };
        let requests: Vec<String> = self.requests.iter().map(|(verb, count)| format!("{verb} {count}")).collect();
        let read = &self.read;
        format!(
            "{found}, {} information; read {} pods, {} claims, {} claim sets, {} pools, {} CN stores{}; requests: {}",
            self.summary.information,
            read.pods,
            read.claims,
            read.claim_sets,
            read.pools,
            read.stores,
            if self.unread.is_empty() { String::new() } else { format!("; {} not read", self.unread.len()) },
            if requests.is_empty() { "none".to_owned() } else { requests.join(", ") },
        )
    }
}
