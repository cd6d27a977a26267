//! Whether a webhook's `caBundle` verifies the certificate its server presents, as the apiserver
//! verifies it before every review: [`verify`] decides, purely; [`presented`] fetches the chain
//! by a TLS handshake with the webhook, taking whatever it presents (a verdict needs it even when
//! it would not verify).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{VerifierBuilderError, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// The serving certificate, verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub not_after: SystemTime,
}

impl Verified {
    /// Whole days left until it expires.
    pub fn days_left(&self, now: SystemTime) -> u64 {
        self.not_after.duration_since(now).unwrap_or_default().as_secs() / 86_400
    }
}

/// Why a caBundle does not verify a served chain.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("the caBundle is not PEM")]
    BundleNotPem,
    #[error("the caBundle holds a certificate that is no CA: {0}")]
    NotACa(rustls::Error),
    #[error("the caBundle holds no certificate")]
    EmptyBundle,
    #[error("no certificate was presented")]
    NonePresented,
    #[error("the caBundle cannot be used: {0}")]
    Unusable(VerifierBuilderError),
    #[error("{0} is no server name")]
    ServerName(String),
    /// The verifier's own words: expired, not valid for the name, unknown issuer.
    #[error("{0}")]
    Refused(rustls::Error),
    #[error("unreadable certificate: {0}")]
    Unreadable(x509_parser::nom::Err<x509_parser::error::X509Error>),
}

/// Verifies `chain` (leaf first) for `server_name` against the CAs of `bundle` (PEM) at `now`.
pub fn verify(
    bundle: &[u8],
    chain: &[CertificateDer<'static>],
    server_name: &str,
    now: SystemTime,
) -> Result<Verified, VerifyError> {
    let mut roots = RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(bundle) {
        let der = der.map_err(|_| VerifyError::BundleNotPem)?;
        roots.add(der).map_err(VerifyError::NotACa)?;
    }
    if roots.is_empty() {
        return Err(VerifyError::EmptyBundle);
    }
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(VerifyError::NonePresented);
    };
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), crate::tls::provider())
        .build()
        .map_err(VerifyError::Unusable)?;
    let name =
        ServerName::try_from(server_name.to_string()).map_err(|_| VerifyError::ServerName(server_name.to_string()))?;
    let at = UnixTime::since_unix_epoch(now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default());
    verifier.verify_server_cert(leaf, intermediates, &name, &[], at).map_err(VerifyError::Refused)?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).map_err(VerifyError::Unreadable)?;
    let seconds = parsed.validity().not_after.timestamp().max(0).unsigned_abs();
    Ok(Verified { not_after: SystemTime::UNIX_EPOCH + Duration::from_secs(seconds) })
}

/// Why PEM text (said after its name) holds no chain.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PemError {
    #[error("not PEM")]
    NotPem,
    #[error("holds no certificate")]
    NoCertificate,
}

/// The chain from PEM text (a Secret's `tls.crt`).
pub fn from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let chain = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|_| PemError::NotPem)?;
    if chain.is_empty() { Err(PemError::NoCertificate) } else { Ok(chain) }
}

/// Why [`presented`] got no chain.
#[derive(Debug)]
pub enum NotPresented {
    /// No connection: the name does not resolve or nothing answers from here (outside the cluster).
    Unreachable(String),
    /// A connection, but no TLS handshake.
    Handshake(String),
}

/// The chain the server at `host:port` presents for `server_name`, within `timeout`.
pub async fn presented(
    host: &str,
    port: u16,
    server_name: &str,
    timeout: Duration,
) -> Result<Vec<CertificateDer<'static>>, NotPresented> {
    let within = |what: &str| format!("{what} within {}", humantime::format_duration(timeout));
    let tcp = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| NotPresented::Unreachable(within("no connection")))?
        .map_err(|e| NotPresented::Unreachable(e.to_string()))?;
    let capture = Arc::new(Capture { chain: Mutex::default(), provider: crate::tls::provider() });
    let config = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| NotPresented::Handshake(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(capture.clone())
        .with_no_client_auth();
    let name = ServerName::try_from(server_name.to_string())
        .map_err(|_| NotPresented::Handshake(format!("{server_name} is no server name")))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(timeout, connector.connect(name, tcp))
        .await
        .map_err(|_| NotPresented::Handshake(within("no TLS handshake")))?
        .map_err(|e| NotPresented::Handshake(e.to_string()))?;
    let chain = std::mem::take(&mut *capture.chain.lock().expect("not poisoned"));
    Ok(chain)
}

/// Takes the presented chain without judging it ([`verify`] judges it), but checks the handshake
/// signatures, so the chain is the one of the server that holds its key.
#[derive(Debug)]
struct Capture {
    chain: Mutex<Vec<CertificateDer<'static>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let chain = std::iter::once(end_entity).chain(intermediates).map(|c| c.clone().into_owned()).collect();
        *self.chain.lock().expect("not poisoned") = chain;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{dns_names, generate};

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn the_bundle_verifies_its_own_serving_certificate_for_the_service_name_only() {
        let now = SystemTime::now();
        let names = dns_names("sandcap-webhook", "sandcap-system");
        let m = generate(&names, now).unwrap();
        let chain = from_pem(m.serving.cert().pem().as_bytes()).unwrap();
        let bundle = m.ca_bundle();
        let ok = verify(bundle.as_bytes(), &chain, "sandcap-webhook.sandcap-system.svc", now).unwrap();
        assert!((364..=365).contains(&ok.days_left(now)), "{}", ok.days_left(now));
        assert_eq!(ok.days_left(now + 100 * DAY), ok.days_left(now) - 100);
        let wrong_name = verify(bundle.as_bytes(), &chain, "evil.example", now).unwrap_err().to_string();
        assert!(wrong_name.contains("certificate not valid for name \"evil.example\""), "{wrong_name}");
        let expired = verify(bundle.as_bytes(), &chain, "sandcap-webhook.sandcap-system.svc", now + 400 * DAY);
        let expired = expired.unwrap_err().to_string();
        assert!(expired.contains("expired"), "{expired}");
        let other = generate(&names, now).unwrap().ca_bundle();
        let unknown =
            verify(other.as_bytes(), &chain, "sandcap-webhook.sandcap-system.svc", now).unwrap_err().to_string();
        assert!(unknown.contains("UnknownIssuer"), "{unknown}");
    }

    #[test]
    fn an_empty_or_broken_bundle_or_chain_is_named() {
        let now = SystemTime::now();
        let m = generate(&["a.b.svc".to_string()], now).unwrap();
        let chain = from_pem(m.serving.cert().pem().as_bytes()).unwrap();
        let refused =
            |bundle: &[u8], chain: &[CertificateDer<'static>]| verify(bundle, chain, "a.b.svc", now).unwrap_err();
        assert_eq!(refused(b"", &chain).to_string(), "the caBundle holds no certificate");
        assert_eq!(refused(m.ca_bundle().as_bytes(), &[]).to_string(), "no certificate was presented");
        assert_eq!(from_pem(b"nothing here").unwrap_err().to_string(), "holds no certificate");
    }
}
