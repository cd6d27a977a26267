use std::io::Write as _;

use sandcap::cli::{self, Command};
use sandcap::run::RunArgs;

// Every review allocates its parsed object and answer; mimalloc's per-thread free lists make that
// cheaper than glibc malloc under load (see docs/webhook.md, "Speed").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc 3's `mimalloc.h` (the sys crate names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc 3 returns freed memory to the OS a second after it was freed (ten for whole arena
/// blocks); a controller start decodes every lease at once, and that delay alone held about 18 MiB
/// more at 10,000 leases (docs/controller.md, "Scale"). 10 ms is mimalloc 2's default.
/// `MIMALLOC_PURGE_DELAY` in the environment still decides.
///
/// Transparent huge pages are off for the process: mimalloc asks for them on the memory it maps
/// (`madvise(MADV_HUGEPAGE)`), and where the kernel grants them (its THP setting `madvise`, the
/// usual default, or `always`) each 2 MiB of heap is resident once one byte of it is touched and
/// stays so until all of it is free: at 10,000 leases huge pages were half of sandcap's resident
/// memory. A heap of tens of MiB gains little from them, and the pod's memory limit counts them.
/// `MIMALLOC_ALLOW_THP` in the environment still decides.
fn tune_allocator() {
    // SAFETY: called first in `main`, before any other thread exists (the option is not atomic).
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, 10) };
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // SAFETY: a prctl with integer arguments; it fails only on kernels older than 3.15, where
        // the memory is what it was.
        unsafe {
            libc::prctl(
                libc::PR_SET_THP_DISABLE,
                1 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        };
    }
}

fn main() {
    tune_allocator();
    let cli = cli::parse();
    let code = match cli.command {
        Command::Run(args) => serve(*args),
        Command::Bridge(args) => bridge(*args),
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
    run_on(tokio::runtime::Runtime::new(), sandcap::run::run(args))
}

/// `sandcap bridge` on one thread: the bridge is small, and the worker it starts is killed when
/// the thread that started it ends (Linux's parent-death signal), which must be the main thread.
fn bridge(args: sandcap::bridge::BridgeArgs) -> i32 {
    run_on(tokio::runtime::Builder::new_current_thread().enable_all().build(), sandcap::bridge::run(args))
}

/// Runs `task` to its end on `runtime`: exit 0, or 1 with its error on stderr.
fn run_on<E: std::fmt::Display>(
    runtime: std::io::Result<tokio::runtime::Runtime>,
    task: impl std::future::Future<Output = Result<(), E>>,
) -> i32 {
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            report(&format!("cannot start the async runtime: {e}"));
            return 1;
        }
    };
    let code = match runtime.block_on(task) {
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
