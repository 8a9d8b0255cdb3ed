//! What the doctor reads: every pool pod, claim, claim set and pool of its
//! scope, the cutover record, and the CN stores of each pool's HAKeeper,
//! found through the pool's `deps` as the operator finds it. Reads only:
//! LIST and GET, never a write.

use std::collections::BTreeMap;

use cnpool_api::hakeeper::{HaKeeperSource, hakeeper_source, log_set_discovery, log_set_resource};
use cnpool_api::{CNClaim, CNClaimSet, CNPool, labels};
use cnpool_registry::{CnStore, StoreRegistry};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot {what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Cutover(cnpool_controllers::Error),
}

fn kube_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ReadError {
    let what = what.into();
    move |source| ReadError::Kube { what, source }
}

/// The CN stores of one pool's HAKeeper, or why they could not be read.
#[derive(Clone, Debug)]
pub enum Stores {
    Listed { hakeeper: String, stores: Vec<CnStore> },
    Unread { hakeeper: Option<String>, why: String },
}

/// Something the doctor could not read: its audit is incomplete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unread {
    pub what: String,
    pub why: String,
}

/// Where the doctor looks.
#[derive(Clone, Debug)]
pub struct Scope {
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// The operator's namespace, where its cutover record is.
    pub operator_namespace: String,
    /// `--hakeeper-discovery`: the HAKeeper of pools without `deps`, as
    /// the operator's flag of that name.
    pub hakeeper_discovery: Option<String>,
    /// `--hakeeper-address RESOLVED=LOCAL`: reach the HAKeeper a pool's
    /// `deps` resolve to at another address (a laptop's port-forward).
    pub hakeeper_addresses: BTreeMap<String, String>,
}

/// The cluster as read.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub pods: Vec<Pod>,
    pub claims: Vec<CNClaim>,
    pub claim_sets: Vec<CNClaimSet>,
    pub pools: Vec<CNPool>,
    /// By (namespace, pool).
    pub stores: BTreeMap<(String, String), Stores>,
    /// The operator's cutover time; `None` before its first start.
    pub cutover: Option<Timestamp>,
    pub now: Timestamp,
}

impl Snapshot {
    /// What could not be read (HAKeepers), one entry per pool.
    pub fn unread(&self) -> Vec<Unread> {
        self.stores
            .iter()
            .filter_map(|((namespace, pool), stores)| match stores {
                Stores::Listed { .. } => None,
                Stores::Unread { hakeeper, why } => Some(Unread {
                    what: match hakeeper {
                        Some(address) => format!("CN stores of CNPool {namespace}/{pool} (HAKeeper {address})"),
                        None => format!("CN stores of CNPool {namespace}/{pool}"),
                    },
                    why: why.clone(),
                }),
            })
            .collect()
    }

    /// The store listing of the pool `pool` of `namespace`, when read.
    pub fn stores_of(&self, namespace: &str, pool: &str) -> Option<&[CnStore]> {
        match self.stores.get(&(namespace.to_owned(), pool.to_owned()))? {
            Stores::Listed { stores, .. } => Some(stores),
            Stores::Unread { .. } => None,
        }
    }
}

/// Every `K` of `namespace` (or all) whose labels match `selector`;
/// `what` names them in the error.
async fn list<K>(
    client: &kube::Client,
    namespace: Option<&str>,
    selector: &str,
    what: &str,
) -> Result<Vec<K>, ReadError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let (api, scope) = match namespace {
        Some(namespace) => (Api::<K>::namespaced(client.clone(), namespace), format!("namespace {namespace}")),
        None => (Api::<K>::all(client.clone()), "all namespaces".to_owned()),
    };
    let params = if selector.is_empty() { ListParams::default() } else { ListParams::default().labels(selector) };
    let listed = api.list(&params).await.map_err(kube_error(format!("list the {what} of {scope}")))?;
    Ok(listed.items)
}

/// Reads the whole snapshot: one LIST per kind, the cutover record, and
/// one store listing per HAKeeper (`registry` makes its client).
pub async fn read<R: StoreRegistry>(
    client: &kube::Client,
    scope: &Scope,
    registry: &impl Fn(&str) -> R,
) -> Result<Snapshot, ReadError> {
    let namespace = scope.namespace.as_deref();
    let pods = list::<Pod>(client, namespace, labels::POOL_NAME, "pool pods").await?;
    let claims = list::<CNClaim>(client, namespace, "", "CNClaims").await?;
    let claim_sets = list::<CNClaimSet>(client, namespace, "", "CNClaimSets").await?;
    let pools = list::<CNPool>(client, namespace, "", "CNPools").await?;
    let cutover =
        cnpool_controllers::cutover::read(client, &scope.operator_namespace).await.map_err(ReadError::Cutover)?;
    let mut snapshot =
        Snapshot { pods, claims, claim_sets, pools, stores: BTreeMap::new(), cutover, now: Timestamp::now() };
    snapshot.stores = read_stores(client, scope, &snapshot.pools, registry).await;
    Ok(snapshot)
}

