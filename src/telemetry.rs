//! Logging setup for `sandcap run`.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Logs to stdout, filtered by `RUST_LOG` (default `info`). A second call keeps the first setup.
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    // tracing-subscriber reports a failed write with eprintln!, which panics when stderr is the
    // same closed pipe, and a panic in the signal task would leave shutdown waiting forever.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(|| LossyStdout)
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
}

/// Standard output for logs, where a line that cannot be written (EPIPE once the reader of a pipe
/// is gone, a full disk) is dropped: losing log lines is better than failing what was logged.
struct LossyStdout;

impl std::io::Write for LossyStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::Write::flush(&mut std::io::stdout().lock());
        Ok(())
    }
}
