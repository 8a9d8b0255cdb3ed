//! Counts of the morpc calls cnpool makes, per method: HAKeeper's
//! (`GetClusterDetails`, `PatchCNStore`, `UpdateCNLabel`, `DeleteCNStore`),
//! the CN query services' (`ShowProcessList`, `GetPipelineInfo`,
//! `GetReplicaCount`) and the TN lock service's (`SetRestartService`,
//! `RemainTxnInService`, `CanRestartService`).
//!
//! A call is counted once, when it ends, however many attempts it took
//! within its deadline (HAKeeper's rediscovery included): an error is a call
//! that failed for its caller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use cnpool_registry::RegistryError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodErrorLabels {
    method: &'static str,
    error: &'static str,
}

/// The counters; cloning shares them. `Default` gives unregistered ones.
#[derive(Clone, Debug, Default)]
pub struct MorpcMetrics {
    requests: Family<MethodLabels, Counter>,
    errors: Family<MethodErrorLabels, Counter>,
}

impl MorpcMetrics {
    /// New counters, registered as `cnpool_morpc_requests_total{method}` and
    /// `cnpool_morpc_request_errors_total{method,error}`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        let registry = registry.sub_registry_with_prefix("cnpool_morpc");
        registry.register(
            "requests",
            "Calls to HAKeeper and the CN and TN services over morpc, per method",
            metrics.requests.clone(),
        );
        registry.register(
            "request_errors",
            "Calls over morpc that failed, per method and kind of error (no_hakeeper, timeout, connection, \
             remote, protocol, store_not_found)",
            metrics.errors.clone(),
        );
        metrics
    }

    /// The call `method` ended with `result`.
    pub(crate) fn answered<T>(&self, method: &'static str, result: &Result<T, RegistryError>) {
        self.requests.get_or_create(&MethodLabels { method }).inc();
        if let Err(error) = result {
            self.errors.get_or_create(&MethodErrorLabels { method, error: error.metric_label() }).inc();
        }
    }

    /// Calls of `method` so far.
    pub fn requests(&self, method: &'static str) -> u64 {
        self.requests.get_or_create(&MethodLabels { method }).get()
    }

    /// Failed calls of `method` so far, of the kind `error`
    /// ([`RegistryError::metric_label`]).
    pub fn errors(&self, method: &'static str, error: &'static str) -> u64 {
        self.errors.get_or_create(&MethodErrorLabels { method, error }).get()
    }
}
