//! UTC timestamps written as `YYYY-MM-DDTHH:MM:SS[.fff]Z`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

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
