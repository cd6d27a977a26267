//! Every relative link in the repository's Markdown resolves: its file or folder exists, and its
//! `#anchor` is a heading of the page it names (the anchor GitHub gives it: lowercased,
//! punctuation dropped but `-` and `_`, spaces turned to `-`, a repeated heading's anchor suffixed
//! `-1`, `-2`, ...). Links inside code (fenced, indented or inline) are text, not links. The files
//! are those git tracks or would track (not ignored), or, outside a checkout, every `.md` below the
//! root but `target/`. And README.md's test command is the one CI runs (`.ci/run`'s last command),
//! and each `sandcap check` line that warns or fails names a section docs/troubleshooting.md has.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use sandcap_core::vocabulary::Check;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files, relative to the root.
fn markdown_files() -> Vec<PathBuf> {
    let git = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md"])
        .current_dir(root())
        .output();
    if let Some(out) = git.ok().filter(|out| out.status.success() && !out.stdout.is_empty()) {
        let listed = String::from_utf8(out.stdout).expect("git lists UTF-8 paths");
        // A file deleted in the working tree but not yet in the index is listed too.
        return listed
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .filter(|p| root().join(p).is_file())
            .collect();
    }
    let mut found = Vec::new();
    walk(Path::new(""), &mut found);
    found
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(root().join(dir)).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        if entry.file_type().expect("a file type").is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                walk(&path, found);
            }
        } else if name.ends_with(".md") {
            found.push(path);
        }
    }
}

/// The lines of `text` that are prose: fenced and indented code blocks blanked out.
fn prose_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut fence: Option<String> = None;
    let mut previous_blank = true;
    let mut in_indented = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str())
                && trimmed.trim_start_matches(open.chars().next().unwrap()).trim().is_empty()
            {
                fence = None;
            }
            lines.push(String::new());
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker = trimmed.chars().next().unwrap();
            fence = Some(trimmed.chars().take_while(|&c| c == marker).collect());
            lines.push(String::new());
            continue;
        }
        let blank = line.trim().is_empty();
        let indented = line.starts_with("    ") || line.starts_with('\t');
        // An indented block starts after a blank line and goes on through blank lines.
        in_indented = if blank { in_indented } else { indented && (in_indented || previous_blank) };
        previous_blank = blank;
        lines.push(if in_indented || blank { String::new() } else { line.to_string() });
    }
    lines
}

/// `line` without its inline code spans.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The anchor GitHub gives a heading's text.
fn slug(heading: &str) -> String {
    // Links render as their text; code spans, emphasis and HTML tags as their content.
    let mut text = String::new();
    let mut chars = heading.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '[' => {}
            ']' if chars.peek() == Some(&'(') => {
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                }
            }
            '<' => {
                for c in chars.by_ref() {
                    if c == '>' {
                        break;
                    }
                }
            }
            _ => text.push(c),
        }
    }
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|&c| c.is_alphanumeric() || c == '-' || c == '_' || c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page: its headings' (with GitHub's suffixes for repeats) and any
/// `<a id=...>` or `<a name=...>`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut found = BTreeSet::new();
    for line in prose_lines(text) {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() < 4 && trimmed.starts_with('#') {
            let level = trimmed.chars().take_while(|&c| c == '#').count();
            let rest = &trimmed[level..];
            if level <= 6 && (rest.is_empty() || rest.starts_with(' ')) {
                let heading = rest.trim().trim_end_matches('#').trim_end();
                let base = slug(&without_code_spans_keeping_text(heading));
                let n = seen.entry(base.clone()).or_insert(0);
                found.insert(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
                *n += 1;
            }
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line.as_str();
            while let Some(i) = rest.find(attr) {
                rest = &rest[i + attr.len()..];
                if let Some(end) = rest.find('"') {
                    found.insert(rest[..end].to_string());
                }
            }
        }
    }
    found
}

/// A heading's text with code spans' backticks dropped (their content is the heading's text).
fn without_code_spans_keeping_text(heading: &str) -> String {
    heading.replace('`', "")
}

/// The link targets of a line of prose: inline links and images, and reference definitions.
fn targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut found = Vec::new();
    let mut rest = line.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let end = rest.find([')', ' ']).unwrap_or(rest.len());
        let target = rest[..end].trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            found.push(target.to_string());
        }
    }
    let trimmed = line.trim_start();
    if let Some(close) = trimmed.strip_prefix('[').and_then(|r| r.find("]:").map(|i| &r[i + 2..]))
        && let Some(target) = close.split_whitespace().next()
    {
        found.push(target.to_string());
    }
    found
}

fn is_external(target: &str) -> bool {
    let scheme = target.split(':').next().unwrap_or("");
    target.starts_with("//")
        || (target.contains(':')
            && !scheme.is_empty()
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)))
}

