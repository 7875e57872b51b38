//! L1 · Transport: the only place that touches a human.
//!
//! Reads input, renders output, intercepts local slash commands and owns the `ask()` channel
//! passed down to L2 and L3. The transports: the interactive [`terminal`], [`headless`]
//! (one prompt, one JSON result, an `ask()` that never waits), [`job`] (the `ask()` of a
//! queued job: the job worker's approval channel), [`web`] (a local page) and [`telegram`]
//! (a bot).

pub mod headless;
pub mod job;
pub mod line_editor;
pub mod markdown;
pub mod render;
pub mod sessions;
pub mod telegram;
pub mod terminal;
pub mod web;
