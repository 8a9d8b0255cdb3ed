//! What one claim reconcile reads: the claim, the pods carrying its UID,
//! the pods it points at, its serving pod's store and, when the core asks,
//! the Idle pods it may take; from the cache, or live when the core asks
//! for a confirmation.

use std::sync::Arc;

use cnpool_api::{CNClaim, CNPool, ClaimPhase, labels};
use cnpool_core::candidates::eligibility;
use cnpool_core::claim::{ClaimInput, Holding};
use cnpool_core::convert::claim_view;
use cnpool_core::model::{ClaimView, ObservedStore, PodView, PoolView, Read, StoreView};
use cnpool_core::pool::occupancy;
use cnpool_core::waiting::ClaimWait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::cache::IdlePod;
use crate::context::Context;
use crate::error::Error;
use crate::observe::{StoresOfPool, pool_revision, store_missing_noted};
use crate::stores::StoreSnapshot;

/// What one reconcile has read, updated with what its writes returned.
pub(super) struct Snapshot {
    pub claim: CNClaim,
    pub owned: Vec<Arc<Pod>>,
    pub pointed: Option<Arc<Pod>>,
    /// The pod `spec.sourcePod` names.
    pub source: Option<Arc<Pod>>,
    pub read: Read,
    /// Whether a live read confirmed `claim` as the server's current version.
    pub claim_confirmed: bool,
    /// Whether this reconcile listed HAKeeper's stores itself.
    pub stores_listed: bool,
    /// The Idle pods offered to the claim, once read.
    pub candidates: Option<Candidates>,
}

/// The Idle pods a claim may take, as read for it.
#[derive(Clone)]
pub(super) struct Candidates {
    pub offered: Vec<Arc<IdlePod>>,
    /// Whether some were held back as acquired lately (by this process, or
    /// tried and refused): they come back when that note expires.
    pub held_back: bool,
}

impl Snapshot {
    pub fn from_cache<R>(ctx: &Context<R>, claim: CNClaim) -> Self {
        Self {
            owned: ctx.pods.owned_by(&claim.uid().unwrap_or_default()),
            claim,
            pointed: None,
            source: None,
            read: Read::Cached,
            claim_confirmed: false,
            stores_listed: false,
            candidates: None,
        }
    }

    pub fn namespace(&self) -> String {
        self.claim.namespace().unwrap_or_default()
    }

    /// Finds the pods the claim points at now (its pointer and its
    /// migration source).
    pub async fn refresh<R>(&mut self, ctx: &Context<R>, view: &ClaimView) -> Result<(), Error> {
        self.pointed = match view.pointed_pod() {
            Some(name) => self.find_pod(ctx, name).await?,
            None => None,
        };
        self.source = match view.source_pod.as_deref() {
            Some(name) => self.find_pod(ctx, name).await?,
            None => None,
        };
        Ok(())
    }

    /// A pod by name: among what this reconcile already holds, else in the
    /// cache or, for a live read, from the server.
    async fn find_pod<R>(&self, ctx: &Context<R>, name: &str) -> Result<Option<Arc<Pod>>, Error> {
        let known = self.owned.iter().chain(self.pointed.as_ref()).chain(self.source.as_ref());
        if let Some(pod) = known.into_iter().find(|pod| pod.name_any() == name) {
            return Ok(Some(pod.clone()));
        }
        let namespace = self.namespace();
        match self.read {
            Read::Cached => Ok(ctx.pods.get(&(namespace, name.to_owned()))),
            Read::Live => {
                let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
                Ok(pods.get_opt(name).await.map_err(|error| Error::kube("read pod", name, error))?.map(Arc::new))
            }
        }
    }

