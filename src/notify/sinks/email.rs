//! E-mail over SMTP (lettre): one plain-text message to the user's `email`.

use super::super::{Delivery, Sink, SinkError, SinkFuture};
use crate::store::notify_config::EmailSink;
use lettre::Transport;
use lettre::message::Mailbox;
use lettre::transport::smtp::SmtpTransport;
use lettre::transport::smtp::authentication::Credentials;
use std::time::Duration;

/// The `Message-ID` of delivery `key`: the same for every attempt of one delivery (a
/// receiver that sees a message twice after a kill can tell it is one), at the sender's
/// domain (RFC 5322 §3.6.4).
pub fn message_id(key: &str, from: &Mailbox) -> String {
    const NS: uuid::Uuid = uuid::Uuid::from_u128(0x3d5e_81a2_46c7_4f0b_9e13_7a2c_5b90_e031);
    let id = uuid::Uuid::new_v5(&NS, key.as_bytes());
    format!("<{id}@{}>", from.email.domain())
}

/// The e-mail sink.
pub struct Email {
    from: Mailbox,
    transport: SmtpTransport,
}

impl Email {
    /// The sink as configured.
    pub fn new(cfg: &EmailSink, timeout: Duration) -> Result<Email, String> {
        let from: Mailbox = cfg
            .from
            .parse()
            .map_err(|e| format!("email: from {:?}: {e}", cfg.from))?;
        let host = cfg.smtp_host.as_str();
        let builder = match cfg.security.as_str() {
            "none" => SmtpTransport::builder_dangerous(host),
            "starttls" => SmtpTransport::starttls_relay(host)
                .map_err(|e| format!("email: smtp_host {host:?}: {e}"))?,
            "tls" => {
                SmtpTransport::relay(host).map_err(|e| format!("email: smtp_host {host:?}: {e}"))?
            }
            other => {
                return Err(format!(
                    "email: security {other:?} is not none, starttls or tls"
                ));
            }
        };
        let mut builder = builder.port(cfg.smtp_port).timeout(Some(timeout));
        if let Some(user) = &cfg.username {
            let password =
                super::super::secrets::secret("email", None, cfg.password_credential.as_deref())?;
            builder = builder.credentials(Credentials::new(user.clone(), password));
        }
        Ok(Email {
            from,
            transport: builder.build(),
        })
    }
}

impl Sink for Email {
    fn name(&self) -> &str {
        "email"
    }

    fn deliver<'a>(&'a self, d: &'a Delivery) -> SinkFuture<'a> {
        Box::pin(async move {
            let Some(user) = &d.user else {
                return Err(SinkError::Permanent("email: no recipient".into()));
            };
            let to: Mailbox = user.email.parse().map_err(|e| {
                SinkError::Permanent(format!(
                    "email: user {}'s address {:?}: {e}",
                    user.id, user.email
                ))
            })?;
            let msg = lettre::Message::builder()
                .message_id(Some(message_id(&d.key, &self.from)))
                .from(self.from.clone())
                .to(to)
                .subject(format!("[agentstore] {}", d.notice.title))
                .header(lettre::message::header::ContentType::TEXT_PLAIN)
                .body(d.text())
                .map_err(|e| SinkError::Permanent(format!("email: {e}")))?;
            let transport = self.transport.clone();
            let sent = tokio::task::spawn_blocking(move || transport.send(&msg))
                .await
                .map_err(|e| SinkError::Transient(format!("email: {e}")))?;
            match sent {
                Ok(_) => Ok(()),
                Err(e) if e.is_permanent() => Err(SinkError::Permanent(format!("email: {e}"))),
                Err(e) => Err(SinkError::Transient(format!("email: {e}"))),
            }
        })
    }
}
