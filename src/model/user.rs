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
