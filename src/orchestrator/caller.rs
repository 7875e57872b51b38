//! Who is calling: a caller's Unix uid mapped to a user in `users/` (its `unix_user`, else
//! its id) — one rule for every front end (the D-Bus interfaces find the uid with
//! `bus::caller::caller_uid`).

use super::RouteError;
use crate::permissions::Caller;
use crate::store::{Store, StoreError};

/// The login name of a uid, if it has one.
pub fn login_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// Maps a caller's Unix user to a PRD §10 caller. Root and the daemon's own user are
/// trusted and may act for the message's `user`; anyone else is the user whose document's
/// `unix_user` (or id) is their login name.
pub fn caller_for_uid(
    store: &Store,
    uid: u32,
    own_uid: u32,
    claimed: Option<&str>,
) -> Result<Caller, RouteError> {
    let lookup = |id: &str| -> Result<Caller, RouteError> {
        match store.user(id) {
            Ok(u) => Ok(Caller::User(u)),
            Err(StoreError::NotFound { .. }) => {
                Err(RouteError::NotFound(format!("User not found: {id}")))
            }
            Err(e) => Err(e.into()),
        }
    };
    if uid == 0 || uid == own_uid {
        return match claimed {
            Some(id) => lookup(id),
            None => Ok(Caller::Trusted),
        };
    }
    let name = login_name(uid)
        .ok_or_else(|| RouteError::PermissionDenied(format!("uid {uid} has no user name")))?;
    let mut ignore = |_| {};
    let user = store
        .users(&mut ignore)?
        .into_iter()
        .find(|u| u.unix_name() == name)
        .ok_or_else(|| {
            RouteError::PermissionDenied(format!(
                "Unix user {name} (uid {uid}) has no document in users/ (ask an admin to add one with unix_user: {name})"
            ))
        })?;
    if let Some(c) = claimed
        && c != user.id
    {
        return Err(RouteError::PermissionDenied(format!(
            "Unix user {name} is {}, not {c}",
            user.id
        )));
    }
    Ok(Caller::User(user))
}
