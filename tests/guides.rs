//! The guides are steps and facts a reader acts on, not a record of how they came to be: README.md
//! and the task pages carry no dates of record, commit hashes or "measured" and "the suite holds"
//! sentences (records live in docs/benchmarks/, CHANGELOG.md and docs/testing.md); install.md
//! opens with its prerequisites as a list; no line of prose and no table cell of the user pages
//! (the task pages, the references and the runbooks) is over 300 characters. Each rule is tried on
//! a planted drift too.

use std::fs;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

/// README.md and the pages an admin or a provider author follows to do something.
const TASK_PAGES: &[&str] = &[
    "README.md",
    "docs/install.md",
    "docs/upgrade.md",
    "docs/contract.md",
    "docs/provider-authors.md",
    "docs/controller.md",
];

/// The other pages written for users (the references and the runbooks); the records
/// (docs/benchmarks/, docs/testing.md, CHANGELOG.md) and the maintainers' pages are not.
const REFERENCE_PAGES: &[&str] = &[
    "docs/configuration.md",
    "docs/operations.md",
    "docs/troubleshooting.md",
    "docs/cli.md",
    "docs/webhook.md",
    "docs/security.md",
    "docs/versioning.md",
];

const MAX_CELL: usize = 300;

fn read(page: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(page)).expect(page)
}

/// The lines of `text` outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// What makes a line evidence rather than a step: a date of record, a commit hash, a measurement
/// reported as such, a claim that a suite holds something.
fn evidence(line: &str) -> Option<&'static str> {
    static RULES: LazyLock<[(&str, Regex); 4]> = LazyLock::new(|| {
        let months = "January|February|March|April|May|June|July|August|September|October|November|December";
        let date = format!(r"\b\d{{1,2}} ({months})\b|\b({months}) \d{{4}}\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b");
        let regex = |pattern: &str| Regex::new(pattern).expect("a valid pattern");
        [
            ("a date", regex(&date)),
            // Hex with a letter and a digit; its length (7 to 40) is checked on each match.
            ("a commit hash", regex(r"\b(?:[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*|[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*)\b")),
            // "Measured by ...", "(measured: ...)": a figure reported; not a mechanism ("as measured").
            ("a measurement", regex(r"(?i)\bmeasured( by|:)|\(measured\b")),
            ("a suite's claim", regex(r"(?i)\b(suite|suites|tests?) (holds?|proves?|shows?)\b")),
        ]
    });
    RULES.iter().find_map(|(what, regex)| {
        regex.find_iter(line).any(|m| *what != "a commit hash" || (7..=40).contains(&m.as_str().len())).then_some(*what)
    })
}

/// The places over the limit: each table cell, each other line.
fn too_long(text: &str) -> Vec<(usize, usize)> {
    let mut long = Vec::new();
    for (n, line) in prose(text) {
        let cells: Vec<&str> = if line.trim_start().starts_with('|') { line.split('|').collect() } else { vec![line] };
        if let Some(cell) = cells.iter().find(|c| c.trim().chars().count() > MAX_CELL) {
            long.push((n, cell.trim().chars().count()));
        }
    }
    long
}

#[test]
fn the_task_pages_carry_no_evidence() {
    let mut found = Vec::new();
    for page in TASK_PAGES {
        for (n, line) in prose(&read(page)) {
            if let Some(what) = evidence(line) {
                found.push(format!("{page}:{n}: {what}: {}", line.chars().take(120).collect::<String>()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "evidence in the guides (move it to docs/benchmarks/, CHANGELOG.md or docs/testing.md):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn no_user_page_line_or_table_cell_is_over_300_characters() {
    let mut found = Vec::new();
    for page in TASK_PAGES.iter().chain(REFERENCE_PAGES) {
        for (n, length) in too_long(&read(page)) {
            found.push(format!("{page}:{n}: {length} characters"));
        }
    }
    assert!(found.is_empty(), "over {MAX_CELL} characters:\n  {}", found.join("\n  "));
}

#[test]
fn install_opens_with_its_prerequisites_as_a_list() {
    let text = read("docs/install.md");
    let first = text.split("\n## ").nth(1).expect("install.md has sections");
    let (heading, body) = first.split_once('\n').unwrap_or_default();
    assert_eq!(heading.trim(), "Prerequisites", "install.md's first section");
    assert!(body.lines().filter(|l| l.starts_with("- ")).count() >= 2, "a list of prerequisites:\n{body}");
}

#[test]
fn each_rule_finds_its_planted_drift() {
    for (line, what) in [
        ("CI's cold run took 41 minutes on 7 December.", "a date"),
        ("Fixed in d827625 (the exit trap).", "a commit hash"),
        ("Measured: 33 MiB at peak.", "a measurement"),
        ("The end-to-end suite holds this on both minors.", "a suite's claim"),
    ] {
        assert_eq!(evidence(line), Some(what), "{line}");
    }
    for step in [
        "Run `sandcap check` on 1.35 and 1.37.",
        "Limits of 8388608 bytes; `0x7f.1` is refused.",
        "Each schema is weighed by its patterns as measured, the cache's size.",
    ] {
        assert_eq!(evidence(step), None, "{step}");
    }
    let long = format!("| a | {} |\n", "x".repeat(MAX_CELL + 1));
    assert_eq!(too_long(&long), [(1, MAX_CELL + 1)]);
    assert!(too_long(&format!("```\n{}\n```\n", "x".repeat(MAX_CELL + 1))).is_empty(), "code is not prose");
}
