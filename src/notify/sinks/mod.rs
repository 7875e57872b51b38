//! The sinks, one file each, and the set a machine's configuration makes.

pub mod desktop;
pub mod email;
pub mod slack;
pub mod slack_api;
pub mod telegram;
pub mod webhook;

use super::{Delivery, Sink, SinkError, SinkFuture};
use crate::store::notify_config::NotifyConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// A configured sink that cannot work (its secret is missing): every delivery fails,
/// transiently, with the reason, so its notices wait until an administrator fixes it or
/// they are given up on.
pub struct Unavailable {
    name: String,
    why: String,
}

impl Sink for Unavailable {
    fn name(&self) -> &str {
        &self.name
    }
    fn deliver<'a>(&'a self, _d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move { Err(SinkError::Transient(self.why.clone())) })
    }
}

/// The HTTP client every HTTP sink shares: bounded time, no redirects (a redirect could
/// carry a token elsewhere).
pub fn http_client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// A reqwest error as text, without its URL (a Telegram URL holds the token).
pub fn http_error(e: reqwest::Error) -> SinkError {
    let e = e.without_url();
    SinkError::Transient(format!("{e}"))
}

/// Every sink `cfg` configures, by name. Desktop is always there.
pub fn from_config(cfg: &NotifyConfig) -> BTreeMap<String, Box<dyn Sink>> {
    let timeout = Duration::from_secs(cfg.retry.timeout_secs.clamp(1, 600));
    let http = http_client(timeout);
    let mut out: BTreeMap<String, Box<dyn Sink>> = BTreeMap::new();
    let mut add = |name: String, made: Result<Box<dyn Sink>, String>| {
        let sink = made.unwrap_or_else(|why| {
            tracing::warn!("notification sink {name} cannot work: {why}");
            Box::new(Unavailable {
                name: name.clone(),
                why,
            })
        });
        out.insert(name, sink);
    };
    add("desktop".into(), Ok(Box::new(desktop::Desktop::new())));
    if let Some(s) = &cfg.slack {
        add(
            "slack".into(),
            slack::Slack::new(s, http.clone()).map(|s| Box::new(s) as Box<dyn Sink>),
        );
    }
    if let Some(t) = &cfg.telegram {
        add(
            "telegram".into(),
            telegram::Telegram::new(t, http.clone()).map(|s| Box::new(s) as Box<dyn Sink>),
        );
    }
    if let Some(e) = &cfg.email {
        add(
            "email".into(),
            email::Email::new(e, timeout).map(|s| Box::new(s) as Box<dyn Sink>),
        );
    }
    for (name, w) in &cfg.webhooks {
        let full = format!("webhook:{name}");
        add(
            full.clone(),
            webhook::Webhook::new(&full, w, http.clone()).map(|s| Box::new(s) as Box<dyn Sink>),
        );
    }
    out
}
