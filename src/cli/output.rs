//! One `-o` for every command, as helm's: `table` for people (the default; `text` is the same),
//! `json` and `yaml` for scripts, both of the same records.

use std::io::{self, Write};

use serde::Serialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    #[default]
    #[value(alias = "text")]
    Table,
    Json,
    Yaml,
}

impl Output {
    /// Writes `records` as JSON or YAML and returns true; returns false for `table`, which each
    /// command writes its own way.
    pub fn write_data(self, out: &mut dyn Write, records: &impl Serialize) -> io::Result<bool> {
        match self {
            Output::Table => return Ok(false),
            Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(records).expect("records serialize"))?,
            Output::Yaml => out.write_all(serde_saphyr::to_string(records).expect("records serialize").as_bytes())?,
        }
        Ok(true)
    }
}
