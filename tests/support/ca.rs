//! A test CA and the serving certificates it signs (the apiserver's, the webhooks', https workers'),
//! included by path where needed (a crate may hold it once).

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// A test CA that signs serving certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let pem = params.self_signed(&key).expect("self-signed CA").pem();
        TestCa { issuer: Issuer::new(params, key), pem }
    }

    /// A serving certificate for loopback and `names`: (certificate PEM, key PEM).
    pub fn serving(&self, names: &[String]) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let loopback = ["127.0.0.1".to_string(), "localhost".to_string()];
        let mut params = CertificateParams::new([&loopback[..], names].concat()).expect("params");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }

    /// Writes a serving pair for loopback and `names` into `dir` as `tls.crt`/`tls.key`; returns
    /// both paths.
    pub fn write_serving(&self, dir: &Path, names: &[String]) -> (PathBuf, PathBuf) {
        let (cert, key) = self.serving(names);
        fs::create_dir_all(dir).expect("cert dir");
        let (cert_path, key_path) = (dir.join("tls.crt"), dir.join("tls.key"));
        fs::write(&cert_path, cert).expect("write cert");
        fs::write(&key_path, key).expect("write key");
        (cert_path, key_path)
    }
}
