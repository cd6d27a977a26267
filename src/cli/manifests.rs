//! Reading manifests: YAML or JSON files, multi-document, `kind: List` expanded.

use std::path::Path;

use serde_json::Value;

use super::error::CliError;

/// Reads every object in a YAML or JSON file (multi-document; `kind: List` items expanded).
pub fn load_objects(path: &Path) -> Result<Vec<Value>, CliError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| CliError::Read { path: shown.clone(), source })?;
    let mut objects = Vec::new();
    let mut reader = text.as_bytes();
    // Empty and null documents are skipped by the parser, so they are not counted.
    for (i, doc) in serde_saphyr::read_with_options::<_, Value>(&mut reader, yaml_options()).enumerate() {
        let value = doc.map_err(|e| CliError::Parse {
            path: shown.clone(),
            message: format!("document {}: not valid YAML or JSON: {}", i + 1, one_line(&e)),
        })?;
        match value {
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                match map.get("items") {
                    Some(Value::Array(items)) => objects.extend(items.iter().cloned()),
                    _ => {
                        return Err(CliError::Parse {
                            path: shown,
                            message: format!("document {}: a List without an items array", i + 1),
                        });
                    }
                }
            }
            Value::Object(_) => objects.push(value),
            other => {
                return Err(CliError::Parse {
                    path: shown,
                    message: format!(
                        "document {}: expected a Kubernetes object, got {}",
                        i + 1,
                        crate::validation::type_name(&other)
                    ),
                });
            }
        }
    }
    Ok(objects)
}

/// The parser's budget (anchors, aliases, events, nodes) refuses alias bombs before they expand;
/// the rest keeps the reading of YAML that sandcap had before (YAML 1.2 scalars): `yes` and
/// `0755` stay strings, `<<` is an ordinary key.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        // As deep as the webhook reads a review's JSON.
        budget: serde_saphyr::budget! { max_depth: 128 },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
    }
}

/// The parser's words for a person (its default adds hints for the programmer), on one line as
/// every CLI error.
fn one_line(e: &serde_saphyr::Error) -> String {
    let options = serde_saphyr::render_options! {
        formatter: &serde_saphyr::UserMessageFormatter,
        snippets: serde_saphyr::SnippetMode::Off,
    };
    e.render_with_options(options).split_whitespace().collect::<Vec<_>>().join(" ")
}
