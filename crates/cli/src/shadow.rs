//! Shadow mode (`cnpool operator --dry-run`): the operator reads and decides
//! as usual, but every Kubernetes write goes out with `dryRun=All` (the API
//! server checks it, answers as if it were stored, and stores nothing) and
//! HAKeeper is only read. Each write it would have made is logged once, so
//! a team can compare cnpool's decisions with what the Go operator does on
//! the same cluster before cutting over.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use cnpool_registry::{CnStore, RegistryError, StoreLabels, StoreRegistry, WorkState, Workload};
use futures::FutureExt;
use http::{Method, Request};
use kube::client::Body;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry as MetricsRegistry;

/// The writes shadow mode held back. Since nothing lands, the same
/// decisions come again on every requeue, with fresh timestamps in them:
/// each write is logged the first time it is seen, writes that differ only
/// in their timestamps counting as the same.
#[derive(Debug, Default)]
pub struct Report {
    /// Each write logged, its timestamps blanked.
    seen: Mutex<BTreeSet<String>>,
    withheld: Counter,
}

impl Report {
    pub fn register(registry: &mut MetricsRegistry) -> Self {
        let report = Self::default();
        registry.register(
            "cnpool_shadow_writes_withheld",
            "Writes shadow mode did not make (Kubernetes and HAKeeper)",
            report.withheld.clone(),
        );
        report
    }

    /// Counts a write to `target` (`METHOD path`) with `body`, and logs it
    /// the first time it is seen.
    fn withheld(&self, target: String, body: &str) {
        self.withheld.inc();
        let key = format!("{target} {}", without_timestamps(body));
        let first = self.seen.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
        if first {
            tracing::info!(write = %format!("{target} {body}"), "shadow mode: would write");
        }
    }

    pub fn log_summary(&self) {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        tracing::info!(distinct = seen.len(), total = self.withheld.get(), "shadow mode: writes withheld");
    }
}

/// `body` with every JSON string that is a timestamp blanked; a body that
/// is not JSON as it is.
fn without_timestamps(body: &str) -> String {
    fn blank(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) if text.parse::<k8s_openapi::jiff::Timestamp>().is_ok() => text.clear(),
            serde_json::Value::Array(items) => items.iter_mut().for_each(blank),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(blank),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(mut json) => {
            blank(&mut json);
            json.to_string()
        }
        Err(_) => body.to_owned(),
    }
}

/// Turns every write into a dry run and reports it; passes everything
/// through when shadow mode is off.
#[derive(Clone, Debug)]
pub struct DryRunLayer {
    report: Option<Arc<Report>>,
}

impl DryRunLayer {
    pub fn new(report: Option<Arc<Report>>) -> Self {
        Self { report }
    }
}

impl<S> tower::Layer<S> for DryRunLayer {
    type Service = DryRun<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DryRun { inner, report: self.report.clone() }
    }
}

#[derive(Clone, Debug)]
pub struct DryRun<S> {
    inner: S,
    report: Option<Arc<Report>>,
}

impl<S> tower::Service<Request<Body>> for DryRun<S>
where
    S: tower::Service<Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let writes = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        match &self.report {
            Some(report) if writes => {
                let request = as_dry_run(request);
                let (target, body) = describe(&request);
                report.withheld(target, &body);
                self.inner.call(request)
            }
            _ => self.inner.call(request),
        }
    }
}

/// The request with `dryRun=All` added to its query.
fn as_dry_run(request: Request<Body>) -> Request<Body> {
    let (mut parts, body) = request.into_parts();
    let path_and_query = match parts.uri.query() {
        Some(query) => format!("{}?{query}&dryRun=All", parts.uri.path()),
        None => format!("{}?dryRun=All", parts.uri.path()),
    };
    let mut uri = parts.uri.clone().into_parts();
    match path_and_query.parse() {
        Ok(parsed) => {
            uri.path_and_query = Some(parsed);
            if let Ok(rebuilt) = http::Uri::from_parts(uri) {
                parts.uri = rebuilt;
            }
        }
        // A path kube built is always a valid path; should one not be,
        // the request still goes out unchanged rather than not at all.
        Err(error) => tracing::warn!(%error, "shadow mode: cannot mark a write as a dry run"),
    }
    Request::from_parts(parts, body)
}