    /// Reads the claim and its pods again, bypassing the cache. `false` when
    /// the claim is gone.
    pub async fn read_live<R>(&mut self, ctx: &Context<R>) -> Result<bool, Error> {
        let namespace = self.namespace();
        let name = self.claim.name_any();
        let Some(claim) = self.claim_live(ctx).await? else {
            return Ok(false);
        };
        let uid = claim.uid().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
        let selector = format!("{}={uid}", labels::CLAIM_UID);
        let owned = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|error| Error::kube("list pods of claim", &name, error))?;
        self.claim = claim;
        self.owned = owned.items.into_iter().map(Arc::new).collect();
        self.pointed = None;
        self.source = None;
        self.read = Read::Live;
        Ok(true)
    }

    /// Checks on the server that the claim read is its current version;
    /// `false` when it changed or is gone.
    pub async fn confirm_current<R>(&mut self, ctx: &Context<R>) -> Result<bool, Error> {
        let live = self.claim_live(ctx).await?;
        self.claim_confirmed = live.is_some_and(|live| live.resource_version() == self.claim.resource_version());
        Ok(self.claim_confirmed)
    }

    /// The claim as the server has it now, bypassing the cache.
    async fn claim_live<R>(&self, ctx: &Context<R>) -> Result<Option<CNClaim>, Error> {
        let name = self.claim.name_any();
        let claims: Api<CNClaim> = Api::namespaced(ctx.client.clone(), &self.namespace());
        claims.get_opt(&name).await.map_err(|error| Error::kube("read claim", &name, error))
    }

    /// Takes a pod as this reconcile's write over `read` returned it. The
    /// watch event of that version is no news to the claim: only its
    /// versions are remembered, not the pod.
    pub fn put_pod<R>(&mut self, ctx: &Context<R>, read: &Pod, pod: Pod) {
        let versions = ObjectMeta { uid: pod.uid(), resource_version: pod.resource_version(), ..ObjectMeta::default() };
        ctx.claim_pod_writes.wrote(read.resource_version().as_deref(), Pod { metadata: versions, ..Pod::default() });
        let pod = Arc::new(pod);
        let name = pod.name_any();
        self.owned.retain(|held| held.name_any() != name);
        self.owned.push(pod.clone());
        for slot in [&mut self.pointed, &mut self.source] {
            if slot.as_ref().is_some_and(|known| known.name_any() == name) {
                *slot = Some(pod.clone());
            }
        }
    }
}

/// The views one decision reads, owned, beside the objects they were read
/// from (a write goes over the very version its decision read).
pub(super) struct Observed {
    pub view: ClaimView,
    pub owned: Vec<PodView>,
    pub pointed: Option<PodView>,
    pub source: Option<PodView>,
    pub pools: Vec<PoolView>,
    pub candidates: Option<Candidates>,
    /// The UUID of the serving pod's store, and its registered view.
    pub store_uuid: Option<String>,
    pub store: Option<StoreView>,
    /// When the serving pod's `cn-store` condition noted its store missing.
    store_noted: Option<jiff::Timestamp>,
    /// The serving pod's pool, and its cluster's store listing when that
    /// cluster's HAKeeper is known.
    pub serving_pool: Option<String>,
    listing: Option<Arc<StoreSnapshot>>,
    serving_since: Option<jiff::Timestamp>,
    may_roll: bool,
    acquired_lately: Option<String>,
    /// Every pod read, to write over by UID.
    read_pods: Vec<Arc<Pod>>,
}

impl Observed {
    pub fn read<R: Send + Sync>(ctx: &Context<R>, snap: &Snapshot) -> Result<Self, Error> {
        let view = claim_view(&snap.claim)?;
        #[cfg(feature = "sabotage")]
        let view = crate::sabotage::ignore_validation(view);
        let observer = ctx.observer();
        let owned: Vec<PodView> = snap.owned.iter().map(|pod| observer.read_pod(pod)).collect::<Result<_, _>>()?;
        #[cfg(feature = "sabotage")]
        let owned = crate::sabotage::hide_extra_pods(&view, owned);
        let pointed = snap.pointed.as_deref().map(|pod| observer.read_pod(pod)).transpose()?;
        let source = snap.source.as_deref().map(|pod| observer.read_pod(pod)).transpose()?;
        let read_pods: Vec<Arc<Pod>> = snap
            .owned
            .iter()
            .chain(snap.pointed.as_ref())
            .chain(snap.source.as_ref())
            .chain(snap.candidates.iter().flat_map(|read| read.offered.iter().map(|idle| &idle.pod)))
            .cloned()
            .collect();
        let holding = Holding::of(&view, &owned, pointed.as_ref(), source.as_ref());
        let store_uuid = holding.serving.and_then(|pod| pod.store_uuid.clone());
        let store_noted =
            holding.serving.and_then(|serving| raw(&read_pods, serving)).and_then(|pod| store_missing_noted(&pod));
        let held_uid = holding.one().map(|pod| pod.uid.as_str());
        let serving_since = view.source_pod.as_ref().and_then(|_| ctx.migrations.track(&view.uid, held_uid));
        let namespace = snap.namespace();
        let may_roll = view.phase == Some(ClaimPhase::Outdated) && may_roll(ctx, &namespace, holding.one());
        let serving_pool = holding.serving.and_then(|pod| pod.pool.clone());
        let listing = serving_pool.as_deref().and_then(|pool| ctx.stores_of(&namespace, pool));
        Ok(Self {
            serving_pool,
            store: listing.as_ref().and_then(|listing| listing.view(store_uuid.as_deref())),
            listing,
            acquired_lately: ctx.claims_took_lately.pod(&view.uid),
            pools: ctx.pool_views(),
            candidates: snap.candidates.clone(),
            view,
            owned,
            pointed,
            source,
            store_uuid,
            store_noted,
            serving_since,
            may_roll,
            read_pods,
        })
    }

