//! The certificates and the Secret that holds them: parsing, checking, creating a CA, issuing.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use x509_parser::error::X509Error;
use x509_parser::pem::Pem;

pub(super) const HOUR: Duration = Duration::from_secs(60 * 60);

/// Lifetime of a CA sandcap creates. Long, because replacing a CA takes a publish-then-switch dance.
pub const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);
/// Lifetime of a serving certificate (capped at its CA's expiry).
pub const SERVING_LIFETIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// A next CA must sit in every webhook's caBundle this long before it signs anything: apiservers
/// watch webhook configurations, so a few seconds would do; an hour leaves room for a lagging one.
pub const CA_PUBLISH_GRACE: Duration = HOUR;
/// A retired CA stays in the caBundle this long after the switch: the kubelet takes up to a minute
/// or two to refresh a mounted Secret, and the file reloader polls every few seconds after that.
pub const CA_RETIRE_GRACE: Duration = HOUR;
/// Certificates start this long before "now", so a node whose clock is a little behind accepts them.
pub(super) const BACKDATE: Duration = HOUR;
/// Renew a certificate once less than 1/RENEW_DIVISOR of its lifetime is left.
pub(super) const RENEW_DIVISOR: u32 = 3;
/// How soon a failed round is retried (capped by the check interval).
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Rounds of read-decide-write lost to other replicas before one reconcile gives up until next time.
pub(super) const MAX_ATTEMPTS: u32 = 5;

/// Keys of the Secret. `tls.crt`/`tls.key` (the only keys the pod mounts) and `ca.crt` follow the
/// kubernetes.io/tls and cert-manager conventions.
pub const TLS_CRT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const CA_CRT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const NEXT_CA_CRT: &str = "next-ca.crt";
pub const NEXT_CA_KEY: &str = "next-ca.key";
pub const RETIRED_CA_CRT: &str = "retired-ca.crt";

/// One parsed X.509 certificate, with what the decisions need.
#[derive(Clone, Debug)]
pub struct Cert {
    pub(super) pem: String,
    pub(super) der: Vec<u8>,
    pub(super) not_before: SystemTime,
    pub(super) not_after: SystemTime,
    pub(super) subject: Vec<u8>,
    pub(super) issuer: Vec<u8>,
    pub(super) common_name: String,
    pub(super) dns_names: Vec<String>,
    pub(super) public_key: Vec<u8>,
}

/// Why PEM text is not one usable certificate; said after the key that holds it, never quoting it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CertError {
    #[error("holds more than one PEM block")]
    SeveralBlocks,
    #[error("is not a PEM certificate")]
    NotPem,
    #[error("is not a valid X.509 certificate ({0})")]
    NotX509(x509_parser::nom::Err<X509Error>),
    #[error("has an unreadable subjectAltName ({0})")]
    SubjectAltName(X509Error),
}

/// Why a certificate and a private key are not a usable pair.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PairError {
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("private key is not a PKCS#8 PEM key")]
    NotPkcs8,
    #[error("private key does not belong to the certificate")]
    NotItsKey,
}

/// Why the Secret's material is not usable: which key, and its problem (never its contents).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MaterialError {
    #[error("{0} is not UTF-8 text")]
    NotUtf8(&'static str),
    #[error("{0} is missing")]
    Missing(&'static str),
    /// The pair of a certificate key (the one named) and its private key.
    #[error("{0}: {1}")]
    Pair(&'static str, PairError),
    #[error("{RETIRED_CA_CRT}: {0}")]
    RetiredCa(CertError),
}

pub(super) fn unix(seconds: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(seconds.max(0).unsigned_abs())
}

pub(super) fn rfc3339(t: SystemTime) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(t)
}

impl Cert {
    /// Parses exactly one PEM `CERTIFICATE`.
    pub fn from_pem(text: &str) -> Result<Cert, CertError> {
        let mut blocks = Pem::iter_from_buffer(text.as_bytes());
        let pem = match (blocks.next(), blocks.next()) {
            (Some(Ok(pem)), None) if pem.label == "CERTIFICATE" => pem,
            (Some(Ok(_)), Some(_)) => return Err(CertError::SeveralBlocks),
            _ => return Err(CertError::NotPem),
        };
        let x509 = pem.parse_x509().map_err(CertError::NotX509)?;
        let dns_names = match x509.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    x509_parser::extensions::GeneralName::DNSName(dns) => Some(dns.to_string()),
                    _ => None,
                })
                .collect(),
            Ok(None) => Vec::new(),
            Err(e) => return Err(CertError::SubjectAltName(e)),
        };
        let cert = Cert {
            pem: text.to_string(),
            not_before: unix(x509.validity().not_before.timestamp()),
            not_after: unix(x509.validity().not_after.timestamp()),
            subject: x509.subject().as_raw().to_vec(),
            issuer: x509.issuer().as_raw().to_vec(),
            common_name: x509
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .unwrap_or_default()
                .to_string(),
            dns_names,
            public_key: x509.public_key().subject_public_key.data.to_vec(),
            der: pem.contents.clone(),
        };
        Ok(cert)
    }

    pub fn pem(&self) -> &str {
        &self.pem
    }

    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    pub fn dns_names(&self) -> &[String] {
        &self.dns_names
    }

    pub(super) fn issued_by(&self, ca: &Cert) -> bool {
        self.issuer == ca.subject
    }

    /// True once less than a third of the lifetime is left (or the certificate is not valid now).
    pub(super) fn due_for_renewal(&self, now: SystemTime) -> bool {
        let lifetime = self.not_after.duration_since(self.not_before).unwrap_or_default();
        match self.not_after.duration_since(now) {
            Ok(left) => now < self.not_before || left < lifetime / RENEW_DIVISOR,
            Err(_) => true,
        }
    }
}

