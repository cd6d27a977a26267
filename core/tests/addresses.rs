//! The address policy: every refused class in each form it may be written or resolved in, the
//! IPv6 forms that carry an IPv4 address, and what the operator's CIDRs let through.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sandcap_core::addresses::{self, AddressClass, AllowedCidrs, classify};
use url::Url;

fn cidrs(list: &[&str]) -> AllowedCidrs {
    AllowedCidrs::new(list.iter().map(|c| c.parse().unwrap()))
}

fn host_class(url: &str, allowed: &AllowedCidrs) -> Option<AddressClass> {
    allowed.refuses_host(&Url::parse(url).unwrap())
}

#[test]
fn every_refused_class_is_recognised_in_each_form() {
    use AddressClass::*;
    let cases = [
        ("127.0.0.1", Loopback),
        ("127.255.0.9", Loopback),
        ("::1", Loopback),
        ("::ffff:127.0.0.1", Loopback),
        ("169.254.0.1", LinkLocal),
        ("169.254.170.2", LinkLocal),
        ("fe80::1", LinkLocal),
        ("febf::1", LinkLocal),
        ("::ffff:169.254.3.4", LinkLocal),
        ("169.254.169.254", Metadata),
        ("::ffff:169.254.169.254", Metadata),
        ("fd00:ec2::254", Metadata),
        ("100.100.100.200", Metadata),
        ("0.0.0.0", Unspecified),
        ("0.1.2.3", Unspecified),
        ("::", Unspecified),
        ("::ffff:0.0.0.0", Unspecified),
    ];
    for (ip, class) in cases {
        assert_eq!(classify(ip.parse().unwrap()), Some(class), "{ip}");
    }
    for ip in ["10.96.0.10", "192.168.1.1", "8.8.8.8", "100.100.100.201", "fd00:ec2::253", "fec0::1", "2001:db8::1"] {
        assert_eq!(classify(ip.parse().unwrap()), None, "{ip}");
    }
}

#[test]
fn url_hosts_are_classed_after_the_parser_normalises_them() {
    use AddressClass::*;
    let none = AllowedCidrs::default();
    let cases = [
        ("http://2130706433/rpc", Loopback),
        ("http://0x7f.1/rpc", Loopback),
        ("http://0177.0.0.1/rpc", Loopback),
        ("http://127.1/rpc", Loopback),
        ("http://[::1]:8080/rpc", Loopback),
        ("http://[::ffff:7f00:1]/rpc", Loopback),
        ("http://[0:0:0:0:0:ffff:127.0.0.1]/", Loopback),
        ("http://LOCALHOST./rpc", Loopback),
        ("http://worker.localhost/rpc", Loopback),
        ("http://user:pw@[fe80::1]/", LinkLocal),
        ("http://2852039166/latest/meta-data/", Metadata),
        ("http://169.254.169.254/", Metadata),
        ("http://metadata.google.internal/computeMetadata/v1/", Metadata),
        ("http://Metadata/", Metadata),
        ("http://instance-data/", Metadata),
        ("http://[fd00:ec2::254]/", Metadata),
        ("http://0/", Unspecified),
        ("http://[::]/", Unspecified),
    ];
    for (url, class) in cases {
        assert_eq!(host_class(url, &none), Some(class), "{url}");
    }
    for url in ["http://worker.example/rpc", "http://10.0.0.7:8080/", "http://acme.sandbox-system.svc:8080/"] {
        assert_eq!(host_class(url, &none), None, "{url}");
    }
}

#[test]
fn allowed_cidrs_let_through_exactly_what_they_cover() {
    let loopback = cidrs(&["127.0.0.0/8", "::1/128"]);
    assert_eq!(host_class("http://127.0.0.1:9/rpc", &loopback), None);
    assert_eq!(host_class("http://localhost:9/rpc", &loopback), None);
    assert_eq!(host_class("http://[::ffff:127.0.0.1]/", &loopback), None, "the mapped form of an allowed address");
    assert_eq!(host_class("http://169.254.169.254/", &loopback), Some(AddressClass::Metadata));
    assert_eq!(host_class("http://metadata/", &loopback), Some(AddressClass::Metadata));
    let one = cidrs(&["127.0.0.2/32"]);
    assert_eq!(host_class("http://127.0.0.1/", &one), Some(AddressClass::Loopback));
    assert_eq!(host_class("http://127.0.0.2/", &one), None);
    let any = AllowedCidrs::any();
    assert_eq!(host_class("http://169.254.169.254/", &any), None);
    assert_eq!(host_class("http://[fe80::1]/", &any), None);
}

#[test]
fn the_cloud_agents_beside_metadata_are_metadata_too() {
    for ip in ["168.63.129.16", "fd00:ec2::23", "::ffff:168.63.129.16", "64:ff9b::a83f:8110"] {
        assert_eq!(classify(ip.parse().unwrap()), Some(AddressClass::Metadata), "{ip}");
    }
    for ip in ["168.63.129.17", "fd00:ec2::24"] {
        assert_eq!(classify(ip.parse().unwrap()), None, "{ip}");
    }
}