    /// The Idle pods offered, as the core reads candidates.
    pub fn candidate_views(&self) -> Option<Vec<&PodView>> {
        self.candidates.as_ref().map(|read| read.offered.iter().map(|idle| &idle.view).collect())
    }

    /// The decision's input; `candidates` from [`Self::candidate_views`].
    pub fn input<'a, 'c, R>(
        &'a self,
        ctx: &Context<R>,
        snap: &Snapshot,
        candidates: Option<&'c [&'a PodView]>,
    ) -> ClaimInput<'a, 'c> {
        ClaimInput {
            claim: &self.view,
            owned: &self.owned,
            pointed: self.pointed.as_ref(),
            read: snap.read,
            store: self.listing.as_ref().map_or(ObservedStore::Unobserved, |listing| {
                listing.observed(self.store_uuid.as_deref(), &self.store, self.store_noted, ctx.now())
            }),
            candidates,
            pools: &self.pools,
            now: ctx.now(),
            store_missing_bound: ctx.config.store_missing_bound,
            source: self.source.as_ref(),
            serving_since: self.serving_since,
            propagation_delay: ctx.config.migration_propagation_delay,
            may_roll: self.may_roll,
            claim_confirmed: snap.claim_confirmed,
            acquired_lately: self.acquired_lately.as_deref(),
            stores_listed: snap.stores_listed,
            adopt_legacy_before: ctx.cutover.get().copied(),
        }
    }

    /// The object a view was read from.
    pub fn raw(&self, view: &PodView) -> Option<Arc<Pod>> {
        raw(&self.read_pods, view)
    }

    /// The one pod the claim holds, if exactly one.
    pub fn held(&self) -> Option<&PodView> {
        Holding::of(&self.view, &self.owned, self.pointed.as_ref(), self.source.as_ref()).one()
    }
}

fn raw(pods: &[Arc<Pod>], view: &PodView) -> Option<Arc<Pod>> {
    pods.iter().find(|pod| pod.uid().as_deref() == Some(view.uid.as_str())).cloned()
}

/// Whether an Outdated standalone claim on `held` may start migrating: no
/// other claim of the pod's pool migrates now (by the cache, and by what
/// this process started lately), so a rollout moves one tenant at a time.
fn may_roll<R>(ctx: &Context<R>, namespace: &str, held: Option<&PodView>) -> bool {
    let Some(pool) = held.and_then(|pod| pod.pool.as_deref()) else { return false };
    let migrating = ctx.claims.in_pool(namespace, pool).iter().any(|claim| claim.spec.source_pod.is_some());
    !migrating && !ctx.rollouts.lately(namespace, pool)
}

