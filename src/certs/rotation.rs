//! The pure decision of each round: what the Secret holds next, and why.

use std::fmt;
use std::time::SystemTime;

use super::material::*;

/// What one round does to the Secret. Reasons are for logs: names and dates, never key material.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rotation {
    Keep,
    /// Start over with a new CA and serving certificate (no usable Secret, or its CA expired).
    Create {
        reason: String,
    },
    /// New serving certificate from the same CA; the caBundle does not change.
    RenewServing {
        reason: String,
    },
    /// The CA is in its last third: create its successor and publish it next to it.
    PrepareNextCa,
    /// The next CA has been published long enough: it signs a new serving certificate and takes over.
    PromoteNextCa,
    /// The switch is long enough ago that no pod serves a certificate of the retired CA any more.
    DropRetiredCa,
}

impl fmt::Display for Rotation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rotation::Keep => write!(f, "certificates are current"),
            Rotation::Create { reason } => {
                write!(f, "created a new CA and serving certificate ({reason})")
            }
            Rotation::RenewServing { reason } => {
                write!(f, "renewed the serving certificate ({reason})")
            }
            Rotation::PrepareNextCa => write!(f, "created the next CA and published it next to the current one"),
            Rotation::PromoteNextCa => write!(f, "switched to the next CA; the old one stays trusted for a while"),
            Rotation::DropRetiredCa => write!(f, "removed the retired CA from the caBundle"),
        }
    }
}

/// Decides the next step. `next_ca_published`: every webhook's caBundle already holds the next CA
/// (see [`bundle_contains`]); a CA is never used before the apiservers trust it.
pub(super) fn decide(stored: &Stored, dns_names: &[String], next_ca_published: bool, now: SystemTime) -> Rotation {
    let m = match stored {
        Stored::Absent => {
            return Rotation::Create { reason: "no certificate Secret yet".into() };
        }
        Stored::Unusable(reason) => {
            return Rotation::Create { reason: format!("the Secret is unusable: {reason}") };
        }
        Stored::Usable(m) => m,
    };
    if now >= m.ca.cert.not_after {
        return Rotation::Create { reason: format!("the CA expired at {}", rfc3339(m.ca.cert.not_after)) };
    }
    if let Some(next) = &m.next_ca
        && next_ca_published
        && now >= next.cert.not_before + BACKDATE + CA_PUBLISH_GRACE
    {
        return Rotation::PromoteNextCa;
    }
    if m.next_ca.is_none() && m.ca.cert.due_for_renewal(now) {
        return Rotation::PrepareNextCa;
    }
    let serving = &m.serving.cert;
    if !serving.issued_by(&m.ca.cert) {
        return Rotation::RenewServing { reason: "it was not issued by the current CA".into() };
    }
    let (mut have, mut want) = (serving.dns_names.clone(), dns_names.to_vec());
    have.sort();
    want.sort();
    if have != want {
        return Rotation::RenewServing { reason: format!("its DNS names should be {}", want.join(", ")) };
    }
    if serving.due_for_renewal(now) {
        return Rotation::RenewServing { reason: format!("it expires at {}", rfc3339(serving.not_after)) };
    }
    if let Some(retired) = &m.retired_ca
        && (now >= retired.not_after || now >= serving.not_before + BACKDATE + CA_RETIRE_GRACE)
    {
        return Rotation::DropRetiredCa;
    }
    Rotation::Keep
}

