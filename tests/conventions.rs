//! The command-line conventions kubectl and helm users expect of the built binary: one `-o`
//! vocabulary, `version` with the commit, shell completion and kubectl's plugin completion
//! (docs/contract.md, "Command line").

use std::process::{Command, Output};

use serde_json::Value;

fn run(binary: &std::path::Path, args: &[&str]) -> Output {
    Command::new(binary).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("sandcap runs")
}

fn sandcap(args: &[&str]) -> Output {
    run(env!("CARGO_BIN_EXE_sandcap").as_ref(), args)
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn every_output_flag_takes_table_json_and_yaml() {
    let file = "examples/provider-full.yaml";
    let commands: [&[&str]; 4] = [
        &["validate", file],
        &["resolve", "--provider", file],
        &["plan", "--contract", "v2", "-f", file],
        &["version"],
    ];
    for command in commands {
        let json: Value = serde_json::from_str(&stdout(&sandcap(&[command, &["-o", "json"]].concat()))).unwrap();
        let yaml: Value = serde_saphyr::from_str(&stdout(&sandcap(&[command, &["-o", "yaml"]].concat()))).unwrap();
        assert_eq!(json, yaml, "{command:?}: the same records in both");
        let table = stdout(&sandcap(&[command, &["-o", "table"]].concat()));
        assert_eq!(table, stdout(&sandcap(command)), "{command:?}: table is the default");
        assert_eq!(table, stdout(&sandcap(&[command, &["-o", "text"]].concat())), "{command:?}: text is table");
    }
    let help = stdout(&sandcap(&["check", "--help"]));
    assert!(help.contains("[possible values: table, json, yaml]"), "{help}");
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let version: Value = serde_json::from_str(&stdout(&sandcap(&["version", "-o", "json"]))).unwrap();
    assert_eq!(version["version"], env!("CARGO_PKG_VERSION"));
    let commit = version["gitCommit"].as_str().unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        // A checkout: the commit is HEAD's (the build script reruns when HEAD moves).
        Ok(head) if !head.is_empty() => assert_eq!(commit, head),
        _ => assert_eq!(commit, "unknown"),
    }
    assert_eq!(version["contracts"], serde_json::json!(["v1", "v2"]));
    assert!(version["platform"].as_str().unwrap().contains('/'), "{version}");
    assert!(stdout(&sandcap(&["--version"])).contains(&format!("(commit {commit})")));
}

#[test]
fn completion_scripts_for_each_shell() {
    for (shell, marker) in
        [("bash", "complete -F _sandcap"), ("zsh", "#compdef sandcap"), ("fish", "complete -c sandcap")]
    {
        let script = stdout(&sandcap(&["completion", shell]));
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("explain"), "{shell}: the subcommands are in it");
    }
    assert!(!sandcap(&["completion", "tcsh"]).status.success());
}

#[test]
fn kubectl_plugin_completion_answers_as_cobra_does() {
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join(sandcap::cli::HELPER_NAME);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sandcap"), &helper).unwrap();
    // kubectl runs the helper with the words after `kubectl sandcap`, the last being completed.
    let lines = |o: Output| stdout(&o).lines().map(String::from).collect::<Vec<_>>();
    let subcommands = lines(run(&helper, &["ex"]));
    assert_eq!(subcommands.last().unwrap(), ":4", "no file names after a subcommand's prefix");
    assert!(subcommands[0].starts_with("explain\tExplain, from the live cluster"), "{subcommands:?}");
    let values = lines(run(&helper, &["check", "-o", ""]));
    assert_eq!(values, ["table", "json", "yaml", ":4"]);
    let flags = lines(run(&helper, &["explain", "lease", "--as"]));
    assert!(flags.iter().any(|l| l.starts_with("--as-group\t")), "{flags:?}");
    assert!(!flags.iter().any(|l| l.starts_with("__complete")), "hidden commands are never offered");
    // The hidden subcommand answers the same, for `kubectl sandcap __complete` wrappers.
    assert_eq!(lines(sandcap(&["__complete", "check", "-o", ""])), values);
    assert_eq!(lines(run(&helper, &[])).last().unwrap(), ":4");
}
