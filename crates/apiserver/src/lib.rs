//! An in-memory Kubernetes API server with the real one's semantics.
//!
//! It serves the parts of the Kubernetes API that cnpool, kube-rs and
//! kubectl use — one cluster-wide resourceVersion, 409 on stale writes,
//! watches that resume from a version (410 when it is too old), finalizers,
//! status and scale subresources, JSON and merge patches (a JSON patch
//! `test` of null on an absent path succeeds, as on the real server),
//! owner-reference garbage collection, CRDs that serve their resources with
//! defaults, pruning and validation, discovery and the Table responses of
//! `kubectl get` — so that tests, the simulator and `cnpool dev` run the
//! operator against something that behaves like a cluster.
//!
//! Two ways in: [`ApiServer::client`] gives a `kube::Client` that calls the
//! server in-process (no sockets), and [`ApiServer::serve`] serves HTTP for
//! kubectl. Where it knowingly differs from kube-apiserver 1.20, see
//! `docs/embedded-apiserver.md`.

mod clock;
mod discovery;
mod error;
mod events;
mod eviction;
mod meta;
mod patch;
mod resources;
mod routes;
mod schema;
mod selectors;
mod store;
mod table;

use std::sync::Arc;

pub use clock::{Clock, SystemClock};
pub use error::ApiError;
pub use resources::StorageKey;
pub use store::{Event, EventType};

/// Options of a new server.
pub struct Builder {
    seed: u64,
    history: usize,
    clock: Arc<dyn Clock>,
}

impl Builder {
    /// Seeds UIDs and `generateName` suffixes, so that a run is repeatable.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How many committed writes watches can resume from; older versions
    /// get 410 Expired. The real server's watch cache is of this order.
    pub fn history(mut self, writes: usize) -> Self {
        self.history = writes;
        self
    }

    /// Where timestamps come from (a virtual clock in the simulator).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn build(self) -> ApiServer {
        ApiServer { store: Arc::new(store::Store::new(self.seed, self.history, self.clock)) }
    }
}

/// A handle on one in-memory cluster; clones share it.
#[derive(Clone)]
pub struct ApiServer {
    store: Arc<store::Store>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl ApiServer {
    pub fn builder() -> Builder {
        Builder { seed: 0x636e_706f_6f6c, history: 10_000, clock: Arc::new(SystemClock) }
    }

    /// The server as an axum router (a `tower::Service`).
    pub fn router(&self) -> axum::Router {
        let server = self.clone();
        axum::Router::new().fallback(move |request: ::http::Request<axum::body::Body>| {
            let server = server.clone();
            async move { routes::handle(server, request).await }
        })
    }

    /// A client that calls this server in-process, without sockets.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.router(), "default")
    }

    /// Serves HTTP on `listener` until the future is dropped.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }

    /// Every write committed from now on, in commit order.
    pub fn commits(&self) -> tokio::sync::broadcast::Receiver<Arc<Event>> {
        self.store.subscribe()
    }

    /// The current cluster-wide resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store.revision()
    }
}
