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
    let numbers = document_numbers(&text);
    let documents = serde_saphyr::read_with_options::<_, Value>(&mut reader, yaml_options());
    for (read, doc) in documents.enumerate() {
        let i = numbers.get(read).map_or(read, |n| n - 1);
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

/// The number, counted in the file, of each document the parser hands over. The parser skips
/// empty and null documents, which a person counting `---` lines still counts. Markers are lines
/// starting with `---` or `...` (YAML forbids either at the start of a line inside a document);
/// what comes before the first `---` is a document only if it holds something.
fn document_numbers(text: &str) -> Vec<usize> {
    fn holds(lines: &[&str]) -> (bool, bool) {
        let content: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('%'))
            .collect();
        let null = matches!(content.as_slice(), [one] if matches!(*one, "null" | "Null" | "NULL" | "~"));
        (!content.is_empty(), null)
    }
    let marker =
        |line: &str, m: &str| line.strip_prefix(m).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
    let (mut numbers, mut counted, mut lines, mut explicit) = (Vec::new(), 0, Vec::new(), false);
    let mut finish = |lines: &mut Vec<&str>, explicit: bool| {
        let (something, null) = holds(lines);
        if explicit || something {
            counted += 1;
            if something && !null {
                numbers.push(counted);
            }
        }
        lines.clear();
    };
    for line in text.lines() {
        if marker(line, "---") {
            finish(&mut lines, explicit);
            explicit = true;
            lines.push(&line[3..]);
        } else if marker(line, "...") {
            finish(&mut lines, explicit);
            explicit = false;
        } else {
            lines.push(line);
        }
    }
    finish(&mut lines, explicit);
    numbers
}

#[cfg(test)]
mod tests {
    use super::document_numbers;

    #[test]
    fn empty_and_null_documents_are_counted_as_a_person_counts_them() {
        assert_eq!(document_numbers("a: 1\n"), [1]);
        assert_eq!(document_numbers("---\na: 1\n---\nb: 2\n"), [1, 2]);
        assert_eq!(document_numbers("---\n---\n# comment\n---\n[1, 2\n"), [3]);
        assert_eq!(document_numbers("# head\n---\nnull\n--- {a: 1}\n...\n---\nb: 2\n"), [2, 3]);
    }
}
