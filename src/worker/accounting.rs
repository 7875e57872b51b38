//! One accounting for the three agents (issue 35): Claude Code's `--output-format json`
//! result, agentshell's `exec --json` result (the same shape) and Codex's `exec --json`
//! event stream all become an [`AgentRun`], whose cost, tokens, turns and session land in the
//! same job fields (`runtime.cost_usd`, `runtime.usage`, `runtime.num_turns`,
//! `runtime.session_id`). Prices, where an agent reports tokens but no cost (Codex), come
//! from agentshell's one price table, so a model costs the same whichever agent ran it.

use crate::agent::core::accounting::PriceTable;
use crate::agent::core::provider::Usage;
use crate::model::TokenUsage;
use serde::Deserialize;
use serde_json::Value;

/// What the worker records of an agent's run, whichever agent it was.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentRun {
    /// The run failed (API error, max turns, a failed turn), whatever the exit code says.
    pub is_error: bool,
    /// The final answer text, or the error.
    pub result: Option<String>,
    /// Total cost in USD; `None` when unknown (never a false 0).
    pub cost_usd: Option<f64>,
    /// Model turns.
    pub num_turns: Option<u64>,
    /// Session (Claude, agentshell) or thread (Codex) id, to resume it.
    pub session_id: Option<String>,
    /// Tokens used.
    pub usage: Option<TokenUsage>,
}

/// How an agent reports its run on stdout.
#[derive(Debug, Clone, PartialEq)]
pub enum ResultFormat {
    /// Plain text: nothing to parse.
    Text,
    /// One JSON result, the last line (`claude -p --output-format json`, `agentshell exec
    /// --json`).
    ResultJson,
    /// JSONL events (`codex exec --json`); `model` prices the tokens (`None`: unknown).
    CodexEvents {
        /// The model the run used, as named on its command line.
        model: Option<String>,
    },
}

/// The usage object of Claude Code's and agentshell's result.
#[derive(Debug, Default, Deserialize)]
struct ResultUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// The fields of the JSON result read.
#[derive(Debug, Default, Deserialize)]
struct ResultJson {
    #[serde(default)]
    is_error: bool,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    total_cost_usd: Option<f64>,
    #[serde(default)]
    num_turns: Option<u64>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    usage: Option<ResultUsage>,
}

/// Parses the JSON result line of Claude Code or agentshell. Claude's input tokens are split
/// into fresh, cache-written and cache-read; here they are added up (`cached_input_tokens`
/// the cache reads), as Codex and agentshell count them.
pub fn from_result_json(line: &[u8]) -> Result<AgentRun, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if !v.is_object() {
        return Err("not a JSON object".into());
    }
    let r: ResultJson = serde_json::from_value(v).map_err(|e| e.to_string())?;
    let usage = r.usage.map(|u| TokenUsage {
        input_tokens: u.input_tokens
            + u.cache_creation_input_tokens.unwrap_or(0)
            + u.cache_read_input_tokens.unwrap_or(0),
        output_tokens: u.output_tokens,
        cached_input_tokens: u.cache_read_input_tokens,
    });
    Ok(AgentRun {
        is_error: r.is_error,
        result: r.result,
        cost_usd: r.total_cost_usd,
        num_turns: r.num_turns,
        session_id: r.session_id,
        usage,
    })
}

/// The cost of `usage` on `model` by the built-in price table (agentshell's), if priced.
pub fn priced(model: Option<&str>, usage: TokenUsage) -> Option<f64> {
    let table = PriceTable::builtin_with(&Default::default());
    table.cost(
        model?,
        Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_and_agentshell_results_share_the_fields() {
        let claude = br#"{"type":"result","subtype":"success","is_error":false,"result":"hi","num_turns":2,"total_cost_usd":0.25,"session_id":"s1","usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":7}}"#;
        let r = from_result_json(claude).unwrap();
        assert_eq!(
            r,
            AgentRun {
                is_error: false,
                result: Some("hi".into()),
                cost_usd: Some(0.25),
                num_turns: Some(2),
                session_id: Some("s1".into()),
                usage: Some(TokenUsage {
                    input_tokens: 1110,
                    output_tokens: 7,
                    cached_input_tokens: Some(1000),
                }),
            }
        );
        let agentshell = br#"{"type":"result","subtype":"success","is_error":false,"result":"ok","num_turns":1,"duration_ms":5,"duration_api_ms":4,"usage":{"input_tokens":1200,"output_tokens":80},"total_cost_usd":null,"session_id":"u","model":"m","permission_denials":[]}"#;
        let r = from_result_json(agentshell).unwrap();
        assert_eq!(r.cost_usd, None);
        assert_eq!(
            r.usage,
            Some(TokenUsage {
                input_tokens: 1200,
                output_tokens: 80,
                cached_input_tokens: None
            })
        );
        assert!(from_result_json(b"[1]").is_err());
        assert!(from_result_json(b"not json").is_err());
    }

    #[test]
    fn tokens_are_priced_by_the_one_table() {
        let u = TokenUsage {
            input_tokens: 1_000_000,
            output_tokens: 0,
            cached_input_tokens: None,
        };
        let table = PriceTable::builtin_with(&Default::default());
        let gpt5 = table.price("gpt-5").unwrap().input_per_mtok;
        assert_eq!(priced(Some("gpt-5"), u), Some(gpt5));
        assert_eq!(priced(Some("no-such-model-x"), u), None);
        assert_eq!(priced(None, u), None);
    }
}
