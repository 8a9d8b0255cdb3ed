//! The HTTP face of the server: routes Kubernetes API paths to the store.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::ApiServer;
use crate::discovery;
use crate::error::ApiError;
use crate::resources::ResourceInfo;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, Event, EventType, Part, Propagation, Target, WriteOptions};
use crate::table::{IncludeObject, table};

/// Largest request body accepted (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;
/// How often a watch that asked for bookmarks gets one.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

pub async fn handle(server: ApiServer, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => return error_response(&ApiError::bad_request("request body too large or unreadable")),
    };
    let query = Query::parse(parts.uri.query().unwrap_or_default());
    let accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let content_type =
        parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    if content_type.contains("protobuf") {
        return error_response(&ApiError::unsupported_media_type(
            "the embedded API server speaks JSON only; send application/json (kubectl's `create <kind>` generators \
             send protobuf: use `kubectl apply -f` instead)",
        ));
    }
    let call = Call { server, method: parts.method, query, accept, content_type, body };
    match call.route(parts.uri.path()) {
        Ok(response) => response,
        Err(error) => error_response(&error),
    }
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn error_response(error: &ApiError) -> Response {
    json_response(StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &error.to_status())
}

fn text_response(text: &'static str) -> Response {
    Response::builder().header(header::CONTENT_TYPE, "text/plain").body(Body::from(text)).unwrap_or_default()
}

/// Query parameters, percent-decoded.
#[derive(Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(text: &str) -> Self {
        Self(
            text.split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (decode(key), decode(value))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |byte: u8| (byte as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' => match (bytes.get(index + 1).and_then(|&b| hex(b)), bytes.get(index + 2).and_then(|&b| hex(b))) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    index += 2;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Call {
    server: ApiServer,
    method: Method,
    query: Query,
    accept: String,
    content_type: String,
    body: Bytes,
}

/// A resource path, split.
struct ResourcePath<'a> {
    group: &'a str,
    version: &'a str,
    namespace: Option<&'a str>,
    plural: &'a str,
    name: Option<&'a str>,
    subresource: Option<&'a str>,
}