/// Why `claim` found no pod to take ([`cnpool_core::waiting::why_no_pod`]),
/// from the pools of its namespace and their pods as cached. A claim
/// created just after its pool may be decided before the pool cache shows
/// the pool: `NoPoolMatches`, a Warning, is said only once a live list of
/// the namespace's pools agrees, unless the claim's condition `shown`
/// says it already (one read per change, not per retry).
pub(super) async fn why_no_pod<R: Send + Sync>(
    ctx: &Context<R>,
    claim: &ClaimView,
    namespace: &str,
    shown: Option<&Condition>,
) -> Result<ClaimWait, Error> {
    let observer = ctx.observer();
    let occupancy = |pool: &PoolView| {
        let pods = ctx.pods.in_pool(namespace, &pool.name);
        // A pod that does not read as a pod of the pool takes no part.
        let views: Vec<PodView> = pods.iter().filter_map(|pod| observer.read_pod(pod).ok()).collect();
        occupancy(pool, &views)
    };
    let reachability = |pool: &PoolView| ctx.reachability_of(namespace, &pool.name);
    let cached = cnpool_core::waiting::why_no_pod(claim, &ctx.pool_views_in(namespace), occupancy, reachability);
    let said =
        |wait: &ClaimWait| shown.is_some_and(|shown| shown.reason == wait.reason() && shown.message == wait.message());
    if !matches!(cached, ClaimWait::NoPoolMatches { .. }) || said(&cached) {
        return Ok(cached);
    }
    let pools: Api<CNPool> = Api::namespaced(ctx.client.clone(), namespace);
    let listed = pools
        .list(&ListParams::default())
        .await
        .map_err(|error| Error::kube("list pools for claim", &claim.name, error))?;
    let live: Vec<PoolView> =
        listed.items.iter().filter_map(|pool| ctx.pool_view(pool, &pool_revision(&pool.spec)).ok()).collect();
    Ok(cnpool_core::waiting::why_no_pod(claim, &live, occupancy, reachability))
}

/// How many Idle pods a claim reads from each pool that it may take (after
/// those of its previous owner): enough for every attempt of every worker
/// binding at once, a few of the first being reserved by the others.
const CANDIDATES_READ: usize = 16;

/// The Idle pods `claim` may take, at most [`CANDIDATES_READ`] a pool
/// beside those its owner held last (the core ranks them). Those acquired
/// lately are held back, those on a cordoned node and those whose store
/// HAKeeper does not list now are left out: the first are not eligible, and
/// a claim taking one of the second would only wait for its store, and
/// maybe be Lost.
pub(super) fn candidate_pods<R: Send + Sync>(
    ctx: &Context<R>,
    claim: &ClaimView,
    namespace: &str,
    pools: &[PoolView],
) -> Candidates {
    let pool_names: Vec<String> = match &claim.pool_name {
        Some(pool) => vec![pool.clone()],
        None => ctx
            .pools
            .all()
            .iter()
            .filter(|(pool, _)| pool.namespace().as_deref() == Some(namespace))
            .map(|(pool, _)| pool.name_any())
            .collect(),
    };
    let mut held_back = false;
    let mut offered = Vec::new();
    let observer = ctx.observer();
    let returning = |idle: &IdlePod| claim.owner_name.is_some() && idle.view.last_owner == claim.owner_name;
    for pool in &pool_names {
        let mut offer = |idle: Arc<IdlePod>| {
            if ctx.pods_taken_lately.contains(&idle.view.uid) {
                held_back = true;
                return false;
            }
            // Reading the store's absence also starts the clock by which the
            // pool replaces the pod.
            let offerable = eligibility(claim, &idle.view, pools).is_ok()
                && !observer.on_cordoned_node(&idle.view)
                && observer.unowned_store_missing_since(&idle.pod, &idle.view).is_none();
            if offerable {
                offered.push(idle);
            }
            offerable
        };
        if let Some(owner) = &claim.owner_name {
            for idle in ctx.pods.idle_last_owned_by(namespace, pool, owner) {
                offer(idle);
            }
        }
        let (mut after, mut found) = (None, 0);
        loop {
            let page = ctx.pods.idle_by_age(namespace, pool, after.as_ref(), CANDIDATES_READ);
            let end = page.len() < CANDIDATES_READ;
            after = page.last().map(|idle| crate::cache::age_rank_of(&idle.view));
            for idle in page.into_iter().filter(|idle| !returning(idle)) {
                found += usize::from(offer(idle));
            }
            if end || found >= CANDIDATES_READ {
                break;
            }
        }
    }
    Candidates { offered, held_back }
}
