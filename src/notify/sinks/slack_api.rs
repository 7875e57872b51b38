//! A small client of Slack's Web API, shared by the Slack sink (notices) and the Socket Mode
//! app (`crate::slackapp`: buttons, commands): JSON bodies with a bearer token, `{"ok": …}`
//! answers turned into [`SinkError`]s that name the method and Slack's error, never the
//! token.

use super::super::SinkError;
use serde_json::Value;

/// Slack errors that an administrator fixes (the delivery waits, it is not given up at once).
const TRANSIENT: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "token_revoked",
    "token_expired",
    "account_inactive",
    "ratelimited",
    "service_unavailable",
    "fatal_error",
    "internal_error",
    "request_timeout",
];

/// One token at one Web API base.
#[derive(Clone)]
pub struct SlackApi {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl std::fmt::Debug for SlackApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackApi")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl SlackApi {
    /// A client of `base` (`https://slack.com/api`) with `token`; `what` names the token in
    /// errors (`slack`, `slack app`).
    pub fn new(
        what: &str,
        base: &str,
        token: String,
        http: reqwest::Client,
    ) -> Result<SlackApi, String> {
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{what}: the token holds white space"));
        }
        reqwest::Url::parse(base).map_err(|e| format!("{what}: api_url {base:?}: {e}"))?;
        Ok(SlackApi {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// Calls Web API `method` with the JSON `body`; the answer when `ok` is true.
    pub async fn call(&self, method: &str, body: Value) -> Result<Value, SinkError> {
        let r = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .map_err(super::http_error)?;
        answer(method, r).await
    }

    /// Calls read method `method` with its arguments in the query string.
    pub async fn get(&self, method: &str, args: &[(&str, &str)]) -> Result<Value, SinkError> {
        let mut url = reqwest::Url::parse(&format!("{}/{method}", self.base))
            .map_err(|e| SinkError::Permanent(format!("slack: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in args {
                q.append_pair(k, v);
            }
        }
        let r = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(super::http_error)?;
        answer(method, r).await
    }

    /// The message `ts` of `channel` as Slack keeps it, with its metadata (`None`: no such
    /// message).
    pub async fn message(&self, channel: &str, ts: &str) -> Result<Option<Value>, SinkError> {
        let v = self
            .get(
                "conversations.history",
                &[
                    ("channel", channel),
                    ("latest", ts),
                    ("inclusive", "true"),
                    ("limit", "1"),
                    ("include_all_metadata", "true"),
                ],
            )
            .await?;
        Ok(v["messages"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["ts"] == ts))
            .cloned())
    }
}

/// The answer of Web API `method`: its body when `ok` is true, else the error it names.
async fn answer(method: &str, r: reqwest::Response) -> Result<Value, SinkError> {
    let status = r.status();
    if status.as_u16() == 429 || status.is_server_error() {
        return Err(SinkError::Transient(format!("slack {method}: {status}")));
    }
    let v: Value = r.json().await.map_err(super::http_error)?;
    if v["ok"] == Value::Bool(true) {
        return Ok(v);
    }
    let err = v["error"].as_str().unwrap_or("no error named").to_string();
    let msg = format!("slack {method}: {err}");
    Err(if TRANSIENT.contains(&err.as_str()) {
        SinkError::Transient(msg)
    } else {
        SinkError::Permanent(msg)
    })
}
