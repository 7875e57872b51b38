use serde::{Deserialize, Serialize};

/// `users/<id>.json` (PRD §4.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// Login id, also the file stem.
    pub id: String,
    /// Slack handle (reserved for v1).
    #[serde(default)]
    pub slack_username: Option<String>,
    /// Display name.
    pub name: String,
    /// E-mail address.
    pub email: String,
    /// `admin` or `user` (PRD §10).
    pub permissions: Permission,
    /// Unix account jobs of this user's projects run as (extension; default: `id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_user: Option<String>,
    /// Where and what this user is told (extension, issue 31): absent means the machine's
    /// defaults (`notify.defaults` in config.yaml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Box<NotifyPrefs>>,
}

/// `notify` in a user document: the sinks and events this user chose, and quiet hours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct NotifyPrefs {
    /// Sinks: `desktop`, `slack`, `telegram`, `email`, `webhook:<name>` (a webhook the
    /// machine's config.yaml names). Absent: the machine's default sinks; empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sinks: Option<Vec<String>>,
    /// Events (`job_finished`, `job_failed`, `approval_waiting`, …). Absent: the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// Quiet hours: notices are held back while they last and delivered after, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet_hours: Option<QuietHours>,
    /// The Telegram chat the bot writes to (the user's own chat with the bot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram_chat_id: Option<String>,
}

/// A daily quiet period, `start` to `end` (`HH:MM`, wrapping past midnight when `end` is
/// earlier), in the time zone `utc_offset` (`+02:00`; default UTC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuietHours {
    /// Start, `HH:MM`.
    pub start: String,
    /// End, `HH:MM`.
    pub end: String,
    /// `+HH:MM` or `-HH:MM`; absent means UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc_offset: Option<String>,
}

impl QuietHours {
    /// Minutes after local midnight of `HH:MM`.
    fn minutes(hm: &str) -> Option<i64> {
        let (h, m) = hm.split_once(':')?;
        let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
        ((0..24).contains(&h) && (0..60).contains(&m) && hm.len() == 5).then_some(h * 60 + m)
    }

    /// The offset in minutes (`+02:00` → 120).
    fn offset(&self) -> Option<i64> {
        let Some(o) = &self.utc_offset else {
            return Some(0);
        };
        let (sign, rest) = match o.as_bytes().first() {
            Some(b'+') => (1, &o[1..]),
            Some(b'-') => (-1, &o[1..]),
            _ => return None,
        };
        let m = Self::minutes(rest)?;
        (m <= 14 * 60).then_some(sign * m)
    }

    /// Checks the fields; the error names the one that is wrong.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [("start", &self.start), ("end", &self.end)] {
            if Self::minutes(v).is_none() {
                return Err(format!("quiet_hours.{name} {v:?} is not HH:MM"));
            }
        }
        if self.offset().is_none() {
            return Err(format!(
                "quiet_hours.utc_offset {:?} is not +HH:MM or -HH:MM (at most 14 hours)",
                self.utc_offset.as_deref().unwrap_or("")
            ));
        }
        Ok(())
    }

    /// Seconds from `now` until the quiet period ends, or `None` when `now` is not in it (or
    /// the fields are malformed: a bad setting never holds notices back).
    pub fn remaining(&self, now: chrono::DateTime<chrono::Utc>) -> Option<i64> {
        use chrono::Timelike;
        let (s, e, off) = (
            Self::minutes(&self.start)?,
            Self::minutes(&self.end)?,
            self.offset()?,
        );
        let local = now + chrono::TimeDelta::minutes(off);
        let sec = i64::from(local.hour() * 3600 + local.minute() * 60 + local.second());
        let (s, e) = (s * 60, e * 60);
        let day = 24 * 3600;
        let inside = if s <= e {
            sec >= s && sec < e
        } else {
            sec >= s || sec < e
        };
        inside.then(|| (e - sec).rem_euclid(day))
    }
}

/// PRD §10 permission level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// All commands.
    Admin,
    /// Own projects, PRDs and jobs only; cannot list or view users.
    User,
}

impl User {
    /// True for `permissions: "admin"`.
    pub fn is_admin(&self) -> bool {
        self.permissions == Permission::Admin
    }

    /// The Unix account this user maps to.
    pub fn unix_name(&self) -> &str {
        self.unix_user.as_deref().unwrap_or(&self.id)
    }
}
