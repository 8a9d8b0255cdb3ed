//! What HAKeeper's store list said when last read, since when each store
//! it lacks has been missing, and whether HAKeeper answers at all.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use cnpool_core::model::{ObservedStore, StoreView};
use cnpool_core::waiting::Reachability;
use cnpool_registry::CnStore;
use jiff::Timestamp;

/// HAKeeper's latest store listing, by store UUID, with when this process
/// first noticed each store missing from it.
#[derive(Default)]
pub struct StoreSnapshot(Mutex<Listing>);

#[derive(Default)]
struct Listing {
    /// Whether the list has been read at least once.
    listed: bool,
    stores: BTreeMap<String, CnStore>,
    /// When each store was first noticed missing.
    missing_since: BTreeMap<String, Timestamp>,
    /// Listings that failed in a row since the last one answered.
    failures: u32,
}

/// Failed listings in a row after which HAKeeper counts as unreachable: a
/// single lost answer is a hiccup, and would rewrite the conditions of
/// every waiting claim and every pool twice.
pub const UNREACHABLE_AFTER: u32 = 3;

impl Listing {
    fn reachability(&self) -> Reachability {
        if self.failures >= UNREACHABLE_AFTER {
            Reachability::Unreachable
        } else if self.listed {
            Reachability::Reachable
        } else {
            Reachability::Unknown
        }
    }
}

impl StoreSnapshot {
    fn listing(&self) -> std::sync::MutexGuard<'_, Listing> {
        // Every critical section is one step on plain data.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registered store `uuid`, as a decision reads it.
    pub fn view(&self, uuid: Option<&str>) -> Option<StoreView> {
        let listing = self.listing();
        uuid.and_then(|uuid| listing.stores.get(uuid)).map(StoreView::from)
    }

    /// The store `uuid` as a claim decision sees it at `now`; `view` holds
    /// the registered store's view ([`Self::view`]), which the answer
    /// borrows; `noted` when the store was noted missing on its pod (see
    /// [`Self::missing_since`]).
    pub fn observed<'a>(
        &self,
        uuid: Option<&str>,
        view: &'a Option<StoreView>,
        noted: Option<Timestamp>,
        now: Timestamp,
    ) -> ObservedStore<'a> {
        let Some(uuid) = uuid else { return ObservedStore::Unobserved };
        if let Some(view) = view {
            return ObservedStore::Registered(view);
        }
        match self.missing_since(uuid, noted, now) {
            Some(since) => ObservedStore::Missing { since },
            None => ObservedStore::Unobserved,
        }
    }

    /// Since when the listed stores have lacked `uuid`; `None` while it is
    /// registered or nothing was listed yet. The first sighting in this
    /// process counts (`now`, the first time it is asked), or `noted`, when
    /// the pod's `cn-store` condition recorded an earlier one: a restart
    /// forgets what memory held, and a store vanishing just before it would
    /// otherwise be missing for the bound twice over.
    pub fn missing_since(&self, uuid: &str, noted: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
        let mut listing = self.listing();
        if !listing.listed || listing.stores.contains_key(uuid) {
            return None;
        }
        let since = listing.missing_since.entry(uuid.to_owned()).or_insert(now);
        *since = noted.map_or(*since, |noted| noted.min(*since));
        Some(*since)
    }

    /// Whether anything was listed yet, and the store `uuid` if listed.
    pub fn get(&self, uuid: &str) -> (bool, Option<CnStore>) {
        let listing = self.listing();
        (listing.listed, listing.stores.get(uuid).cloned())
    }

    /// Whether HAKeeper answers, as the listings tell.
    pub fn reachability(&self) -> Reachability {
        self.listing().reachability()
    }

    /// Notes a listing that failed; returns the reachability it changed
    /// to, if it changed.
    pub fn listing_failed(&self) -> Option<Reachability> {
        let mut listing = self.listing();
        let before = listing.reachability();
        listing.failures = listing.failures.saturating_add(1);
        Some(listing.reachability()).filter(|now| *now != before)
    }

    /// Replaces the snapshot with a fresh list; returns the UUIDs whose
    /// entry changed, and the reachability the listing changed to, if it
    /// changed.
    pub fn replace(&self, listed: Vec<CnStore>) -> (Vec<String>, Option<Reachability>) {
        let mut listing = self.listing();
        let before = listing.reachability();
        listing.failures = 0;
        let fresh: BTreeMap<String, CnStore> = listed.into_iter().map(|store| (store.uuid.clone(), store)).collect();
        let mut changed: Vec<String> =
            listing.stores.keys().filter(|uuid| !fresh.contains_key(*uuid)).cloned().collect();
        changed.extend(
            fresh
                .iter()
                .filter(|(uuid, store)| listing.stores.get(*uuid) != Some(*store))
                .map(|(uuid, _)| uuid.clone()),
        );
        listing.missing_since.retain(|uuid, _| !fresh.contains_key(uuid));
        listing.stores = fresh;
        listing.listed = true;
        (changed, Some(listing.reachability()).filter(|now| *now != before))
    }

    /// Records a store as this process just wrote it.
    pub fn wrote(&self, store: CnStore) {
        let mut listing = self.listing();
        listing.missing_since.remove(&store.uuid);
        listing.stores.insert(store.uuid.clone(), store);
    }

    /// Drops the store `uuid`, which HAKeeper no longer holds.
    pub fn forget(&self, uuid: &str) {
        self.listing().stores.remove(uuid);
    }
}

