use std::io::Write as _;

use sandcap::cli::{self, Command};
use sandcap::run::RunArgs;

// Every review allocates its parsed object and answer; mimalloc's per-thread free lists make that
// cheaper than glibc malloc under load (see docs/webhook.md, "Speed").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = cli::parse();
    let code = match cli.command {
        Command::Run(args) => serve(*args),
        Command::Tool(command) => match cli::run(command, &mut std::io::stdout().lock()) {
            Ok(code) => code,
            Err(e) => {
                report(&e);
                2
            }
        },
    };
    std::process::exit(code);
}

fn serve(args: RunArgs) -> i32 {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            report(&format!("cannot start the async runtime: {e}"));
            return 1;
        }
    };
    let code = match runtime.block_on(sandcap::run::run(args)) {
        Ok(()) => 0,
        Err(e) => {
            report(&e);
            1
        }
    };
    // After a clean stop nothing is left; after a forced one, what is left must not hold up the exit.
    runtime.shutdown_background();
    code
}

/// To stderr, without eprintln!'s panic when stderr is a closed pipe.
fn report(error: &dyn std::fmt::Display) {
    let _ = writeln!(std::io::stderr(), "sandcap: {error}");
}
