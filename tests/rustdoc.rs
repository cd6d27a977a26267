//! The code's own documentation links what exists: rustdoc over both crates, their private items
//! included (a maintainer reads those), with a broken intra-doc link an error. In a target
//! directory of its own (target/rustdoc), so it never waits for or invalidates the test build.
//! Links from public to private items are allowed (the docs are built with the private items), and
//! so are `<svc>`-style placeholders, which are the flags' help text as clap prints it.

use std::path::Path;
use std::process::Command;

#[test]
fn rustdoc_finds_every_intra_doc_link() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(env!("CARGO"))
        .args(["doc", "--locked", "--no-deps", "--document-private-items", "--workspace"])
        .current_dir(root)
        .env("CARGO_TARGET_DIR", root.join("target/rustdoc"))
        .env("RUSTDOCFLAGS", "-D warnings -A rustdoc::private_intra_doc_links -A rustdoc::invalid_html_tags")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "cargo doc failed:\n{stderr}");
}
