//! The shape docs/architecture.md promises: no source file over 400 lines, so that each holds
//! one concern a reader can take in whole; the tests, benchmarks and fuzz targets too.

use std::fs;
use std::path::{Path, PathBuf};

#[path = "shape/functions.rs"]
mod functions;

const MAX_LINES: usize = 400;

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        // A build's output (fuzz/ builds in a target directory of its own).
        if path.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_400_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "core/src", "benches", "tests", "core/tests", "fuzz"] {
        rust_files(&root.join(dir), &mut files);
    }
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = fs::read_to_string(f).expect("a readable source file").lines().count();
            (lines > MAX_LINES).then(|| format!("{}: {lines} lines", f.strip_prefix(root).unwrap_or(f).display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines:\n  {}", long.join("\n  "));
}

/// The section `heading` (a `## ` heading) of the Markdown file `path`, to its next such heading.
fn section(path: &str, heading: &str) -> String {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).expect(path);
    let found = text.split(&format!("## {heading}\n")).nth(1).and_then(|s| s.split("\n## ").next());
    found.unwrap_or_else(|| panic!("{path} has no section {heading:?}")).to_string()
}

/// Every file and folder directly under `src/` and `core/src/` is named in CONTRIBUTING.md's
/// "Where things are", so the map a newcomer starts from cannot miss a part of the code.
#[test]
fn contributings_map_names_every_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = section("CONTRIBUTING.md", "Where things are");
    let mut missing = Vec::new();
    for dir in ["src", "core/src"] {
        for entry in fs::read_dir(root.join(dir)).expect("a source folder") {
            let name = entry.expect("an entry").file_name().to_string_lossy().into_owned();
            let (path, folder) = (format!("{dir}/{name}"), root.join(dir).join(&name).is_dir());
            let named = if folder { format!("{path}/") } else { path.clone() };
            // Named by its path, or in its crate's row by its own name.
            let short = if folder { format!("`{name}/`") } else { format!("`{name}`") };
            if !map.contains(&named) && !map.lines().any(|l| l.contains(&format!("`{dir}/`")) && l.contains(&short)) {
                missing.push(path);
            }
        }
    }
    assert!(missing.is_empty(), "CONTRIBUTING.md's \"Where things are\" does not name: {missing:?}");
}

/// docs/architecture.md's "The controllers, file by file" names every file of `src/controller/`
/// (a folder's `tests.rs` aside), so the controllers' map cannot fall behind the code.
#[test]
fn the_controllers_layout_names_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let layout = section("docs/architecture.md", "The controllers, file by file");
    let mut files = Vec::new();
    rust_files(&root.join("src/controller"), &mut files);
    let missing: Vec<String> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .filter_map(|f| {
            let relative = f.strip_prefix(root.join("src/controller")).ok()?.display().to_string();
            let name = f.file_name()?.to_string_lossy().into_owned();
            (!layout.contains(&relative) && !layout.contains(&name)).then_some(relative)
        })
        .collect();
    assert!(missing.is_empty(), "docs/architecture.md's \"The controllers, file by file\" does not name: {missing:?}");
}
