//! The dashboard: server-rendered pages (readable with JavaScript off).

use super::auth::Peer;
use super::error::WebError;
use super::{App, Body, respond};
use hyper::body::Incoming;
use hyper::{Request, Response};

/// Answers one page request.
pub async fn route(
    app: &App,
    peer: Peer,
    req: Request<Incoming>,
) -> Result<Response<Body>, WebError> {
    let _ = (app, peer);
    Err(WebError::no_route(req.uri().path()))
}

/// An error as a page.
pub fn error_page(e: &WebError) -> Response<Body> {
    respond(
        e.status,
        "text/html; charset=utf-8",
        format!(
            "<!doctype html><title>{}</title><h1>{}</h1><p>{}</p>",
            e.status,
            super::html::esc(&e.name),
            super::html::esc(&e.message)
        ),
    )
}
