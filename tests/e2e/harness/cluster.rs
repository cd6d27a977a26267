//! A real Kubernetes control plane for the tests, envtest-style: etcd and kube-apiserver built from
//! their Go modules by `testcluster/build.sh`, with token authentication and RBAC. etcd listens on
//! Unix sockets, the apiserver on a loopback address of its own (see [`apiserver_address`]): no
//! port is picked, released and bound later, when another test's connection may have taken it.
//!
//! Every process is started with `PR_SET_PDEATHSIG`, from a thread that lives as long as the test
//! process, so nothing outlives the tests even when one panics or the runner is killed; `Drop`
//! stops them in order when a cluster goes out of scope.

use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use rcgen::KeyPair;

// Files of their own; `path` keeps them found when this file is included by path alone
// (examples/cluster.rs).
#[path = "../../support/ca.rs"]
mod ca;
pub use ca::TestCa;
#[path = "processes.rs"]
pub mod processes;
pub use processes::{spawn_logged, stop, tail};
#[path = "proxy.rs"]
mod proxy;
pub use proxy::Proxy;
#[path = "testcluster.rs"]
pub mod testcluster;
pub use testcluster::{Binaries, repo_root};

const ADMIN_TOKEN: &str = "sandcap-e2e-admin";
const STARTUP: Duration = Duration::from_secs(120);
/// The apiserver reaches webhooks through an HTTP CONNECT proxy of the tests, which stands in for
/// cluster networking: a Service's DNS name is routed to a loopback port. It listens on a Unix
/// socket (a TCP proxy would have to speak TLS).
const EGRESS: &str = "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: SOCKET\n";
/// Every request of a ServiceAccount (sandcap's) is audited, so tests can count what it asked for.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  userGroups: [\"system:serviceaccounts\"]\n- level: None\n";

/// An address for an apiserver, which cannot listen on port 0 and report the port it got
/// (`--secure-port 0` serves nothing): a random address of 127.0.0.0/8 outside 127.0.x.x, with a
/// port free there. Releasing that port races with nothing: a connection to loopback leaves from
/// 127.0.0.1 (the kernel's route for 127.0.0.0/8 says `src 127.0.0.1`), so no outbound connection
/// ever holds a port of this address; only a listener on 0.0.0.0 could take it, which
/// [`Cluster::start`] answers by trying another address.
fn apiserver_address() -> SocketAddr {
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish().to_be_bytes();
    let ip = Ipv4Addr::new(127, random[0].clamp(1, 254), random[1], random[2].clamp(1, 254));
    TcpListener::bind((ip, 0)).and_then(|l| l.local_addr()).expect("a free port on a loopback address")
}

/// kube-apiserver could not bind its address (the end of its log).
struct AddressTaken(String);

/// etcd and kube-apiserver of one minor, running until dropped.
pub struct Cluster {
    pub bin: Binaries,
    pub dir: PathBuf,
    /// Where the apiserver listens (see [`apiserver_address`]).
    pub addr: SocketAddr,
    pub ca: TestCa,
    etcd: Mutex<Option<Child>>,
    apiserver: Mutex<Option<Child>>,
    /// The admin kubeconfig (`system:masters`), for kubectl and for clients.
    pub kubeconfig: PathBuf,
    /// Where the apiserver's cluster-bound connections (webhook calls) go: see [`Proxy`].
    pub proxy: Proxy,
}