/// The Secret contents after `action`. Material that cannot be built upon is replaced whatever
/// the action (decide never asks for that, but a fresh start is the only safe answer).
pub fn carry_out(
    stored: &Stored,
    action: &Rotation,
    dns_names: &[String],
    now: SystemTime,
) -> Result<Material, rcgen::Error> {
    let Stored::Usable(current) = stored else {
        return generate(dns_names, now);
    };
    let mut next = Material::clone(current);
    match action {
        Rotation::Keep => {}
        Rotation::Create { .. } => return generate(dns_names, now),
        Rotation::RenewServing { .. } => next.serving = issue_serving(&current.ca, dns_names, now)?,
        Rotation::PrepareNextCa => next.next_ca = Some(new_ca(now)?),
        Rotation::PromoteNextCa => {
            let Some(ca) = next.next_ca.take() else {
                return generate(dns_names, now);
            };
            next.serving = issue_serving(&ca, dns_names, now)?;
            next.retired_ca = Some(std::mem::replace(&mut next.ca, ca).cert);
        }
        Rotation::DropRetiredCa => next.retired_ca = None,
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;

    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 60 * 60);
    const YEAR: Duration = Duration::from_secs(365 * 24 * 60 * 60);

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn names() -> Vec<String> {
        dns_names("sandcap-webhook", "sandcap-system")
    }

    fn fresh() -> Material {
        generate(&names(), t0()).unwrap()
    }

    fn usable(m: &Material) -> Stored {
        Stored::Usable(Box::new(m.clone()))
    }

    fn step(m: &Material, action: &Rotation, now: SystemTime) -> Material {
        carry_out(&usable(m), action, &names(), now).unwrap()
    }

    #[test]
    fn absent_or_unusable_secret_is_created() {
        assert!(matches!(decide(&Stored::Absent, &names(), false, t0()), Rotation::Create { .. }));
        let mut data = fresh().to_secret_data();
        data.insert(TLS_KEY.into(), ByteString(b"garbage".to_vec()));
        let Stored::Unusable(reason) = Stored::from_secret(Some(&Secret { data: Some(data), ..Secret::default() }))
        else {
            panic!("a garbage key must make the Secret unusable");
        };
        assert_eq!(reason.to_string(), "tls.crt: private key is not a PKCS#8 PEM key");
        let action = decide(&Stored::Unusable(reason), &names(), false, t0());
        assert_eq!(
            action,
            Rotation::Create { reason: "the Secret is unusable: tls.crt: private key is not a PKCS#8 PEM key".into() }
        );
    }

    #[test]
    fn unusable_reasons_name_the_problem() {
        let m = fresh();
        let other = fresh();
        let cases: [(&str, &[u8], &str); 4] = [
            (CA_CRT, b"", "ca.crt: is not a PEM certificate"),
            (CA_KEY, other.ca.key_pem().as_bytes(), "ca.crt: private key does not belong to the certificate"),
            (TLS_CRT, &[0xff, 0xfe], "tls.crt is not UTF-8 text"),
            (NEXT_CA_CRT, m.ca.cert.pem().as_bytes(), "next-ca.key is missing"),
        ];
        for (key, value, expected) in cases {
            let mut data = m.to_secret_data();
            data.insert(key.into(), ByteString(value.to_vec()));
            assert_eq!(Material::from_secret_data(&data).unwrap_err().to_string(), expected, "{key}");
        }
        let mut data = m.to_secret_data();
        data.remove(TLS_KEY);
        assert_eq!(Material::from_secret_data(&data).unwrap_err().to_string(), "tls.key is missing");
    }

    #[test]
    fn generated_material_is_consistent_and_round_trips() {
        let m = fresh();
        assert!(m.serving.cert.issued_by(&m.ca.cert));
        assert_eq!(m.serving.cert.dns_names(), names().as_slice());
        assert_eq!(m.serving.cert.not_after().duration_since(t0()).unwrap(), SERVING_LIFETIME);
        assert_eq!(m.ca.cert.not_after().duration_since(t0()).unwrap(), CA_LIFETIME);
        assert_eq!(t0().duration_since(m.ca.cert.not_before()).unwrap(), BACKDATE);
        let back = Material::from_secret_data(&m.to_secret_data()).unwrap();
        assert_eq!(back.to_secret_data(), m.to_secret_data());
        assert_eq!(m.ca_bundle(), m.ca.cert.pem());
        assert!(bundle_contains(m.ca_bundle().as_bytes(), &m.ca.cert));
        assert!(!bundle_contains(m.ca_bundle().as_bytes(), &m.serving.cert));
    }

    #[test]
    fn debug_output_never_shows_keys() {
        let m = fresh();
        let shown = format!("{m:?}");
        assert!(!shown.contains("PRIVATE KEY") && shown.contains("<redacted>"));
    }

    #[test]
    fn fresh_material_is_kept() {
        let m = fresh();
        for later in [Duration::ZERO, DAY, 200 * DAY] {
            assert_eq!(decide(&usable(&m), &names(), false, t0() + later), Rotation::Keep, "{later:?}");
        }
    }

    #[test]
    fn serving_certificate_is_renewed_in_its_last_third_with_the_same_ca() {
        let m = fresh();
        let now = t0() + 250 * DAY;
        let action = decide(&usable(&m), &names(), false, now);
        assert!(
            matches!(&action, Rotation::RenewServing { reason } if reason.starts_with("it expires at ")),
            "{action:?}"
        );
        let renewed = step(&m, &action, now);
        assert_eq!(renewed.ca.cert.pem(), m.ca.cert.pem(), "the CA (and so the caBundle) must not change");
        assert_eq!(renewed.ca_bundle(), m.ca_bundle());
        assert_ne!(renewed.serving.cert.pem(), m.serving.cert.pem());
        assert!(renewed.serving.cert.issued_by(&m.ca.cert));
        assert_eq!(decide(&usable(&renewed), &names(), false, now), Rotation::Keep);
    }

    #[test]
    fn serving_certificate_is_renewed_when_names_change_or_the_ca_differs() {
        let m = fresh();
        let other_names = dns_names("renamed", "sandcap-system");
        assert!(matches!(decide(&usable(&m), &other_names, false, t0()), Rotation::RenewServing { .. }));
        let foreign = Material { serving: fresh().serving, ..m.clone() };
        assert_eq!(
            decide(&usable(&foreign), &names(), false, t0()),
            Rotation::RenewServing { reason: "it was not issued by the current CA".into() }
        );
    }

    #[test]
    fn serving_certificate_never_outlives_its_ca() {
        let m = fresh();
        let late = t0() + CA_LIFETIME - 100 * DAY;
        let serving = issue_serving(&m.ca, &names(), late).unwrap();
        assert_eq!(serving.cert.not_after(), m.ca.cert.not_after());
    }

    #[test]
    fn expired_ca_starts_over() {
        let m = fresh();
        let action = decide(&usable(&m), &names(), false, t0() + CA_LIFETIME);
        assert!(matches!(action, Rotation::Create { ref reason } if reason.starts_with("the CA expired at ")));
    }

    #[test]
    fn ca_rotation_publishes_before_it_switches_and_retires_after() {
        let names = names();
        let m = fresh();
        // Keep the serving certificate young so that only the CA drives the decisions.
        let mut now = t0() + 7 * YEAR;
        let m = Material { serving: issue_serving(&m.ca, &names, now).unwrap(), ..m };

        assert_eq!(decide(&usable(&m), &names, false, now), Rotation::PrepareNextCa);
        let prepared = step(&m, &Rotation::PrepareNextCa, now);
        let next = prepared.next_ca.clone().unwrap();
        assert_eq!(prepared.ca_bundle(), format!("{}{}", m.ca.cert.pem(), next.cert.pem()));
        assert_eq!(prepared.serving.cert.pem(), m.serving.cert.pem(), "nothing is signed by the next CA yet");

        // Published, but not for long enough; or old enough, but not published: wait.
        now += CA_PUBLISH_GRACE / 2;
        assert_eq!(decide(&usable(&prepared), &names, true, now), Rotation::Keep);
        now += CA_PUBLISH_GRACE;
        assert_eq!(decide(&usable(&prepared), &names, false, now), Rotation::Keep);
        assert_eq!(decide(&usable(&prepared), &names, true, now), Rotation::PromoteNextCa);

        let promoted = step(&prepared, &Rotation::PromoteNextCa, now);
        assert_eq!(promoted.ca.cert.pem(), next.cert.pem());
        assert!(promoted.serving.cert.issued_by(&next.cert));
        assert!(promoted.next_ca.is_none());
        assert_eq!(promoted.retired_ca.as_ref().unwrap().pem(), m.ca.cert.pem());
        assert_eq!(promoted.ca_bundle(), format!("{}{}", next.cert.pem(), m.ca.cert.pem()));

        assert_eq!(decide(&usable(&promoted), &names, false, now + CA_RETIRE_GRACE / 2), Rotation::Keep);
        let later = now + CA_RETIRE_GRACE;
        assert_eq!(decide(&usable(&promoted), &names, false, later), Rotation::DropRetiredCa);
        let done = step(&promoted, &Rotation::DropRetiredCa, later);
        assert_eq!(done.ca_bundle(), next.cert.pem());
        assert_eq!(decide(&usable(&done), &names, false, later), Rotation::Keep);
    }

    #[test]
    fn next_ca_does_not_block_serving_renewals_meanwhile() {
        let names = names();
        let now = t0() + 7 * YEAR;
        let m = step(&fresh(), &Rotation::PrepareNextCa, now);
        // The serving certificate from t0 expired long ago; the unpublished next CA must not wait.
        assert!(matches!(decide(&usable(&m), &names, false, now), Rotation::RenewServing { .. }));
        let renewed = step(&m, &decide(&usable(&m), &names, false, now), now);
        assert!(renewed.serving.cert.issued_by(&m.ca.cert), "still signed by the published CA");
        assert_eq!(renewed.next_ca.unwrap().cert.pem(), m.next_ca.unwrap().cert.pem());
    }

    #[test]
    fn bundle_contains_compares_certificates_not_text() {
        let m = fresh();
        let other = fresh();
        let bundle = format!("{}\n\n{}", other.ca.cert.pem(), m.ca.cert.pem().replace('\n', "\r\n"));
        assert!(bundle_contains(bundle.as_bytes(), &m.ca.cert));
        assert!(!bundle_contains(other.ca.cert.pem().as_bytes(), &m.ca.cert));
        assert!(!bundle_contains(b"not pem", &m.ca.cert));
    }
}
