//! The audit itself: pure functions from a [`Snapshot`] to findings. A
//! claim is judged by the operator's own decision ([`next_claim_step`]),
//! fed with what was read live: the step the operator would take names the
//! finding (a claim it would mark Lost points at a pod it has lost; one it
//! would adopt a Go pod for is a Go binding cutover adopts), so the doctor
//! and the operator cannot disagree on what is wrong.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use cnpool_api::validation::{validate_claim_set_spec, validate_pool_spec};
use cnpool_api::{CNClaim, ClaimPhase, PodPhase};
use cnpool_controllers::{own_view, pool_revision, store_missing_noted};
use cnpool_core::claim::{ClaimInput, ClaimStep, Holding, LossReason, next_claim_step};
use cnpool_core::convert::{DrainDefaults, claim_view, pool_view};
use cnpool_core::model::{ClaimView, ObservedStore, PodView, PoolView, Read, StoreView};
use cnpool_registry::{CnStore, StoreLabels};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};

use crate::finding::{Check, Finding, Fix, FixBy, ObjectRef, Owner, Write};
use crate::snapshot::Snapshot;

/// The bounds the audit judges by; the operator's defaults unless told.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// `--store-missing-bound` of the operator.
    pub store_missing_bound: Duration,
    /// How long after its deletion an object may still be held by a
    /// finalizer; a pod or pool gets its pool's drain timeout on top.
    pub finalizer_bound: Duration,
    pub drain: DrainDefaults,
    /// The operator's migration propagation delay (read by the decision).
    pub propagation_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        let operator = cnpool_controllers::Config::default();
        Self {
            store_missing_bound: operator.store_missing_bound,
            finalizer_bound: Duration::from_secs(5 * 60),
            drain: DrainDefaults { timeout: operator.drain_timeout, min_delay: operator.drain_min_delay },
            propagation_delay: operator.migration_propagation_delay,
        }
    }
}

const WHY_SHARED: &str = "two claims pointing at one pod is the Go operator's double binding (freetier-01): both \
     tenants are routed to one CN, and the claim that does not own the pod is served by nobody";
const WHY_SEVERAL: &str = "a claim owns one pod; the others are held from every other claim until released";
const WHY_LOST: &str = "the claim says its tenant has a CN, but that pod is gone, failing or another's: the tenant \
     has none until the claim is marked Lost and binds again";
const WHY_STORE: &str = "the claim is shown Bound, but HAKeeper does not list its pod's CN store: no session can \
     reach the tenant's CN";
const WHY_FOREIGN: &str = "HAKeeper routes a tenant's sessions by store labels: this store receives another \
     tenant's sessions";
const WHY_ORPHAN: &str = "a pod owned by no claim is never offered again: it is lost capacity until released";
const WHY_OVER: &str = "the pool uses more pods (and nodes) than its maxPods allows";
const WHY_STUCK: &str = "the object was deleted, but a finalizer keeps it: what it holds is not given back";
const WHY_INVALID: &str = "cnpool acts on no spec it refuses: the object waits until its spec is fixed";
const WHY_LEGACY: &str = "the Go operator bound this pod to the claim by name; cnpool adopts it in place (the \
     tenant keeps its CN)";

/// One claim, as read and as the operator would decide it.
struct Judged<'a> {
    claim: &'a CNClaim,
    namespace: String,
    view: ClaimView,
    step: StepSeen,
}

/// What of the operator's next step matters to the audit.
#[derive(Clone, Debug, PartialEq)]
enum StepSeen {
    MarkLost(LossReason),
    Adopt { keep: String, release: Vec<String> },
    AdoptLegacy(String),
    WaitsForMissingStore(String),
    Rebind,
    Unavailable,
    Other,
}

/// The pods as read, with their views and indexes.
struct Pods<'a> {
    raw: Vec<&'a Pod>,
    views: Vec<PodView>,
    by_name: HashMap<(String, String), usize>,
    by_owner: HashMap<(String, String), Vec<usize>>,
}