impl Call {
    fn route(self, path: &str) -> Result<Response, ApiError> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let store = &self.server.store;
        match segments.as_slice() {
            ["version"] => Ok(json_response(StatusCode::OK, &discovery::version())),
            ["healthz" | "readyz" | "livez", ..] => Ok(text_response("ok")),
            ["api"] => Ok(json_response(StatusCode::OK, &discovery::core_versions())),
            ["apis"] => Ok(json_response(StatusCode::OK, &discovery::group_list(&store.resources()))),
            ["apis", group] => discovery::group(&store.resources(), group)
                .map(|doc| json_response(StatusCode::OK, &doc))
                .ok_or_else(ApiError::path_not_found),
            ["openapi", "v3"] => Ok(json_response(StatusCode::OK, &discovery::openapi_v3_root(&store.resources()))),
            ["openapi", "v3", "api", version] => self.openapi("", version),
            ["openapi", "v3", "apis", group, version] => self.openapi(group, version),
            ["api", "v1"] => self.resource_list("", "v1"),
            ["apis", group, version] => self.resource_list(group, version),
            ["api", "v1", rest @ ..] => self.resource(split_resource("", "v1", rest)?),
            ["apis", group, version, rest @ ..] => self.resource(split_resource(group, version, rest)?),
            _ => Err(ApiError::path_not_found()),
        }
    }

    fn openapi(&self, group: &str, version: &str) -> Result<Response, ApiError> {
        discovery::openapi_v3_group_version(&self.server.store.resources(), group, version)
            .map(|doc| json_response(StatusCode::OK, &doc))
            .ok_or_else(ApiError::path_not_found)
    }

    fn resource_list(&self, group: &str, version: &str) -> Result<Response, ApiError> {
        discovery::resource_list(&self.server.store.resources(), group, version)
            .map(|doc| json_response(StatusCode::OK, &doc))
            .ok_or_else(ApiError::path_not_found)
    }

    fn resource(self, path: ResourcePath) -> Result<Response, ApiError> {
        let store = self.server.store.clone();
        let Some(res) = store.lookup(path.group, path.version, path.plural) else {
            return Err(ApiError::path_not_found());
        };
        if res.namespaced != path.namespace.is_some() && path.name.is_some() {
            return Err(ApiError::path_not_found());
        }
        let target = Target { resource: &res, namespace: path.namespace };
        let options = WriteOptions {
            dry_run: self.query.get("dryRun") == Some("All"),
            strict: self.query.get("fieldValidation") == Some("Strict"),
        };
        if path.subresource == Some("eviction") && discovery::is_core_pods(&res) {
            return self.evict(&target, path.name.unwrap_or_default());
        }
        let part = match path.subresource {
            None => Part::Main,
            Some("status") if res.status => Part::Status,
            Some("scale") if res.scale.is_some() => return self.scale(&target, path.name.unwrap_or_default()),
            Some(_) => return Err(ApiError::path_not_found()),
        };
        let Some(name) = path.name else {
            return match self.method {
                Method::GET if self.query.flag("watch") => self.watch(res.clone(), path.namespace.map(String::from)),
                Method::GET => self.list(&target),
                Method::POST => {
                    let object = self.json_body()?;
                    let created = store.create(&target, object, options)?;
                    Ok(json_response(StatusCode::CREATED, &created))
                }
                _ => Err(ApiError::method_not_allowed(format!("{} is not supported on a collection", self.method))),
            };
        };
        let response = match self.method {
            Method::GET => store.get(&target, name)?,
            Method::PUT => store.update(&target, name, self.json_body()?, part, options)?,
            Method::PATCH => store.patch(&target, name, &self.content_type, &self.body, part, options)?,
            Method::DELETE => store.delete(&target, name, &self.delete_options()?)?,
            _ => return Err(ApiError::method_not_allowed(format!("{} is not supported on an object", self.method))),
        };
        Ok(self.object_response(&res, response))
    }

    fn object_response(&self, res: &ResourceInfo, object: Value) -> Response {
        if wants_table(&self.accept) {
            let include = IncludeObject::parse(self.query.get("includeObject"));
            let rendered = table(res, &[object], json!({}), self.server.store.now(), include);
            return json_response(StatusCode::OK, &rendered);
        }
        json_response(StatusCode::OK, &object)
    }

    fn json_body(&self) -> Result<Value, ApiError> {
        let value: Value = serde_json::from_slice(&self.body)
            .map_err(|error| ApiError::bad_request(format!("the request body is not valid JSON: {error}")))?;
        if !value.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        Ok(value)
    }

    fn selectors(&self, res: &ResourceInfo) -> Result<(LabelSelector, FieldSelector), ApiError> {
        let labels = LabelSelector::parse(self.query.get("labelSelector").unwrap_or_default())?;
        let fields = FieldSelector::parse(self.query.get("fieldSelector").unwrap_or_default(), res.field_selectors)?;
        Ok((labels, fields))
    }

    fn list(&self, target: &Target) -> Result<Response, ApiError> {
        let (labels, fields) = self.selectors(target.resource)?;
        let limit = self.query.get("limit").and_then(|l| l.parse().ok()).filter(|&l: &usize| l > 0);
        let list = self.server.store.list(target, &labels, &fields, limit, self.query.get("continue"))?;
        if wants_table(&self.accept) {
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let include = IncludeObject::parse(self.query.get("includeObject"));
            let rendered = table(target.resource, &items, list["metadata"].clone(), self.server.store.now(), include);
            return Ok(json_response(StatusCode::OK, &rendered));
        }
        Ok(json_response(StatusCode::OK, &list))
    }

    /// `POST pods/{name}/eviction`: the pod is deleted (with the
    /// Eviction's `deleteOptions`) when its disruption budget allows.
    fn evict(&self, target: &Target, name: &str) -> Result<Response, ApiError> {
        if self.method != Method::POST {
            return Err(ApiError::method_not_allowed("the eviction subresource supports create only"));
        }
        let eviction = self.json_body()?;
        let options = self.delete_options_of(&eviction["deleteOptions"])?;
        let store = &self.server.store;
        let pod = store.get(target, name)?;
        crate::eviction::admit(store, target.namespace.unwrap_or_default(), &pod, options.dry_run)?;
        store.delete(target, name, &options)?;
        Ok(json_response(StatusCode::CREATED, &crate::eviction::evicted()))
    }

    fn delete_options(&self) -> Result<DeleteOptions, ApiError> {
        let body: Value = if self.body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(&self.body)
                .map_err(|error| ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {error}")))?
        };
        self.delete_options_of(&body)
    }

    /// Reads DeleteOptions from `body`, falling back to the query string.
    fn delete_options_of(&self, body: &Value) -> Result<DeleteOptions, ApiError> {
        let policy = body["propagationPolicy"].as_str().or(self.query.get("propagationPolicy"));
        let propagation = match policy {
            None | Some("Background") => Propagation::Background,
            Some("Foreground") => Propagation::Foreground,
            Some("Orphan") => Propagation::Orphan,
            Some(other) => return Err(ApiError::bad_request(format!("unknown propagationPolicy {other}"))),
        };
        let grace = body["gracePeriodSeconds"]
            .as_i64()
            .or_else(|| self.query.get("gracePeriodSeconds").and_then(|g| g.parse().ok()));
        let dry_run = body["dryRun"].as_array().is_some_and(|d| d.iter().any(|v| v == "All"))
            || self.query.get("dryRun") == Some("All");
        Ok(DeleteOptions {
            uid: body["preconditions"]["uid"].as_str().map(String::from),
            resource_version: body["preconditions"]["resourceVersion"].as_str().map(String::from),
            propagation,
            grace_period_seconds: grace,
            dry_run,
        })
    }

    fn scale(&self, target: &Target, name: &str) -> Result<Response, ApiError> {
        let store = &self.server.store;
        let scale = match self.method {
            Method::GET => store.get_scale(target, name)?,
            Method::PUT | Method::PATCH => {
                let current = store.get_scale(target, name)?;
                let updated = if self.method == Method::PUT {
                    self.json_body()?
                } else {
                    let kind = crate::patch::PatchKind::from_content_type(&self.content_type, false)?;
                    crate::patch::apply(kind, current, &crate::patch::parse(kind, &self.body)?)?
                };
                let Some(replicas) = updated["spec"]["replicas"].as_i64() else {
                    return Err(ApiError::invalid(
                        "Scale",
                        name,
                        vec![("spec.replicas".into(), "Required value".into())],
                    ));
                };
                if replicas < 0 {
                    return Err(ApiError::invalid(
                        "Scale",
                        name,
                        vec![(
                            "spec.replicas".into(),
                            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
                        )],
                    ));
                }
                let version = updated["metadata"]["resourceVersion"].as_str().map(String::from);
                store.update_scale(target, name, replicas, version)?
            }
            _ => return Err(ApiError::method_not_allowed("scale supports get, update and patch")),
        };
        Ok(json_response(StatusCode::OK, &scale))
    }

    fn watch(&self, res: Arc<ResourceInfo>, namespace: Option<String>) -> Result<Response, ApiError> {
        let (labels, fields) = self.selectors(&res)?;
        let since = match self.query.get("resourceVersion") {
            None | Some("" | "0") => None,
            Some(version) => Some(version.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("resourceVersion: Invalid value: \"{version}\": must be a number"))
            })?),
        };
        let timeout = self
            .query
            .get("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(1800));
        let watch = Watch {
            res,
            namespace,
            labels,
            fields,
            bookmarks: self.query.flag("allowWatchBookmarks"),
            table: wants_table(&self.accept).then(|| IncludeObject::parse(self.query.get("includeObject"))),
            server: self.server.clone(),
        };
        let target = Target { resource: &watch.res, namespace: watch.namespace.as_deref() };
        let lines = match self.server.store.watch_from(&target, since) {
            Ok(start) => watch.stream(start.backlog, start.receiver, start.revision, timeout).boxed(),
            // A version older than the history: 200 with an ERROR event.
            Err(error) => futures::stream::once(async move { line("ERROR", &error.to_status()) }).boxed(),
        };
        Ok(Response::builder()
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::TRANSFER_ENCODING, "chunked")
            .body(Body::from_stream(lines.map(Ok::<_, std::convert::Infallible>)))
            .unwrap_or_default())
    }
}