/// A certificate with its private key (PKCS#8 PEM). `Debug` never prints the key.
#[derive(Clone)]
pub struct KeyedCert {
    pub(super) cert: Cert,
    pub(super) key_pem: String,
}

impl fmt::Debug for KeyedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCert").field("cert", &self.cert.common_name).field("key_pem", &"<redacted>").finish()
    }
}

impl KeyedCert {
    pub(super) fn parse(cert: &str, key: &str) -> Result<KeyedCert, PairError> {
        let parsed = Cert::from_pem(cert)?;
        let pair = KeyPair::from_pem(key).map_err(|_| PairError::NotPkcs8)?;
        if pair.public_key_raw() != parsed.public_key.as_slice() {
            return Err(PairError::NotItsKey);
        }
        Ok(KeyedCert { cert: parsed, key_pem: key.to_string() })
    }

    pub(super) fn generated(cert: rcgen::Certificate, key: &KeyPair) -> Result<KeyedCert, rcgen::Error> {
        let parsed = Cert::from_pem(&cert.pem()).map_err(|_| rcgen::Error::CouldNotParseCertificate)?;
        Ok(KeyedCert { cert: parsed, key_pem: key.serialize_pem() })
    }

    pub fn cert(&self) -> &Cert {
        &self.cert
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }
}

/// Everything the Secret holds, parsed and checked for consistency.
#[derive(Clone, Debug)]
pub struct Material {
    pub ca: KeyedCert,
    pub next_ca: Option<KeyedCert>,
    pub retired_ca: Option<Cert>,
    pub serving: KeyedCert,
}

/// What the Secret currently holds.
#[derive(Clone, Debug)]
pub enum Stored {
    Absent,
    /// Present but not usable.
    Unusable(MaterialError),
    Usable(Box<Material>),
}

impl Stored {
    pub fn from_secret(secret: Option<&Secret>) -> Stored {
        let Some(secret) = secret else {
            return Stored::Absent;
        };
        let empty = BTreeMap::new();
        match Material::from_secret_data(secret.data.as_ref().unwrap_or(&empty)) {
            Ok(material) => Stored::Usable(Box::new(material)),
            Err(reason) => Stored::Unusable(reason),
        }
    }
}

type Data = BTreeMap<String, ByteString>;

pub(super) fn text<'a>(data: &'a Data, key: &'static str) -> Result<Option<&'a str>, MaterialError> {
    data.get(key).map(|value| std::str::from_utf8(&value.0).map_err(|_| MaterialError::NotUtf8(key))).transpose()
}

pub(super) fn required<'a>(data: &'a Data, key: &'static str) -> Result<&'a str, MaterialError> {
    text(data, key)?.ok_or(MaterialError::Missing(key))
}

pub(super) fn keyed(data: &Data, cert_key: &'static str, key_key: &'static str) -> Result<KeyedCert, MaterialError> {
    KeyedCert::parse(required(data, cert_key)?, required(data, key_key)?).map_err(|e| MaterialError::Pair(cert_key, e))
}