#[cfg(test)]
mod tests {
    use cnpool_registry::WorkState;
    use jiff::SignedDuration;

    use super::*;

    fn store(uuid: &str, work_state: WorkState) -> CnStore {
        CnStore { uuid: uuid.to_owned(), work_state, ..CnStore::default() }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + SignedDuration::from_secs(seconds)
    }

    #[test]
    fn nothing_is_missing_before_the_first_listing_nor_while_registered() {
        let snapshot = StoreSnapshot::default();
        assert_eq!(snapshot.missing_since("a", None, at(10)), None, "not listed yet: no judgement");
        assert_eq!(snapshot.get("a"), (false, None));
        snapshot.replace(vec![store("a", WorkState::Working)]);
        assert_eq!(snapshot.missing_since("a", None, at(20)), None);
        assert_eq!(snapshot.get("a"), (true, Some(store("a", WorkState::Working))));
    }

    #[test]
    fn missing_since_is_the_earlier_of_the_first_sighting_and_the_noted_time() {
        let snapshot = StoreSnapshot::default();
        snapshot.replace(Vec::new());
        assert_eq!(snapshot.missing_since("a", None, at(100)), Some(at(100)), "first sighting");
        assert_eq!(snapshot.missing_since("a", None, at(150)), Some(at(100)), "a later sighting keeps the first");
        assert_eq!(snapshot.missing_since("a", Some(at(120)), at(160)), Some(at(100)), "a later note changes nothing");
        assert_eq!(snapshot.missing_since("a", Some(at(40)), at(170)), Some(at(40)), "an earlier note wins");
        assert_eq!(snapshot.missing_since("a", None, at(180)), Some(at(40)), "and is kept");
        let view = None;
        assert_eq!(snapshot.observed(Some("a"), &view, None, at(190)), ObservedStore::Missing { since: at(40) });
        assert_eq!(snapshot.observed(None, &view, None, at(190)), ObservedStore::Unobserved);
    }

    #[test]
    fn a_store_listed_or_written_again_is_no_longer_missing_and_starts_over() {
        let snapshot = StoreSnapshot::default();
        snapshot.replace(Vec::new());
        snapshot.missing_since("a", None, at(100));
        snapshot.missing_since("b", None, at(100));
        snapshot.replace(vec![store("a", WorkState::Working)]);
        snapshot.wrote(store("b", WorkState::Draining));
        assert_eq!(snapshot.missing_since("a", None, at(200)), None);
        assert_eq!(snapshot.view(Some("b")).map(|view| view.work_state), Some(WorkState::Draining));
        snapshot.replace(Vec::new());
        assert_eq!(snapshot.missing_since("a", None, at(300)), Some(at(300)), "counted from the new sighting");
        snapshot.wrote(store("c", WorkState::Working));
        snapshot.forget("c");
        assert_eq!(snapshot.get("c"), (true, None));
    }

    #[test]
    fn replace_returns_exactly_the_uuids_whose_entry_changed() {
        let snapshot = StoreSnapshot::default();
        let (first, _) = snapshot.replace(vec![store("a", WorkState::Working), store("b", WorkState::Working)]);
        assert_eq!(first, vec!["a".to_owned(), "b".to_owned()], "all new");
        let (second, _) = snapshot.replace(vec![
            store("a", WorkState::Working),
            store("b", WorkState::Draining),
            store("c", WorkState::Working),
        ]);
        assert_eq!(second, vec!["b".to_owned(), "c".to_owned()], "a is unchanged");
        let (third, _) = snapshot.replace(vec![store("b", WorkState::Draining)]);
        assert_eq!(third, vec!["a".to_owned(), "c".to_owned()], "removals count");
        assert_eq!(snapshot.replace(vec![store("b", WorkState::Draining)]).0, Vec::<String>::new());
    }

    #[test]
    fn hakeeper_is_unreachable_after_failed_listings_in_a_row_and_reachable_at_the_first_answer() {
        let snapshot = StoreSnapshot::default();
        assert_eq!(snapshot.reachability(), Reachability::Unknown, "no judgement before a listing");
        assert_eq!(snapshot.replace(Vec::new()).1, Some(Reachability::Reachable));
        assert_eq!(snapshot.replace(Vec::new()).1, None, "no change, nothing to say");
        for _ in 1..UNREACHABLE_AFTER {
            assert_eq!(snapshot.listing_failed(), None, "a hiccup");
        }
        assert_eq!(snapshot.reachability(), Reachability::Reachable);
        assert_eq!(snapshot.listing_failed(), Some(Reachability::Unreachable));
        assert_eq!(snapshot.listing_failed(), None, "said once");
        assert_eq!(snapshot.replace(Vec::new()).1, Some(Reachability::Reachable));
        assert_eq!(snapshot.listing_failed(), None, "the count starts over");
    }
}
