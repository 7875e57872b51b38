//! Percent-encoding of the web's URLs and forms (`percent-encoding`), with the web's rules:
//! `+` is a space, a broken escape or non-UTF-8 is refused, and so is a NUL (no D-Bus string
//! carries one).

use super::error::WebError;

/// Decodes `%XX` and `+` in a query component; a `%` not followed by two hex digits, and
/// bytes that are not UTF-8, are refused.
pub fn percent_decode(s: &str) -> Result<String, WebError> {
    let bytes = s.as_bytes();
    let escapes_whole = s.match_indices('%').all(|(i, _)| {
        bytes
            .get(i + 1..i + 3)
            .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if !escapes_whole {
        return Err(WebError::invalid(format!("bad %-escape in {s:?}")));
    }
    let text = percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .map_err(|_| WebError::invalid(format!("{s:?} is not UTF-8")))?
        .into_owned();
    no_nul(&text)?;
    Ok(text)
}

/// Refuses text holding a NUL: a D-Bus string cannot carry one, and the bus daemon drops the
/// connection that sends one (every caller's, the server has one).
pub fn no_nul(text: &str) -> Result<(), WebError> {
    if text.contains('\0') {
        return Err(WebError::invalid(format!(
            "{:?}: a NUL character is not allowed",
            text.replace('\0', "\\0")
        )));
    }
    Ok(())
}

/// What [`percent_encode`] leaves as it is: the unreserved characters of RFC 3986.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Encodes a query component (or a path segment): every byte but the unreserved ones as
/// `%XX`, uppercase.
pub fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_takes_escapes_in_either_case_and_plus_as_a_space() {
        assert_eq!(percent_decode("a%2Fb%2fc+d%2B").unwrap(), "a/b/c d+");
        assert_eq!(percent_decode("%C3%A9t%C3%A9").unwrap(), "été");
        assert_eq!(percent_decode("").unwrap(), "");
        assert_eq!(percent_decode("100%25").unwrap(), "100%");
    }

    #[test]
    fn broken_escapes_non_utf8_and_nul_are_refused_by_name() {
        // Cut short, not hex, a sign (`u8::from_str_radix` took "%+1"), a `%` escaped twice.
        for bad in ["%", "a%2", "%zz", "%+1", "%%41", "%4%41"] {
            let e = percent_decode(bad).unwrap_err().message;
            assert!(e.contains("bad %-escape"), "{bad}: {e}");
        }
        let e = percent_decode("%FF").unwrap_err().message;
        assert!(e.contains("is not UTF-8"), "{e}");
        let e = percent_decode("a%00b").unwrap_err().message;
        assert!(e.contains("NUL"), "{e}");
    }

    #[test]
    fn encoding_keeps_only_the_unreserved_characters() {
        assert_eq!(percent_encode("aZ09-_.~"), "aZ09-_.~");
        assert_eq!(percent_encode("a b/c+d%é"), "a%20b%2Fc%2Bd%25%C3%A9");
        for s in ["j-1 x/y", "été+%", "?&=#"] {
            assert_eq!(percent_decode(&percent_encode(s)).unwrap(), s);
        }
    }
}
