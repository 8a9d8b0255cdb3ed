//! Which object, and which controller: the keys every part of the crate
//! shares (caches, wakers, backoff), in a module that imports none of them.

use kube::{Resource, ResourceExt};

/// Namespace and name of an object.
pub type Key = (String, String);

pub fn key_of<K: Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// Which controller a backoff counter (or a wake) belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Claim,
    Pool,
    ClaimSet,
    Pod,
}
