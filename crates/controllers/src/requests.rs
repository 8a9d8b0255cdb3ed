//! A client layer that counts every Kubernetes API request by verb,
//! resource and answer in [`Metrics`], and tells [`Health`] of each watch
//! the API server answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use crate::Telemetry;
use crate::health::Health;
use crate::metrics::Metrics;

/// What a Kubernetes API request is about, as the API server's own metrics
/// name it.
#[derive(Debug, PartialEq, Eq)]
struct RequestKind {
    verb: &'static str,
    /// `pods`, `cnclaims/status`, ...; `discovery` for the API's discovery
    /// documents (`/api/v1`, `/apis/policy/v1`, ...); the path itself for
    /// any other URL (`/version`).
    resource: String,
    /// The namespace of a namespaced request; none across namespaces.
    namespace: Option<String>,
}

fn classify(method: &http::Method, path: &str, query: Option<&str>) -> RequestKind {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/GROUP/VERSION/...
    let rest = match segments.first() {
        Some(&"api") => Some(segments.get(2..).unwrap_or_default()),
        Some(&"apis") => Some(segments.get(3..).unwrap_or_default()),
        _ => None,
    };
    let (namespace, rest) = match rest {
        Some(["namespaces", namespace, resource, tail @ ..]) => {
            (Some((*namespace).to_owned()), std::iter::once(*resource).chain(tail.iter().copied()).collect())
        }
        Some(other) => (None, other.to_vec()),
        None => (None, Vec::new()),
    };
    let named = rest.len() >= 2;
    let resource = match (rest.as_slice(), segments.first()) {
        ([], Some(&("api" | "apis"))) => "discovery".to_owned(),
        ([], _) => path.to_owned(),
        ([resource], _) | ([resource, _], _) => (*resource).to_owned(),
        ([resource, _, subresource, ..], _) => format!("{resource}/{subresource}"),
    };
    let watching = query.is_some_and(|query| query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1"));
    let verb = match *method {
        http::Method::GET if watching => "watch",
        http::Method::GET if named || rest.is_empty() => "get",
        http::Method::GET => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    };
    RequestKind { verb, resource, namespace }
}

/// A tower layer for kube's client that counts each request in the
/// telemetry's [`Metrics`] and reports answered watches to its [`Health`]:
/// `ClientBuilder::with_layer(&CountRequestsLayer::new(&telemetry))`.
#[derive(Clone, Debug)]
pub struct CountRequestsLayer {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl CountRequestsLayer {
    pub fn new(telemetry: &Telemetry) -> Self {
        Self { metrics: Arc::clone(&telemetry.metrics), health: Arc::clone(&telemetry.health) }
    }
}

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests { inner, metrics: Arc::clone(&self.metrics), health: Arc::clone(&self.health) }
    }
}

/// See [`CountRequestsLayer`].
#[derive(Clone, Debug)]
pub struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

impl<S, B, R> tower::Service<http::Request<B>> for CountRequests<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let kind = classify(request.method(), request.uri().path(), request.uri().query());
        let (metrics, health) = (Arc::clone(&self.metrics), Arc::clone(&self.health));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            if let Ok(response) = &answer {
                let status = response.status();
                if kind.verb == "watch" && status.is_success() {
                    health.watch_answered(kind.namespace.as_deref(), &kind.resource);
                }
                metrics.api_answered(kind.verb, kind.resource, status.as_u16());
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(method: http::Method, uri: &str) -> (&'static str, String, Option<String>) {
        let uri: http::Uri = uri.parse().unwrap();
        let kind = classify(&method, uri.path(), uri.query());
        (kind.verb, kind.resource, kind.namespace)
    }

    #[test]
    fn requests_are_named_as_the_api_server_names_them() {
        use http::Method;
        let ns = || Some("ns".to_owned());
        assert_eq!(kind(Method::GET, "/api/v1/pods?labelSelector=x"), ("list", "pods".into(), None));
        assert_eq!(kind(Method::GET, "/api/v1/pods?watch=true&resourceVersion=5"), ("watch", "pods".into(), None));
        assert_eq!(kind(Method::GET, "/api/v1/namespaces/ns/pods?watch=1"), ("watch", "pods".into(), ns()));
        assert_eq!(kind(Method::GET, "/api/v1/namespaces/ns/pods/p"), ("get", "pods".into(), ns()));
        assert_eq!(kind(Method::PATCH, "/api/v1/namespaces/ns/pods/p"), ("patch", "pods".into(), ns()));
        assert_eq!(
            kind(Method::PUT, "/apis/core.matrixorigin.io/v1alpha1/namespaces/ns/cnclaims/c/status"),
            ("update", "cnclaims/status".into(), ns())
        );
        assert_eq!(
            kind(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events"),
            ("create", "events".into(), ns())
        );
        assert_eq!(kind(Method::DELETE, "/api/v1/namespaces/ns/pods/p"), ("delete", "pods".into(), ns()));
        assert_eq!(kind(Method::GET, "/apis/core.matrixorigin.io/v1alpha1/cnpools"), ("list", "cnpools".into(), None));
        assert_eq!(kind(Method::GET, "/api/v1/namespaces/ns"), ("get", "namespaces".into(), None));
    }

    #[test]
    fn discovery_and_other_urls_are_named_too() {
        use http::Method;
        // What the pool controller asks before it writes a PodDisruptionBudget.
        assert_eq!(kind(Method::GET, "/apis/policy/v1"), ("get", "discovery".into(), None));
        assert_eq!(kind(Method::GET, "/api"), ("get", "discovery".into(), None));
        assert_eq!(kind(Method::GET, "/version"), ("get", "/version".into(), None));
    }
}
