use super::*;

fn run(editor: &mut LineEditor, input: &[u8]) -> ReadOutcome {
    let mut bytes = input.iter().copied();
    let mut out = Vec::new();
    editor.edit("> ", &mut || bytes.next(), &mut out).unwrap()
}

#[test]
fn editing_keys() {
    let mut e = LineEditor::new();
    // type "helo", left, insert "l", end, "!" → "hello!"
    assert_eq!(
        run(&mut e, b"helo\x1b[Dl\x1b[F!\r"),
        ReadOutcome::Line("hello!".into())
    );
    // backspace and Ctrl+U
    assert_eq!(
        run(&mut e, b"abc\x7f\x7fz\r"),
        ReadOutcome::Line("az".into())
    );
    assert_eq!(run(&mut e, b"junk\x15ok\r"), ReadOutcome::Line("ok".into()));
    // Ctrl+W deletes a word
    assert_eq!(
        run(&mut e, b"one two\x17three\r"),
        ReadOutcome::Line("one three".into())
    );
    // UTF-8 and Home
    assert_eq!(
        run(&mut e, "é\x01x\r".as_bytes()),
        ReadOutcome::Line("xé".into())
    );
}

#[test]
fn history_up_down() {
    let mut e = LineEditor::new();
    run(&mut e, b"first\r");
    run(&mut e, b"second\r");
    assert_eq!(
        run(&mut e, b"\x1b[A\x1b[A\r"),
        ReadOutcome::Line("first".into())
    );
    assert_eq!(
        run(&mut e, b"draft\x1b[A\x1b[B\r"),
        ReadOutcome::Line("draft".into())
    );
    // a recalled line is appended again; a repeat of the last line is not
    run(&mut e, b"\x1b[A\r");
    assert_eq!(
        e.history(),
        &["first", "second", "first", "draft"].map(String::from)
    );
}

#[test]
fn interrupt_and_eof() {
    let mut e = LineEditor::new();
    assert_eq!(
        run(&mut e, b"text\x03"),
        ReadOutcome::Interrupted { had_input: true }
    );
    assert_eq!(
        run(&mut e, b"\x03"),
        ReadOutcome::Interrupted { had_input: false }
    );
    assert_eq!(run(&mut e, b"\x04"), ReadOutcome::Eof);
    assert_eq!(run(&mut e, b"ab"), ReadOutcome::Eof);
}

#[test]
fn alt_enter_and_trailing_backslash_insert_newlines() {
    let mut e = LineEditor::new();
    assert_eq!(
        run(&mut e, b"one\x1b\rtwo\r"),
        ReadOutcome::Line("one\ntwo".into())
    );
    assert_eq!(
        run(&mut e, b"first \\\rsecond\r"),
        ReadOutcome::Line("first \nsecond".into())
    );
    // a backslash not at the end is text
    assert_eq!(
        run(&mut e, b"a\\b\x1b[D\x1b[D\r"),
        ReadOutcome::Line("a\\b".into())
    );
}

#[test]
fn a_bracketed_paste_is_one_piece_and_never_submits() {
    let mut e = LineEditor::new();
    // the paste's CR/LF are newlines, not Enter; its escape bytes are dropped
    let input = b"\x1b[200~line one\r\nline two\rline\x1b three\n\x1b[201~ and typed\r";
    assert_eq!(
        run(&mut e, input),
        ReadOutcome::Line("line one\nline two\nline three\n and typed".into())
    );
    // a paste that never ends is end of input, not a submission
    assert_eq!(run(&mut e, b"\x1b[200~rm -rf x\r"), ReadOutcome::Eof);
}

#[test]
fn up_and_down_move_between_lines_of_a_multiline_entry() {
    let mut e = LineEditor::new();
    run(&mut e, b"older\r");
    // on the second line Up moves to the first; Home; insert
    assert_eq!(
        run(&mut e, b"abc\x1b\rdef\x1b[A\x01>\r"),
        ReadOutcome::Line(">abc\ndef".into())
    );
    // on the first line Up recalls history
    assert_eq!(
        run(&mut e, b"\x1b[A\r"),
        ReadOutcome::Line(">abc\ndef".into())
    );
}

#[test]
fn redraw_stays_on_the_input_rows() {
    // A 3-line entry: every redraw goes up to the input's first row and clears below;
    // it never clears the whole screen.
    let mut e = LineEditor::new();
    let mut bytes = b"a\x1b\rb\x1b\rc\x1b[A\r".iter().copied();
    let mut out = Vec::new();
    e.edit("> ", &mut || bytes.next(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("\x1b[2J"), "{text:?}");
    assert!(text.contains("\x1b[2A\r\x1b[J> a"), "{text:?}");
}

#[test]
fn history_file_survives_and_keeps_multiline_entries() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history");
    let (mut e, warning) = LineEditor::with_history_file(&path);
    assert!(warning.is_none());
    run(&mut e, b"one\x1b\rtwo\r");
    run(&mut e, b"three\r");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (mut again, _) = LineEditor::with_history_file(&path);
    assert_eq!(again.history(), &["one\ntwo", "three"].map(String::from));
    assert_eq!(
        run(&mut again, b"\x1b[A\x1b[A\r"),
        ReadOutcome::Line("one\ntwo".into())
    );
    // a damaged line is named and skipped, the rest kept
    std::fs::write(&path, "\"ok\"\nnot json\n").unwrap();
    let (e, warning) = LineEditor::with_history_file(&path);
    assert_eq!(e.history(), &["ok".to_string()]);
    assert!(warning.unwrap().contains("line 2"));
}
