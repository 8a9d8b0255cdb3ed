//! `serve_tls`: what a client sees of the certificate files over time.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cnpool_webhook::{OperatorIdentity, ServeError, TlsFiles, router, serve_tls};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "test CA");
        Self { issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap() }
    }

    /// Writes a new serving certificate for 127.0.0.1 and its key; returns
    /// the certificate.
    fn issue(&self, tls: &TlsFiles) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let cert =
            CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().signed_by(&key, &self.issuer).unwrap();
        std::fs::write(&tls.key, key.serialize_pem()).unwrap();
        std::fs::write(&tls.cert, cert.pem()).unwrap();
        cert.der().clone()
    }

    fn connector(&self) -> TlsConnector {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        TlsConnector::from(Arc::new(ClientConfig::builder().with_root_certificates(roots).with_no_client_auth()))
    }
}

/// The certificate the server presents to a client that trusts `ca`.
async fn presented(ca: &Ca, port: u16) -> CertificateDer<'static> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let tls = ca.connector().connect(name, tcp).await.expect("handshake with a certificate the CA signed");
    tls.get_ref().1.peer_certificates().unwrap()[0].clone()
}

fn files(dir: &Path) -> TlsFiles {
    std::fs::create_dir_all(dir).unwrap();
    TlsFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") }
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let dir = std::env::temp_dir().join(format!("cnpool-webhook-tls-{}", std::process::id()));
    let tls = files(&dir);
    let ca = Ca::new();
    let first = ca.issue(&tls);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = router(OperatorIdentity::username("op"));
    let server = tokio::spawn(serve_tls(listener, app, tls.clone(), Duration::from_millis(50), async move {
        let _ = stopped.await;
    }));
    assert_eq!(presented(&ca, port).await, first);

    let renewed = ca.issue(&tls);
    let mut seen = presented(&ca, port).await;
    for _ in 0..200 {
        if seen == renewed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
        seen = presented(&ca, port).await;
    }
    assert_eq!(seen, renewed, "the renewed certificate is served");

    // A half-written renewal: the server keeps what it has.
    std::fs::write(&tls.cert, "-----BEGIN CERTIFICATE-----\ntruncated").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(presented(&ca, port).await, renewed);

    stop.send(()).unwrap();
    server.await.unwrap().expect("served until stopped");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn missing_certificate_files_stop_the_server_with_both_paths_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tls = TlsFiles { cert: "/nonexistent/tls.crt".into(), key: "/nonexistent/tls.key".into() };
    let app = router(OperatorIdentity::username("op"));
    let error = serve_tls(listener, app, tls, Duration::from_secs(60), std::future::pending()).await.unwrap_err();
    assert!(matches!(error, ServeError::Tls { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with("reading the serving certificate /nonexistent/tls.crt and key /nonexistent/tls.key: "),
        "{message}"
    );
    assert!(
        message
            .ends_with("give a PEM certificate chain and its PEM private key (docs/webhook.md says how to make them)"),
        "{message}"
    );
}
