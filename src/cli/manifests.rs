//! Reading manifests: YAML or JSON, multi-document, `kind: List` expanded, from files, from
//! directories (as kubectl's `-f DIR`: the `.json`, `.yaml` and `.yml` files in it, its
//! subdirectories only with `-R`) and from `-` (stdin), each within a bound.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::error::CliError;

/// The most one file, or stdin, may hold: a manifest is a few KiB, and the apiserver takes at
/// most 3 MiB per object.
pub const MAX_INPUT: u64 = 16 << 20;
/// The most all the inputs of one command may hold together.
pub const MAX_TOTAL: u64 = 64 << 20;
/// The most files and directories one command visits.
pub const MAX_ENTRIES: usize = 4096;
/// How stdin is named in messages, as kubectl names it.
pub const STDIN: &str = "STDIN";
const EXTENSIONS: [&str; 3] = ["json", "yaml", "yml"];

fn stdin_twice() -> CliError {
    CliError::Usage("- (stdin) can be read only once".into())
}

/// The objects of one file (or of stdin).
pub struct Loaded {
    pub shown: String,
    pub objects: Vec<Value>,
}

/// Reads the inputs of one command: stdin at most once, and everything within [`MAX_TOTAL`] and
/// [`MAX_ENTRIES`].
#[derive(Default)]
pub struct Manifests {
    recursive: bool,
    stdin_read: bool,
    total: u64,
    entries: usize,
}

impl Manifests {
    /// `recursive`: a directory's subdirectories too (kubectl's `-R`).
    pub fn new(recursive: bool) -> Manifests {
        Manifests { recursive, ..Manifests::default() }
    }

    /// Refuses `-` named more than once among `paths`, before anything is read: a command that
    /// judges one input before it loads the next would otherwise spend that work first.
    pub fn stdin_at_most_once<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Result<(), CliError> {
        match paths.into_iter().filter(|p| p.as_os_str() == "-").count() {
            0 | 1 => Ok(()),
            _ => Err(stdin_twice()),
        }
    }

    /// Every object at `path`: a file, the manifests of a directory, or stdin for `-`.
    pub fn load(&mut self, path: &Path) -> Result<Vec<Loaded>, CliError> {
        let mut loaded = Vec::new();
        if path.as_os_str() == "-" {
            if std::mem::replace(&mut self.stdin_read, true) {
                return Err(stdin_twice());
            }
            let text = self.read(STDIN, std::io::stdin().lock())?;
            loaded.push(Loaded { objects: parse_objects(STDIN, &text)?, shown: STDIN.into() });
        } else if path.is_dir() {
            self.directory(path, &mut loaded)?;
        } else {
            loaded.push(self.file(path)?);
        }
        Ok(loaded)
    }

    fn directory(&mut self, dir: &Path, loaded: &mut Vec<Loaded>) -> Result<(), CliError> {
        let shown = dir.display().to_string();
        let unreadable = |source| CliError::Read { path: shown.clone(), source };
        let mut entries = std::fs::read_dir(dir)
            .map_err(unreadable)?
            .map(|entry| entry.and_then(|e| Ok((e.path(), e.file_type()?))))
            .collect::<Result<Vec<_>, _>>()
            .map_err(unreadable)?;
        // kubectl walks a directory in lexical order.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (path, kind) in entries {
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                return Err(CliError::Parse {
                    path: shown,
                    message: format!("more than {MAX_ENTRIES} files and directories to read"),
                });
            }
            // A symbolic link to a directory is not followed (as kubectl does not), so no loop.
            if kind.is_dir() {
                if self.recursive {
                    self.directory(&path, loaded)?;
                }
            } else if path.extension().and_then(|e| e.to_str()).is_some_and(|e| EXTENSIONS.contains(&e)) {
                loaded.push(self.file(&path)?);
            }
        }
        Ok(())
    }

    fn file(&mut self, path: &Path) -> Result<Loaded, CliError> {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| CliError::Read { path: shown.clone(), source })?;
        let text = self.read(&shown, file)?;
        Ok(Loaded { objects: parse_objects(&shown, &text)?, shown })
    }

    /// Reads at most [`MAX_INPUT`] bytes (and what is left of [`MAX_TOTAL`]) as UTF-8 text.
    fn read(&mut self, shown: &str, from: impl Read) -> Result<String, CliError> {
        let limit = MAX_INPUT.min(MAX_TOTAL - self.total);
        let mut bytes = Vec::new();
        from.take(limit + 1).read_to_end(&mut bytes).map_err(|source| CliError::Read { path: shown.into(), source })?;
        if bytes.len() as u64 > limit {
            let message = if limit == MAX_INPUT {
                format!("larger than {} MiB", MAX_INPUT >> 20)
            } else {
                format!("the inputs together are larger than {} MiB", MAX_TOTAL >> 20)
            };
            return Err(CliError::Parse { path: shown.into(), message });
        }
        self.total += bytes.len() as u64;
        String::from_utf8(bytes).map_err(|e| CliError::Parse {
            path: shown.into(),
            message: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        })
    }
}

/// Reads every object in one YAML or JSON file, or in stdin for `-`, or in a directory's
/// manifests.
pub fn load_objects(path: &Path) -> Result<Vec<Value>, CliError> {
    Ok(Manifests::new(false).load(path)?.into_iter().flat_map(|l| l.objects).collect())
}

/// Every object in one YAML or JSON text (multi-document; `kind: List` items expanded); `shown`
/// names it in errors.
fn parse_objects(shown: &str, text: &str) -> Result<Vec<Value>, CliError> {
    let shown = shown.to_string();
    let mut objects = Vec::new();
    let mut reader = text.as_bytes();
    let numbers = document_numbers(text);
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
                        sandcap_core::validation::type_name(&other)
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
