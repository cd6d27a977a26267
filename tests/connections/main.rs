//! The connection limits of docs/webhook.md ("Connections", "Memory"), against the real `sandcap`
//! binary (a debug build) with its default limits. Loopback has many addresses, so each client
//! below is a client address of its own: a neighbour at 127.0.0.2 holds hundreds of connections of
//! every kind on both ports, floods HTTP/2 streams, trickles bodies and heads, while the kubelet
//! (127.0.0.3) probes `/healthz` and the apiserver (127.0.0.4) sends reviews.

#[path = "../support/mod.rs"]
mod support;

mod floods;
mod hoarding;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const NEIGHBOUR: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const KUBELET: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
const APISERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4));

/// The budgets these tests hold sandcap to (docs/webhook.md).
const PROBE_WITHIN: Duration = Duration::from_secs(1);
const REVIEW_WITHIN: Duration = Duration::from_secs(2);
const PEAK: u64 = 128 * 1024 * 1024;

/// The tests that measure how fast sandcap answers run one at a time, so that on a small machine
/// none measures another's load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn addr(url: &str) -> SocketAddr {
    let host = url.trim_start_matches("https://").trim_start_matches("http://");
    host.split('/').next().unwrap().parse().unwrap()
}

async fn connect_from(local: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    socket.connect(to).await
}

/// sandcap's certificate is self-signed and these clients only need a channel: accept it, and
/// its handshake signatures, unchecked.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

/// What a handshake signature check answers.
type Signature = Result<HandshakeSignatureValid, rustls::Error>;

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(&self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct) -> Signature {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(&self, _: &[u8], _: &CertificateDer<'_>, _: &DigitallySignedStruct) -> Signature {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The apiserver's client: from its own address, pooled keep-alive connections, sandcap's
/// certificate unchecked, 10 s for an answer.
fn apiserver_client() -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(APISERVER)
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn tls_connector(alpn: &[u8]) -> tokio_rustls::TlsConnector {
    let provider = sandcap::tls::provider();
    let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Writes `request` and reads one whole answer (by its Content-Length); empty if the connection
/// breaks first.
async fn http1(io: &mut (impl AsyncReadExt + AsyncWriteExt + Unpin), request: &[u8]) -> String {
    if io.write_all(request).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let mut chunk = [0; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase().strip_prefix("content-length:").map(|n| n.trim().to_string())
                })
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            if answer.len() >= end + 4 + length {
                return text.into_owned();
            }
        }
        match io.read(&mut chunk).await {
            Ok(n) if n > 0 => answer.extend_from_slice(&chunk[..n]),
            _ => return String::from_utf8_lossy(&answer).into_owned(),
        }
    }
}
