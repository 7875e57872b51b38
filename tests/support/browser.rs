//! The one headless Chromium driver of the tests: the DevTools protocol over
//! `--remote-debugging-pipe` (fd 3: commands in, fd 4: answers and events out, each message
//! JSON ended by a NUL), with one page attached. Waiting on a page is awaiting it: a promise
//! in the page resolves when a DOM mutation (or the document's readiness) makes the awaited
//! expression true, never a poll from here.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The Chromium binary on PATH, if any.
pub fn binary() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| crate::harness::have(c))
}

/// Headless Chromium with one page (a blank one until [`Browser::open`]); killed on drop.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long one DevTools call may take (a hang guard; a loaded machine answers in seconds).
const CALL_LIMIT: Duration = Duration::from_secs(60);

impl Browser {
    /// Starts the [`binary`] (the caller has checked there is one) with a blank page.
    pub fn start() -> Browser {
        use std::os::unix::process::CommandExt;
        let binary = binary().expect("chromium is not installed (checked by the caller)");
        let profile = tempfile::tempdir().unwrap();
        let (cmd_read, cmd_write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
        let (out_read, out_write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
        let (cr, ow) = (cmd_read.as_raw_fd(), out_write.as_raw_fd());
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-pipe",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .env("HOME", profile.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Move both ends out of the way first, then into place (fds may collide).
                let a = libc::fcntl(cr, libc::F_DUPFD, 10);
                let b = libc::fcntl(ow, libc::F_DUPFD, 10);
                if a < 0 || b < 0 || libc::dup2(a, 3) < 0 || libc::dup2(b, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        drop(cmd_read);
        drop(out_write);
        let (tx, rx) = std::sync::mpsc::channel();
        let mut reader = std::fs::File::from(out_read);
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            while let Ok(n @ 1..) = reader.read(&mut chunk) {
                buf.extend_from_slice(&chunk[..n]);
                while let Some(end) = buf.iter().position(|b| *b == 0) {
                    let msg: Vec<u8> = buf.drain(..=end).collect();
                    if let Ok(v) = serde_json::from_slice::<Value>(&msg[..msg.len() - 1])
                        && tx.send(v).is_err()
                    {
                        return;
                    }
                }
            }
        });
        let mut b = Browser {
            child,
            to: std::fs::File::from(cmd_write),
            from: rx,
            next: 1,
            session: String::new(),
            _profile: profile,
        };
        let t = b.send(None, "Target.createTarget", json!({"url": "about:blank"}));
        let t = t.unwrap_or_else(|e| panic!("Target.createTarget: {e}"));
        let s = b.send(
            None,
            "Target.attachToTarget",
            json!({"targetId": t["targetId"], "flatten": true}),
        );
        b.session = s.unwrap_or_else(|e| panic!("Target.attachToTarget: {e}"))["sessionId"]
            .as_str()
            .unwrap()
            .to_string();
        b
    }

    /// Sends a command (to the page when `session` is given) and awaits its answer: the
    /// result, or the protocol's error.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next;
        self.next += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        let deadline = Instant::now() + CALL_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = match self.from.recv_timeout(left) {
                Ok(v) => v,
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "timed out after {CALL_LIMIT:?} waiting for Chromium's answer to {method}"
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("Chromium closed its pipe ({method})")
                }
            };
            // Events (no id) and late answers are not this call's.
            if v["id"] == json!(id) {
                return match v.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(v["result"].clone()),
                };
            }
        }
    }

    /// A command to the page; its result (a protocol error fails the test).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.send(Some(&s), method, params)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// The value of `expr` in the page; an exception fails the test.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Whether `expr` is (or becomes, within `slice`) true in the page: a promise in the
    /// page, resolved by the DOM mutation or readiness change that makes it true. `false`
    /// also when the document went away meanwhile (a navigation) or `expr` threw.
    pub fn becomes(&mut self, expr: &str, slice: Duration) -> bool {
        let js = format!(
            "new Promise(resolve => {{
               const ok = () => {{ try {{ return !!({expr}); }} catch (e) {{ return false; }} }};
               if (ok()) {{ resolve(true); return; }}
               const done = v => {{ o.disconnect(); resolve(v); }};
               const o = new MutationObserver(() => {{ if (ok()) done(true); }});
               o.observe(document, {{subtree: true, childList: true, characterData: true, attributes: true}});
               document.addEventListener('readystatechange', () => {{ if (ok()) done(true); }});
               setTimeout(() => done(ok()), {ms});
             }})",
            ms = slice.as_millis()
        );
        let s = self.session.clone();
        let r = self.send(
            Some(&s),
            "Runtime.evaluate",
            json!({"expression": js, "awaitPromise": true, "returnByValue": true}),
        );
        r.is_ok_and(|r| r["result"]["value"] == json!(true))
    }

    /// Awaits (up to `limit`) `expr` becoming true in the page ([`Self::becomes`], over
    /// navigations too); fails naming `what`, with the page's text.
    pub fn wait_for(&mut self, limit: Duration, what: &str, expr: &str) {
        let deadline = Instant::now() + limit;
        while !self.becomes(expr, Duration::from_secs(1)) {
            if Instant::now() >= deadline {
                let text = self.send(
                    Some(&self.session.clone()),
                    "Runtime.evaluate",
                    json!({"expression": "document.body && document.body.innerText", "returnByValue": true}),
                );
                panic!("timed out after {limit:?} waiting for {what}; page text: {text:?}");
            }
        }
    }

    /// Loads `url` and awaits the new document, complete.
    pub fn open(&mut self, url: &str) {
        self.eval("window.__previous = true");
        let t = Instant::now();
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(
            Duration::from_secs(60),
            &format!("{url} to load"),
            "window.__previous === undefined && document.readyState === 'complete'",
        );
        eprintln!("loaded {url} in {:?}", t.elapsed());
    }

    /// A real click: the mouse pressed and released at the centre of `selector`'s element.
    pub fn click(&mut self, selector: &str) {
        let expr = format!(
            "(() => {{ const e = document.querySelector({sel}); e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()",
            sel = json!(selector)
        );
        let at = self.eval(&expr);
        let (x, y) = (at[0].as_f64().unwrap(), at[1].as_f64().unwrap());
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Types `text` where the focus is.
    pub fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text}));
    }

    /// A PNG of the page as shown, kept as `target/artifacts/<name>.png`; its path.
    pub fn screenshot(&mut self, name: &str) -> PathBuf {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = data_encoding::BASE64
            .decode(r["data"].as_str().unwrap().as_bytes())
            .expect("CDP sends a screenshot in base64");
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join(format!("{name}.png"));
        std::fs::write(&out, png).unwrap();
        eprintln!("screenshot {}", out.display());
        out
    }
}
