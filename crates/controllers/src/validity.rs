//! The `Ready` condition of pools and claim sets, as far as it says whether
//! their spec passes the validation the webhook runs (DESIGN §2, "Inputs").
//! The controllers do not act on an invalid pool or set, and the webhook
//! may not be there to refuse one: `Ready=False` with reason `InvalidSpec`,
//! and one Warning Event per new message, are how the user learns why
//! nothing happens and what to fix. A valid spec leaves `Ready` to what
//! the controller says of the object's health.

use cnpool_api::validation::Invalid;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{self, Wanted, status_of};
use crate::context::Context;

/// The condition type that carries the verdict.
pub const READY_CONDITION: &str = "Ready";
/// The reason of `Ready=False`: the spec fails validation.
pub const INVALID_SPEC: &str = "InvalidSpec";

/// What validation said of a spec, as the `Ready` condition shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub valid: bool,
    /// The reason of `Ready=False` when not valid: [`INVALID_SPEC`], or
    /// why a valid spec cannot be acted on yet (a pool's LogSet not ready).
    pub reason: &'static str,
    pub message: String,
}

impl Verdict {
    /// The verdict on `checked`; `held_back` says what the controller does
    /// not do while the spec is invalid.
    pub fn of(checked: Result<(), Invalid>, held_back: &str) -> Self {
        match checked {
            Ok(()) => Self { valid: true, reason: INVALID_SPEC, message: "the spec is valid".to_owned() },
            Err(invalid) => Self {
                valid: false,
                reason: INVALID_SPEC,
                message: format!("{}. Until it is fixed, {held_back}", summary(&invalid)),
            },
        }
    }

    /// A valid spec that cannot be acted on yet, for `reason`: shown and
    /// announced like an invalid one, under its own reason.
    pub fn blocked(reason: &'static str, message: String) -> Self {
        Self { valid: false, reason, message }
    }

    /// Sets the `Ready` condition in `conditions`: `ready` (its status,
    /// reason and message) when the spec is valid, else `False` with reason
    /// `InvalidSpec`; `true` when that changed them.
    pub fn apply(
        &self,
        conditions: &mut Vec<Condition>,
        ready: (bool, &str, &str),
        generation: Option<i64>,
        now: jiff::Timestamp,
    ) -> bool {
        let (status, reason, message) = match self.valid {
            true => (status_of(ready.0), ready.1, ready.2),
            false => ("False", self.reason, self.message.as_str()),
        };
        let wanted = Wanted { type_: READY_CONDITION, status, reason, message };
        conditions::set(conditions, wanted, generation, now)
    }

    /// Says what changed once the condition was written over `before` (the
    /// `Ready` condition of the version read): one log line per transition,
    /// and one Warning Event per new invalid message, so that a user who
    /// edits a spec from one mistake to another hears of each, and a
    /// reconcile that changes nothing says nothing.
    pub async fn announce<R>(&self, ctx: &Context<R>, object: &ObjectReference, before: Option<&Condition>) {
        let kind = object.kind.as_deref().unwrap_or_default();
        let name = object.name.as_deref().unwrap_or_default();
        let namespace = object.namespace.as_deref().unwrap_or_default();
        let was_invalid = before.is_some_and(|condition| condition.reason == INVALID_SPEC);
        if self.valid {
            if was_invalid {
                tracing::info!(kind, namespace, name, "spec fixed; acting on it again");
            }
            return;
        }
        if before.is_some_and(|condition| condition.reason == self.reason && condition.message == self.message) {
            return;
        }
        tracing::warn!(kind, namespace, name, reason = self.reason, message = %self.message, "not acting on the spec");
        ctx.event(object, true, self.reason, "Validate", self.message.clone());
    }
}

/// The first error, and how many more there are: a condition message is
/// read in one line of `kubectl get -o wide` or `describe`, and fixing the
/// first error shows the next.
fn summary(invalid: &Invalid) -> String {
    match invalid.0.as_slice() {
        [] => "the spec is invalid".to_owned(),
        [only] => only.to_string(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// The `Ready` condition among `conditions`.
pub fn ready_condition(conditions: &[Condition]) -> Option<&Condition> {
    conditions::find(conditions, READY_CONDITION)
}

#[cfg(test)]
mod tests {
    use cnpool_api::validation::FieldError;

    use super::*;

    fn error(field: &str) -> FieldError {
        FieldError { field: field.into(), problem: "is wrong".into(), fix: "write it right".into() }
    }

    #[test]
    fn an_invalid_spec_names_its_first_field_and_counts_the_rest() {
        let one = Verdict::of(Err(Invalid(vec![error("spec.a")])), "nothing is done");
        assert_eq!(one.message, format!("{}. Until it is fixed, nothing is done", error("spec.a")));
        let three = Verdict::of(Err(Invalid(vec![error("spec.a"), error("spec.b"), error("spec.c")])), "x");
        assert!(three.message.starts_with(&format!("{} (and 2 more)", error("spec.a"))), "{}", three.message);
        assert!(!three.message.contains("spec.b"));
    }

    #[test]
    fn an_invalid_spec_wins_over_what_the_controller_says_and_a_valid_one_leaves_ready_to_it() {
        let at = |seconds| jiff::Timestamp::from_second(seconds).unwrap();
        let healthy = (true, "Serving", "all is well");
        let mut conditions = Vec::new();
        let invalid = Verdict::of(Err(Invalid(vec![error("spec.a")])), "x");
        assert!(invalid.apply(&mut conditions, healthy, Some(1), at(10)));
        assert!(!invalid.apply(&mut conditions, healthy, Some(1), at(20)), "the same verdict writes nothing");
        let ready = ready_condition(&conditions).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", INVALID_SPEC));
        assert!(ready.message.contains("spec.a"));
        let valid = Verdict::of(Ok(()), "x");
        assert!(valid.apply(&mut conditions, (false, "HAKeeperUnreachable", "no answer"), Some(2), at(30)));
        let ready = ready_condition(&conditions).unwrap();
        assert_eq!((ready.reason.as_str(), ready.last_transition_time.0), ("HAKeeperUnreachable", at(10)));
        assert!(valid.apply(&mut conditions, healthy, Some(3), at(40)));
        let ready = ready_condition(&conditions).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str(), ready.last_transition_time.0),
            ("True", "Serving", at(40))
        );
        assert_eq!(conditions.len(), 1);
    }
}
