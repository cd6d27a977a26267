//! How an offline command fails.

/// A failure of the command itself (as opposed to a denial): one line, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{path}: cannot read: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {kind}/{name}: {message}")]
    Object { path: String, kind: String, name: String, message: String },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Request(#[from] super::cluster::RequestError),
    /// The output could not be written (a closed pipe, a full disk): a truncated output must not
    /// pass for a complete one.
    #[error("cannot write the output: {0}")]
    Write(#[from] std::io::Error),
}
