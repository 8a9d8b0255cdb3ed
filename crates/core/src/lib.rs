//! cnpool's decision core: pure functions from what the controllers
//! observed to what they should do next.
//!
//! Nothing here performs I/O, reads a clock, draws random numbers or awaits:
//! the current time is an input, and every answer is a plain value the
//! caller executes as guarded writes (DESIGN §2, "Guarded transitions").
//! The inputs are the core's own views ([`model`]), read from Kubernetes
//! objects and HAKeeper by [`convert`], so that the decisions are tested
//! alone, with plain tests and proptest properties.
//!
//! - [`candidates`]: which pods a claim may acquire, best first;
//! - [`claim`]: a claim's next step (bind, sync, finalize, legacy adoption);
//! - [`pool`]: which pods a pool creates, retires and deletes;
//! - [`claim_set`]: which member claims a claim set creates and deletes;
//! - [`store`]: a pod's next phase and the HAKeeper writes its phase implies;
//! - [`binding`]: the annotation a bound pod records its claim's wishes in;
//! - [`waiting`]: why a claim waits, in words a person can act on.

#![warn(missing_docs)]

pub mod binding;
pub mod candidates;
pub mod claim;
pub mod claim_set;
pub mod convert;
pub mod model;
pub mod pool;
pub mod store;
pub mod waiting;

#[cfg(test)]
mod testing;
