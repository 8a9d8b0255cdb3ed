//! The creations and deletions a controller issued that its cache does not
//! show yet, per owner.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::key::Key;

/// How long a creation or deletion this process issued is expected to show
/// in the cache; past that it is forgotten and plans read the cache alone.
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// One owner's writes not yet seen in the cache: created object names (with
/// the UID the server gave) and deleted (or retired) object UIDs, each with
/// when it was issued.
#[derive(Default)]
struct Outstanding {
    creations: BTreeMap<String, (String, Instant)>,
    deletions: BTreeMap<String, Instant>,
}

/// The creations and deletions one controller issued for the objects it
/// manages (a pool's pods, a claim set's claims), per owner, until its cache
/// shows them: its plans count them so that a lagging cache makes it
/// neither create nor delete twice.
#[derive(Default)]
pub struct Expected(Mutex<BTreeMap<Key, Outstanding>>);

impl Expected {
    fn all(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Outstanding>> {
        // Every critical section is one step on plain data.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn creation(&self, owner: &Key, name: &str, uid: &str) {
        self.all()
            .entry(owner.clone())
            .or_default()
            .creations
            .insert(name.to_owned(), (uid.to_owned(), Instant::now()));
    }

    /// The cache has shown the object `uid` named `name` of `owner`: its
    /// creation is no longer outstanding, even if the object is gone again
    /// before a plan reads the cache (else the plan would count a pod that
    /// was created and deleted as one still on its way, until the TTL).
    pub fn shown(&self, owner: &Key, name: &str, uid: &str) {
        if let Some(outstanding) = self.all().get_mut(owner)
            && outstanding.creations.get(name).is_some_and(|(created, _)| created == uid)
        {
            outstanding.creations.remove(name);
        }
    }

    pub fn deletion(&self, owner: &Key, uid: &str) {
        self.all().entry(owner.clone()).or_default().deletions.insert(uid.to_owned(), Instant::now());
    }

    /// What `owner`'s plan must still count, once what the cache shows is
    /// dropped: a creation whose name is `seen`, a deletion whose UID is no
    /// longer `shown` as before, and anything older than the TTL.
    pub fn outstanding(
        &self,
        owner: &Key,
        seen: impl Fn(&str) -> bool,
        shown: impl Fn(&str) -> bool,
    ) -> cnpool_core::pool::Expectations {
        let mut all = self.all();
        let Outstanding { creations, deletions } = all.entry(owner.clone()).or_default();
        creations.retain(|name, (_, at)| at.elapsed() < EXPECTATION_TTL && !seen(name));
        deletions.retain(|uid, at| at.elapsed() < EXPECTATION_TTL && shown(uid));
        cnpool_core::pool::Expectations {
            creations: creations.keys().cloned().collect(),
            deletions: deletions.keys().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> Key {
        ("ns".to_owned(), name.to_owned())
    }

    #[tokio::test(start_paused = true)]
    async fn writes_are_counted_until_the_cache_shows_them_or_the_ttl_is_over() {
        let expected = Expected::default();
        expected.creation(&owner("pool"), "pod-1", "uid-1");
        expected.creation(&owner("pool"), "pod-2", "uid-2");
        expected.deletion(&owner("pool"), "uid-3");
        let now = expected.outstanding(&owner("pool"), |name| name == "pod-1", |_| true);
        assert_eq!(Vec::from_iter(now.creations), ["pod-2"], "pod-1 is seen");
        assert_eq!(Vec::from_iter(now.deletions), ["uid-3"], "uid-3 still shows");
        let other = expected.outstanding(&owner("other"), |_| false, |_| true);
        assert!(other.creations.is_empty() && other.deletions.is_empty(), "per owner");
        tokio::time::advance(EXPECTATION_TTL).await;
        let later = expected.outstanding(&owner("pool"), |_| false, |_| true);
        assert!(later.creations.is_empty() && later.deletions.is_empty(), "forgotten past the TTL");
    }

    #[test]
    fn a_creation_the_cache_showed_is_not_outstanding_even_once_the_object_is_gone() {
        let expected = Expected::default();
        expected.creation(&owner("pool"), "pod-1", "uid-new");
        expected.shown(&owner("pool"), "pod-1", "uid-old");
        let outstanding = expected.outstanding(&owner("pool"), |_| false, |_| true);
        assert_eq!(
            Vec::from_iter(outstanding.creations),
            ["pod-1"],
            "an older pod of the same name is not the one created"
        );
        expected.shown(&owner("pool"), "pod-1", "uid-new");
        let outstanding = expected.outstanding(&owner("pool"), |_| false, |_| true);
        assert!(outstanding.creations.is_empty(), "shown, then deleted before the plan looked: not still coming");
    }
}