/// `METHOD path` of a write, without the query (where the dry run is), and
/// its body.
fn describe(request: &Request<Body>) -> (String, String) {
    // kube's write bodies are whole in memory, so collecting a clone of one
    // is ready at once.
    let body = request
        .body()
        .try_clone()
        .and_then(|body| body.collect_bytes().now_or_never())
        .and_then(Result::ok)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    (format!("{} {}", request.method(), request.uri().path()), body)
}

/// The registry with its writes held back in shadow mode.
#[derive(Clone, Debug)]
pub struct Registry<R> {
    inner: R,
    report: Option<Arc<Report>>,
}

impl<R> Registry<R> {
    pub fn new(inner: R, report: Option<Arc<Report>>) -> Self {
        Self { inner, report }
    }

    /// Whether the HAKeeper write `call` on store `uuid` (with `detail`) is
    /// held back.
    fn withheld(&self, call: &str, uuid: &str, detail: impl FnOnce() -> String) -> bool {
        match &self.report {
            Some(report) => {
                report.withheld(format!("HAKeeper {call} {uuid}"), &detail());
                true
            }
            None => false,
        }
    }
}

impl<R: StoreRegistry> StoreRegistry for Registry<R> {
    async fn list_stores(&self) -> Result<Vec<CnStore>, RegistryError> {
        self.inner.list_stores().await
    }

    async fn patch_store(&self, uuid: &str, state: WorkState, labels: &StoreLabels) -> Result<(), RegistryError> {
        if self.withheld("PatchCNStore", uuid, || format!("state {state:?} labels {labels:?}")) {
            return Ok(());
        }
        self.inner.patch_store(uuid, state, labels).await
    }

    async fn replace_labels(&self, uuid: &str, labels: &StoreLabels) -> Result<(), RegistryError> {
        if self.withheld("UpdateCNLabel", uuid, || format!("labels {labels:?}")) {
            return Ok(());
        }
        self.inner.replace_labels(uuid, labels).await
    }

    async fn delete_store(&self, uuid: &str) -> Result<(), RegistryError> {
        if self.withheld("DeleteCNStore", uuid, String::new) {
            return Ok(());
        }
        self.inner.delete_store(uuid).await
    }

    async fn workload(&self, store: &CnStore) -> Result<Workload, RegistryError> {
        self.inner.workload(store).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_becomes_a_dry_run_and_keeps_its_query() {
        let request = Request::patch("https://api/api/v1/namespaces/ns/pods/p?fieldManager=cnpool")
            .body(Body::from(b"{}".to_vec()))
            .unwrap();
        let dry = as_dry_run(request);
        assert_eq!(dry.uri().to_string(), "https://api/api/v1/namespaces/ns/pods/p?fieldManager=cnpool&dryRun=All");
        let request = Request::post("https://api/api/v1/namespaces/ns/pods").body(Body::empty()).unwrap();
        assert_eq!(as_dry_run(request).uri().query(), Some("dryRun=All"));
    }

    #[test]
    fn a_write_is_reported_once_whatever_its_timestamps_and_every_write_counted() {
        let report = Report::default();
        let lost = |at: &str| format!(r#"{{"status":{{"phase":"Lost","lastTransitionTime":"{at}"}}}}"#);
        report.withheld("PUT /c/status".into(), &lost("2026-12-01T07:44:11Z"));
        report.withheld("PUT /c/status".into(), &lost("2026-12-01T07:44:21Z"));
        report.withheld("PUT /c/status".into(), r#"{"status":{"phase":"Bound"}}"#);
        report.withheld("DELETE /q".into(), "");
        assert_eq!(report.withheld.get(), 4);
        assert_eq!(report.seen.lock().unwrap().len(), 3, "the second Lost differs only in its time");
    }
}
