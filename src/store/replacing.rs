//! A document that a sync engine is replacing at this instant.
//!
//! Syncthing writes an incoming version to `.syncthing.<name>.tmp` beside the document, then
//! REMOVES the document and renames the temporary file over its name (`performFinish`:
//! `deleteItemOnDisk`, then `RenameOrCopy`): between the two calls the document does not
//! exist. On a copy of the store that another machine keeps changing (the orchestrator records
//! a project's `update_time` after each research job, a user edits `config.yaml`), a reader
//! that opens the document in that window gets `ENOENT` for a file that exists before and
//! after — and "project not found" then failed a job (t_sync, issue 13).
//!
//! [`crate::store::safe::open_read`], through which every document of the store is read, asks
//! [`being_replaced`] when an open finds nothing, and opens again while the answer is yes (at
//! most [`REPLACE_WAIT`]). A file that is really gone (moved into another state folder, never
//! synced, deleted) has no fresh partial beside it and is "not found" at once.

use super::safe;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest time a reader waits for a document a sync engine is replacing.
pub const REPLACE_WAIT: Duration = Duration::from_secs(2);

/// Pause between two opens while waiting.
pub const REPLACE_POLL: Duration = Duration::from_millis(2);

/// A partial file changed longer ago than this is a leftover of an interrupted transfer
/// (Syncthing keeps those for reuse for a day), not a replacement in progress.
const FRESH: Duration = Duration::from_secs(10);

/// Syncthing hashes a name longer than this into its partial's name (`lib/fs/tempname.go`:
/// 160 − `.syncthing.` − `.tmp`).
const SYNCTHING_MAX_NAME: usize = 160 - ".syncthing.".len() - ".tmp".len();

/// Names of a sync engine's partial file for `name` in the same folder: Syncthing's
/// (`.syncthing.<name>.tmp`, and `~syncthing~<name>.tmp` as it names them on Windows shares;
/// for a name longer than [`SYNCTHING_MAX_NAME`] bytes the SHA-256 of the name in hex stands
/// for it, as Syncthing names it).
fn partial_names(name: &str) -> [String; 2] {
    let base = if name.len() > SYNCTHING_MAX_NAME {
        sha256(name.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    } else {
        name.to_string()
    };
    [
        format!(".syncthing.{base}.tmp"),
        format!("~syncthing~{base}.tmp"),
    ]
}

/// SHA-256 (FIPS 180-4) of `data`: only for the hashed partial names above, so every
/// program of the package stays free of a cryptography library it would load at each start.
fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// Whether `path`, which an open has just not found, is being replaced by a sync engine: a
/// fresh partial file of it lies beside it, or it is back already (replaced between the failed
/// open and now).
pub fn being_replaced(path: &Path) -> bool {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return false;
    };
    let fresh_partial = partial_names(name).iter().any(|p| {
        safe::symlink_metadata(&dir.join(p))
            .is_ok_and(|m| m.file_type().is_file() && changed_within(&m, FRESH))
    });
    // Checked after the partial: its rename makes the document appear in the same step.
    fresh_partial || safe::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// The file's status (data or metadata: Syncthing sets the partial's mode just before the
/// rename) changed less than `within` ago, or in the future (another clock).
fn changed_within(m: &std::fs::Metadata, within: Duration) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let changed = m.ctime() as f64 + m.ctime_nsec() as f64 / 1e9;
    now - changed < within.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_known_by_its_hashed_partial() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("{}.json", "j".repeat(150));
        let doc = dir.path().join(&name);
        assert!(!being_replaced(&doc), "nothing there");
        // The name Syncthing 1.x/2.x gives it: sha256(base name) in hex (checked with
        // `printf %s NAME | sha256sum`).
        let hex = String::from_utf8(
            std::process::Command::new("sh")
                .args([
                    "-c",
                    "printf %s \"$1\" | sha256sum | cut -c1-64",
                    "sh",
                    &name,
                ])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let partial = dir.path().join(format!(".syncthing.{}.tmp", hex.trim()));
        std::fs::write(&partial, b"{}").unwrap();
        assert!(being_replaced(&doc), "a fresh hashed partial");
        // A short name is never hashed.
        let short = dir.path().join("p.json");
        assert!(!being_replaced(&short));
    }

    #[test]
    fn sha256_matches_the_standard_vectors() {
        let hex = |d: &[u8]| {
            sha256(d)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        assert_eq!(
            hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // Two blocks (the padding spills over).
        assert_eq!(
            hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
        );
    }

    #[test]
    fn a_fresh_partial_or_the_file_back_means_being_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let doc = dir.path().join("project.json");
        assert!(!being_replaced(&doc), "nothing there");
        let partial = dir.path().join(".syncthing.project.json.tmp");
        std::fs::write(&partial, b"{}").unwrap();
        assert!(being_replaced(&doc), "a fresh partial");
        std::fs::rename(&partial, &doc).unwrap();
        assert!(being_replaced(&doc), "back already");
        std::fs::remove_file(&doc).unwrap();
        std::fs::write(dir.path().join(".syncthing.other.json.tmp"), b"{}").unwrap();
        assert!(!being_replaced(&doc), "another document's partial");
    }
}
