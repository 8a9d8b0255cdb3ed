//! The HTTP side: one path per resource, served over TLS.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview};

use crate::review::{Refusal, Request, answer};
use crate::{OperatorIdentity, review_claim, review_claim_set, review_pod, review_pool};

/// Where the ValidatingWebhookConfiguration sends pod reviews.
pub const PODS_PATH: &str = "/validate-pods";
/// Where it sends CNClaim reviews.
pub const CLAIMS_PATH: &str = "/validate-cnclaims";
/// Where it sends CNClaimSet reviews.
pub const CLAIM_SETS_PATH: &str = "/validate-cnclaimsets";
/// Where it sends CNPool reviews.
pub const POOLS_PATH: &str = "/validate-cnpools";

/// The webhook's routes. Each path reviews one kind, so that the webhook
/// configuration's rules and the code line up one to one; a review of
/// another kind sent to a path is refused with a message saying so.
pub fn router(operator: OperatorIdentity) -> Router {
    Router::new()
        .route(PODS_PATH, post(pods))
        .route(CLAIMS_PATH, post(claims))
        .route(CLAIM_SETS_PATH, post(claim_sets))
        .route(POOLS_PATH, post(pools))
        .with_state(Arc::new(operator))
}

type Review = AdmissionReview<DynamicObject>;

async fn pods(Json(review): Json<Review>) -> Json<Review> {
    respond(review, "Pod", PODS_PATH, review_pod)
}

async fn claims(State(operator): State<Arc<OperatorIdentity>>, Json(review): Json<Review>) -> Json<Review> {
    respond(review, "CNClaim", CLAIMS_PATH, |request| review_claim(&operator, request))
}

async fn claim_sets(Json(review): Json<Review>) -> Json<Review> {
    respond(review, "CNClaimSet", CLAIM_SETS_PATH, review_claim_set)
}

async fn pools(Json(review): Json<Review>) -> Json<Review> {
    respond(review, "CNPool", POOLS_PATH, review_pool)
}

fn respond(review: Review, kind: &str, path: &str, decide: impl FnOnce(&Request) -> AdmissionResponse) -> Json<Review> {
    let request: Request = match review.try_into() {
        Ok(request) => request,
        Err(_) => return Json(AdmissionResponse::invalid("request: missing from the AdmissionReview").into_review()),
    };
    let response = if request.kind.kind == kind {
        decide(&request)
    } else {
        let message = format!(
            "request.kind: {path} reviews {kind}, not {other}; fix the rules of the ValidatingWebhookConfiguration \
             that sent it (deploy/webhook/)",
            other = request.kind.kind,
        );
        answer(&request, Err(Refusal::Unreadable(message)))
    };
    if response.allowed {
        tracing::debug!(kind, name = request.name, operation = ?request.operation, "admitted");
    } else {
        // An absent user name is left out, not logged as `None`.
        let user = request.user_info.username.as_deref();
        tracing::info!(kind, name = request.name, operation = ?request.operation, user, reason = response.result.message,
            "refused");
    }
    Json(response.into_review())
}

/// The serving certificate and its key, as PEM files (what a cert-manager
/// Certificate's Secret holds as `tls.crt` and `tls.key`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "reading the serving certificate {cert} and key {key}: {source}; give a PEM certificate chain and its PEM \
         private key (docs/webhook.md says how to make them)"
    )]
    Tls { cert: PathBuf, key: PathBuf, source: io::Error },
    #[error("serving the webhook on {addr}: {source}")]
    Serve { addr: String, source: io::Error },
}

/// Serves `app` over TLS on `listener` until `shutdown` completes, then
/// lets requests in flight finish (for at most five seconds).
///
/// The certificate and key are read at start, where a bad file is an
/// error, and re-read every `reload_every` after that, so that a renewed
/// certificate (cert-manager rewrites the mounted Secret) is served without
/// a restart. A failed re-read keeps the certificate being served and logs a
/// warning: a half-written pair must not take the webhook down.
pub async fn serve_tls(
    listener: std::net::TcpListener,
    app: Router,
    tls: TlsFiles,
    reload_every: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_or_else(|error| error.to_string(), |addr| addr.to_string());
    let config = RustlsConfig::from_pem_file(&tls.cert, &tls.key).await.map_err(|source| ServeError::Tls {
        cert: tls.cert.clone(),
        key: tls.key.clone(),
        source,
    })?;
    let handle: Handle<SocketAddr> = Handle::new();
    let reloader = tokio::spawn(reload(config.clone(), tls, reload_every));
    let stopper = tokio::spawn({
        let handle = handle.clone();
        async move {
            shutdown.await;
            handle.graceful_shutdown(Some(Duration::from_secs(5)));
        }
    });
    let served = match axum_server::from_tcp_rustls(listener, config) {
        Ok(server) => server.handle(handle).serve(app.into_make_service()).await,
        Err(error) => Err(error),
    };
    reloader.abort();
    stopper.abort();
    served.map_err(|source| ServeError::Serve { addr, source })
}

