//! Records the git commit the binary is built from, for `sandcap version`: `SANDCAP_GIT_COMMIT`
//! when set (the Dockerfile's build, whose context has no `.git`), else what `git` says of the
//! checkout, else `unknown` (a source tarball).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=SANDCAP_GIT_COMMIT");
    // A commit or a checkout moves HEAD or a branch's ref; nothing else changes the answer.
    for watched in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        if std::path::Path::new(watched).exists() {
            println!("cargo:rerun-if-changed={watched}");
        }
    }
    let commit = std::env::var("SANDCAP_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let out = Command::new("git").args(["rev-parse", "HEAD"]).output().ok()?;
        let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !commit.is_empty()).then_some(commit)
    });
    println!("cargo:rustc-env=SANDCAP_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
