//! Shared test support, for `mod support;` in an integration test.
//! Tests may also include one file: `#[path = "support/fake_anthropic.rs"] mod fake_anthropic;`.
#![allow(dead_code)]

pub mod claude_env;
pub mod fake_anthropic;
