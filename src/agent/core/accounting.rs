//! Token and cost accounting per request, per turn and per session.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::agent::core::provider::Usage;

/// Prices of one model in USD per million tokens (`config.json` → `prices`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct Price {
    /// USD per million input tokens.
    #[serde(default)]
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    #[serde(default)]
    pub output_per_mtok: f64,
}

/// The price table, keyed by the model string as configured (`deepseek/deepseek-chat`) or by
/// the bare model name (`deepseek-chat`).
#[derive(Debug, Clone, Default)]
pub struct PriceTable(pub BTreeMap<String, Price>);

impl PriceTable {
    /// Cost of `usage` on `model` (0 when the model has no price entry).
    pub fn cost(&self, model: &str, usage: Usage) -> f64 {
        let price = self
            .0
            .get(model)
            .or_else(|| model.split_once('/').and_then(|(_, bare)| self.0.get(bare)));
        price.map_or(0.0, |p| {
            (usage.input_tokens as f64 * p.input_per_mtok
                + usage.output_tokens as f64 * p.output_per_mtok)
                / 1_000_000.0
        })
    }

    /// Whether `model` has a price entry.
    pub fn knows(&self, model: &str) -> bool {
        self.0.contains_key(model)
            || model
                .split_once('/')
                .is_some_and(|(_, bare)| self.0.contains_key(bare))
    }
}

/// Figures of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestStats {
    /// Wall time of the call, streaming included.
    pub duration: Duration,
    /// Tokens.
    pub usage: Usage,
    /// USD.
    pub cost_usd: f64,
}

/// Running totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// Model calls made.
    pub requests: u64,
    /// Time spent in model calls.
    pub model_time: Duration,
    /// Tokens.
    pub usage: Usage,
    /// USD.
    pub cost_usd: f64,
}

impl Totals {
    /// Add one call.
    pub fn add(&mut self, stats: &RequestStats) {
        self.requests += 1;
        self.model_time += stats.duration;
        self.usage += stats.usage;
        self.cost_usd += stats.cost_usd;
    }
}

impl Totals {
    /// Add another set of totals (a sub-agent's).
    pub fn merge(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.model_time += other.model_time;
        self.usage += other.usage;
        self.cost_usd += other.cost_usd;
    }
}

/// What the sub-agents of a session used and were refused, for the parent's result.
#[derive(Debug, Default)]
pub struct SubagentLedger {
    inner: std::sync::Mutex<LedgerEntries>,
}

/// The ledger's contents.
#[derive(Debug, Clone, Default)]
pub struct LedgerEntries {
    /// Sub-agents started.
    pub started: u32,
    /// Their model calls, tokens, cost and model time.
    pub totals: Totals,
    /// Their refused tool calls: (call, reason).
    pub denials: Vec<(crate::agent::tools::ToolCall, String)>,
}

impl SubagentLedger {
    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerEntries> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Reserve a sub-agent start; `false` when `limit` sub-agents have already started.
    pub fn try_start(&self, limit: u32) -> bool {
        let mut l = self.lock();
        if l.started >= limit {
            return false;
        }
        l.started += 1;
        true
    }
    /// Record one sub-agent model call.
    pub fn add_request(&self, stats: &RequestStats) {
        self.lock().totals.add(stats);
    }
    /// Record a refused sub-agent tool call.
    pub fn add_denial(&self, call: &crate::agent::tools::ToolCall, reason: &str) {
        self.lock().denials.push((call.clone(), reason.to_string()));
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> LedgerEntries {
        self.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_by_full_or_bare_name() {
        let mut t = BTreeMap::new();
        t.insert(
            "deepseek-chat".to_string(),
            Price {
                input_per_mtok: 0.27,
                output_per_mtok: 1.10,
            },
        );
        let table = PriceTable(t);
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
        };
        assert!((table.cost("deepseek/deepseek-chat", usage) - 0.82).abs() < 1e-9);
        assert_eq!(table.cost("other", usage), 0.0);
    }
}