impl Material {
    pub fn from_secret_data(data: &Data) -> Result<Material, MaterialError> {
        let ca = keyed(data, CA_CRT, CA_KEY)?;
        let serving = keyed(data, TLS_CRT, TLS_KEY)?;
        let next_ca = match text(data, NEXT_CA_CRT)? {
            Some(_) => Some(keyed(data, NEXT_CA_CRT, NEXT_CA_KEY)?),
            None => None,
        };
        let retired_ca =
            text(data, RETIRED_CA_CRT)?.map(Cert::from_pem).transpose().map_err(MaterialError::RetiredCa)?;
        Ok(Material { ca, next_ca, retired_ca, serving })
    }

    pub fn to_secret_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |key: &str, value: &str| {
            data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
        };
        put(CA_CRT, self.ca.cert.pem());
        put(CA_KEY, self.ca.key_pem());
        put(TLS_CRT, self.serving.cert.pem());
        put(TLS_KEY, self.serving.key_pem());
        if let Some(next) = &self.next_ca {
            put(NEXT_CA_CRT, next.cert.pem());
            put(NEXT_CA_KEY, next.key_pem());
        }
        if let Some(retired) = &self.retired_ca {
            put(RETIRED_CA_CRT, retired.pem());
        }
        data
    }

    /// The PEM bundle every webhook's `caBundle` must hold: the CA, then the next or retired one.
    pub fn ca_bundle(&self) -> String {
        let mut bundle = String::new();
        let certs = [Some(&self.ca.cert), self.next_ca.as_ref().map(|n| &n.cert), self.retired_ca.as_ref()];
        for cert in certs.into_iter().flatten() {
            bundle.push_str(cert.pem().trim_end());
            bundle.push('\n');
        }
        bundle
    }
}

/// `<svc>`, `<svc>.<ns>` and `<svc>.<ns>.svc`: the names the apiserver may use for the Service.
pub fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![service.to_string(), format!("{service}.{namespace}"), service_host(service, namespace)]
}

/// `<svc>.<ns>.svc`: the name the apiserver calls a webhook registered by Service by, and verifies
/// its serving certificate for.
pub fn service_host(service: &str, namespace: &str) -> String {
    format!("{service}.{namespace}.svc")
}

/// Whether a PEM bundle (a webhook's `caBundle`) contains this certificate.
pub(super) fn bundle_contains(bundle: &[u8], cert: &Cert) -> bool {
    Pem::iter_from_buffer(bundle).any(|pem| pem.is_ok_and(|pem| pem.contents == cert.der))
}

/// A new CA and a serving certificate from it.
pub fn generate(dns_names: &[String], now: SystemTime) -> Result<Material, rcgen::Error> {
    let ca = new_ca(now)?;
    let serving = issue_serving(&ca, dns_names, now)?;
    Ok(Material { ca, next_ca: None, retired_ca: None, serving })
}

/// The CA's identity: used to create it and, from its common name, to sign with it later (the
/// issuer name and key identifier in a serving certificate must match the CA's exactly).
pub(super) fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, common_name);
    // Path length 0: this CA signs serving certificates only, never another CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// A new self-signed CA (ECDSA P-256) valid for [`CA_LIFETIME`].
pub(super) fn new_ca(now: SystemTime) -> Result<KeyedCert, rcgen::Error> {
    let key = KeyPair::generate()?;
    let created = now.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs();
    // Unique per CA (time and key), so the CAs in one caBundle are told apart by name too.
    let tail = key.public_key_raw().iter().rev().take(4).map(|b| format!("{b:02x}")).collect::<String>();
    let mut params = ca_params(&format!("sandcap-webhook-ca@{created}-{tail}"));
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + CA_LIFETIME).into();
    KeyedCert::generated(params.self_signed(&key)?, &key)
}

/// A serving certificate for `dns_names` signed by `ca`, valid for [`SERVING_LIFETIME`] or until
/// the CA expires, whichever is sooner.
pub(super) fn issue_serving(ca: &KeyedCert, dns_names: &[String], now: SystemTime) -> Result<KeyedCert, rcgen::Error> {
    let issuer = Issuer::new(ca_params(&ca.cert.common_name), KeyPair::from_pem(&ca.key_pem)?);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns_names.to_vec())?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, dns_names.last().map(String::as_str).unwrap_or("sandcap"));
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + SERVING_LIFETIME).min(ca.cert.not_after).into();
    KeyedCert::generated(params.signed_by(&key, &issuer)?, &key)
}