/// `base` joined with `relative`, `..` and `.` resolved; None if it leaves the root.
fn join(base: &Path, relative: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = Vec::new();
    let start = if relative.starts_with('/') { PathBuf::new() } else { base.to_path_buf() };
    for component in start.join(relative.trim_start_matches('/')).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop()?;
            }
            _ => {}
        }
    }
    Some(parts.iter().collect())
}

fn decode(path: &str) -> String {
    path.replace("%20", " ")
}

/// Every broken link of the repository's Markdown, as `file:line: target: why`.
fn broken_links() -> Vec<String> {
    let files = markdown_files();
    let mut pages: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut page_anchors = |path: &Path| -> Option<BTreeSet<String>> {
        if let Some(found) = pages.get(path) {
            return Some(found.clone());
        }
        let text = fs::read_to_string(root().join(path)).ok()?;
        let found = anchors(&text);
        pages.insert(path.to_path_buf(), found.clone());
        Some(found)
    };
    let mut broken = Vec::new();
    for file in &files {
        let text = fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let dir = file.parent().unwrap_or(Path::new(""));
        for (n, line) in prose_lines(&text).iter().enumerate() {
            for target in targets(line) {
                if is_external(&target) {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((path, anchor)) => (path, Some(anchor)),
                    None => (target.as_str(), None),
                };
                let mut fail = |why: &str| broken.push(format!("{}:{}: {target}: {why}", file.display(), n + 1));
                let resolved = if path.is_empty() { Some(file.clone()) } else { join(dir, &decode(path)) };
                let Some(resolved) = resolved else {
                    fail("leaves the repository");
                    continue;
                };
                if !root().join(&resolved).exists() {
                    fail("no such file or folder");
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if resolved.extension().is_some_and(|e| e == "md") {
                    match page_anchors(&resolved) {
                        Some(found) if found.contains(anchor) => {}
                        Some(_) => fail("no heading with this anchor"),
                        None => fail("unreadable"),
                    }
                } else if !(anchor.starts_with('L')
                    && anchor[1..].split('-').all(|p| p.trim_start_matches('L').parse::<u32>().is_ok()))
                {
                    fail("an anchor into a file that is not Markdown");
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let files = markdown_files();
    assert!(files.iter().any(|f| f == Path::new("README.md")), "README.md is among the Markdown files: {files:?}");
    let broken = broken_links();
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}

#[test]
fn anchors_are_githubs() {
    let page = "# Title\n\n## 5. Command line\n\n### `v1`\n\n## The node: sandcap's chart as pods (`examples/node.sh`)\n\
                \n## Notes\n\n## Notes\n\n```\n## not a heading\n```\n\n    ## nor this\n\n## [A link](x.md) and *emphasis*\n";
    let found = anchors(page);
    for expected in [
        "title",
        "5-command-line",
        "v1",
        "the-node-sandcaps-chart-as-pods-examplesnodesh",
        "notes",
        "notes-1",
        "a-link-and-emphasis",
    ] {
        assert!(found.contains(expected), "{expected} in {found:?}");
    }
    assert!(!found.contains("not-a-heading") && !found.contains("nor-this"), "{found:?}");
}

#[test]
fn links_in_code_are_not_links() {
    let text = "See [this](a.md#x) and `[not](b.md)`.\n\n    [nor](c.md)\n\n```\n[nor](d.md)\n```\n[ref]: e.md\n";
    let found: Vec<String> = prose_lines(text).iter().flat_map(|l| targets(l)).collect();
    assert_eq!(found, ["a.md#x", "e.md"]);
    assert!(is_external("https://example.com/x") && is_external("mailto:a@b") && !is_external("docs/a.md#b:c"));
}

#[test]
fn readmes_test_command_is_what_ci_runs() {
    let readme = include_str!("../README.md");
    let ci_run = include_str!("../.ci/run");
    let heading = "\n## Run all tests\n\n";
    let start = readme.find(heading).expect("README.md has a section \"Run all tests\"") + heading.len();
    let command = readme[start..].lines().next().expect("a line after the heading");
    let command = command.strip_prefix("    ").expect("the command, as an indented code block, first in the section");
    let last =
        ci_run.lines().rev().find(|l| !l.trim().is_empty() && !l.starts_with('#')).expect(".ci/run runs a command");
    assert_eq!(command, last, "README's test command is .ci/run's last command");
}

/// Every line of `sandcap check` that warns or fails names a section of docs/troubleshooting.md
/// ([`Check::troubleshooting`]); each section is there.
#[test]
fn every_check_names_a_troubleshooting_section() {
    let text = fs::read_to_string(root().join("docs/troubleshooting.md")).expect("docs/troubleshooting.md");
    let headings = anchors(&text);
    for check in Check::ALL {
        let see = check.troubleshooting();
        let (page, anchor) = see.split_once('#').expect("a page and an anchor");
        assert_eq!(page, "docs/troubleshooting.md");
        assert!(headings.contains(anchor), "{see}: no such section (### check: {})", check.name());
    }
}
