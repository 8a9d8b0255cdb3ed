//! MatrixOne's morpc protocol as cnpool needs it: the HAKeeper calls that
//! register, label, drain and delete CN stores, the CN query service's
//! drain counters and the TN lock service's lock hand-over, plus morpc
//! servers that play a MatrixOne cluster from a
//! [`cnpool_registry::memory::MemoryRegistry`] for tests and `cnpool dev`.
//!
//! The wire format follows reference/hakeeper-protocol.md; see
//! `docs/matrixone.md` for pointing the operator at a cluster and for which
//! MatrixOne versions have which calls.
//!
//! Layers, bottom up: [`frame`] (the frame codec), [`proto`] (the protobuf
//! messages), [`conn`] (a connection multiplexed by request id, and a pool),
//! then the clients [`hakeeper`], [`cache`], [`query`] and [`lock`], the
//! [`registry::MorpcRegistry`] on top of them, and [`server`]. Every call
//! is counted in [`metrics`].

pub mod cache;
pub mod conn;
pub mod error;
pub mod frame;
pub mod hakeeper;
pub mod lock;
pub mod metrics;
pub mod proto;
pub mod query;
pub mod registry;
pub mod server;
mod service;

pub use error::RpcError;
pub use metrics::MorpcMetrics;
pub use registry::{MorpcOptions, MorpcRegistry};
