//! The cutover record: when cnpool first started on this cluster, kept in
//! the cluster (ConfigMap [`RECORD`] in the operator's own namespace,
//! `data.cutoverTime`, RFC 3339), not in memory, so that every replica and
//! every restart agrees on it. Only a claim created before it may adopt a
//! pod the Go operator bound to its name (DESIGN §2, adopt-legacy): a claim
//! deleted and recreated under a Go claim's name since never inherits the
//! Go pod.
//!
//! The record is read, else created with the time of day; a create that
//! finds another replica's record (AlreadyExists) reads that one. It is
//! never rewritten. In shadow mode the create is a dry run: the record is
//! "now" on every start, as the switch would record it then.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::{BoxFuture, Shared};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::context::Context;
use crate::error::{Error, is_already_exists};

/// The ConfigMap holding the cutover time.
pub const RECORD: &str = "cnpool-cutover";
/// Its key.
pub const KEY: &str = "cutoverTime";

/// Reads or makes the record until it succeeds (or `shutdown`), then keeps
/// its time in the context. Until then no claim adopts a Go-bound pod; such
/// a claim waits and says why.
pub async fn establish<R>(ctx: Arc<Context<R>>, shutdown: Shared<BoxFuture<'static, ()>>) {
    let namespace = ctx.config.operator_namespace.clone();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut delay = ctx.config.requeue_min;
    let mut failing = false;
    loop {
        match read_or_record(&ctx.client, &namespace, ctx.now()).await {
            Ok(time) => {
                tracing::info!(%namespace, record = RECORD, cutover = %time, "cutover time known: older claims may adopt Go-bound pods");
                // Set once, here only.
                let _ = ctx.cutover.set(time);
                return;
            }
            Err(error) if !failing => {
                tracing::warn!(%namespace, record = RECORD, %error, "cannot read or record the cutover time; Go-bound pods are not adopted until it is known");
                failing = true;
            }
            Err(_) => {}
        }
        tokio::select! {
            () = &mut shutdown => return,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(ctx.config.requeue_max);
    }
}

/// The recorded time, if the record exists; never writes (`cnpool doctor`).
pub async fn read(client: &kube::Client, namespace: &str) -> Result<Option<Timestamp>, Error> {
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let record = records
        .get_opt(RECORD)
        .await
        .map_err(|error| Error::kube("read", format!("ConfigMap {namespace}/{RECORD}"), error))?;
    record.map(|record| time_of(&record, namespace)).transpose()
}

/// The recorded time, recording `now` if there is none yet.
async fn read_or_record(client: &kube::Client, namespace: &str, now: Timestamp) -> Result<Timestamp, Error> {
    let records: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let object = || format!("ConfigMap {namespace}/{RECORD}");
    if let Some(time) = read(client, namespace).await? {
        return Ok(time);
    }
    let record = ConfigMap {
        metadata: ObjectMeta {
            name: Some(RECORD.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(KEY.to_owned(), recorded(now).to_string())])),
        ..ConfigMap::default()
    };
    match records.create(&PostParams::default(), &record).await {
        Ok(created) => time_of(&created, namespace),
        Err(error) if is_already_exists(&error) => {
            let theirs = records.get(RECORD).await.map_err(|error| Error::kube("read", object(), error))?;
            time_of(&theirs, namespace)
        }
        Err(error) => Err(Error::kube("create", object(), error)),
    }
}

/// `now` rounded up to the whole second. A claim's creationTimestamp has
/// whole seconds: a claim made in the second of the first start, before
/// it, must still count as older.
pub fn recorded(now: Timestamp) -> Timestamp {
    let floor = Timestamp::from_second(now.as_second()).unwrap_or(now);
    if floor == now { now } else { Timestamp::from_second(now.as_second().saturating_add(1)).unwrap_or(now) }
}

fn time_of(record: &ConfigMap, namespace: &str) -> Result<Timestamp, Error> {
    let value = record.data.as_ref().and_then(|data| data.get(KEY));
    let malformed = |reason: String| Error::CutoverRecord { namespace: namespace.to_owned(), reason };
    let value = value.ok_or_else(|| malformed(format!("no data.{KEY}")))?;
    value.parse().map_err(|error| malformed(format!("data.{KEY} {value:?} is not an RFC 3339 time: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_is_rounded_up_to_the_second_of_creation_timestamps() {
        let exact = Timestamp::from_second(100).unwrap();
        assert_eq!(recorded(exact), exact);
        let within = Timestamp::new(100, 300_000_000).unwrap();
        assert_eq!(recorded(within), Timestamp::from_second(101).unwrap());
    }

    #[test]
    fn a_record_without_a_readable_time_is_an_error_naming_the_key() {
        let record = ConfigMap {
            data: Some(BTreeMap::from([(KEY.to_owned(), "yesterday".to_owned())])),
            ..ConfigMap::default()
        };
        let error = time_of(&record, "ops").unwrap_err().to_string();
        assert!(error.contains("cutoverTime") && error.contains("ops/cnpool-cutover"), "{error}");
    }
}
