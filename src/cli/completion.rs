//! Shell completion. `sandcap completion SHELL` prints a script for that shell. `sandcap
//! __complete WORDS...` answers kubectl (1.26 and later), which completes `kubectl sandcap ...` by
//! running `kubectl_complete-sandcap` from the PATH with the words after `sandcap` (the last one
//! being completed) and reads Cobra's answer: a candidate per line (`value<TAB>help`), then
//! `:<directive>`. The binary linked or copied under that name answers so too.
//! Both come from clap's own completion engine, so they follow the command line as it parses.

use std::ffi::OsString;
use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;
use super::error::CliError;

/// The name kubectl runs for a plugin's completion.
pub const HELPER_NAME: &str = "kubectl_complete-sandcap";

/// Cobra's `ShellCompDirectiveNoFileComp`: these candidates are all there is.
const NO_FILE_COMPLETION: u8 = 4;
/// Cobra's `ShellCompDirectiveDefault`: nothing to offer; the shell may complete file names.
const DEFAULT: u8 = 0;

#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to print the completion script for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub(super) fn script(args: &CompletionArgs, out: &mut dyn Write) -> Result<i32, CliError> {
    clap_complete::generate(args.shell, &mut Cli::command(), "sandcap", out);
    Ok(0)
}

/// Cobra's answer for `words`, the last of which (possibly empty) is being completed.
pub(super) fn answer(words: &[OsString], out: &mut dyn Write) -> Result<i32, CliError> {
    let mut args = vec![OsString::from("sandcap")];
    args.extend(words.iter().cloned());
    if args.len() == 1 {
        args.push(OsString::new());
    }
    let index = args.len() - 1;
    let here = std::env::current_dir().ok();
    let candidates = clap_complete::engine::complete(&mut Cli::command(), args, index, here.as_deref())
        .map_err(|e| CliError::Usage(format!("cannot complete: {e}")))?;
    let shown: Vec<_> = candidates.iter().filter(|c| !c.is_hide_set()).collect();
    for candidate in &shown {
        let value = candidate.get_value().to_string_lossy();
        match candidate.get_help().map(|h| h.to_string()) {
            Some(help) => writeln!(out, "{value}\t{}", help.lines().next().unwrap_or_default())?,
            None => writeln!(out, "{value}")?,
        }
    }
    writeln!(out, ":{}", if shown.is_empty() { DEFAULT } else { NO_FILE_COMPLETION })?;
    Ok(0)
}