impl<'a> Pods<'a> {
    fn index(pods: &'a [Pod]) -> Self {
        let mut index = Pods { raw: Vec::new(), views: Vec::new(), by_name: HashMap::new(), by_owner: HashMap::new() };
        for pod in pods {
            // A pod that does not read as a pool pod (no UID: not from a
            // server) takes no part, as in the operator.
            let Ok(view) = own_view(pod) else { continue };
            let namespace = pod.namespace().unwrap_or_default();
            let at = index.views.len();
            index.by_name.insert((namespace.clone(), view.name.clone()), at);
            if let Some(uid) = &view.claim_uid {
                index.by_owner.entry((namespace, uid.clone())).or_default().push(at);
            }
            index.raw.push(pod);
            index.views.push(view);
        }
        index
    }

    fn named(&self, namespace: &str, name: &str) -> Option<usize> {
        self.by_name.get(&(namespace.to_owned(), name.to_owned())).copied()
    }
}

/// Each pool's listed stores by UUID.
struct StoreIndex<'a>(HashMap<(&'a str, &'a str), HashMap<&'a str, &'a CnStore>>);

impl<'a> StoreIndex<'a> {
    fn of(snapshot: &'a Snapshot) -> Self {
        let mut index = HashMap::new();
        for (namespace, pool) in snapshot.stores.keys() {
            let Some(stores) = snapshot.stores_of(namespace, pool) else { continue };
            let by_uuid = stores.iter().map(|store| (store.uuid.as_str(), store)).collect();
            index.insert((namespace.as_str(), pool.as_str()), by_uuid);
        }
        Self(index)
    }

    /// The store of `pod` in `namespace`: `None` when its pool's stores
    /// were not read, `Some(None)` when HAKeeper does not list it.
    fn of_pod(&self, namespace: &str, pod: &PodView) -> Option<Option<&'a CnStore>> {
        let stores = self.0.get(&(namespace, pod.pool.as_deref()?))?;
        Some(stores.get(pod.store_uuid.as_deref()?).copied())
    }
}

/// Every finding in `snapshot`, worst first.
pub fn findings(snapshot: &Snapshot, settings: &Settings) -> Vec<Finding> {
    let mut found = Vec::new();
    let pods = Pods::index(&snapshot.pods);
    let pools = pool_views(snapshot, settings, &mut found);
    let stores = StoreIndex::of(snapshot);
    let judged = judge_claims(snapshot, settings, &pods, &stores, &pools, &mut found);
    claims_findings(&judged, &mut found);
    orphans(snapshot, &pods, &mut found);
    foreign_store_labels(&pods, &stores, &judged, &mut found);
    over_max_pods(snapshot, &pods, &mut found);
    stuck_finalizers(snapshot, settings, &pools, &mut found);
    invalid_claim_sets(snapshot, &mut found);
    found.sort_by_key(Finding::key);
    found
}

fn pool_views(snapshot: &Snapshot, settings: &Settings, found: &mut Vec<Finding>) -> Vec<(String, PoolView)> {
    let mut views = Vec::new();
    for pool in &snapshot.pools {
        let namespace = pool.namespace().unwrap_or_default();
        let name = pool.name_any();
        let refused = validate_pool_spec(&pool.spec).err().map(|invalid| invalid.to_string());
        match pool_view(pool, &pool_revision(&pool.spec), settings.drain) {
            Ok(view) if refused.is_none() => views.push((namespace, view)),
            Ok(view) => {
                views.push((namespace.clone(), view));
                found.push(invalid(ObjectRef::new("CNPool", &namespace, &name), refused.unwrap_or_default()));
            }
            Err(error) => found.push(invalid(ObjectRef::new("CNPool", &namespace, &name), error.to_string())),
        }
    }
    views
}

fn invalid(object: ObjectRef, message: String) -> Finding {
    let fix = Fix::by(FixBy::Person, format!("fix the spec: {message}"));
    Finding::new(Check::InvalidSpec, format!("{object}: {message}"), vec![object], WHY_INVALID, fix)
}

