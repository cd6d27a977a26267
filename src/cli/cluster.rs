//! The connection of the commands that read the live cluster (`explain`, `check`): the usual
//! kubeconfig and context flags, as kubectl and its plugins read them, or the pod's service account
//! in a cluster; every request bounded in time.

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::error::CliError;

/// The flags every live command takes (kubectl's names).
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// The kubeconfig file [default: $KUBECONFIG, else ~/.kube/config, else the pod's service
    /// account].
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: its current context].
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use [default: the context's].
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use [default: the context's].
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// How long one request to the apiserver may take; `0`, as for kubectl, means no limit.
    #[arg(long, global = true, default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub request_timeout: Duration,
    /// The user to impersonate for every request, as kubectl's `--as`.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub impersonate: Option<String>,
    /// A group to impersonate, with `--as`; repeat it for more than one, as kubectl's `--as-group`.
    #[arg(long = "as-group", global = true, value_name = "GROUP", requires = "impersonate")]
    pub impersonate_groups: Vec<String>,
}

/// A client, and the namespace of the kubeconfig context (or of the pod) for commands that
/// default to it.
pub struct Connection {
    pub client: Client,
    pub default_namespace: String,
}

impl ClusterArgs {
    /// Reads the kubeconfig (`--kubeconfig`, else `KUBECONFIG` or `~/.kube/config`, else the
    /// in-cluster service account, as `kube::Config::infer` does) with the context flags applied.
    pub async fn connect(&self) -> Result<Connection, CliError> {
        let options =
            KubeConfigOptions { context: self.context.clone(), cluster: self.cluster.clone(), user: self.user.clone() };
        let no_config = |e: &dyn std::fmt::Display| CliError::Usage(format!("no Kubernetes client configuration: {e}"));
        let mut config = match &self.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path)
                    .map_err(|e| CliError::Usage(format!("{}: not a usable kubeconfig: {e}", path.display())))?;
                Config::from_custom_kubeconfig(file, &options).await.map_err(|e| no_config(&e))?
            }
            None if self.context.is_some() || self.cluster.is_some() || self.user.is_some() => {
                Config::from_kubeconfig(&options).await.map_err(|e| no_config(&e))?
            }
            None => Config::infer().await.map_err(|e| no_config(&e))?,
        };
        let limit = Some(self.request_timeout).filter(|t| !t.is_zero());
        (config.connect_timeout, config.read_timeout, config.write_timeout) = (limit, limit, limit);
        if let Some(user) = &self.impersonate {
            config.auth_info.impersonate = Some(user.clone());
            config.auth_info.impersonate_groups =
                Some(self.impersonate_groups.clone()).filter(|groups| !groups.is_empty());
        }
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(crate::run::client_config(config)).map_err(|e| no_config(&e))?;
        Ok(Connection { client, default_namespace })
    }
}

/// The runtime of one live command: one thread is enough for a handful of requests.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start the async runtime: {e}")))
}

/// A request to the apiserver that failed, by what it was doing (`reading CRD x`).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{what}: {}", api_error(.error))]
    Failed { what: String, error: kube::Error },
    #[error("{what}: no answer within {}", humantime::format_duration(*.timeout))]
    NoAnswer { what: String, timeout: Duration },
}

/// `work`, or a failure naming `what` once `timeout` has passed: nothing may hang a command
/// unless the caller said so (`--request-timeout 0`).
pub async fn bounded<T>(
    timeout: Duration,
    what: &str,
    work: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, RequestError> {
    match within(timeout, work).await {
        Some(Ok(value)) => Ok(value),
        Some(Err(error)) => Err(RequestError::Failed { what: what.to_string(), error }),
        None => Err(RequestError::NoAnswer { what: what.to_string(), timeout }),
    }
}

/// `work`'s output, or `None` once a `--request-timeout` has passed; a zero timeout is none, as
/// kubectl reads it.
pub async fn within<T>(timeout: Duration, work: impl Future<Output = T>) -> Option<T> {
    if timeout.is_zero() {
        return Some(work.await);
    }
    tokio::time::timeout(timeout, work).await.ok()
}

/// How many objects one list request asks for.
const PAGE: u32 = 250;

/// Every object of `resource` in the cluster, handed to `each` a page at a time, each request
/// within `timeout`: what `check` and `plan` read, never all of it in one answer.
pub async fn list_pages(
    client: &Client,
    resource: &ApiResource,
    timeout: Duration,
    mut each: impl FnMut(Vec<DynamicObject>),
) -> Result<(), RequestError> {
    let api = Api::<DynamicObject>::all_with(client.clone(), resource);
    let what = format!("listing {}s", resource.kind);
    let mut token = None::<String>;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = bounded(timeout, &what, api.list(&params)).await?;
        each(page.items);
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(());
        }
    }
}

/// The apiserver's own message for an API error, else the client's.
pub fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
