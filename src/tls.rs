//! The webhook's serving certificate: a rustls resolver whose certificate can be swapped while
//! connections are being served, fed either by an in-memory self-signed certificate or by PEM files
//! that are polled for changes.
//!
//! Files are polled and compared by content rather than watched: Kubernetes updates a Secret
//! volume by swapping a `..data` symlink, which a watch on the file itself never sees. A pair that
//! does not load (half written, or a key that does not match the certificate) is logged and
//! ignored, and the previous certificate keeps serving. So is a pair that loads but must not be
//! served: not valid yet or any more, or no longer valid for a name the webhook is called by that
//! the certificate it would replace is valid for (see [`CertResolver::admits`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ClientHello, ParsedCertificate, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, version};
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, ResultLabels};

/// Where the serving certificate comes from.
#[derive(Clone, Debug)]
pub enum CertSource {
    /// Generated at startup, valid for localhost and 127.0.0.1: for local use and tests.
    SelfSigned,
    /// PEM files, polled.
    Files(CertFiles),
}

/// The certificate files and what a pair read from them must meet to be served.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// How often both are read again.
    pub interval: Duration,
    /// The names clients call the webhook by (in a cluster, `<service>.<namespace>.svc`, the
    /// apiserver's): a replacement must stay valid for each one the current certificate is valid for.
    pub called_by: Vec<String>,
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
    #[error("the certificate is not valid before {}; it is served from then on unless the files change", at(*.0))]
    NotYetValid(i64),
    #[error("the certificate expired at {}", at(*.0))]
    Expired(i64),
    #[error(
        "the certificate is not valid for {0}, which the webhook is called by and the serving certificate is valid for"
    )]
    DropsName(String),
}

