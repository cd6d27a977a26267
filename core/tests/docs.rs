//! docs/contract.md against the code it describes: each contract version's tables ("Contract
//! versions") are rendered here from `sandcap_core::versions`, the table the CRDs, the webhook and
//! resolution derive from, and must stand in the docs verbatim, so the two cannot drift apart.

use sandcap_core::versions::{Contract, ContractVersion};

const CONTRACT_MD: &str = include_str!("../../docs/contract.md");

/// A version's keys and refused keys as docs/contract.md writes them.
fn tables(contract: &Contract) -> String {
    let code = |word: &str| format!("`{word}`");
    let cell = |words: Vec<String>| if words.is_empty() { "—".to_string() } else { words.join(", ") };
    let mut out =
        String::from("| key | opt-in | worker methods required | narrowed by | column |\n|---|---|---|---|---|\n");
    for rule in contract.keys {
        out += &format!(
            "| {} | {} | {} | {} | {} |\n",
            code(rule.capability.key()),
            if rule.opt_in { "yes" } else { "no" },
            cell(rule.methods.iter().map(|m| code(m.as_str())).collect()),
            cell(rule.narrowed_by.iter().map(|n| code(n.reason().as_str())).collect()),
            code(rule.capability.column()),
        );
    }
    out += "\n| refused key | the CRD's message |\n|---|---|\n";
    for key in contract.refused_keys() {
        let message = contract.refusal(key).expect("a refused key has a message");
        out += &format!("| {} | {} |\n", code(key), code(&message));
    }
    out
}

#[test]
fn each_version_has_its_tables_under_its_heading() {
    for version in ContractVersion::ALL {
        let heading = format!("\n#### `{version}`\n");
        let start = CONTRACT_MD.find(&heading).unwrap_or_else(|| panic!("docs/contract.md has no heading {heading:?}"));
        let rest = &CONTRACT_MD[start + heading.len()..];
        let section = &rest[..rest.find("\n#").unwrap_or(rest.len())];
        let tables = tables(version.contract());
        assert!(section.contains(&tables), "docs/contract.md under {heading:?} should hold, verbatim:\n{tables}");
    }
}
