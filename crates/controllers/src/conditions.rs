//! Setting a status condition, the same way for claims, pools and claim
//! sets: an unchanged condition is no write, and its transition time moves
//! only when its status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A condition as a controller wants it.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    pub type_: &'a str,
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
}

/// Sets `wanted` among `conditions`; `true` when that changed them. A
/// change of `generation` alone changes nothing: the condition says the
/// same of the new spec.
pub fn set(conditions: &mut Vec<Condition>, wanted: Wanted<'_>, generation: Option<i64>, now: jiff::Timestamp) -> bool {
    match conditions.iter_mut().find(|condition| condition.type_ == wanted.type_) {
        Some(condition)
            if condition.status == wanted.status
                && condition.reason == wanted.reason
                && condition.message == wanted.message =>
        {
            false
        }
        Some(condition) => {
            if condition.status != wanted.status {
                condition.last_transition_time = Time(now);
            }
            condition.status = wanted.status.to_owned();
            condition.reason = wanted.reason.to_owned();
            condition.message = wanted.message.to_owned();
            condition.observed_generation = generation;
            true
        }
        None => {
            conditions.push(Condition {
                type_: wanted.type_.to_owned(),
                status: wanted.status.to_owned(),
                reason: wanted.reason.to_owned(),
                message: wanted.message.to_owned(),
                observed_generation: generation,
                last_transition_time: Time(now),
            });
            true
        }
    }
}

/// The condition `type_` among `conditions`.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|condition| condition.type_ == type_)
}

/// `"True"` or `"False"`.
pub fn status_of(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn the_transition_time_moves_with_the_status_only() {
        let mut conditions = Vec::new();
        let waiting = Wanted { type_: "Bound", status: "False", reason: "PoolScalingOut", message: "a" };
        assert!(set(&mut conditions, waiting, Some(1), at(10)));
        assert!(!set(&mut conditions, waiting, Some(2), at(20)), "the same condition is no write");
        let full = Wanted { reason: "PoolAtMaxPods", message: "b", ..waiting };
        assert!(set(&mut conditions, full, Some(2), at(30)));
        assert_eq!(conditions[0].last_transition_time.0, at(10), "still False");
        assert_eq!((conditions[0].reason.as_str(), conditions[0].observed_generation), ("PoolAtMaxPods", Some(2)));
        assert!(set(&mut conditions, Wanted { status: "True", ..full }, Some(2), at(40)));
        assert_eq!(conditions[0].last_transition_time.0, at(40));
        assert_eq!(conditions.len(), 1);
        assert!(find(&conditions, "Bound").is_some() && find(&conditions, "Ready").is_none());
    }
}
