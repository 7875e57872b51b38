//! Making untrusted text safe to show a human: the model's words, tool output, commands and
//! arguments may carry terminal escape sequences (retitle the window, clear the screen, move
//! the cursor) or backspaces and carriage returns that make a confirmation show one command
//! while another runs. Every such character is made visible instead.

/// `text` with every control character (C0 except newline and tab, DEL, C1) and every bidi
/// override shown as a visible token: ESC as `^[`, backspace as `^H`, CR as `^M`, others as
/// `<U+XXXX>`.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_visible(&mut out, c, false);
    }
    out
}

/// Like [`visible`], but newlines and tabs are shown too (`^J`, `^I`): for one-line displays
/// such as a confirmation question, where a newline could hide what follows.
pub fn visible_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_visible(&mut out, c, true);
    }
    out
}

fn push_visible(out: &mut String, c: char, one_line: bool) {
    let code = c as u32;
    match c {
        '\n' | '\t' if !one_line => out.push(c),
        _ if code < 0x20 => {
            out.push('^');
            out.push(char::from(b'@' + code as u8));
        }
        '\u{7f}' => out.push_str("^?"),
        '\u{80}'..='\u{9f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}' => out.push_str(&format!("<U+{code:04X}>")),
        _ => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_visible() {
        assert_eq!(
            visible("a\x1b]0;pwned\x07b\x1b[2Jc\nd\te"),
            "a^[]0;pwned^Gb^[[2Jc\nd\te"
        );
        assert_eq!(
            visible_line("touch x\x08\x08\x08\x08\x08\x08\x08ls -la $HOME\r\n"),
            "touch x^H^H^H^H^H^H^Hls -la $HOME^M^J"
        );
        assert_eq!(
            visible("\u{9b}31m \u{202e}x\u{7f}"),
            "<U+009B>31m <U+202E>x^?"
        );
        assert_eq!(visible("plain ünïcode ⏺"), "plain ünïcode ⏺");
    }
}