#[test]
fn ipv6_forms_that_carry_a_refused_ipv4_address_are_classed_as_it() {
    use AddressClass::*;
    let cases = [
        ("64:ff9b::127.0.0.1", Loopback, "NAT64"),
        ("64:ff9b::a9fe:a9fe", Metadata, "NAT64"),
        ("64:ff9b:1:abcd:1::169.254.3.4", LinkLocal, "NAT64, local use"),
        ("64:ff9b:1::0.0.0.0", Unspecified, "NAT64, local use"),
        ("2002:7f00:1::", Loopback, "6to4"),
        ("2002:a9fe:a9fe:1:2:3:4:5", Metadata, "6to4"),
        ("2002:a83f:8110::1", Metadata, "6to4"),
        // The Teredo client 127.0.0.1 behind the server 65.54.227.120.
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", Loopback, "Teredo"),
        ("2001:db8::5efe:127.0.0.1", Loopback, "ISATAP"),
        ("2001:db8:1:2:200:5efe:a9fe:a9fe", Metadata, "ISATAP"),
        ("::ffff:0:127.0.0.1", Loopback, "SIIT"),
        ("::127.0.0.1", Loopback, "IPv4-compatible"),
        ("::169.254.169.254", Metadata, "IPv4-compatible"),
        ("::0.1.2.3", Unspecified, "IPv4-compatible"),
    ];
    for (ip, class, form) in cases {
        assert_eq!(classify(ip.parse().unwrap()), Some(class), "{form} {ip}");
    }
    for ip in [
        "64:ff9b::8.8.8.8",
        "64:ff9b:1::10.0.0.1",
        "64:ff9b:2::127.0.0.1",
        "2002:808:808::1",
        "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        "2001:db8::5efe:10.0.0.1",
        "2001:db8::100:5efe:127.0.0.1",
        "::8.8.8.8",
        "::ffff:0:8.8.8.8",
    ] {
        assert_eq!(classify(ip.parse().unwrap()), None, "{ip}");
    }
}

/// Every IPv6 form the test knows for `v4`, with `noise` in the bits each form leaves free.
fn embeddings(v4: Ipv4Addr, noise: u128) -> Vec<(&'static str, Ipv6Addr)> {
    let v4 = u128::from(v4.to_bits());
    // The bits from `from` to `to`, counted from the top.
    let free = |from: u32, to: u32| noise & (u128::MAX >> from) & !u128::MAX.checked_shr(to).unwrap_or(0);
    let mut forms = vec![
        ("mapped", (0xffff << 32) | v4),
        ("SIIT", (0xffff << 48) | v4),
        ("NAT64", (0x64_ff9b << 96) | v4),
        ("NAT64, local use", (0x64_ff9b_0001 << 80) | free(48, 96) | v4),
        ("6to4", (0x2002 << 112) | (v4 << 80) | free(48, 128)),
        ("Teredo", (0x2001_0000 << 96) | free(32, 96) | (!v4 & 0xffff_ffff)),
        ("ISATAP", (0x2001_0db8 << 96) | free(32, 64) | (0x5efe << 32) | v4),
        ("ISATAP, universal", (0x2001_0db8 << 96) | free(32, 64) | (0x0200_5efe << 32) | v4),
    ];
    // `::` and `::1` are addresses of their own.
    if v4 > 1 {
        forms.push(("IPv4-compatible", v4));
    }
    forms.into_iter().map(|(form, bits)| (form, Ipv6Addr::from_bits(bits))).collect()
}

fn refused_ipv4() -> impl proptest::strategy::Strategy<Value = Ipv4Addr> {
    use proptest::prelude::*;
    let within = |net: &str| {
        let net: ipnet::Ipv4Net = net.parse().unwrap();
        let (base, host) = (net.network().to_bits(), net.hostmask().to_bits());
        any::<u32>().prop_map(move |n| Ipv4Addr::from_bits(base | (n & host)))
    };
    let metadata: Vec<Ipv4Addr> = addresses::METADATA
        .iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
        .collect();
    prop_oneof![within("127.0.0.0/8"), within("169.254.0.0/16"), within("0.0.0.0/8"), prop::sample::select(metadata)]
}

proptest::proptest! {
    #[test]
    fn every_embedding_of_a_refused_ipv4_address_is_refused_as_it(v4 in refused_ipv4(), noise: u128) {
        let class = classify(IpAddr::V4(v4));
        proptest::prop_assert!(class.is_some());
        for (form, v6) in embeddings(v4, noise) {
            proptest::prop_assert_eq!(classify(IpAddr::V6(v6)), class, "{} {} of {}", form, v6, v4);
        }
    }

    #[test]
    fn every_embedding_of_another_ipv4_address_stays_allowed(bits: u32, noise: u128) {
        let v4 = Ipv4Addr::from_bits(bits);
        proptest::prop_assume!(classify(IpAddr::V4(v4)).is_none());
        for (form, v6) in embeddings(v4, noise) {
            proptest::prop_assert_eq!(classify(IpAddr::V6(v6)), None, "{} {} of {}", form, v6, v4);
        }
    }
}

#[test]
fn an_allowed_ipv4_cidr_covers_its_mapped_form_only() {
    let loopback = cidrs(&["127.0.0.0/8"]);
    assert_eq!(host_class("http://[::ffff:127.0.0.1]/", &loopback), None, "the same address");
    for url in ["http://[64:ff9b::127.0.0.1]/", "http://[2002:7f00:1::]/", "http://[::127.0.0.1]/"] {
        assert_eq!(host_class(url, &loopback), Some(AddressClass::Loopback), "{url}: another machine's loopback");
        assert_eq!(host_class(url, &AllowedCidrs::default()), Some(AddressClass::Loopback), "{url}");
    }
    let nat64 = cidrs(&["64:ff9b::/96"]);
    assert_eq!(host_class("http://[64:ff9b::127.0.0.1]/", &nat64), None, "allowed by its IPv6 prefix");
    assert_eq!(host_class("http://127.0.0.1/", &nat64), Some(AddressClass::Loopback));
}