fn wants_table(accept: &str) -> bool {
    accept.contains("as=Table")
}

fn split_resource<'a>(group: &'a str, version: &'a str, rest: &[&'a str]) -> Result<ResourcePath<'a>, ApiError> {
    let path =
        |namespace, plural, name, subresource| ResourcePath { group, version, namespace, plural, name, subresource };
    Ok(match rest {
        // namespaces/{name}[/status|finalize] is the namespace object itself.
        ["namespaces", name] if group.is_empty() => path(None, "namespaces", Some(*name), None),
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => {
            path(None, "namespaces", Some(*name), Some(*sub))
        }
        ["namespaces", namespace, plural] => path(Some(*namespace), *plural, None, None),
        ["namespaces", namespace, plural, name] => path(Some(*namespace), *plural, Some(*name), None),
        ["namespaces", namespace, plural, name, sub] => path(Some(*namespace), *plural, Some(*name), Some(*sub)),
        [plural] => path(None, *plural, None, None),
        [plural, name] => path(None, *plural, Some(*name), None),
        [plural, name, sub] => path(None, *plural, Some(*name), Some(*sub)),
        _ => return Err(ApiError::path_not_found()),
    })
}

/// One line of a watch: `{"type":…,"object":…}`, the object encoded in place.
fn line(event_type: &str, object: &Value) -> Bytes {
    let mut bytes = Vec::with_capacity(1024);
    bytes.extend_from_slice(b"{\"type\":");
    let encoded = serde_json::to_writer(&mut bytes, event_type)
        .and_then(|()| {
            bytes.extend_from_slice(b",\"object\":");
            serde_json::to_writer(&mut bytes, object)
        })
        .map(|()| bytes.extend_from_slice(b"}\n"));
    // A JSON value always encodes; a failure would only leave the line out.
    if encoded.is_err() {
        return Bytes::new();
    }
    Bytes::from(bytes)
}