fn invalid_claim_sets(snapshot: &Snapshot, found: &mut Vec<Finding>) {
    for set in &snapshot.claim_sets {
        if let Err(refused) = validate_claim_set_spec(&set.spec) {
            let object = ObjectRef::new("CNClaimSet", &set.namespace().unwrap_or_default(), &set.name_any());
            found.push(invalid(object, refused.to_string()));
        }
    }
}

fn judge_claims<'a>(
    snapshot: &'a Snapshot,
    settings: &Settings,
    pods: &Pods<'_>,
    stores: &StoreIndex<'_>,
    pools: &[(String, PoolView)],
    found: &mut Vec<Finding>,
) -> Vec<Judged<'a>> {
    let adopt_legacy_before = Some(snapshot.cutover.unwrap_or(cnpool_controllers::cutover::recorded(snapshot.now)));
    let mut pools_by_namespace: HashMap<&str, Vec<PoolView>> = HashMap::new();
    for (namespace, pool) in pools {
        pools_by_namespace.entry(namespace.as_str()).or_default().push(pool.clone());
    }
    let mut judged = Vec::new();
    for claim in &snapshot.claims {
        let namespace = claim.namespace().unwrap_or_default();
        // Only a claim not from a server lacks these: nothing to judge.
        let Ok(mut view) = claim_view(claim) else { continue };
        // The operator adds its finalizer before any step that could need
        // it (row 4): the step after that is the one that tells.
        view.has_finalizer = true;
        if let Some(refused) = &view.invalid {
            found.push(invalid(ObjectRef::new("CNClaim", &namespace, &view.name), refused.to_string()));
        }
        if view.deleting {
            judged.push(Judged { claim, namespace, view, step: StepSeen::Other });
            continue;
        }
        let owned: Vec<PodView> = pods
            .by_owner
            .get(&(namespace.clone(), view.uid.clone()))
            .into_iter()
            .flatten()
            .map(|&at| pods.views[at].clone())
            .collect();
        let find = |name: Option<&str>| name.and_then(|name| pods.named(&namespace, name));
        let pointed = find(view.pointed_pod()).map(|at| &pods.views[at]);
        let source = find(view.source_pod.as_deref()).map(|at| &pods.views[at]);
        let holding = Holding::of(&view, &owned, pointed, source);
        let serving = holding.serving.and_then(|pod| pods.named(&namespace, &pod.name));
        let listed = serving.and_then(|at| Some((at, stores.of_pod(&namespace, &pods.views[at])?)));
        let store_view: Option<StoreView> = listed.and_then(|(_, store)| store).map(StoreView::from);
        let store = match (listed, &store_view) {
            (None, _) => ObservedStore::Unobserved,
            (Some(_), Some(view)) => ObservedStore::Registered(view),
            (Some((at, _)), None) => {
                ObservedStore::Missing { since: store_missing_noted(pods.raw[at]).unwrap_or(snapshot.now) }
            }
        };
        let pool_list = pools_by_namespace.get(namespace.as_str()).map_or(&[][..], Vec::as_slice);
        let input = ClaimInput {
            claim: &view,
            owned: &owned,
            pointed,
            read: Read::Live,
            store,
            candidates: None,
            pools: pool_list,
            now: snapshot.now,
            store_missing_bound: settings.store_missing_bound,
            source,
            serving_since: None,
            propagation_delay: settings.propagation_delay,
            may_roll: false,
            claim_confirmed: true,
            acquired_lately: None,
            stores_listed: true,
            adopt_legacy_before,
        };
        let step = match next_claim_step(&input) {
            ClaimStep::MarkLost { reason, .. } | ClaimStep::ConfirmLost(reason) => StepSeen::MarkLost(reason),
            ClaimStep::FallBackToSource { .. } => StepSeen::Other,
            ClaimStep::Adopt { keep, release } => StepSeen::Adopt {
                keep: keep.name.clone(),
                release: release.iter().map(|release| release.pod.name.clone()).collect(),
            },
            ClaimStep::AdoptLegacy(pod) => StepSeen::AdoptLegacy(pod.name.clone()),
            ClaimStep::WaitForStore(_) if matches!(store, ObservedStore::Missing { .. }) && shown_bound(&view) => {
                StepSeen::WaitsForMissingStore(holding.serving.map(|pod| pod.name.clone()).unwrap_or_default())
            }
            ClaimStep::Rebind => StepSeen::Rebind,
            ClaimStep::ReportUnavailable(_) => StepSeen::Unavailable,
            _ => StepSeen::Other,
        };
        judged.push(Judged { claim, namespace, view, step });
    }
    judged
}

