#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn a_redirect_only_ever_stays_on_this_server() {
    for ok in [
        "/",
        "/jobs",
        "/jobs/job-1?as=alice",
        "/approvals",
        "/a/./b/../c",
    ] {
        let to = local_path(ok).unwrap_or_else(|| panic!("{ok:?} refused"));
        assert!(
            to.starts_with('/') && !to.starts_with("//"),
            "{ok:?} → {to:?}"
        );
    }
    assert_eq!(local_path("/a/./b/../c").as_deref(), Some("/a/c"));
    assert_eq!(
        local_path("/jobs?project=a+b&status=failed").as_deref(),
        Some("/jobs?project=a+b&status=failed")
    );
    // What `query` hands over is decoded once: `/%09/evil.example/` arrives as "/\t/…".
    for bad in [
        "//evil.example/",
        "/\\evil.example/",
        "\\\\evil.example",
        "/\t/evil.example/",
        "/\n/evil.example/",
        "/\r/evil.example/",
        "\t//evil.example/",
        " //evil.example/",
        "/ /evil.example/",
        "/%2F/evil.example/",
        "/%2f%2fevil.example/",
        "/%252F%252Fevil.example/",
        "/%5Cevil.example/",
        "/%5cevil.example/",
        "/%09/evil.example/",
        "/%0A/evil.example/",
        "/%00/evil.example/",
        "/.//evil.example/",
        "/..//evil.example/",
        "/a/..//evil.example/",
        "/./%2F/evil.example",
        "https://evil.example/",
        "http:evil.example",
        "javascript:alert(1)",
        "evil.example",
        "",
        "/\u{3000}/evil.example/",
        "/\u{feff}/evil.example/",
        "/%zz",
    ] {
        assert_eq!(local_path(bad), None, "{bad:?} was let through");
    }
}
