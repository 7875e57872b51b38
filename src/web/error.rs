//! HTTP errors: the D-Bus error names in an HTTP status and a JSON body
//! (`{"error": "org.agentstore.Error.NotFound", "message": "…"}`).

use crate::bus::BusError;

/// An error answer.
#[derive(Debug, Clone)]
pub struct WebError {
    /// HTTP status.
    pub status: u16,
    /// The D-Bus error name it stands for (or an HTTP-only name).
    pub name: String,
    /// The text, as the D-Bus error carries it.
    pub message: String,
    /// The methods the path allows (a 405's `Allow` header).
    pub allow: Option<&'static str>,
}

impl WebError {
    /// An error with `status`, `name` and `message`.
    pub fn new(status: u16, name: &str, message: impl Into<String>) -> WebError {
        WebError {
            status,
            name: name.to_string(),
            message: message.into(),
            allow: None,
        }
    }

    /// 400 with `org.agentstore.Error.InvalidMessage`.
    pub fn invalid(message: impl Into<String>) -> WebError {
        WebError::new(400, "org.agentstore.Error.InvalidMessage", message)
    }

    /// 404 for a path the API does not have.
    pub fn no_route(path: &str) -> WebError {
        WebError::new(404, "NoSuchPath", format!("no such path: {path}"))
    }

    /// 405 for `method` on `path`, which allows `allow` (the `Allow` header's value).
    pub fn method_not_allowed(method: &hyper::Method, path: &str, allow: &'static str) -> WebError {
        WebError {
            allow: Some(allow),
            ..WebError::new(
                405,
                "MethodNotAllowed",
                format!("{method} {path}: this path answers {allow} only"),
            )
        }
    }

    /// The error as a response: `answer` (its JSON or page) with the status and, for a 405,
    /// the `Allow` header.
    pub fn with_headers(
        &self,
        mut answer: hyper::Response<super::Body>,
    ) -> hyper::Response<super::Body> {
        if let Some(allow) = self.allow {
            answer.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static(allow),
            );
        }
        answer
    }

    /// 401: no or a wrong token on TCP.
    pub fn unauthorized(message: impl Into<String>) -> WebError {
        WebError::new(401, "Unauthorized", message)
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        serde_json::json!({"error": self.name, "message": self.message}).to_string()
    }

    /// The status for a D-Bus error name.
    fn status_of(name: &str) -> u16 {
        match name.rsplit('.').next().unwrap_or("") {
            "NotFound" | "ServiceUnknown" | "UnknownObject" | "NameHasNoOwner" => 404,
            "PermissionDenied" | "AccessDenied" => 403,
            "InvalidMessage" | "InvalidArgs" => 400,
            _ => 502,
        }
    }
}

impl From<BusError> for WebError {
    fn from(e: BusError) -> WebError {
        let (name, message) = match e.normalized() {
            BusError::NotFound(m) => ("NotFound", m),
            BusError::PermissionDenied(m) => ("PermissionDenied", m),
            BusError::InvalidMessage(m) => ("InvalidMessage", m),
            BusError::Failed(m) => ("Failed", m),
            BusError::Unavailable(m) => ("Unavailable", m),
            BusError::ZBus(z) => return WebError::from(z),
        };
        let name = format!("org.agentstore.Error.{name}");
        WebError {
            status: WebError::status_of(&name),
            name,
            message,
            allow: None,
        }
    }
}

impl From<zbus::Error> for WebError {
    fn from(e: zbus::Error) -> WebError {
        match e {
            zbus::Error::MethodError(name, detail, _) => {
                let name = name.to_string();
                WebError {
                    status: WebError::status_of(&name),
                    message: detail.unwrap_or_else(|| name.clone()),
                    name,
                    allow: None,
                }
            }
            zbus::Error::FDO(f) => {
                let text = f.to_string();
                let name = match *f {
                    zbus::fdo::Error::ServiceUnknown(_) => {
                        "org.freedesktop.DBus.Error.ServiceUnknown"
                    }
                    zbus::fdo::Error::NameHasNoOwner(_) => {
                        "org.freedesktop.DBus.Error.NameHasNoOwner"
                    }
                    zbus::fdo::Error::AccessDenied(_) => "org.freedesktop.DBus.Error.AccessDenied",
                    _ => "org.freedesktop.DBus.Error.Failed",
                };
                WebError::new(WebError::status_of(name), name, text)
            }
            other => WebError::new(502, "org.agentstore.Error.Failed", other.to_string()),
        }
    }
}
