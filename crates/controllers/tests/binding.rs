#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking
//! The binding core end to end: the controllers in this process on an API
//! server (see support) with the simulated kubelet, CNs and HAKeeper. The
//! scenarios are in support/binding.rs.

mod support;

use support::{Cluster, binding};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_to_distinct_pods_whose_stores_carry_their_labels() {
    binding::claims_bind_to_distinct_pods_whose_stores_carry_their_labels(&Cluster::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_pod_is_deleted_or_whose_store_vanishes_is_lost_then_rebound() {
    binding::a_claim_whose_pod_is_deleted_or_whose_store_vanishes_is_lost_then_rebound(&Cluster::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_claim_releases_its_pod_which_drains_back_to_idle_with_a_clean_store() {
    binding::a_deleted_claim_releases_its_pod_which_drains_back_to_idle_with_a_clean_store(&Cluster::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_cluster_costs_no_writes() {
    binding::a_settled_cluster_costs_no_writes(&Cluster::new().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_labels_name_another_claims_uid_takes_nothing() {
    binding::a_claim_whose_labels_name_another_claims_uid_takes_nothing(&Cluster::new().await).await;
}