/// Each pool's stores, one listing per HAKeeper address.
async fn read_stores<R: StoreRegistry>(
    client: &kube::Client,
    scope: &Scope,
    pools: &[CNPool],
    registry: &impl Fn(&str) -> R,
) -> BTreeMap<(String, String), Stores> {
    let mut listed: BTreeMap<String, Result<Vec<CnStore>, String>> = BTreeMap::new();
    let mut stores = BTreeMap::new();
    for pool in pools {
        let key = (pool.namespace().unwrap_or_default(), pool.name_any());
        let address = match hakeeper_of(client, scope, pool).await {
            Ok(address) => address,
            Err(why) => {
                stores.insert(key, Stores::Unread { hakeeper: None, why });
                continue;
            }
        };
        if !listed.contains_key(&address) {
            let answer = registry(&address).list_stores().await.map_err(|error| error.to_string());
            listed.insert(address.clone(), answer);
        }
        let entry = match listed.get(&address) {
            Some(Ok(found)) => Stores::Listed { hakeeper: address, stores: found.clone() },
            Some(Err(why)) => Stores::Unread { hakeeper: Some(address), why: why.clone() },
            None => continue,
        };
        stores.insert(key, entry);
    }
    stores
}

/// The HAKeeper `host:port` of `pool`, as the operator resolves it
/// (cnpool_controllers::clusters), then mapped by `--hakeeper-address`.
async fn hakeeper_of(client: &kube::Client, scope: &Scope, pool: &CNPool) -> Result<String, String> {
    let resolved = resolve_hakeeper(client, scope, pool).await?;
    Ok(scope.hakeeper_addresses.get(&resolved).cloned().unwrap_or(resolved))
}

async fn resolve_hakeeper(client: &kube::Client, scope: &Scope, pool: &CNPool) -> Result<String, String> {
    match hakeeper_source(pool) {
        HaKeeperSource::Endpoint(endpoint) => Ok(endpoint.to_owned()),
        HaKeeperSource::Default => scope.hakeeper_discovery.clone().ok_or_else(|| {
            "the pool has no spec.deps, so its HAKeeper is the operator's --hakeeper-discovery: pass the same \
             address to --hakeeper-discovery"
                .to_owned()
        }),
        HaKeeperSource::LogSet(namespace, name) => {
            let log_sets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &log_set_resource());
            match log_sets.get_opt(&name).await {
                Ok(Some(log_set)) => log_set_discovery(&log_set.data).ok_or_else(|| {
                    format!("LogSet {namespace}/{name} (spec.deps.logSet) has no status.discovery address yet")
                }),
                Ok(None) => Err(format!("spec.deps.logSet names LogSet {namespace}/{name}, which does not exist")),
                Err(error) => Err(format!("cannot read LogSet {namespace}/{name} (spec.deps.logSet): {error}")),
            }
        }
    }
}

/// `snapshot` with every object a finding names read again by GET (gone
/// when the server no longer has it), the claims the re-read pods'
/// `claimed-by` name, and the stores listed again: the confirmation
/// before a finding is reported.
pub async fn reread<R: StoreRegistry>(
    client: &kube::Client,
    scope: &Scope,
    registry: &impl Fn(&str) -> R,
    snapshot: &Snapshot,
    named: &[crate::ObjectRef],
) -> Result<Snapshot, ReadError> {
    let mut fresh = snapshot.clone();
    let mut claims_named: Vec<(String, String)> = Vec::new();
    for object in named {
        let (namespace, name) = (object.namespace.as_str(), object.name.as_str());
        match object.kind {
            "Pod" => {
                let pod = get::<Pod>(client, namespace, name).await?;
                if let Some(claim) = pod.as_ref().and_then(|pod| pod.labels().get(labels::CLAIMED_BY)) {
                    claims_named.push((namespace.to_owned(), claim.clone()));
                }
                replace(&mut fresh.pods, namespace, name, pod);
            }
            "CNClaim" => claims_named.push((namespace.to_owned(), name.to_owned())),
            "CNClaimSet" => {
                let set = get::<CNClaimSet>(client, namespace, name).await?;
                replace(&mut fresh.claim_sets, namespace, name, set);
            }
            "CNPool" => {
                let pool = get::<CNPool>(client, namespace, name).await?;
                replace(&mut fresh.pools, namespace, name, pool);
            }
            _ => {}
        }
    }
    claims_named.sort();
    claims_named.dedup();
    for (namespace, name) in claims_named {
        let claim = get::<CNClaim>(client, &namespace, &name).await?;
        replace(&mut fresh.claims, &namespace, &name, claim);
    }
    fresh.stores = read_stores(client, scope, &fresh.pools, registry).await;
    fresh.now = Timestamp::now();
    Ok(fresh)
}

async fn get<K>(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<K>, ReadError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let kind = K::kind(&());
    Api::<K>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(kube_error(format!("read {kind} {namespace}/{name}")))
}

/// Puts `object` in place of the one of that name (removing it when gone).
fn replace<K: Resource>(objects: &mut Vec<K>, namespace: &str, name: &str, object: Option<K>) {
    let same = |candidate: &K| {
        candidate.meta().namespace.as_deref() == Some(namespace) && candidate.meta().name.as_deref() == Some(name)
    };
    objects.retain(|candidate| !same(candidate));
    objects.extend(object);
}