async fn reload(config: RustlsConfig, tls: TlsFiles, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if let Err(error) = config.reload_from_pem_file(&tls.cert, &tls.key).await {
            tracing::warn!(cert = %tls.cert.display(), key = %tls.key.display(), %error,
                "could not re-read the webhook's serving certificate; still serving the previous one");
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::body::{Body, to_bytes};
    use axum::http::{Request as HttpRequest, StatusCode};
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;
    use crate::review::tests::review_json;

    async fn post_review(path: &str, review: Value) -> Value {
        let request = HttpRequest::post(path)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&review).unwrap()))
            .unwrap();
        let response = router(OperatorIdentity::username("op")).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        serde_json::from_slice(&to_bytes(response.into_body(), 1 << 20).await.unwrap()).unwrap()
    }

    fn pod(claimed_by: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns",
                            "labels": {"pool.matrixorigin.io/claimed-by": claimed_by}}, "spec": {}})
    }

    #[tokio::test]
    async fn a_refusal_comes_back_as_an_admission_review_with_the_request_uid_and_message() {
        let review = review_json("Pod", "UPDATE", "p", Some(pod("other")), Some(pod("a")), "u");
        let answer = post_review(PODS_PATH, review).await;
        // The shape kube-apiserver reads: apiVersion/kind of the request,
        // response.uid echoed, allowed false, status with code and message.
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        let response = &answer["response"];
        assert_eq!(response["uid"], "0df28fbd-5f5f-11e8-bc74-36e6bb280816");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 403);
        assert_eq!(response["status"]["reason"], "Forbidden");
        let message = response["status"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(
                "metadata.labels[pool.matrixorigin.io/claimed-by]: cannot change from \"a\" to \"other\" on pod p;"
            ),
            "{message}"
        );
    }

    #[tokio::test]
    async fn an_admitted_request_comes_back_allowed() {
        let review = review_json("Pod", "UPDATE", "p", Some(pod("a")), Some(pod("a")), "u");
        let response = &post_review(PODS_PATH, review).await["response"];
        assert_eq!(response["uid"], "0df28fbd-5f5f-11e8-bc74-36e6bb280816");
        assert_eq!(response["allowed"], true);
    }

    #[tokio::test]
    async fn each_path_reviews_its_own_kind() {
        let pool = json!({"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNPool",
                          "metadata": {"name": "pool-a", "namespace": "ns"},
                          "spec": {"template": {"image": "matrixorigin/matrixone:1.2.0"},
                                   "strategy": {"scaleStrategy": {"maxIdle": 2, "maxPods": 1}}}});
        let review = review_json("CNPool", "CREATE", "pool-a", Some(pool), None, "u");
        let refused = post_review(POOLS_PATH, review.clone()).await;
        assert_eq!(refused["response"]["status"]["code"], 422);
        assert!(
            refused["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .starts_with("spec.strategy.scaleStrategy.maxPods: 1 is less than maxIdle (2);")
        );

        let misrouted = post_review(CLAIMS_PATH, review).await;
        assert_eq!(misrouted["response"]["allowed"], false);
        assert_eq!(
            misrouted["response"]["status"]["message"],
            "request.kind: /validate-cnclaims reviews CNClaim, not CNPool; fix the rules of the \
             ValidatingWebhookConfiguration that sent it (deploy/webhook/)"
        );

        let claim = json!({"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
                           "metadata": {"name": "c", "namespace": "ns"},
                           "spec": {"podName": "pool-a-2", "selector": {}}});
        let old = json!({"apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
                         "metadata": {"name": "c", "namespace": "ns"}, "spec": {"selector": {}}});
        let by_operator = review_json("CNClaim", "UPDATE", "c", Some(claim.clone()), Some(old.clone()), "op");
        assert_eq!(post_review(CLAIMS_PATH, by_operator).await["response"]["allowed"], true);
        let by_user = review_json("CNClaim", "UPDATE", "c", Some(claim), Some(old), "bob");
        assert_eq!(post_review(CLAIMS_PATH, by_user).await["response"]["allowed"], false);
    }

    #[tokio::test]
    async fn a_body_that_is_no_admission_review_is_a_client_error() {
        let request = HttpRequest::post(PODS_PATH)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"kind": "Pod"}"#))
            .unwrap();
        let response = router(OperatorIdentity::username("op")).oneshot(request).await.unwrap();
        assert!(response.status().is_client_error(), "{}", response.status());
    }
}
