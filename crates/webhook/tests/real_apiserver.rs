//! The webhook called by a real kube-apiserver over TLS. Runs only when
//! `CNPOOL_WEBHOOK_E2E_KUBECONFIG` names a kubeconfig of a disposable
//! cluster (`.ci/run` points it at kube-apiserver 1.20); otherwise it says
//! so and does nothing.
//!
//! It serves the webhook in-process on 127.0.0.1 with a certificate from a
//! CA of its own, registers deploy/webhook/validating-webhook.yaml with a URL
//! and that CA in place of the Service (scoped to a namespace of its own),
//! and checks what a user sees, then that with the server stopped a pod's
//! finalizer can still be removed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cnpool_api::{CNClaim, CNPool};
use cnpool_webhook::{OperatorIdentity, TlsFiles, router, serve_tls};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{ValidatingWebhookConfiguration, WebhookClientConfig};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::json;

const NAMESPACE_LABEL: &str = "cnpool.matrixorigin.io/webhook-e2e";

#[tokio::test]
async fn the_real_apiserver_calls_the_webhook_over_tls() {
    let Ok(kubeconfig) = std::env::var("CNPOOL_WEBHOOK_E2E_KUBECONFIG") else {
        eprintln!(
            "real_apiserver: CNPOOL_WEBHOOK_E2E_KUBECONFIG is not set, so this test did nothing; set it to the \
             kubeconfig of a disposable cluster (.ci/run does, for kube-apiserver 1.20)"
        );
        return;
    };
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig readable"),
        &Default::default(),
    )
    .await
    .expect("kubeconfig usable");
    let client = Client::try_from(config).expect("client");
    let run = Run::new(client, PathBuf::from(kubeconfig));

    let created_crds = run.install_crds().await;
    let checks = tokio::spawn({
        let run = run.clone();
        async move { run.checks().await }
    });
    let outcome = checks.await;
    run.clean_up(&created_crds).await;
    if let Err(error) = outcome {
        std::panic::resume_unwind(error.into_panic());
    }
}

#[derive(Clone)]
struct Run {
    client: Client,
    kubeconfig: PathBuf,
    ns: String,
    webhook_name: String,
    dir: PathBuf,
}

impl Run {
    fn new(client: Client, kubeconfig: PathBuf) -> Self {
        let id = std::process::id();
        Self {
            client,
            kubeconfig,
            ns: format!("webhook-e2e-{id}"),
            webhook_name: format!("cnpool-webhook-e2e-{id}"),
            dir: std::env::temp_dir().join(format!("cnpool-webhook-e2e-{id}")),
        }
    }

    /// Installs the CRDs that are missing; returns the names of those it
    /// created, which are the ones to delete afterwards.
    async fn install_crds(&self) -> Vec<String> {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let mut created = Vec::new();
        for crd in cnpool_api::crd::crds() {
            let name = crd.metadata.name.clone().unwrap();
            match crds.create(&PostParams::default(), &crd).await {
                Ok(_) => created.push(name),
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => panic!("creating CRD {name}: {error}"),
            }
        }
        created
    }

    async fn checks(&self) {
        self.create_namespace().await;
        let (ca_pem, tls) = self.certificates();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The operator's identity is nobody this test acts as: the test's
        // user is an ordinary one for the podName rules.
        let app = router(OperatorIdentity::service_account("cnpool-system", "cnpool"));
        let server = tokio::spawn(serve_tls(listener, app, tls, Duration::from_secs(60), async move {
            let _ = stopped.await;
        }));
        self.register_webhooks(port, &ca_pem).await;

        let pools: Api<CNPool> = Api::namespaced(self.client.clone(), &self.ns);
        let claims: Api<CNClaim> = Api::namespaced(self.client.clone(), &self.ns);
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);

