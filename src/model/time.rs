//! UTC timestamps written as `YYYY-MM-DDTHH:MM:SS[.fff]Z`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The most two machines' clocks are taken to differ by (seconds). A heartbeat or other time
/// another machine claims further ahead than this is invalid.
pub const MAX_CLOCK_SKEW_SECS: u64 = 300;

/// A UTC instant that always serialises with a `Z` suffix, as PRD §4 requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub DateTime<Utc>);

impl Timestamp {
    /// The current time, truncated to whole seconds (the PRD's own format).
    pub fn now() -> Timestamp {
        let now = Utc::now();
        Timestamp(DateTime::from_timestamp(now.timestamp(), 0).unwrap_or(now))
    }

    /// Seconds from `self` to `later` (negative if `later` is earlier).
    pub fn seconds_until(&self, later: &Timestamp) -> f64 {
        (later.0 - self.0).num_milliseconds() as f64 / 1000.0
    }

    /// True when `self`, a time another machine (or the store) claims, lies further ahead of
    /// `now` than clocks may differ ([`MAX_CLOCK_SKEW_SECS`]): it is judged invalid, never
    /// trusted (DESIGN §9: time claimed by other machines is bounded).
    pub fn is_beyond_skew(&self, now: &Timestamp) -> bool {
        now.seconds_until(self) > MAX_CLOCK_SKEW_SECS as f64
    }

    /// The age by `now` of `self`, a time another machine claims (a heartbeat, a job's
    /// queue time): 0 for one slightly ahead (clock skew), and `f64::INFINITY` for one from
    /// beyond the skew — a heartbeat from the future counts as stale and a job from the
    /// future as old, never as fresh forever.
    pub fn claimed_age(&self, now: &Timestamp) -> f64 {
        if self.is_beyond_skew(now) {
            f64::INFINITY
        } else {
            self.seconds_until(now).max(0.0)
        }
    }

    /// `self` plus `secs` seconds (saturating at the latest representable time).
    pub fn plus_secs(&self, secs: u64) -> Timestamp {
        let d = chrono::TimeDelta::try_seconds(i64::try_from(secs).unwrap_or(i64::MAX))
            .unwrap_or(chrono::TimeDelta::MAX);
        Timestamp(
            self.0
                .checked_add_signed(d)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }
}

/// Error for a string that is not `YYYY-MM-DDTHH:MM:SS[.fff]Z`.
#[derive(Debug, thiserror::Error)]
#[error("invalid timestamp {0:?}: expected UTC like 2025-10-23T21:59:44Z")]
pub struct TimestampError(String);

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let b = s.as_bytes();
        let shape_ok = b.len() >= 20
            && b[4] == b'-'
            && b[7] == b'-'
            && b[10] == b'T'
            && b[13] == b':'
            && b[16] == b':'
            && b.last() == Some(&b'Z');
        if !shape_ok {
            return Err(TimestampError(s.to_string()));
        }
        DateTime::parse_from_rfc3339(s)
            .map(|d| Timestamp(d.with_timezone(&Utc)))
            .map_err(|_| TimestampError(s.to_string()))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in ["2025-10-23T21:59:44Z", "2025-10-23T21:59:44.123Z"] {
            let t: Timestamp = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
        }
        for bad in [
            "2025-10-23 21:59:44Z",
            "2025-10-23T21:59:44+01:00",
            "2025-13-01T00:00:00Z",
            "",
        ] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
    }
}
