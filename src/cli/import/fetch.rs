//! A manifest from a running `sandcap bridge` (`GET /manifest`, the manifest it loaded in its
//! pod): the import then evaluates no plugin code at all. Bounded as a manifest file is: at most
//! the manifest budget of body, within the loader's time budget, no redirects.

use std::time::Duration;

use super::CliError;

/// The body of `GET url`, at most `limit` bytes, within `timeout`.
pub fn manifest(url: &str, limit: u64, timeout: Duration) -> Result<Vec<u8>, CliError> {
    let failed = |message: String| CliError::Parse { path: url.to_string(), message };
    let parsed = reqwest::Url::parse(url).map_err(|e| failed(format!("not a URL: {e}")))?;
    crate::tls::install_default_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    let fetch = async {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| failed(format!("no HTTP client: {e}")))?;
        let mut response = client.get(parsed).send().await.map_err(|e| failed(format!("cannot fetch: {e}")))?;
        if !response.status().is_success() {
            return Err(failed(format!("answered HTTP {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(format!("cannot read: {e}")))? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > limit {
                return Err(failed(format!("a manifest is at most {limit} bytes")));
            }
        }
        Ok(body)
    };
    runtime
        .block_on(async { tokio::time::timeout(timeout, fetch).await })
        .unwrap_or_else(|_| Err(failed(format!("no answer within {}", humantime::format_duration(timeout)))))
}