        // An invalid pool is refused naming the field; this also waits for
        // the apiserver to pick the configuration up.
        let refusal = self.first_refusal_of_invalid_pool(&pools).await;
        assert_eq!(refusal.code, 422, "{refusal:?}");
        assert_eq!(
            refusal.message,
            "admission webhook \"cnpools-create.webhook.cnpool.matrixorigin.io\" denied the request: \
             spec.strategy.scaleStrategy.maxPods: 1 is less than maxIdle (3); set maxPods to at least maxIdle, lower \
             maxIdle, or remove maxPods for no limit"
        );

        // A bound pool pod cannot be handed to another claim.
        pods.create(&PostParams::default(), &bound_pod()).await.expect("bound pool pod created");
        // Off the runtime's threads: the webhook serves from them meanwhile.
        let mut kubectl = Command::new("kubectl");
        kubectl.arg("--kubeconfig").arg(&self.kubeconfig).args([
            "-n",
            &self.ns,
            "label",
            "pod",
            "pool-a-0",
            "pool.matrixorigin.io/claimed-by=other",
            "--overwrite",
        ]);
        let output = tokio::task::spawn_blocking(move || kubectl.output()).await.unwrap().expect("kubectl runs");
        assert!(!output.status.success(), "kubectl label succeeded: {}", String::from_utf8_lossy(&output.stdout));
        assert_eq!(
            String::from_utf8_lossy(&output.stderr).trim_end(),
            "Error from server (Forbidden): admission webhook \"pods.webhook.cnpool.matrixorigin.io\" denied the \
             request: metadata.labels[pool.matrixorigin.io/claimed-by]: cannot change from \"a\" to \"other\" on pod \
             pool-a-0; a pod changes owner only by release then acquire: delete or migrate the claim that holds it, \
             cnpool releases the pod, and another claim can acquire it once it is Idle again"
        );
        let pod = pods.get("pool-a-0").await.unwrap();
        assert_eq!(pod.metadata.labels.unwrap()["pool.matrixorigin.io/claimed-by"], "a", "the label is unchanged");

