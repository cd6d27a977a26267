//! `sandcap bridge` as a real process: an SDK plugin behind it probed by the real sandcap
//! (`sdk.rs`), and workers that misbehave every way its budgets cover (`misbehaving.rs`, scripts
//! in `workers/`). Needs node and npm (docs/testing.md, "The bridge's tests").

mod boxed;
mod harness;
mod import;
mod misbehaving;
mod sdk;
