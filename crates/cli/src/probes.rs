//! The operator's plain-HTTP endpoints: `/healthz` (no controller is
//! wedged: see `cnpool_controllers::health`), `/readyz` (its caches are
//! listed, or it stands by for the leader lease, ready to take over) and
//! `/metrics` (Prometheus text format).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State as Shared;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use cnpool_controllers::Telemetry;
use prometheus_client::registry::Registry;

#[derive(Clone)]
pub struct State {
    registry: Arc<Registry>,
    telemetry: Telemetry,
    /// True while this replica waits for the leader lease.
    standing_by: Arc<AtomicBool>,
    /// Whether `/healthz` last failed, to log its changes only.
    wedged: Arc<AtomicBool>,
}

impl State {
    pub fn new(registry: Registry, telemetry: Telemetry, standing_by: bool) -> Self {
        Self {
            registry: Arc::new(registry),
            telemetry,
            standing_by: Arc::new(AtomicBool::new(standing_by)),
            wedged: Arc::default(),
        }
    }

    pub fn set_standing_by(&self, standing_by: bool) {
        self.standing_by.store(standing_by, Ordering::Relaxed);
    }
}

pub fn router(state: State) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// 503 while a controller is wedged, naming it and why; a replica standing
/// by runs no controllers, and its webhook and lease keep it alive.
async fn healthz(Shared(state): Shared<State>) -> (StatusCode, String) {
    match state.telemetry.health.check() {
        Ok(()) => {
            if state.wedged.swap(false, Ordering::Relaxed) {
                tracing::info!("health check passes again");
            }
            (StatusCode::OK, "ok\n".to_owned())
        }
        Err(wedged) => {
            if !state.wedged.swap(true, Ordering::Relaxed) {
                tracing::warn!(%wedged, "health check fails: a controller is wedged");
            }
            (StatusCode::SERVICE_UNAVAILABLE, format!("{wedged}\n"))
        }
    }
}

async fn readyz(Shared(state): Shared<State>) -> (StatusCode, &'static str) {
    if state.standing_by.load(Ordering::Relaxed) {
        (StatusCode::OK, "standing by for the leader lease\n")
    } else if state.telemetry.ready() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the controllers' caches are not listed yet\n")
    }
}

async fn metrics(Shared(state): Shared<State>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        Ok(()) => {
            let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            (StatusCode::OK, [(header::CONTENT_TYPE, kind)], text)
        }
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], format!("{error}\n")),
    }
}

/// Serves [`router`] on `listener` until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: State,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let address = listener.local_addr()?;
    tracing::info!(%address, "health and metrics endpoints serving");
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;

    async fn get(state: &State, path: &str) -> (StatusCode, String) {
        let request = axum::http::Request::get(path).body(Body::empty()).unwrap_or_default();
        let Ok(response) = router(state.clone()).oneshot(request).await;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap_or_default();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_while_a_controller_is_wedged_and_passes_once_it_is_gone() {
        let telemetry = Telemetry::default();
        let state = State::new(Registry::default(), telemetry.clone(), false);
        let pools = telemetry.health.register("CNPool", None, "cnpools".into(), Arc::clone(&telemetry.metrics));
        assert_eq!(get(&state, "/healthz").await, (StatusCode::OK, "ok\n".to_owned()));

        tokio::time::advance(telemetry.health.stall_timeout() + Duration::from_secs(1)).await;
        let (status, body) = get(&state, "/healthz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("the CNPool controller: its watch of cnpools has delivered nothing"), "{body}");

        // Controllers that stopped (a lost lease) are no longer judged.
        drop(pools);
        assert_eq!(get(&state, "/healthz").await.0, StatusCode::OK);
    }
}
