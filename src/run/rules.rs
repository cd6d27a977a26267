//! The flags that choose the rules: the contract version and where workers may be. `run` takes
//! them, and so do `validate` and `resolve`, so that they judge as that operator would; `plan`
//! takes the worker policy and a contract version of its own, the one it previews. Which
//! endpoints of a worker Service are probed is `run`'s alone ([`EndpointArgs`]).

use ipnet::IpNet;

use crate::controller::{EndpointSlices, EndpointTrust};
use sandcap_core::addresses::{AllowedCidrs, WorkerPolicy};
use sandcap_core::validation::Options;
use sandcap_core::versions::ContractVersion;

/// The contract version and the worker policy: everything that changes what is admitted and
/// resolved.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct RulesArgs {
    /// The contract version the cluster enforces (docs/contract.md, "Contract versions"): v1, the
    /// six keys, or v2, the nine of the host's current contract. The chart's `contract.version`
    /// installs the matching CRDs.
    #[arg(long = "contract", env = "SANDCAP_CONTRACT", default_value = "v1", value_parser = contract_version)]
    pub contract: ContractVersion,
    #[command(flatten)]
    pub workers: WorkerPolicyArgs,
}

impl RulesArgs {
    pub fn options(&self) -> Options {
        Options { workers: self.workers.policy(), contract: self.contract }
    }
}

/// A contract version flag's value that names none of the versions.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown contract version {given:?}: the versions are {}",
    ContractVersion::ALL.map(ContractVersion::as_str).join(", ")
)]
pub struct UnknownContractVersion {
    given: String,
}

/// Parses a contract version as the flag and the chart spell it.
pub fn contract_version(text: &str) -> Result<ContractVersion, UnknownContractVersion> {
    ContractVersion::parse(text).ok_or_else(|| UnknownContractVersion { given: text.to_string() })
}

/// Where the operator lets workers be ([`WorkerPolicy`]).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct WorkerPolicyArgs {
    /// Accept and probe `spec.worker.url` in providers.
    #[arg(long, env = "SANDCAP_ALLOW_WORKER_URLS")]
    pub allow_worker_urls: bool,
    /// Loopback, link-local, cloud metadata and unspecified addresses (and the IPv6 forms that
    /// carry them) that workers may reach nonetheless, as CIDRs, comma-separated (e.g.
    /// `127.0.0.0/8,::1/128` for a worker beside sandcap). Every other address is allowed.
    #[arg(long, env = "SANDCAP_WORKER_URL_ALLOWED_CIDRS", value_delimiter = ',', value_name = "CIDRS")]
    pub worker_url_allowed_cidrs: Vec<IpNet>,
}

impl WorkerPolicyArgs {
    pub fn policy(&self) -> WorkerPolicy {
        WorkerPolicy {
            allow_urls: self.allow_worker_urls,
            allowed_cidrs: AllowedCidrs::new(self.worker_url_allowed_cidrs.iter().copied()),
        }
    }
}

/// Which endpoints of a worker Service the controllers probe ([`EndpointTrust`]): `run`'s alone,
/// since only the controllers read EndpointSlices.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct EndpointArgs {
    /// Which endpoints of a `spec.worker.service` worker are probed: `managed`, those the cluster
    /// vouches for (in slices the EndpointSlice controller manages, of Pods in the Service's
    /// namespace); `any`, those of hand-made slices too, which lets whoever may write
    /// EndpointSlices in a worker's namespace choose where sandcap connects.
    #[arg(long, env = "SANDCAP_ENDPOINT_SLICES", value_enum, default_value_t)]
    pub endpoint_slices: EndpointSlices,
    /// The addresses the endpoints of a `spec.worker.service` worker may have, as CIDRs,
    /// comma-separated (e.g. the cluster's pod CIDRs); empty, the default, any address. Endpoints
    /// elsewhere are not probed.
    #[arg(long, env = "SANDCAP_WORKER_ENDPOINT_CIDRS", value_delimiter = ',', value_name = "CIDRS")]
    pub worker_endpoint_cidrs: Vec<IpNet>,
}

impl EndpointArgs {
    pub fn trust(&self) -> EndpointTrust {
        EndpointTrust { slices: self.endpoint_slices, cidrs: self.worker_endpoint_cidrs.clone() }
    }
}