struct Watch {
    res: Arc<ResourceInfo>,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    bookmarks: bool,
    table: Option<IncludeObject>,
    server: ApiServer,
}

impl Watch {
    /// What this watch sends for a committed write, if anything. With a
    /// selector, an object that starts matching is ADDED and one that stops
    /// matching is DELETED, as on the real server.
    fn render(&self, event: &Event) -> Option<Bytes> {
        if event.storage != self.res.storage || self.namespace.as_deref().is_some_and(|ns| ns != event.namespace()) {
            return None;
        }
        let selects = |object: &Value| self.labels.matches(object) && self.fields.matches(object);
        let now = selects(&event.object);
        let before = event.old.as_ref().is_some_and(selects);
        let event_type = match (event.event_type, before, now) {
            (EventType::Deleted, true, _) | (EventType::Deleted, _, true) => EventType::Deleted,
            (EventType::Deleted, false, false) => return None,
            (_, false, true) => EventType::Added,
            (EventType::Added, _, true) | (EventType::Modified, true, true) => event.event_type,
            (_, true, false) => EventType::Deleted,
            (_, false, false) => return None,
        };
        let present = || crate::store::present(&self.res, event.object.clone());
        Some(match self.table {
            Some(include) => {
                let version = json!({"resourceVersion": event.resource_version.to_string()});
                let rows = table(&self.res, &[present()], version, self.server.store.now(), include);
                line(event_type.as_str(), &rows)
            }
            None => event.line(&self.res.api_version(), event_type, || line(event_type.as_str(), &present())),
        })
    }

    fn bookmark(&self, revision: u64) -> Bytes {
        let object = json!({"kind": self.res.kind, "apiVersion": self.res.api_version(),
            "metadata": {"resourceVersion": revision.to_string()}});
        line("BOOKMARK", &object)
    }

    fn stream(
        self,
        backlog: Vec<Arc<Event>>,
        receiver: tokio::sync::broadcast::Receiver<Arc<Event>>,
        revision: u64,
        timeout: Duration,
    ) -> impl futures::Stream<Item = Bytes> + Send + 'static {
        let deadline = tokio::time::Instant::now() + timeout;
        let initial: Vec<Bytes> = backlog.iter().filter_map(|event| self.render(event)).collect();
        let last = backlog.iter().map(|e| e.resource_version).max().unwrap_or(revision).max(revision);
        let state = (self, receiver, last, false);
        futures::stream::iter(initial).chain(futures::stream::unfold(
            state,
            move |(watch, mut receiver, mut last, done)| async move {
                if done {
                    return None;
                }
                loop {
                    let next_bookmark = tokio::time::sleep(BOOKMARK_INTERVAL);
                    tokio::select! {
                        received = receiver.recv() => match received {
                            Ok(event) => {
                                if event.resource_version <= last {
                                    continue;
                                }
                                last = event.resource_version;
                                if let Some(bytes) = watch.render(&event) {
                                    return Some((bytes, (watch, receiver, last, false)));
                                }
                            }
                            Err(RecvError::Lagged(_)) => {
                                // This watcher fell too far behind: like the real
                                // server, end it with 410 so the client relists.
                                let error = ApiError::expired("too old resource version: the watch fell behind");
                                return Some((line("ERROR", &error.to_status()), (watch, receiver, last, true)));
                            }
                            Err(RecvError::Closed) => return None,
                        },
                        _ = next_bookmark, if watch.bookmarks => {
                            let bookmark = watch.bookmark(last);
                            return Some((bookmark, (watch, receiver, last, false)));
                        }
                        _ = tokio::time::sleep_until(deadline) => return None,
                    }
                }
            },
        ))
    }
}
