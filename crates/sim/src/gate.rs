//! The way every simulated client reaches the embedded API server: a
//! `tower` service in front of its router that counts the operators'
//! traffic and injects the API faults of DESIGN §4 — conflicts, server
//! errors, timeouts whose write did or did not happen, informer lag and
//! dropped watches (410 Gone, which forces a relist).

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use axum::body::{Body as AxumBody, HttpBody};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use http::{Method, Request, Response, StatusCode};
use tokio::time::Instant;
use tower::ServiceExt;

use crate::ledger::{Actor, Fault, Ledger, PodWrite, Reach};
use crate::scenario::FaultRates;

/// How long a timed-out request hangs before the client gives up.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Whether faults are injected now (only while the control plane acts).
pub struct FaultSwitch {
    rates: FaultRates,
    rng: Mutex<fastrand::Rng>,
    on: std::sync::atomic::AtomicBool,
}

impl FaultSwitch {
    pub fn new(rates: FaultRates, seed: u64) -> Self {
        Self { rates, rng: Mutex::new(fastrand::Rng::with_seed(seed)), on: true.into() }
    }

    pub fn stop(&self) {
        self.on.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn is_on(&self) -> bool {
        self.on.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn rates(&self) -> &FaultRates {
        &self.rates
    }

    /// Runs `draw` on the run's fault generator.
    pub fn draw<T>(&self, draw: impl FnOnce(&mut fastrand::Rng) -> T) -> T {
        draw(&mut self.rng.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn chance(&self, probability: f64) -> bool {
        self.is_on() && probability > 0.0 && self.draw(|rng| rng.f64()) < probability
    }
}

/// One client's way to the server.
#[derive(Clone)]
pub struct Gate {
    router: axum::Router,
    actor: Actor,
    faults: Arc<FaultSwitch>,
    ledger: Arc<Ledger>,
}

/// A kube client for `actor` on `router`.
pub fn client(router: axum::Router, actor: Actor, faults: Arc<FaultSwitch>, ledger: Arc<Ledger>) -> kube::Client {
    kube::Client::new(Gate { router, actor, faults, ledger }, "default")
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<AxumBody> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    let mut response = Response::new(AxumBody::from(body.to_string()));
    *response.status_mut() = code;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// What the gate does with one operator request.
enum Verdict {
    Pass,
    Refuse(Fault),
    /// Applied, but the answer is lost.
    ApplyThenTimeout,
}

impl Gate {
    fn verdict(&self, write: bool) -> Verdict {
        let rates = self.faults.rates();
        if write && self.faults.chance(rates.conflict_per_write) {
            Verdict::Refuse(Fault::Conflict)
        } else if self.faults.chance(rates.server_error_per_request) {
            Verdict::Refuse(Fault::ServerError)
        } else if write && self.faults.chance(rates.timeout_lost_per_write) {
            Verdict::Refuse(Fault::TimeoutLost)
        } else if write && self.faults.chance(rates.timeout_applied_per_write) {
            Verdict::ApplyThenTimeout
        } else {
            Verdict::Pass
        }
    }
}

impl tower::Service<Request<kube::client::Body>> for Gate {
    type Response = Response<AxumBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<AxumBody>, Infallible>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<kube::client::Body>) -> Self::Future {
        let router = self.router.clone();
        let Actor::Operator(replica) = self.actor else {
            let (actor, ledger) = (self.actor, self.ledger.clone());
            return async move { forward(router, request, actor, &ledger).await }.boxed();
        };
        let actor = self.actor;
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let watch = request.uri().query().is_some_and(|query| query.split('&').any(|pair| pair == "watch=true"));
        let write = method != Method::GET;
        let event = path.contains("/events");
        self.ledger.operator_request(write, event);
        self.ledger.operator_bytes(body_size(request.body()).unwrap_or_default(), 0);
        let (ledger, faults) = (self.ledger.clone(), self.faults.clone());
        if watch {
            return async move {
                let response = router.oneshot(request).await?;
                let response = lagging_watch(response, &path, replica, faults, ledger.clone());
                Ok(counted(response, ledger))
            }
            .boxed();
        }
        let verdict = if event { Verdict::Pass } else { self.verdict(write) };
        let answer_ledger = ledger.clone();
        let answer = async move {
            match verdict {
                Verdict::Pass => {
                    let response = forward(router, request, actor, &ledger).await?;
                    if matches!(response.status(), StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY) {
                        ledger.operator_conflict();
                    }
                    Ok(response)
                }
                Verdict::Refuse(fault) => {
                    ledger.fault(fault, Reach::of_request(&path), format_args!("operator-{replica} {method} {path}"));
                    Ok(match fault {
                        Fault::Conflict => {
                            ledger.operator_conflict();
                            status(StatusCode::CONFLICT, "Conflict", "injected: the object has been modified")
                        }
                        Fault::TimeoutLost => {
                            tokio::time::sleep(TIMEOUT).await;
                            status(StatusCode::GATEWAY_TIMEOUT, "Timeout", "injected: timed out before storage")
                        }
                        _ => status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "injected: unavailable"),
                    })
                }
                Verdict::ApplyThenTimeout => {
                    let response = forward(router, request, actor, &ledger).await?;
                    ledger.fault(
                        Fault::TimeoutApplied,
                        Reach::of_request(&path),
                        format_args!("operator-{replica} {method} {path} -> {}", response.status().as_u16()),
                    );
                    tokio::time::sleep(TIMEOUT).await;
                    Ok(status(StatusCode::GATEWAY_TIMEOUT, "Timeout", "injected: timed out after storage"))
                }
            }
        };
        answer.map(move |answer| answer.map(|response| counted(response, answer_ledger))).boxed()
    }
}

/// Sends `request` to the server. A write to a pod is recorded in the
/// ledger under the resourceVersion it committed, with its body, so that
/// the checker can tell which write moved a pod's owner labels (I8). It is
/// recorded as soon as the server answers, in the same poll: the checker
/// reads commits on another task, and virtual time does not move on until
/// both have run.
async fn forward(
    router: axum::Router,
    request: Request<kube::client::Body>,
    actor: Actor,
    ledger: &Ledger,
) -> Result<Response<AxumBody>, Infallible> {
    let pod_write = matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH)
        && request.uri().path().split('/').nth(5) == Some("pods");
    if !pod_write {
        return router.oneshot(request).await;
    }
    let (parts, body) = request.into_parts();
    let sent = body.collect_bytes().await.unwrap_or_default();
    let content_type = parts.headers.get(http::header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    let write = PodWrite {
        actor,
        method: parts.method.to_string(),
        content_type: content_type.unwrap_or_default().to_owned(),
        body: serde_json::from_slice(&sent).unwrap_or(serde_json::Value::Null),
    };
    let response = router.oneshot(Request::from_parts(parts, kube::client::Body::from(sent))).await?;
    if !response.status().is_success() {
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let answer = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let version = serde_json::from_slice::<serde_json::Value>(&answer).ok().and_then(|object| {
        object.pointer("/metadata/resourceVersion").and_then(serde_json::Value::as_str)?.parse::<u64>().ok()
    });
    if let Some(version) = version {
        ledger.pod_write(version, write);
    }
    Ok(Response::from_parts(parts, AxumBody::from(answer)))
}

/// A body's length, when known before it is read.
fn body_size(body: &impl HttpBody) -> Option<u64> {
    body.size_hint().exact()
}

/// `response`, its body's bytes counted as the operator's traffic: at once
/// when its length is known, else (a watch) as the client reads it.
fn counted(response: Response<AxumBody>, ledger: Arc<Ledger>) -> Response<AxumBody> {
    if let Some(size) = body_size(response.body()) {
        ledger.operator_bytes(0, size);
        return response;
    }
    let (parts, body) = response.into_parts();
    let frames = body.into_data_stream().inspect(move |frame| {
        if let Ok(bytes) = frame {
            ledger.operator_bytes(0, bytes.len() as u64);
        }
    });
    Response::from_parts(parts, AxumBody::from_stream(frames))
}

/// The 410 a real server sends in a watch whose version has been compacted.
const GONE: &str = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\
\"status\":\"Failure\",\"message\":\"injected: too old resource version\",\"reason\":\"Expired\",\"code\":410}}\n";

/// Delivers a watch's events `lag` after the server sent them (one lag per
/// watch), and ends it with 410 Gone at a random time when dropped
/// watches are on.
fn lagging_watch(
    response: Response<AxumBody>,
    path: &str,
    replica: usize,
    faults: Arc<FaultSwitch>,
    ledger: Arc<Ledger>,
) -> Response<AxumBody> {
    if !response.status().is_success() || !faults.is_on() {
        return response;
    }
    let rates = faults.rates();
    let max_lag = rates.max_watch_lag.as_millis() as u64;
    let lag = Duration::from_millis(faults.draw(|rng| if max_lag == 0 { 0 } else { rng.u64(0..=max_lag) }));
    // Each watch ends at a random time with mean 1/rate minutes.
    let drop_after = (rates.dropped_watches_per_minute > 0.0).then(|| {
        let uniform = faults.draw(|rng| rng.f64()).max(1e-9);
        Duration::from_secs_f64(-uniform.ln() * 60.0 / rates.dropped_watches_per_minute)
    });
    if !lag.is_zero() {
        ledger.fault(
            Fault::WatchLag,
            Reach::Ambient,
            format_args!("operator-{replica} {path} lag {}ms", lag.as_millis()),
        );
    }
    let (parts, body) = response.into_parts();
    let (sender, receiver) = futures::channel::mpsc::unbounded::<(Instant, Bytes)>();
    // Read the server's stream as it comes, so that the lag is per event
    // and does not add up.
    tokio::spawn(async move {
        let mut frames = body.into_data_stream();
        while let Some(Ok(chunk)) = frames.next().await {
            if sender.unbounded_send((Instant::now() + lag, chunk)).is_err() {
                return;
            }
        }
    });
    let deadline = drop_after.map(|after| Instant::now() + after);
    let path = path.to_owned();
    // A drop due once faults are off (the settle period) does not happen.
    let delivered = futures::stream::unfold(Some((receiver, deadline)), move |state| {
        let (ledger, path, faults) = (ledger.clone(), path.clone(), faults.clone());
        async move {
            let (mut receiver, deadline) = state?;
            let gone = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = gone => {
                    if !faults.is_on() {
                        return Some((Ok(Bytes::new()), Some((receiver, None))));
                    }
                    ledger.fault(Fault::DroppedWatch, Reach::EVERYTHING, format_args!("operator-{replica} {path}"));
                    Some((Ok::<_, Infallible>(Bytes::from_static(GONE.as_bytes())), None))
                }
                next = receiver.next() => {
                    let (at, chunk) = next?;
                    tokio::time::sleep_until(at).await;
                    Some((Ok(chunk), Some((receiver, deadline))))
                }
            }
        }
    });
    Response::from_parts(parts, AxumBody::from_stream(delivered))
}
