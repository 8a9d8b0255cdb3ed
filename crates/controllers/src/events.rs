//! The operator's Events (events.k8s.io/v1), whose text always says what
//! last happened.
//!
//! kube-runtime's `Recorder` folds a repeat into the series of the Event
//! with the same type, reason, action and object, whatever its note, and
//! keeps the first note: `kubectl describe cnpool` showed `ScaledOut (x3
//! over 111s) created pods default-0 … default-4` after later scale-outs
//! had created default-5 … default-9. Here the note is part of what makes
//! two Events the same: a repeat of one text is counted in that Event's
//! series, and a new text is an Event of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::mpsc;

/// How long a repeat still counts in an Event's series; later, it is an
/// Event of its own (kube-runtime's recorder keeps the same window).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// What makes two Events the same occurrence repeated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Occurrence {
    warning: bool,
    reason: String,
    action: String,
    /// The object's kind, namespace, name and UID.
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    note: String,
}

/// The Event published for an occurrence, and its series so far.
struct Published {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

/// How often the occurrences whose series window is over are dropped: a
/// sweep at every Event made a burst of 10,000 Bound Events quadratic.
const SWEEP_EVERY: SignedDuration = SignedDuration::from_mins(1);

/// The Events published lately, by occurrence, and when those past the
/// series window were last dropped.
#[derive(Default)]
struct Series {
    by_occurrence: HashMap<Occurrence, Published>,
    swept: Option<Timestamp>,
}

impl Series {
    /// The Event whose series a repeat of `occurrence` at `now` counts in.
    fn repeated(&mut self, occurrence: &Occurrence, now: Timestamp) -> Option<&Published> {
        if self.swept.is_none_or(|swept| now.duration_since(swept) >= SWEEP_EVERY) {
            self.by_occurrence.retain(|_, event| now.duration_since(event.last) < SERIES_WINDOW);
            self.swept = Some(now);
        }
        self.by_occurrence.get(occurrence).filter(|event| now.duration_since(event.last) < SERIES_WINDOW)
    }

    /// `event` is the latest of `occurrence`'s series.
    fn remember(&mut self, occurrence: Occurrence, event: Published) {
        self.by_occurrence.insert(occurrence, event);
    }
}

/// How many Events may wait for the publisher; more are dropped (Events
/// are best effort, as kube-runtime's recorder's are).
const QUEUE_CAPACITY: usize = 4096;

/// One Event waiting to be published, with the time it happened.
struct Pending {
    regarding: ObjectReference,
    warning: bool,
    reason: String,
    action: String,
    note: String,
    at: Timestamp,
}

/// Hands Events to one task that publishes them in order, so that a
/// reconcile never waits for an Event's round trip: the `Bound` Event used
/// to stand between one claim's bind and the next on the same worker.
pub struct EventQueue {
    sender: mpsc::Sender<Pending>,
}

impl EventQueue {
    /// Starts the publishing task on the current runtime; it ends once the
    /// queue is dropped and what it holds is published.
    pub fn start(recorder: Recorder) -> Self {
        let (sender, mut receiver) = mpsc::channel::<Pending>(QUEUE_CAPACITY);
        tokio::spawn(async move {
            while let Some(event) = receiver.recv().await {
                if let Err(error) = recorder.publish(&event).await {
                    tracing::debug!(%error, reason = event.reason, "could not publish an Event");
                }
            }
        });
        Self { sender }
    }

    /// Queues an Event about `regarding` that happened `at`.
    pub fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
        at: Timestamp,
    ) {
        let event = Pending {
            regarding: regarding.clone(),
            warning,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
            at,
        };
        if self.sender.try_send(event).is_err() {
            tracing::debug!(reason, "Event queue full or closed; Event dropped");
        }
    }
}

/// Publishes Events as `controller` (instance `instance`).
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    published: Mutex<Series>,
    /// Makes names unique within one instant (a virtual clock stands still
    /// within a step).
    sequence: AtomicU64,
}

