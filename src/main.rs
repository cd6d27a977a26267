use clap::Parser;
use sandcap::cli::{self, Cli, Command, RunArgs};

// Every review allocates its parsed object and answer; mimalloc's per-thread free lists make that
// cheaper than glibc malloc under load (see docs/webhook.md, "Speed").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => serve(*args),
        command => match cli::run(Cli { command }, &mut std::io::stdout().lock()) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("sandcap: {e}");
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
            eprintln!("sandcap: cannot start the async runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(sandcap::server::run(args)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("sandcap: {e}");
            1
        }
    }
}
