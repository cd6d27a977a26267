//! Where a worker may not lead: the refused address classes and the operator's exceptions. The
//! probe's resolver (the binary's `probe::resolver`) applies them to the addresses actually
//! connected to; the webhook to hosts as written.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use ipnet::IpNet;
use url::Url;

use crate::vocabulary::words;

words! {
    /// The addresses a worker URL may not reach unless the operator allows them: each reaches the
    /// node sandcap runs on, or the cloud's instance metadata service (credentials, among other
    /// things), rather than a worker.
    pub enum AddressClass (as_str, parse) {
        /// 127.0.0.0/8, ::1: sandcap's own pod.
        Loopback = "loopback",
        /// 169.254.0.0/16, fe80::/10: the node's link.
        LinkLocal = "link-local",
        /// The metadata services of the major clouds.
        Metadata = "cloud metadata",
        /// 0.0.0.0/8, `::`: connecting there reaches the local host.
        Unspecified = "unspecified",
    }
}

pub const GCE_AWS_AZURE_METADATA: IpAddr = IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254));
pub const METADATA: [IpAddr; 5] = [
    GCE_AWS_AZURE_METADATA,
    // AWS over IPv6 (Nitro instances).
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    // EKS Pod Identity's agent: it hands out the credentials of any pod's role.
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)),
    // Azure's WireServer: the VM agent's channel, which serves the VM's extensions and settings.
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    // Alibaba Cloud.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// The class of `ip`, if worker URLs may not reach it. An IPv4-mapped IPv6 address
/// (`::ffff:127.0.0.1`) reaches the IPv4 address, and the other IPv6 forms that carry an IPv4
/// address ([`embedded_ipv4`]) are translated or tunnelled to it, so each is classed as that.
pub fn classify(ip: IpAddr) -> Option<AddressClass> {
    let ip = ip.to_canonical();
    if METADATA.contains(&ip) {
        return Some(AddressClass::Metadata);
    }
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some(AddressClass::Loopback),
        IpAddr::V4(v4) if v4.is_link_local() => Some(AddressClass::LinkLocal),
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some(AddressClass::Unspecified),
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) if v6.is_loopback() => Some(AddressClass::Loopback),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some(AddressClass::LinkLocal),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(AddressClass::Unspecified),
        IpAddr::V6(v6) => embedded_ipv4(v6).and_then(|v4| classify(IpAddr::V4(v4))),
    }
}

/// The IPv4 address an IPv6 address carries, in the forms that make a connection to it reach that
/// IPv4 address through a translator or a tunnel: NAT64 (`64:ff9b::/96`, and the local-use
/// `64:ff9b:1::/48` with the IPv4 address in the last 32 bits, RFC 6052 and 8215), 6to4
/// (`2002::/16`, bits 16 to 48), Teredo (`2001::/32`, the client's address inverted in the last 32
/// bits), ISATAP (an interface identifier `0:5efe` or `200:5efe` under any prefix), SIIT's
/// `::ffff:0:a.b.c.d` and the deprecated IPv4-compatible `::a.b.c.d`. The IPv4-mapped form is not
/// among them: it is the IPv4 address itself ([`Ipv6Addr::to_canonical`]).
pub fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = v6.to_bits();
    let low = Ipv4Addr::from_bits(bits as u32);
    match v6.segments() {
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] | [0x64, 0xff9b, 1, ..] => Some(low),
        [0x2002, ..] => Some(Ipv4Addr::from_bits((bits >> 80) as u32)),
        [0x2001, 0, ..] => Some(!low),
        [0, 0, 0, 0, 0, 0, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        [_, _, _, _, 0 | 0x200, 0x5efe, _, _] => Some(low),
        _ => None,
    }
}

/// Host names that always stand for a refused address, and the address each stands for. They are
/// refused by name as well, so that the webhook, which resolves nothing, can deny them.
pub fn named_address(name: &str) -> Option<IpAddr> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name == "localhost" || name.ends_with(".localhost") {
        // RFC 6761: every name under localhost is loopback.
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    const METADATA_NAMES: [&str; 5] =
        ["metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"];
    METADATA_NAMES.contains(&name).then_some(GCE_AWS_AZURE_METADATA)
}

/// Where the operator lets workers be: whether a provider may name its worker by URL at all
/// (`--allow-worker-urls`; a Service is always allowed), and which refused addresses workers may
/// reach nonetheless. One value, so that the webhook, the probe and the offline commands judge by
/// the same policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerPolicy {
    pub allow_urls: bool,
    pub allowed_cidrs: AllowedCidrs,
}

impl WorkerPolicy {
    /// URLs to any address: for `sandcap resolve --worker-url`, whose URL is its caller's own.
    pub fn any() -> WorkerPolicy {
        WorkerPolicy { allow_urls: true, allowed_cidrs: AllowedCidrs::any() }
    }
}

/// `--worker-url-allowed-cidrs`: the refused addresses worker URLs may reach nonetheless (a worker
/// on loopback in a test, say). Addresses outside every class are always allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedCidrs(Arc<[IpNet]>);

impl AllowedCidrs {
    pub fn new(cidrs: impl IntoIterator<Item = IpNet>) -> AllowedCidrs {
        AllowedCidrs(cidrs.into_iter().collect())
    }

    /// Every address: for `sandcap resolve --worker-url`, whose URL is its caller's own.
    pub fn any() -> AllowedCidrs {
        AllowedCidrs::new([IpNet::V4(Default::default()), IpNet::V6(Default::default())])
    }

    /// The class that refuses `ip`, if it has one and no CIDR allows it. An IPv4 CIDR covers the
    /// IPv4-mapped form too, which reaches the same address; not the translated or tunnelled
    /// forms of [`embedded_ipv4`], which reach the IPv4 address as a gateway or relay sees it (its
    /// loopback is not sandcap's): those the operator allows by their IPv6 prefix.
    pub fn refuses(&self, ip: IpAddr) -> Option<AddressClass> {
        let allowed = |ip: IpAddr| self.0.iter().any(|net| net.contains(&ip));
        classify(ip).filter(|_| !allowed(ip) && !allowed(ip.to_canonical()))
    }

    /// The class that refuses a URL's host as written (an IP literal, or a name from
    /// [`named_address`]); other names are checked as they are resolved.
    pub fn refuses_host(&self, url: &Url) -> Option<AddressClass> {
        let ip = literal_ip(url).or_else(|| named_address(url.host_str()?))?;
        self.refuses(ip)
    }
}

/// The URL's host if it is an IP address. The URL parser writes every IPv4 spelling
/// (2130706433, 0x7f.1, 0177.0.0.1) as dotted decimal, and an IPv6 one in brackets.
pub fn literal_ip(url: &Url) -> Option<IpAddr> {
    url.host_str()?.trim_start_matches('[').trim_end_matches(']').parse().ok()
}