impl Recorder {
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            published: Mutex::default(),
            sequence: AtomicU64::new(0),
        }
    }

    /// Publishes `event`: a repeat of the same note within the series
    /// window counts in its Event's series.
    async fn publish(&self, event: &Pending) -> Result<(), kube::Error> {
        let Pending { regarding, warning, reason, action, note, at: now } = event;
        let (now, note) = (*now, note.clone());
        let occurrence = Occurrence {
            warning: *warning,
            reason: reason.clone(),
            action: action.clone(),
            regarding: (
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
            ),
            note,
        };
        let repeat = {
            let mut published = self.published.lock().unwrap_or_else(PoisonError::into_inner);
            let repeated = published.repeated(&occurrence, now);
            repeated.map(|event| (event.namespace.clone(), event.name.clone(), event.count + 1))
        };
        if let Some((namespace, name, count)) = repeat {
            let series = json!({"series": EventSeries { count, last_observed_time: MicroTime(now) }});
            let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            match events.patch(&name, &PatchParams::default(), &Patch::Merge(&series)).await {
                Ok(_) => {
                    self.remember(occurrence, Published { namespace, name, count, last: now });
                    return Ok(());
                }
                // Gone (expired, or deleted by someone): a new Event.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let event = self.event(regarding, &occurrence, now);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let name = event.metadata.name.clone().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        self.remember(occurrence, Published { namespace, name, count: 1, last: now });
        Ok(())
    }

    fn remember(&self, occurrence: Occurrence, event: Published) {
        self.published.lock().unwrap_or_else(PoisonError::into_inner).remember(occurrence, event);
    }

    fn event(&self, regarding: &ObjectReference, occurrence: &Occurrence, now: Timestamp) -> Event {
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let object = regarding.name.as_deref().unwrap_or(&self.controller);
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}.{sequence:x}", now.as_nanosecond())),
                // A cluster-scoped object's Events go to `default`, as kubectl looks for them.
                namespace: Some(regarding.namespace.clone().unwrap_or_else(|| "default".to_owned())),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if occurrence.warning { "Warning" } else { "Normal" }.to_owned()),
            reason: Some(occurrence.reason.clone()),
            action: Some(occurrence.action.clone()),
            note: Some(occurrence.note.clone()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occurrence(note: &str) -> Occurrence {
        Occurrence {
            warning: false,
            reason: "Bound".into(),
            action: "Bind".into(),
            regarding: (Some("CNClaim".into()), Some("tenants".into()), Some("a".into()), Some("uid-a".into())),
            note: note.into(),
        }
    }

    fn published(last: Timestamp) -> Published {
        Published { namespace: "tenants".into(), name: "a.1".into(), count: 1, last }
    }

    #[test]
    fn a_repeat_counts_in_the_series_within_its_window_only_however_lately_the_map_was_swept() {
        let start = Timestamp::UNIX_EPOCH;
        let mut series = Series::default();
        // Swept at start, so the next sweep is a minute away.
        assert!(series.repeated(&occurrence("bound to pod-0"), start).is_none());
        series.remember(occurrence("bound to pod-0"), published(start));
        let later = |seconds: i64| start + SignedDuration::from_secs(seconds);
        assert!(series.repeated(&occurrence("bound to pod-0"), later(30)).is_some());
        assert!(series.repeated(&occurrence("bound to pod-1"), later(30)).is_none(), "another note, another Event");
        // Swept at 5:59 (kept), then past the window before the next sweep.
        assert!(series.repeated(&occurrence("bound to pod-0"), later(359)).is_some());
        assert!(series.repeated(&occurrence("bound to pod-0"), later(361)).is_none());
        assert!(series.repeated(&occurrence("bound to pod-0"), later(420)).is_none());
        assert!(series.by_occurrence.is_empty(), "the sweep at 7:00 dropped it");
    }
}