fn shown_bound(view: &ClaimView) -> bool {
    matches!(view.phase, Some(ClaimPhase::Bound | ClaimPhase::Outdated))
}

fn claim_ref(judged: &Judged<'_>) -> ObjectRef {
    ObjectRef::new("CNClaim", &judged.namespace, &judged.view.name)
}

fn misbound_write(judged: &Judged<'_>) -> Write {
    Write::MarkMisbound { namespace: judged.namespace.clone(), claim: judged.view.name.clone() }
}

/// The findings the operator's decision names, and the pods two claims
/// point at.
fn claims_findings(judged: &[Judged<'_>], found: &mut Vec<Finding>) {
    let mut pointing: BTreeMap<(String, String), Vec<&Judged<'_>>> = BTreeMap::new();
    for claim in judged.iter().filter(|claim| !claim.view.deleting) {
        if let Some(pod) = claim.view.pointed_pod() {
            pointing.entry((claim.namespace.clone(), pod.to_owned())).or_default().push(claim);
        }
    }
    let mut in_shared: Vec<(String, String)> = Vec::new();
    for ((namespace, pod), claims) in pointing.iter().filter(|(_, claims)| claims.len() > 1) {
        found.push(shared_pod(namespace, pod, claims));
        in_shared.extend(claims.iter().map(|claim| (claim.namespace.clone(), claim.view.name.clone())));
    }
    for claim in judged {
        let object = claim_ref(claim);
        let shared = in_shared.contains(&(claim.namespace.clone(), claim.view.name.clone()));
        let pod_ref = |pod: &str| ObjectRef::new("Pod", &claim.namespace, pod);
        match &claim.step {
            StepSeen::MarkLost(reason) if !shared => {
                let pod = claim.view.pointed_pod().unwrap_or_default();
                let summary = format!("{object} points at pod {pod}: {}", reason.message());
                let fix = if *reason == LossReason::Misbound {
                    Fix {
                        by: FixBy::Doctor,
                        action: "mark the claim Lost (Misbound) and clear its spec.podName; the operator then binds \
                                 it to a pod of its own"
                            .to_owned(),
                        writes: vec![misbound_write(claim)],
                    }
                } else {
                    Fix::by(
                        FixBy::Operator,
                        format!("the operator marks the claim Lost ({}) and binds it to another pod", reason.as_str()),
                    )
                };
                found.push(Finding::new(Check::LostPod, summary, vec![object, pod_ref(pod)], WHY_LOST, fix));
            }
            StepSeen::Adopt { keep, release } => {
                let summary = format!("{object} owns pods {keep} and {} by claim-uid", release.join(", "));
                let writes = release
                    .iter()
                    .map(|pod| Write::ReleasePod {
                        namespace: claim.namespace.clone(),
                        pod: pod.clone(),
                        owner: Owner::ClaimUid(claim.view.uid.clone()),
                    })
                    .collect();
                let action = format!("keep {keep} and release the others with the operator's guarded release");
                let mut objects = vec![object, pod_ref(keep)];
                objects.extend(release.iter().map(|pod| pod_ref(pod)));
                let fix = Fix { by: FixBy::Doctor, action, writes };
                found.push(Finding::new(Check::SeveralPods, summary, objects, WHY_SEVERAL, fix));
            }
            StepSeen::WaitsForMissingStore(pod) => {
                let summary = format!("{object} is shown Bound to pod {pod}, whose CN store HAKeeper does not list");
                let fix = Fix::by(
                    FixBy::Operator,
                    "the operator marks the claim Lost (StoreMissing) once the store has been missing for its \
                     --store-missing-bound, and binds it again; check the CN's log and its connection to HAKeeper",
                );
                found.push(Finding::new(Check::StoreMissing, summary, vec![object, pod_ref(pod)], WHY_STORE, fix));
            }
            StepSeen::AdoptLegacy(pod) => {
                let summary = format!("{object} is bound by the Go operator to pod {pod}");
                let fix = Fix::by(FixBy::Nothing, format!("cutover adopts {pod} for the claim (adds its claim-uid)"));
                found.push(Finding::new(Check::LegacyBinding, summary, vec![object, pod_ref(pod)], WHY_LEGACY, fix));
            }
            _ => {}
        }
    }
}

fn shared_pod(namespace: &str, pod: &str, claims: &[&Judged<'_>]) -> Finding {
    let names: Vec<&str> = claims.iter().map(|claim| claim.view.name.as_str()).collect();
    let summary = format!("pod {namespace}/{pod} is pointed at by claims {}", names.join(", "));
    let mut objects = vec![ObjectRef::new("Pod", namespace, pod)];
    objects.extend(claims.iter().map(|claim| claim_ref(claim)));
    let mut writes = Vec::new();
    let mut says = Vec::new();
    let mut needs_person = false;
    for claim in claims {
        let name = &claim.view.name;
        says.push(match &claim.step {
            StepSeen::MarkLost(LossReason::Misbound) => {
                writes.push(misbound_write(claim));
                format!("{name} is marked Lost (Misbound) and its spec.podName cleared: it binds a pod of its own")
            }
            StepSeen::MarkLost(reason) => format!("the operator marks {name} Lost ({})", reason.as_str()),
            StepSeen::AdoptLegacy(_) => format!("{name} keeps the pod (cutover adopts it)"),
            StepSeen::Rebind => format!("the operator clears {name}'s spec.podName"),
            StepSeen::Unavailable => {
                needs_person = true;
                format!("{name} asks for a pod another claim holds: clear its spec.podName, or delete it")
            }
            _ => format!("{name} keeps the pod"),
        });
    }
    let by = match (writes.is_empty(), needs_person) {
        (false, _) => FixBy::Doctor,
        (true, true) => FixBy::Person,
        (true, false) => FixBy::Operator,
    };
    Finding::new(Check::SharedPod, summary, objects, WHY_SHARED, Fix { by, action: says.join("; "), writes })
}

/// Pods carrying the UID of no claim, or bound by the Go operator to a
/// claim name no claim has.
fn orphans(snapshot: &Snapshot, pods: &Pods<'_>, found: &mut Vec<Finding>) {
    // Every claim read counts, deleting ones too: their finalizer releases.
    let uids: HashSet<(String, String)> = snapshot
        .claims
        .iter()
        .map(|claim| (claim.namespace().unwrap_or_default(), claim.uid().unwrap_or_default()))
        .collect();
    let names: HashSet<(String, String)> =
        snapshot.claims.iter().map(|claim| (claim.namespace().unwrap_or_default(), claim.name_any())).collect();
    let has_uid = |namespace: &str, uid: &str| uids.contains(&(namespace.to_owned(), uid.to_owned()));
    let exists = |namespace: &str, name: &str| names.contains(&(namespace.to_owned(), name.to_owned()));
    for (pod, view) in pods.raw.iter().zip(&pods.views).filter(|(_, view)| !view.deleting) {
        let namespace = pod.namespace().unwrap_or_default();
        let owner = match (&view.claim_uid, &view.claimed_by) {
            (Some(uid), _) if !has_uid(&namespace, uid) => Owner::ClaimUid(uid.clone()),
            (None, Some(name)) if view.phase == Some(PodPhase::Bound) && !exists(&namespace, name) => {
                Owner::GoClaimName(name.clone())
            }
            _ => continue,
        };
        let object = ObjectRef::new("Pod", &namespace, &view.name);
        let summary = match &owner {
            Owner::ClaimUid(uid) => format!("{object} carries claim-uid {uid}, which no claim has"),
            Owner::GoClaimName(name) => format!("{object} is bound by the Go operator to claim {name}, which is gone"),
        };
        let write = Write::ReleasePod { namespace: namespace.clone(), pod: view.name.clone(), owner };
        let fix = Fix {
            by: FixBy::Doctor,
            action: "release the pod with the operator's guarded release; it drains back to Idle".to_owned(),
            writes: vec![write],
        };
        found.push(Finding::new(Check::OrphanPod, summary, vec![object], WHY_ORPHAN, fix));
    }
}

/// Stores whose labels are those of a claim that does not own their pod.
fn foreign_store_labels(pods: &Pods<'_>, stores: &StoreIndex<'_>, judged: &[Judged<'_>], found: &mut Vec<Finding>) {
    let by_uid: HashMap<(&str, &str), &Judged<'_>> =
        judged.iter().map(|claim| ((claim.namespace.as_str(), claim.view.uid.as_str()), claim)).collect();
    let by_name: HashMap<(&str, &str), &Judged<'_>> =
        judged.iter().map(|claim| ((claim.namespace.as_str(), claim.view.name.as_str()), claim)).collect();
    let mut labelled: HashMap<(&str, &StoreLabels), Vec<&Judged<'_>>> = HashMap::new();
    for claim in judged.iter().filter(|claim| !claim.view.cn_labels.is_empty()) {
        labelled.entry((claim.namespace.as_str(), &claim.view.cn_labels)).or_default().push(claim);
    }
    for (pod, view) in pods.raw.iter().zip(&pods.views) {
        let namespace = pod.namespace().unwrap_or_default();
        let Some(Some(store)) = stores.of_pod(&namespace, view) else { continue };
        let uuid = store.uuid.as_str();
        if store.labels.is_empty() {
            continue;
        }
        let owner = match (&view.claim_uid, &view.claimed_by) {
            (Some(uid), _) => by_uid.get(&(namespace.as_str(), uid.as_str())),
            (None, Some(name)) => by_name.get(&(namespace.as_str(), name.as_str())),
            (None, None) => None,
        }
        .copied();
        if owner.is_some_and(|owner| owner.view.cn_labels == store.labels) {
            continue;
        }
        let strangers: Vec<&Judged<'_>> = labelled
            .get(&(namespace.as_str(), &store.labels))
            .into_iter()
            .flatten()
            .copied()
            .filter(|claim| owner.is_none_or(|owner| !std::ptr::eq(owner.claim, claim.claim)))
            .collect();
        if strangers.is_empty() {
            continue;
        }
        let names: Vec<&str> = strangers.iter().map(|claim| claim.view.name.as_str()).collect();
        let owned_by = owner.map_or_else(|| "no claim".to_owned(), |owner| format!("claim {}", owner.view.name));
        let summary = format!(
            "CN store {uuid} of pod {namespace}/{} carries the labels of claim {}, but the pod is owned by {owned_by}",
            view.name,
            names.join(", ")
        );
        let mut objects =
            vec![ObjectRef::new("CNStore", &namespace, uuid), ObjectRef::new("Pod", &namespace, &view.name)];
        objects.extend(owner.into_iter().chain(strangers).map(claim_ref));
        let fix = Fix::by(
            FixBy::Operator,
            "the operator's CN-store controller writes the store's labels from its pod: its owner's labels, none \
             for an unowned pod (only it writes HAKeeper)",
        );
        found.push(Finding::new(Check::ForeignStoreLabels, summary, objects, WHY_FOREIGN, fix));
    }
}

fn over_max_pods(snapshot: &Snapshot, pods: &Pods<'_>, found: &mut Vec<Finding>) {
    let mut counts: HashMap<(String, &str), u64> = HashMap::new();
    for (pod, view) in pods.raw.iter().zip(&pods.views).filter(|(_, view)| !view.deleting) {
        if let Some(pool) = view.pool.as_deref() {
            *counts.entry((pod.namespace().unwrap_or_default(), pool)).or_default() += 1;
        }
    }
    for pool in &snapshot.pools {
        let namespace = pool.namespace().unwrap_or_default();
        let name = pool.name_any();
        // A refused spec is its own finding, and the operator scales no
        // such pool: its maxPods means nothing yet.
        let Some(max) = pool.spec.strategy.scale_strategy.max_pods.filter(|_| validate_pool_spec(&pool.spec).is_ok())
        else {
            continue;
        };
        let count = counts.get(&(namespace.clone(), name.as_str())).copied().unwrap_or_default();
        if count <= u64::try_from(max).unwrap_or_default() {
            continue;
        }
        let object = ObjectRef::new("CNPool", &namespace, &name);
        let summary = format!("{object} has {count} pods, more than its maxPods {max}");
        let fix = Fix::by(
            FixBy::Operator,
            "the operator retires Idle pods above maxPods; pods in use stay until their claims release them",
        );
        found.push(Finding::new(Check::OverMaxPods, summary, vec![object], WHY_OVER, fix));
    }
}

fn stuck_finalizers(snapshot: &Snapshot, settings: &Settings, pools: &[(String, PoolView)], found: &mut Vec<Finding>) {
    let drain_of = |namespace: &str, pool: Option<&str>| {
        pools
            .iter()
            .find(|(ns, view)| ns == namespace && Some(view.name.as_str()) == pool)
            .map_or(settings.drain.timeout, |(_, view)| view.drain_timeout)
    };
    let pod_bound = |pod: &Pod| {
        let namespace = pod.namespace().unwrap_or_default();
        let pool = pod.labels().get(cnpool_api::labels::POOL_NAME).map(String::as_str);
        drain_of(&namespace, pool) + settings.finalizer_bound
    };
    let pool_bound = |namespace: &str, name: &str| drain_of(namespace, Some(name)) + settings.finalizer_bound;
    for pod in &snapshot.pods {
        stuck(found, "Pod", pod, pod_bound(pod), snapshot.now);
    }
    for pool in &snapshot.pools {
        let bound = pool_bound(&pool.namespace().unwrap_or_default(), &pool.name_any());
        stuck(found, "CNPool", pool, bound, snapshot.now);
    }
    for claim in &snapshot.claims {
        stuck(found, "CNClaim", claim, settings.finalizer_bound, snapshot.now);
    }
    for set in &snapshot.claim_sets {
        stuck(found, "CNClaimSet", set, settings.finalizer_bound, snapshot.now);
    }
}

fn stuck<K: Resource>(found: &mut Vec<Finding>, kind: &'static str, object: &K, bound: Duration, now: Timestamp) {
    let meta = object.meta();
    let (Some(deleted), Some(finalizers)) = (meta.deletion_timestamp.as_ref(), meta.finalizers.as_ref()) else {
        return;
    };
    let Ok(bound) = jiff::SignedDuration::try_from(bound) else { return };
    if finalizers.is_empty() || now.duration_since(deleted.0) < bound {
        return;
    }
    let object =
        ObjectRef::new(kind, meta.namespace.as_deref().unwrap_or_default(), meta.name.as_deref().unwrap_or_default());
    let summary = format!("{object} was deleted at {} and is still held by {}", deleted.0, finalizers.join(", "));
    let fix = Fix::by(
        FixBy::Operator,
        "the operator removes its finalizers once what they guard is done (pods released, CN drained and its store \
         removed): check that it runs, and its log for this object",
    );
    found.push(Finding::new(Check::StuckFinalizer, summary, vec![object], WHY_STUCK, fix));
}

#[cfg(test)]
mod tests;