impl Cluster {
    /// Starts etcd and kube-apiserver and waits for `/readyz`.
    pub fn start(bin: Binaries) -> Cluster {
        let dir = repo_root().join("target/e2e").join(format!("{}-{}", bin.minor, std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("pki")).expect("cluster dir");
        let ca = TestCa::new("sandcap e2e cluster CA");
        fs::write(dir.join("pki/ca.crt"), &ca.pem).expect("ca");
        let sa_key = KeyPair::generate().expect("service account key");
        fs::write(dir.join("pki/sa.key"), sa_key.serialize_pem()).expect("sa key");
        fs::write(dir.join("pki/sa.pub"), sa_key.public_key_pem()).expect("sa pub");
        fs::write(dir.join("tokens.csv"), format!("{ADMIN_TOKEN},admin,admin,system:masters\n")).expect("tokens");
        fs::write(dir.join("audit-policy.yaml"), AUDIT_POLICY).expect("audit policy");
        let kubeconfig = dir.join("admin.kubeconfig");
        let proxy = Proxy::start(&dir.join("proxy.sock"));
        fs::write(dir.join("egress.yaml"), EGRESS.replace("SOCKET", &dir.join("proxy.sock").display().to_string()))
            .expect("egress config");
        let mut cluster = Cluster {
            bin,
            dir,
            addr: apiserver_address(),
            ca,
            etcd: Mutex::new(None),
            apiserver: Mutex::new(None),
            kubeconfig,
            proxy,
        };
        cluster.start_etcd();
        for attempt in 1.. {
            cluster.ca.write_serving(&cluster.dir.join("pki"), &[cluster.addr.ip().to_string()]);
            fs::write(&cluster.kubeconfig, kubeconfig_yaml(cluster.addr, &cluster.ca.pem, ADMIN_TOKEN))
                .expect("kubeconfig");
            match cluster.try_start_apiserver(&[]) {
                Ok(()) => break,
                Err(AddressTaken(_)) if attempt < 5 => cluster.addr = apiserver_address(),
                Err(AddressTaken(log)) => panic!("kube-apiserver found its address taken 5 times:\n{log}"),
            }
        }
        cluster
    }

    fn start_etcd(&self) {
        // etcd wants `host:port` even in a Unix URL, and makes `unix://etcd:2379` the socket file
        // `etcd:2379` of its working directory.
        let (client_url, peer_url) = ("unix://etcd:2379", "unix://etcd:2380");
        let mut command = Command::new(self.bin.path("etcd"));
        command
            .current_dir(&self.dir)
            .args(["--name", "e2e", "--data-dir"])
            .arg(self.dir.join("etcd"))
            .args(["--listen-client-urls", client_url, "--advertise-client-urls", client_url])
            .args(["--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url])
            .args(["--initial-cluster", &format!("e2e={peer_url}")])
            // A test cluster loses nothing worth an fsync; etcd's own default is far slower.
            .arg("--unsafe-no-fsync");
        let child = spawn_logged(command, &self.dir.join("etcd.log"));
        *self.etcd.lock().unwrap() = Some(child);
    }

    /// Starts kube-apiserver over the same etcd (also after [`Cluster::stop_apiserver`]), on the
    /// same address.
    pub fn start_apiserver(&self) {
        self.start_apiserver_with(&[]);
    }

    /// As [`Cluster::start_apiserver`], with `flags` added to its command line.
    pub fn start_apiserver_with(&self, flags: &[&str]) {
        if let Err(AddressTaken(log)) = self.try_start_apiserver(flags) {
            panic!("kube-apiserver found {} taken:\n{log}", self.addr);
        }
    }

    fn try_start_apiserver(&self, flags: &[&str]) -> Result<(), AddressTaken> {
        let pki = self.dir.join("pki");
        let arg = |name: &str| pki.join(name).into_os_string();
        let ip = self.addr.ip().to_string();
        let mut command = Command::new(self.bin.path("kube-apiserver"));
        command
            // etcd's client takes `unix://` and an absolute path.
            .args(["--etcd-servers", &format!("unix://{}", self.dir.join("etcd:2379").display())])
            .args(["--bind-address", &ip, "--advertise-address", &ip])
            // The `kubernetes` Service's endpoints may not be loopback, and nothing here needs them.
            .args(["--endpoint-reconciler-type", "none"])
            .args(["--secure-port", &self.addr.port().to_string()])
            .arg("--tls-cert-file")
            .arg(arg("tls.crt"))
            .arg("--tls-private-key-file")
            .arg(arg("tls.key"))
            .arg("--client-ca-file")
            .arg(arg("ca.crt"))
            .arg("--token-auth-file")
            .arg(self.dir.join("tokens.csv"))
            .args(["--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.0.0.0/24"])
            .args(["--service-account-issuer", "https://kubernetes.default.svc"])
            .arg("--service-account-key-file")
            .arg(arg("sa.pub"))
            .arg("--service-account-signing-key-file")
            .arg(arg("sa.key"))
            // Pods never run here; priority and fairness only adds its own objects and load.
            .args(["--enable-priority-and-fairness=false", "--allow-privileged=true"])
            .arg("--egress-selector-config-file")
            .arg(self.dir.join("egress.yaml"))
            .arg("--audit-policy-file")
            .arg(self.dir.join("audit-policy.yaml"))
            .arg("--audit-log-path")
            .arg(self.dir.join("audit.log"))
            .args(["--audit-log-format", "json", "--audit-log-mode", "blocking"])
            .args(["--cert-dir"])
            .arg(self.dir.join("apiserver-certs"))
            .args(flags);
        let log = self.dir.join("apiserver.log");
        let logged_before = fs::metadata(&log).map_or(0, |m| m.len() as usize);
        let child = spawn_logged(command, &log);
        *self.apiserver.lock().unwrap() = Some(child);
        self.wait_ready().map_err(|status| {
            let text = fs::read_to_string(&log).unwrap_or_default();
            let this_run = text.get(logged_before..).unwrap_or_default();
            assert!(
                this_run.contains("address already in use"),
                "kube-apiserver exited with {status}:\n{}",
                tail(&log, 40)
            );
            AddressTaken(tail(&log, 5))
        })
    }

    /// Stops kube-apiserver (etcd keeps running), as an outage would.
    pub fn stop_apiserver(&self) {
        if let Some(mut child) = self.apiserver.lock().unwrap_or_else(|e| e.into_inner()).take() {
            stop(&mut child);
        }
    }

    /// Sends `signal` to kube-apiserver: SIGSTOP makes it a hung apiserver (its connections stay
    /// open and nothing answers), SIGCONT resumes it.
    pub fn signal_apiserver(&self, signal: i32) {
        if let Some(child) = self.apiserver.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// Waits for `/readyz`; the exit status if the apiserver exits first.
    fn wait_ready(&self) -> Result<(), std::process::ExitStatus> {
        let deadline = Instant::now() + STARTUP;
        let url = format!("https://{}/readyz", self.addr);
        // Its own thread and runtime: this is called from plain threads and from async tests alike.
        let ready = || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let _entered = runtime.enter();
            let ca = reqwest::Certificate::from_pem(self.ca.pem.as_bytes()).expect("ca");
            let http = reqwest::Client::builder().add_root_certificate(ca).build().expect("http client");
            let request = http.get(&url).bearer_auth(ADMIN_TOKEN).timeout(Duration::from_secs(2));
            runtime.block_on(request.send()).is_ok_and(|r| r.status().is_success())
        };
        loop {
            if std::thread::scope(|s| s.spawn(ready).join().unwrap_or(false)) {
                return Ok(());
            }
            let exited = self.apiserver.lock().unwrap().as_mut().and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(status);
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver {} not ready after {STARTUP:?}:\n{}",
                self.bin.version(),
                tail(&self.dir.join("apiserver.log"), 40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A client authenticated as `system:masters`.
    pub async fn admin(&self) -> Client {
        client_from(&self.kubeconfig).await
    }

    /// A kubeconfig for ServiceAccount `namespace/name` with a fresh token (TokenRequest), so a
    /// process runs with exactly that account's RBAC.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let api = Api::<ServiceAccount>::namespaced(self.admin().await, namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec { expiration_seconds: Some(24 * 3600), ..Default::default() },
            ..Default::default()
        };
        let token = api
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .unwrap_or_else(|e| panic!("TokenRequest for {namespace}/{name}: {e}"))
            .status
            .expect("token status")
            .token;
        let path = self.dir.join(format!("{namespace}-{name}.kubeconfig"));
        fs::write(&path, kubeconfig_yaml(self.addr, &self.ca.pem, &token)).expect("kubeconfig");
        path
    }

    /// The audit log so far: one JSON event per request of a ServiceAccount.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        let text = fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// Runs kubectl against this cluster as admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_stdin(args, "")
    }

    /// Runs kubectl with `stdin` (for `-f -`).
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(self.bin.path("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        child.stdin.take().expect("stdin").write_all(stdin.as_bytes()).expect("stdin written");
        child.wait_with_output().expect("kubectl finishes")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_apiserver();
        if let Some(mut child) = self.etcd.lock().unwrap_or_else(|e| e.into_inner()).take() {
            stop(&mut child);
        }
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

pub async fn client_from(kubeconfig: &Path) -> Client {
    let config = Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await.expect("config");
    Client::try_from(config).expect("client")
}

fn kubeconfig_yaml(addr: SocketAddr, ca_pem: &str, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: https://{addr}\n    certificate-authority-data: {ca}\nusers:\n- name: e2e\n  user:\n    token: {token}\ncontexts:\n- name: e2e\n  context: {{cluster: e2e, user: e2e}}\ncurrent-context: e2e\n"
    )
}