fn at(unix: i64) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(unix.max(0).unsigned_abs()))
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

    /// Whether `loaded` may replace what is served now, at `now` (Unix seconds): it must be valid
    /// now, and valid for each of `called_by` that the current certificate is valid for. Only a
    /// name lost matters: a certificate for localhost, with no in-cluster name, may be replaced
    /// by anything valid, and the first one loaded is judged on its dates alone.
    pub fn admits(&self, loaded: &Loaded, called_by: &[String], now: i64) -> Result<(), CertLoadError> {
        if now < loaded.not_before {
            return Err(CertLoadError::NotYetValid(loaded.not_before));
        }
        if now > loaded.not_after {
            return Err(CertLoadError::Expired(loaded.not_after));
        }
        let Some(current) = self.current.load_full() else { return Ok(()) };
        match called_by.iter().find(|name| valid_for(&current, name) && !valid_for(&loaded.key, name)) {
            Some(lost) => Err(CertLoadError::DropsName(lost.clone())),
            None => Ok(()),
        }
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

/// Whether the leaf of `key` is valid for `name`, as a TLS client verifies it (subject
/// alternative names only, wildcards in the first label).
fn valid_for(key: &CertifiedKey, name: &str) -> bool {
    let (Ok(leaf), Ok(name)) = (key.end_entity_cert(), ServerName::try_from(name)) else { return false };
    ParsedCertificate::try_from(leaf).is_ok_and(|leaf| rustls::client::verify_server_name(&leaf, &name).is_ok())
}

/// A certificate chain with its key, checked to belong together, and the leaf's validity.
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// The leaf's notBefore, in Unix seconds.
    pub not_before: i64,
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
    let (not_before, not_after) = (parsed.validity().not_before.timestamp(), parsed.validity().not_after.timestamp());
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
    Ok(Loaded { key: Arc::new(certified), not_before, not_after })
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

/// Keeps `resolver` supplied from `files` until `shutdown`, polling them every `files.interval`
/// (the first poll at once).
pub async fn watch_files(files: CertFiles, resolver: Arc<CertResolver>, metrics: Metrics, shutdown: CancellationToken) {
    let interval = files.interval;
    let mut reloader = Reloader { files, resolver, metrics, seen: None, early: None };
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
    files: CertFiles,
    resolver: Arc<CertResolver>,
    metrics: Metrics,
    seen: Option<Seen>,
    /// The pair the files hold, refused only for not being valid yet: a clock a little behind the
    /// issuer's must not leave it unserved until the files change again.
    early: Option<Loaded>,
}

impl Reloader {
    /// Loads the pair if it changed since the last poll. Each distinct state is logged and counted
    /// once, so a pair that stays broken does not flood the log or the failure counter.
    async fn poll(&mut self) {
        let read = read_pair(&self.files.cert, &self.files.key).await;
        let seen = match &read {
            Ok((cert, key)) => Seen::Contents(cert.clone(), key.clone()),
            Err(e) => Seen::Unreadable(e.to_string()),
        };
        let now = unix_now();
        if self.seen.as_ref() == Some(&seen) {
            if let Some(early) = self.early.take_if(|early| now >= early.not_before) {
                self.judge(Ok(early), now);
            }
            return;
        }
        self.seen = Some(seen);
        self.early = None;
        // Parsed only when the bytes changed: most polls find the same files.
        let (cert_name, key_name) = (shown(&self.files.cert), shown(&self.files.key));
        self.judge(read.and_then(|(cert, key)| load_pem(&cert, &key, &cert_name, &key_name)), now);
    }

    /// Serves `loaded` if the resolver admits it; logs and counts the outcome.
    fn judge(&mut self, loaded: Result<Loaded, CertLoadError>, now: i64) {
        let admitted = loaded.and_then(|loaded| match self.resolver.admits(&loaded, &self.files.called_by, now) {
            Ok(()) => Ok(loaded),
            Err(e) => {
                if matches!(e, CertLoadError::NotYetValid(_)) {
                    self.early = Some(loaded);
                }
                Err(e)
            }
        });
        let result = match admitted {
            Ok(loaded) => {
                self.resolver.install(&loaded, &self.metrics);
                let cert = self.files.cert.display();
                tracing::info!(cert = %cert, not_after = loaded.not_after, "serving certificate loaded");
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

fn unix_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
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

    const HOST: &str = "sandcap-webhook.sandcap-system.svc";
    const NOW: i64 = 1_800_000_000;

    /// A pair for `names`, valid from `from` to `until` (Unix seconds).
    fn pair(names: &[&str], from: i64, until: i64) -> Loaded {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.not_before = time::OffsetDateTime::from_unix_timestamp(from).unwrap();
        params.not_after = time::OffsetDateTime::from_unix_timestamp(until).unwrap();
        let cert = params.self_signed(&key).unwrap();
        load_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes(), "c", "k").unwrap()
    }

    fn serving(loaded: &Loaded) -> CertResolver {
        let resolver = CertResolver::default();
        resolver.install(loaded, &Metrics::register(&mut prometheus_client::registry::Registry::default()));
        resolver
    }

    #[test]
    fn only_a_pair_within_its_validity_period_is_admitted() {
        let (none, called_by) = (CertResolver::default(), [HOST.to_string()]);
        let early = none.admits(&pair(&[HOST], NOW + 1, NOW + 86_400), &called_by, NOW);
        assert!(matches!(early, Err(CertLoadError::NotYetValid(t)) if t == NOW + 1), "{early:?}");
        let expired = none.admits(&pair(&[HOST], NOW - 86_400, NOW - 1), &called_by, NOW);
        assert!(matches!(expired, Err(CertLoadError::Expired(t)) if t == NOW - 1), "{expired:?}");
        // Both ends are inclusive, as in X.509.
        none.admits(&pair(&[HOST], NOW, NOW), &called_by, NOW).unwrap();
        assert_eq!(
            CertLoadError::Expired(NOW).to_string(),
            "the certificate expired at 2027-01-15T08:00:00Z",
            "a time the log reader can read"
        );
    }

    #[test]
    fn a_replacement_must_keep_each_called_name_the_served_certificate_has() {
        let called_by = [HOST.to_string()];
        let valid = |names: &[&str]| pair(names, NOW - 60, NOW + 86_400);
        // The first certificate is judged on its dates alone (a localhost one for local use).
        CertResolver::default().admits(&valid(&["localhost"]), &called_by, NOW).unwrap();

        let in_cluster = serving(&valid(&["sandcap-webhook", HOST]));
        let lost = in_cluster.admits(&valid(&["localhost", "sandcap-webhook.other.svc"]), &called_by, NOW);
        assert!(matches!(&lost, Err(CertLoadError::DropsName(name)) if name == HOST), "{lost:?}");
        in_cluster.admits(&valid(&[HOST]), &called_by, NOW).unwrap();
        in_cluster.admits(&valid(&["*.sandcap-system.svc"]), &called_by, NOW).unwrap();
        let too_wide = in_cluster.admits(&valid(&["*.svc"]), &called_by, NOW);
        assert!(matches!(too_wide, Err(CertLoadError::DropsName(_))), "a wildcard stands for one label: {too_wide:?}");

        // Served for localhost only: no called name to keep.
        let local = serving(&valid(&["localhost", "127.0.0.1"]));
        local.admits(&valid(&["other.example"]), &called_by, NOW).unwrap();
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
