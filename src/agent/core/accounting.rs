//! Token and cost accounting per request, per turn and per session.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::agent::core::provider::Usage;

/// Prices of one model in USD per million tokens (`config.json` → `prices`, and the built-in
/// table in `prices.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct Price {
    /// USD per million input tokens.
    #[serde(default)]
    pub input_per_mtok: f64,
    /// USD per million output tokens.
    #[serde(default)]
    pub output_per_mtok: f64,
    /// USD per million tokens written to the prompt cache (informational: usage does not
    /// report cache tokens separately yet, so they are billed as input).
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
    /// USD per million cached input tokens read (informational, as above).
    #[serde(default)]
    pub cache_read_per_mtok: Option<f64>,
}

/// The built-in list prices: the one data file they are kept in.
pub const BUILTIN_PRICES: &str = include_str!("prices.json");

#[derive(Deserialize)]
struct PriceFile {
    models: BTreeMap<String, Price>,
}

/// The price table, keyed by the model string as configured (`deepseek/deepseek-chat`) or by
/// the bare model name (`deepseek-chat`); a dated or `-latest` variant of a listed name
/// (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`) has that name's price.
#[derive(Debug, Clone, Default)]
pub struct PriceTable(pub BTreeMap<String, Price>);

impl PriceTable {
    /// The built-in table (`prices.json`) with `overrides` (the user's config) on top.
    pub fn builtin_with(overrides: &BTreeMap<String, Price>) -> Self {
        let mut table = serde_json::from_str::<PriceFile>(BUILTIN_PRICES)
            .map(|f| f.models)
            .unwrap_or_default();
        table.extend(overrides.iter().map(|(k, v)| (k.clone(), *v)));
        Self(table)
    }

    /// The price of `model`, if known.
    pub fn price(&self, model: &str) -> Option<&Price> {
        if let Some(p) = self.0.get(model) {
            return Some(p);
        }
        let bare = model.rsplit_once('/').map_or(model, |(_, b)| b);
        if let Some(p) = self.0.get(bare) {
            return Some(p);
        }
        // The longest listed name of which `bare` is a dated or `-latest` variant.
        self.0
            .iter()
            .filter(|(name, _)| {
                bare.strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix(['-', '@']))
                    .is_some_and(|v| {
                        v == "latest"
                            || (!v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '-'))
                    })
            })
            .max_by_key(|(name, _)| name.len())
            .map(|(_, p)| p)
    }

    /// Cost of `usage` on `model`; `None` when the model has no price.
    pub fn cost(&self, model: &str, usage: Usage) -> Option<f64> {
        self.price(model).map(|p| {
            (usage.input_tokens as f64 * p.input_per_mtok
                + usage.output_tokens as f64 * p.output_per_mtok)
                / 1_000_000.0
        })
    }

    /// Whether `model` has a price entry.
    pub fn knows(&self, model: &str) -> bool {
        self.price(model).is_some()
    }
}

/// Figures of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestStats {
    /// Wall time of the call, streaming included.
    pub duration: Duration,
    /// Tokens.
    pub usage: Usage,
    /// USD (0 when the price is unknown).
    pub cost_usd: f64,
    /// Whether the model has a price (else the cost is unknown, not 0).
    pub priced: bool,
}

impl RequestStats {
    /// The cost, `None` when unknown.
    pub fn cost(&self) -> Option<f64> {
        (self.priced || self.usage == Usage::default()).then_some(self.cost_usd)
    }
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
    /// USD of the priced calls.
    pub cost_usd: f64,
    /// Calls that used tokens on a model without a price.
    pub unpriced: u64,
}

impl Totals {
    /// Add one call.
    pub fn add(&mut self, stats: &RequestStats) {
        self.requests += 1;
        self.model_time += stats.duration;
        self.usage += stats.usage;
        self.cost_usd += stats.cost_usd;
        if stats.cost().is_none() {
            self.unpriced += 1;
        }
    }

    /// The cost, `None` when any call's price is unknown.
    pub fn cost(&self) -> Option<f64> {
        (self.unpriced == 0).then_some(self.cost_usd)
    }
}

/// A cost for humans: `$0.0123`, or `unknown` (naming the calls without a price).
pub fn cost_text(totals: &Totals) -> String {
    match totals.cost() {
        Some(c) => format!("${c:.4}"),
        None if totals.cost_usd > 0.0 => format!(
            "unknown (${:.4} plus {} calls on models without a price)",
            totals.cost_usd, totals.unpriced
        ),
        None => "unknown (no price for this model; set config prices)".to_string(),
    }
}