        // A claim pre-bound at creation cannot point at another pod without sourcePod.
        let claim: CNClaim = serde_json::from_value(json!({
            "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNClaim",
            "metadata": {"name": "a"},
            "spec": {"podName": "pool-a-0", "poolName": "pool-a", "selector": {}}
        }))
        .unwrap();
        claims.create(&PostParams::default(), &claim).await.expect("a pre-bound claim is created");
        let moved = claims
            .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"podName": "pool-a-1"}})))
            .await
            .expect_err("podName change without sourcePod");
        let kube::Error::Api(status) = moved else { panic!("not an API error: {moved}") };
        assert_eq!(status.code, 403);
        assert_eq!(
            status.message,
            "admission webhook \"cnclaims-update.webhook.cnpool.matrixorigin.io\" denied the request: spec.podName: \
             cannot change from \"pool-a-0\" to \"pool-a-1\" without spec.sourcePod.podName \"pool-a-0\"; a new pod is \
             a migration: set spec.sourcePod.podName to \"pool-a-0\" in the same write, or put spec.podName back to \
             \"pool-a-0\""
        );

        // With the webhook down, a finalizer still comes off: UPDATE fails open.
        stop.send(()).unwrap();
        server.await.unwrap().expect("the webhook served and stopped");
        let refused_create =
            pools.create(&PostParams::default(), &invalid_pool()).await.expect_err("CREATE fails closed");
        assert!(refused_create.to_string().contains("failed calling webhook"), "{refused_create}");
        let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        let pod = pods.patch("pool-a-0", &PatchParams::default(), &patch).await.expect("finalizer removed");
        assert_eq!(pod.metadata.finalizers, None);
    }

    async fn create_namespace(&self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let namespace = serde_json::from_value(json!({
            "metadata": {"name": self.ns, "labels": {NAMESPACE_LABEL: self.ns}}
        }))
        .unwrap();
        namespaces.create(&PostParams::default(), &namespace).await.expect("namespace created");
        // The controller-manager creates the ServiceAccount pods need.
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &self.ns);
        for _ in 0..100 {
            if accounts.get_opt("default").await.unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no default ServiceAccount in {} after 10 s: is kube-controller-manager running?", self.ns);
    }

    /// A CA, and a serving certificate for 127.0.0.1 signed by it, written
    /// as PEM files.
    fn certificates(&self) -> (String, TlsFiles) {
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "cnpool webhook e2e CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &ca).unwrap();
        std::fs::create_dir_all(&self.dir).unwrap();
        let tls = TlsFiles { cert: self.dir.join("tls.crt"), key: self.dir.join("tls.key") };
        write(&tls.cert, &cert.pem());
        write(&tls.key, &key.serialize_pem());
        (ca.pem(), tls)
    }

    /// The deployed configuration, pointed at this test's server and
    /// limited to this test's namespace.
    async fn register_webhooks(&self, port: u16, ca_pem: &str) {
        let yaml = include_str!("../../../deploy/webhook/validating-webhook.yaml");
        let mut configuration: ValidatingWebhookConfiguration = serde_saphyr::from_str(yaml).unwrap();
        configuration.metadata.name = Some(self.webhook_name.clone());
        configuration.metadata.annotations = None;
        for webhook in configuration.webhooks.iter_mut().flatten() {
            let path = webhook.client_config.service.as_ref().and_then(|service| service.path.clone()).unwrap();
            webhook.client_config = WebhookClientConfig {
                url: Some(format!("https://127.0.0.1:{port}{path}")),
                ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
                service: None,
            };
            webhook.namespace_selector = Some(LabelSelector {
                match_labels: Some([(NAMESPACE_LABEL.to_string(), self.ns.clone())].into()),
                ..Default::default()
            });
        }
        let configurations: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        configurations.create(&PostParams::default(), &configuration).await.expect("webhook registered");
    }

    /// Creates an invalid pool until the webhook refuses it (the apiserver
    /// applies a new configuration within a second or so); a pool created
    /// before that is deleted again.
    async fn first_refusal_of_invalid_pool(&self, pools: &Api<CNPool>) -> kube::core::Status {
        for _ in 0..100 {
            match pools.create(&PostParams::default(), &invalid_pool()).await {
                Ok(_) => {
                    pools.delete("invalid", &DeleteParams::default()).await.unwrap();
                }
                Err(kube::Error::Api(status)) if status.message.contains("admission webhook") => return *status,
                // The CRD is not served yet.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => panic!("creating an invalid pool: {error}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the webhook configuration never took effect");
    }

    /// Removes what the test made, the webhook configuration first so that
    /// nothing else is ever reviewed by a server that is gone.
    async fn clean_up(&self, created_crds: &[String]) {
        let configurations: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let _ = configurations.delete(&self.webhook_name, &DeleteParams::default()).await;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.ns);
        let _ = pods
            .patch("pool-a-0", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
            .await;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for name in created_crds {
            let _ = crds.delete(name, &DeleteParams::default()).await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
}

fn invalid_pool() -> CNPool {
    serde_json::from_value(json!({
        "apiVersion": "core.matrixorigin.io/v1alpha1", "kind": "CNPool",
        "metadata": {"name": "invalid"},
        "spec": {"template": {"image": "matrixorigin/matrixone:1.2.0"},
                 "strategy": {"scaleStrategy": {"maxIdle": 3, "maxPods": 1}}}
    }))
    .unwrap()
}

/// A pool pod bound to claim `a`, with the CN store finalizer. Nothing
/// schedules it: only its labels and finalizer matter here.
fn bound_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "pool-a-0",
            "labels": {
                "pool.matrixorigin.io/pool-name": "pool-a",
                "pool.matrixorigin.io/phase": "Bound",
                "pool.matrixorigin.io/claimed-by": "a",
                "pool.matrixorigin.io/claim-uid": "uid-of-a"
            },
            "finalizers": ["matrixorigin.io/cn-draining"]
        },
        "spec": {"containers": [{"name": "cn", "image": "matrixone/matrixone:latest"}]}
    }))
    .unwrap()
}
