//! Renders a Go-shaped CNPool — `spec.template` a CNSetSpec, `spec.deps` a
//! LogSet object or an external log set — into the pods, ConfigMap and
//! headless Service of a cnpool pool, the way the Go matrixone-operator
//! renders a CN through its CNSet (reference/cnset-rendering.md, "§" below).
//! Pure: no I/O, clock or randomness; objects read from the cluster are
//! arguments.
//!
//! | function | reference |
//! |---|---|
//! | `cnpool_api::cnset` types: the template, overlay, deps, LogSet | §1, §5 |
//! | [`pod::pool_template`], [`pod::with_webhook_defaults`] | §1 (webhook), §7 (pool overrides) |
//! | [`cnset::cnset_name`], [`cnset::hashed_json`], [`cnset::revision_hash`] | §0 |
//! | [`config::cn_config`] (config.toml), [`config::config_suffix`], [`config::config_map_digest`] | §3 |
//! | [`pod::render`]: containers, command, start.sh, env, volumes, labels, annotations, readiness gate, overlay, Services | §2, §4 |
//! | [`deps::cluster`] (and `PoolDeps::log_set_key`): the HAKeeper address and log services | §5 |
//! | [`deps::drain_timeout`]: drainStrategy.timeout, else storeDrainTimeout, else 5m | §1, §6 |
//! | the CN store UUID: `cnpool_api::cn_store_uuid`, which the start script matches | §4 |
//!
//! Deliberately not carried over, and why:
//! - Kruise's readiness gates (`KruisePodReady`, `InPlaceUpdateReady`), its
//!   lifecycle hooks, instance ids and CloneSet settings: no kruise runs
//!   cnpool's pods (§7). Adopted Go pods keep theirs; that is the cutover's job.
//! - Service `S-cn` and CNSet status: nothing in pool or claim code uses them (§7).
//! - Pod names and the `mo-data` PVC per pod: the pool controller names its
//!   pods; [`pod::Rendered::data_claim`] is the claim template it creates
//!   from, and it adds the `mo-data` volume. `overlay.volumeClaims` are not
//!   created (Go adds them to the CloneSet only, and only at its creation).
//! - `overlay.startupProbe`: accepted and never applied, as in Go.
//! - start.sh: cnpool writes its own script with the behaviour of Go's (§4),
//!   so the ConfigMap's digest-suffixed name differs from Go's; only Go
//!   used that name (to force restarts), and the CN UUID is the same.
//! - `deps.dnSet` is kept as read, never waited for (Go only waits for it
//!   before rendering). `externalLogSet`, which Go
//!   cannot run (§5), is the HAKeeper address of the pools that use it, and
//!   its CN config has no LogSet storage (the user's `config` supplies it).
//!
//! Known limits of the Go CNSet name: [`cnset::hashed_json`] knows Go's field
//! order for the template, resources, env, envFrom, volume mounts,
//! tolerations, host aliases and pull secrets; an overlay with volumes,
//! probes, affinity, security contexts, containers or topology constraints
//! gets [`gojson::GoJsonError::Unsupported`] naming the field instead of a
//! wrong name. A TOML datetime in `config` prints as written, where go-toml
//! would print an RFC 3339 time.

pub mod cnset;
pub mod config;
pub mod deps;
pub mod gojson;
pub mod pod;
pub mod quantity;
pub mod toml;
pub mod version;
