//! The webhook's serving certificate: a rustls resolver whose certificate can be swapped while
//! connections are being served, fed either by an in-memory self-signed certificate or by PEM files
//! that are polled for changes.
//!
//! Files are polled and compared by content rather than watched: Kubernetes updates a Secret
//! volume by swapping a `..data` symlink, which a watch on the file itself never sees. A pair that
//! does not load (half written, or a key that does not match the certificate) is logged and
//! ignored, and the previous certificate keeps serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, ResultLabels};

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Generated at startup, valid for localhost and 127.0.0.1: for local use and tests.
    SelfSigned,
    /// PEM files, polled every `interval`.
    Files { cert: PathBuf, key: PathBuf, interval: Duration },
}

#[derive(Debug, thiserror::Error)]
pub enum CertLoadError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Pem { path: String, message: String },
    #[error("the private key does not match the certificate: {0}")]
    Mismatch(rustls::Error),
    #[error("the certificate cannot be parsed: {0}")]
    X509(String),
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The crypto provider for every TLS config sandcap builds: ring, chosen explicitly because other
/// dependencies enable a second provider and rustls then refuses to guess.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default provider too, for the TLS configs that reqwest builds (it
/// takes the default and has no ring feature of its own). Once is enough; later calls find it set.
pub fn install_default_provider() {
    // An error means a default is set already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Serves whatever certificate was stored last; none until the first one loads, so handshakes
/// fail (and `/readyz` says not ready) rather than serve something wrong.
#[derive(Debug, Default)]
pub struct CertResolver {
    current: ArcSwapOption<CertifiedKey>,
}

impl CertResolver {
    pub fn has_cert(&self) -> bool {
        self.current.load().is_some()
    }

    /// Serves `loaded` from the next handshake on.
    pub fn install(&self, loaded: &Loaded, metrics: &Metrics) {
        self.current.store(Some(loaded.key.clone()));
        metrics.certificate_expiry.set(loaded.not_after);
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

/// TLS 1.2 and 1.3 only, HTTP/2 preferred over HTTP/1.1, certificate from `resolver`.
pub fn server_config(resolver: Arc<CertResolver>) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&version::TLS13, &version::TLS12])
        .expect("ring supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A certificate chain with its key, checked to belong together, and the leaf's expiry.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// The leaf's notAfter, in Unix seconds.
    pub not_after: i64,
}

/// Parses a PEM chain (leaf first) and a PEM private key, and checks that they match.
/// `cert_name`/`key_name` only label errors. Error messages never quote the key.
pub fn load_pem(cert_pem: &[u8], key_pem: &[u8], cert_name: &str, key_name: &str) -> Result<Loaded, CertLoadError> {
    let pem_error = |path: &str, message: String| CertLoadError::Pem { path: path.to_string(), message };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(cert_name, format!("not a PEM certificate chain: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(pem_error(cert_name, "no certificate in the file".into()));
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(|e| CertLoadError::X509(e.to_string()))?;
    let not_after = parsed.validity().not_after.timestamp();
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| pem_error(key_name, format!("not a PEM private key: {e}")))?;
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| pem_error(key_name, format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    // Unlike CertifiedKey::from_der, an unverifiable pair is refused too: swapping in a key that
    // might not match would break every handshake.
    certified.keys_match().map_err(CertLoadError::Mismatch)?;
    Ok(Loaded { key: Arc::new(certified), not_after })
}

/// A fresh self-signed certificate for localhost and 127.0.0.1, valid for a year.
pub fn self_signed() -> Result<Loaded, CertLoadError> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "sandcap self-signed");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(365);
    let cert = params.self_signed(&key)?;
    load_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), "self-signed", "self-signed")
}

/// Keeps `resolver` supplied from the PEM files `cert` and `key` until `shutdown`, polling them
/// every `interval` (the first poll at once).
pub async fn watch_files(
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    resolver: Arc<CertResolver>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut reloader = Reloader { cert, key, resolver, metrics, seen: None };
    loop {
        reloader.poll().await;
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// What the files held at the last poll, or why they could not be read.
#[derive(PartialEq, Eq)]
enum Seen {
    Contents(Vec<u8>, Vec<u8>),
    Unreadable(String),
}

struct Reloader {
    cert: PathBuf,
    key: PathBuf,
    resolver: Arc<CertResolver>,
    metrics: Metrics,
    seen: Option<Seen>,
}

impl Reloader {
    /// Loads the pair if it changed since the last poll. Each distinct state is logged and counted
    /// once, so a pair that stays broken does not flood the log or the failure counter.
    async fn poll(&mut self) {
        let read = read_pair(&self.cert, &self.key).await;
        let seen = match &read {
            Ok((cert, key)) => Seen::Contents(cert.clone(), key.clone()),
            Err(e) => Seen::Unreadable(e.to_string()),
        };
        if self.seen.as_ref() == Some(&seen) {
            return;
        }
        // Parsed only when the bytes changed: most polls find the same files.
        let result = read.and_then(|(cert, key)| load_pem(&cert, &key, &shown(&self.cert), &shown(&self.key)));
        self.seen = Some(seen);
        let result = match result {
            Ok(loaded) => {
                self.resolver.install(&loaded, &self.metrics);
                tracing::info!(cert = %self.cert.display(), not_after = loaded.not_after, "serving certificate loaded");
                "success"
            }
            Err(e) => {
                let keeps =
                    if self.resolver.has_cert() { "the previous certificate keeps serving" } else { "not serving yet" };
                tracing::warn!(error = %e, "serving certificate not loaded; {keeps}");
                "failure"
            }
        };
        self.metrics.certificate_reloads.get_or_create(&ResultLabels { result }).inc();
    }
}

/// Reads the pair, and the certificate once more: if it changed meanwhile, the files were being
/// swapped and the key may belong to either version, so the read is repeated (a few times at most;
/// a pair still in flux after that is judged on what was read).
async fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), CertLoadError> {
    let read = |path: &Path| {
        let path = path.to_path_buf();
        async move { tokio::fs::read(&path).await.map_err(|source| CertLoadError::Read { path: shown(&path), source }) }
    };
    let mut pair = (read(cert).await?, read(key).await?);
    for _ in 0..3 {
        let again = read(cert).await?;
        if again == pair.0 {
            break;
        }
        pair = (again, read(key).await?);
    }
    Ok(pair)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_certificate_loads_and_expires_in_a_year() {
        let loaded = self_signed().unwrap();
        let in_a_year = time::OffsetDateTime::now_utc().unix_timestamp() + 365 * 86_400;
        assert!((loaded.not_after - in_a_year).abs() < 60);
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b".to_string()]).unwrap();
        let err = load_pem(a.cert.pem().as_bytes(), b.signing_key.serialize_pem().as_bytes(), "c", "k");
        assert!(matches!(err, Err(CertLoadError::Mismatch(_))));
    }

    #[test]
    fn half_written_files_are_refused() {
        let a = rcgen::generate_simple_self_signed(vec!["a".to_string()]).unwrap();
        let (cert, key) = (a.cert.pem(), a.signing_key.serialize_pem());
        assert!(load_pem(&cert.as_bytes()[..cert.len() / 2], key.as_bytes(), "c", "k").is_err());
        assert!(load_pem(cert.as_bytes(), &key.as_bytes()[..key.len() / 2], "c", "k").is_err());
        assert!(load_pem(b"", key.as_bytes(), "c", "k").is_err());
    }
}
