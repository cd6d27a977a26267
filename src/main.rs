use clap::Parser;
use sandcap::cli::{self, Cli};

fn main() {
    let cli = Cli::parse();
    let code = match cli::run(cli, &mut std::io::stdout().lock()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sandcap: {e}");
            2
        }
    };
    std::process::exit(code);
}
