//! `cnpool sim`: the deterministic simulator of DESIGN §4.
//!
//! One seed fixes a whole run of cnpool's production controllers (their
//! wiring and reconcile functions, driven by [`driver`]'s deterministic
//! scheduler), or of [`legacy`]'s model of the Go operator, against the
//! embedded API server, the simulated node side and HAKeeper, the scenario's control plane (with [`hostile`] specs) and injected faults ([`gate`] for
//! the API, [`run`] for the rest), on tokio's paused clock. [`checker`]
//! checks the invariants of DESIGN §3 on every committed write; [`ledger`]
//! keeps the trace and the counts; [`summary`] adds seeds up; [`report`]
//! draws one seed as an HTML timeline.

pub mod checker;
pub mod driver;
pub mod gate;
pub mod hostile;
pub mod ledger;
pub mod legacy;
pub mod report;
pub mod run;
pub mod scenario;
pub mod summary;

pub use run::{Controllers, Keep, Observer, Outcome, RunError, run, run_observed};
pub use scenario::Scenario;