impl Totals {
    /// Add another set of totals (a sub-agent's).
    pub fn merge(&mut self, other: &Totals) {
        self.requests += other.requests;
        self.model_time += other.model_time;
        self.usage += other.usage;
        self.cost_usd += other.cost_usd;
        self.unpriced += other.unpriced;
    }
}

/// What the sub-agents of a session used and were refused, for the parent's result.
#[derive(Debug, Default)]
pub struct SubagentLedger {
    inner: parking_lot::Mutex<LedgerEntries>,
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
    /// Reserve a sub-agent start; `false` when `limit` sub-agents have already started.
    pub fn try_start(&self, limit: u32) -> bool {
        let mut l = self.inner.lock();
        if l.started >= limit {
            return false;
        }
        l.started += 1;
        true
    }
    /// Record one sub-agent model call.
    pub fn add_request(&self, stats: &RequestStats) {
        self.inner.lock().totals.add(stats);
    }
    /// Record a refused sub-agent tool call.
    pub fn add_denial(&self, call: &crate::agent::tools::ToolCall, reason: &str) {
        self.inner
            .lock()
            .denials
            .push((call.clone(), reason.to_string()));
    }
    /// A copy of the contents.
    pub fn snapshot(&self) -> LedgerEntries {
        self.inner.lock().clone()
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
                ..Price::default()
            },
        );
        let table = PriceTable(t);
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
        };
        assert!((table.cost("deepseek/deepseek-chat", usage).unwrap() - 0.82).abs() < 1e-9);
        assert_eq!(table.cost("other", usage), None);
    }

    #[test]
    fn builtin_table_prices_known_models_of_every_provider_and_config_wins() {
        let table = PriceTable::builtin_with(&BTreeMap::new());
        let mtok = Usage {
            input_tokens: 1_000_000,
            output_tokens: 1_000_000,
        };
        for (model, expected) in [
            ("anthropic/claude-sonnet-4-5", 18.0),
            ("claude-sonnet-4-5-20250929", 18.0),
            ("anthropic/claude-3-5-haiku-latest", 4.8),
            ("openai/gpt-4o", 12.5),
            ("openai/gpt-4o-mini-2024-07-18", 0.75),
            ("gpt-4.1", 10.0),
            ("openai/o3", 10.0),
            ("openai/o4-mini", 5.5),
            ("deepseek/deepseek-chat", 0.7),
            ("gemini/gemini-2.5-pro", 11.25),
            ("xai/grok-3", 18.0),
            ("mistral/mistral-large-latest", 8.0),
            ("groq/llama-3.3-70b-versatile", 1.38),
            ("openrouter/anthropic/claude-sonnet-4", 18.0),
        ] {
            let got = table.cost(model, mtok);
            assert!(
                got.is_some_and(|c| (c - expected).abs() < 1e-9),
                "{model}: {got:?} != {expected}"
            );
        }
        // a variant that is not a date is a different model: unknown, not a guess
        assert_eq!(table.cost("openai/o3-deep-research", mtok), None);
        assert_eq!(table.cost("openai/test-model", mtok), None);
        let mut over = BTreeMap::new();
        over.insert(
            "gpt-4o".to_string(),
            Price {
                input_per_mtok: 1.0,
                output_per_mtok: 1.0,
                ..Price::default()
            },
        );
        let table = PriceTable::builtin_with(&over);
        assert_eq!(table.cost("openai/gpt-4o", mtok), Some(2.0));
    }

    #[test]
    fn the_price_file_says_its_date_and_source_and_every_entry_is_complete() {
        let v: serde_json::Value = serde_json::from_str(BUILTIN_PRICES).unwrap();
        assert!(
            v["about"]
                .as_str()
                .unwrap()
                .contains("List prices as known on")
        );
        assert!(v["as_of"].is_string());
        for (name, p) in v["models"].as_object().unwrap() {
            assert!(
                p["input_per_mtok"].as_f64().is_some_and(|x| x > 0.0)
                    && p["output_per_mtok"].as_f64().is_some_and(|x| x > 0.0),
                "{name}"
            );
        }
    }

    #[test]
    fn unknown_cost_is_not_zero() {
        let mut t = Totals::default();
        t.add(&RequestStats {
            usage: Usage {
                input_tokens: 5,
                output_tokens: 1,
            },
            ..RequestStats::default()
        });
        assert_eq!(t.cost(), None);
        assert!(cost_text(&t).starts_with("unknown"));
    }
}
