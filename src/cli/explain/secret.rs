//! A lease's `configFrom` Secrets as the caller sees them (metadata only: found, labelled, in a
//! namespace sandcap serves), and whether sandcap reads each.

use serde::Serialize;

use sandcap_core::vocabulary::CONFIG_SOURCE_LABEL;

/// What the command could see of a `configFrom` Secret: metadata only, never its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    Found {
        labelled: bool,
    },
    NotFound,
    /// The command could not look (forbidden, unreachable); the text says why.
    Unknown(String),
}

/// One `configFrom` entry, with the Secret as the caller sees it and whether sandcap reads it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretReport {
    pub name: String,
    pub key: String,
    pub found: Option<bool>,
    pub labelled: Option<bool>,
    /// Its namespace is one sandcap reads Secrets in (`--secret-namespaces`).
    pub in_scope: bool,
    /// Found, labelled and in scope: sandcap reads it; otherwise it reads as missing.
    pub sandcap_reads_it: bool,
    pub detail: String,
}

impl SecretReport {
    pub fn new(name: &str, key: &str, namespace: &str, lookup: &Lookup, in_scope: bool, scope: &str) -> SecretReport {
        let label = CONFIG_SOURCE_LABEL;
        let (found, labelled, detail) = match lookup {
            Lookup::NotFound => (Some(false), None, "not found".to_string()),
            Lookup::Unknown(why) => (None, None, format!("cannot tell whether it exists: {why}")),
            Lookup::Found { labelled: false } => (
                Some(true),
                Some(false),
                format!("found, but not labelled {label}=true: sandcap does not read it, so it reads as missing"),
            ),
            Lookup::Found { labelled: true } if !in_scope => (
                Some(true),
                Some(true),
                format!(
                    "found and labelled, but sandcap reads Secrets only in {scope} (--secret-namespaces), \
                     not in {namespace}: it reads as missing"
                ),
            ),
            Lookup::Found { labelled: true } => {
                (Some(true), Some(true), format!("found, labelled {label}=true, in a namespace sandcap serves"))
            }
        };
        let sandcap_reads_it = found == Some(true) && labelled == Some(true) && in_scope;
        SecretReport { name: name.into(), key: key.into(), found, labelled, in_scope, sandcap_reads_it, detail }
    }
}
