use super::fragments::{base64, hex, rot13};
use super::*;

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn placeholders_become_env_references_never_argv() {
    let (broker, _) = SecretBroker::new(
        map(&[
            ("GITHUB_TOKEN", "ghp_abcdef123456"),
            ("OTHER", "other-secret-1"),
        ]),
        BTreeMap::new(),
    );
    let p = broker
        .prepare("curl -H 'x: {{secret:GITHUB_TOKEN}}' url", &BTreeMap::new())
        .unwrap();
    assert_eq!(
        p,
        PreparedCommand {
            command: "curl -H 'x: ${GITHUB_TOKEN}' url".into(),
            set_env: map(&[("GITHUB_TOKEN", "ghp_abcdef123456")]),
            remove_env: vec!["OTHER".into()],
        }
    );
    assert!(!p.command.contains("ghp_"));
}

#[test]
fn env_values_are_substituted() {
    let (broker, _) = SecretBroker::new(map(&[("TOKEN", "tok-123456")]), BTreeMap::new());
    let p = broker
        .prepare("make deploy", &map(&[("AUTH", "Bearer {{secret:TOKEN}}")]))
        .unwrap();
    assert_eq!(p.set_env, map(&[("AUTH", "Bearer tok-123456")]));
    assert_eq!(p.remove_env, vec!["TOKEN".to_string()]);
}

#[test]
fn unknown_and_invalid_names_are_errors() {
    let (broker, _) = SecretBroker::new(map(&[("A_KEY", "value-123456")]), BTreeMap::new());
    assert_eq!(
        broker.prepare("echo {{secret:NOPE}}", &BTreeMap::new()),
        Err(SecretError::Unknown("NOPE".into(), "A_KEY".into()))
    );
    assert_eq!(
        broker.prepare("echo {{secret:a b}}", &BTreeMap::new()),
        Err(SecretError::InvalidName("a b".into()))
    );
}

#[test]
fn redaction_replaces_longest_first() {
    let (broker, _) = SecretBroker::new(
        map(&[
            ("SHORT", "abcdef"),
            ("LONG", "abcdef-ghijkl"),
            ("TINY", "ab"),
        ]),
        BTreeMap::new(),
    );
    assert_eq!(
        broker.redact("x=abcdef-ghijkl y=abcdef z=ab"),
        "x={{secret:LONG}} y={{secret:SHORT}} z=ab"
    );
}

#[test]
fn fragments_at_a_cut_are_redacted() {
    let (broker, _) = SecretBroker::new(map(&[("TOKEN", "abcdefghijklmnop")]), BTreeMap::new());
    assert_eq!(
        broker.redact_cut("log line abcdefgh", "ijklmnop more"),
        (
            "log line {{secret:TOKEN}}".to_string(),
            "{{secret:TOKEN}} more".to_string()
        )
    );
    assert_eq!(
        broker.redact_cut("ends abc", "xyz"),
        ("ends abc".to_string(), "xyz".to_string()),
        "fragments shorter than MIN_FRAGMENT_LEN stay"
    );
}

/// The encodings a model can choose: each output must lose the secret.
#[test]
fn encoded_forms_are_redacted() {
    let value = "AKIAsecretvalue0123456789XYZ";
    let (broker, _) = SecretBroker::new(map(&[("AWS_SECRET_ACCESS_KEY", value)]), BTreeMap::new());
    let rev: String = value.chars().rev().collect();
    let rot: String = value.bytes().map(|b| char::from(rot13(b))).collect();
    let hexed = hex(value.as_bytes());
    let spaced_hex: String = value
        .bytes()
        .map(|b| format!("{b:02x} "))
        .collect::<String>();
    let od_c: String = value
        .chars()
        .collect::<Vec<_>>()
        .chunks(16)
        .enumerate()
        .map(|(i, c)| {
            format!(
                "{:07o} {}\n",
                i * 16,
                c.iter().map(|c| format!("   {c}")).collect::<String>()
            )
        })
        .collect();
    let folded: String = value
        .chars()
        .collect::<Vec<_>>()
        .chunks(3)
        .map(|c| c.iter().collect::<String>() + "\n")
        .collect();
    let mut outputs = vec![
        format!("KEY={rev}"),
        rot.clone(),
        value.to_uppercase(),
        value.to_lowercase(),
        hexed.to_uppercase(),
        spaced_hex,
        od_c,
        folded,
        value[..14].to_string(),
        value[14..].to_string(),
    ];
    for prefix in ["", "K", "KE", "AWS_SECRET_ACCESS_KEY="] {
        outputs.push(base64(format!("{prefix}{value}\n").as_bytes(), false));
        outputs.push(base64(format!("{prefix}{value}").as_bytes(), true));
    }
    for out in outputs {
        let red = broker.redact(&out);
        let flat: String = red.chars().filter(|c| !c.is_whitespace()).collect();
        assert!(
            red.contains("{{secret:AWS_SECRET_ACCESS_KEY}}"),
            "{out:?} -> {red:?}"
        );
        for piece in value.as_bytes().chunks(8) {
            let piece = std::str::from_utf8(piece).unwrap().to_lowercase();
            if piece.len() == 8 {
                assert!(!flat.to_lowercase().contains(&piece), "{out:?} -> {red:?}");
            }
        }
    }
    // ordinary text is left alone
    assert_eq!(
        broker.redact("cargo test --lib 2>&1 | tail"),
        "cargo test --lib 2>&1 | tail"
    );
    assert_eq!(broker.redact("née ünïcode ✓"), "née ünïcode ✓");
}

/// Issue 28: lines of `seq` output are not the hex of a short or patterned secret.
#[test]
fn ordinary_output_is_not_redacted_by_coincidence() {
    let (broker, _) = SecretBroker::new(
        map(&[
            ("PIN", "123456789"),
            ("TOKEN", "ab123456789cdXYZqr"),
            ("WORDS", "aaaaaaaaaaaaaaaaaaaa"),
        ]),
        BTreeMap::new(),
    );
    let seq: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    let seq_hex: String = (0x30..=0x39).map(|i| format!("{i}\n")).collect();
    for text in [seq.as_str(), seq_hex.as_str(), "31 32 33 34 35 36 37 38 39"] {
        assert_eq!(broker.redact(text), text);
        assert_eq!(broker.probe(text), None, "{text}");
    }
    // the value itself is still redacted where it appears whole
    assert_eq!(broker.redact("pin 123456789"), "pin {{secret:PIN}}");
    // in a URL with credentials, only the credentials are secret
    let (broker, _) = SecretBroker::new(
        map(&[(
            "DATABASE_URL",
            "postgres://app:Xk9mQ2pLw7@localhost:5432/dev",
        )]),
        BTreeMap::new(),
    );
    for text in [
        "db at localhost:5432/dev",
        "postgres://app@localhost:5432/dev",
    ] {
        assert_eq!(broker.redact(text), text);
        assert_eq!(broker.guarded_hit(text), None, "{text}");
    }
    assert_eq!(
        broker.guarded_hit("app:Xk9mQ2pLw7").as_deref(),
        Some("DATABASE_URL")
    );
}

/// Issue 28: a command that carries a guess of a secret in a form the redactor knows is a
/// probe; a public prefix and a few guessed bytes are not enough to match a fragment.
#[test]
fn probes_are_recognised_in_every_known_form() {
    let token = "ghp_Zx9Qw3Er7Ty1Ui5Op2As6Df4Gh8Jk0LmNbVc";
    let (broker, _) = SecretBroker::new(map(&[("GITHUB_TOKEN", token)]), BTreeMap::new());
    let window = &token[4..16];
    let hexed = hex(window.as_bytes());
    let escaped: String = window.bytes().map(|b| format!("\\x{b:02x}")).collect();
    let octal: String = window.bytes().map(|b| format!("\\{b:o}")).collect();
    let decimal: Vec<String> = window.bytes().map(|b| b.to_string()).collect();
    let reversed: String = window.chars().rev().collect();
    for command in [
        format!("echo {token}"),
        format!("printf '%s\\n' 'aaaa|{hexed}|bbbb'"),
        format!("printf '%s' '{}'", hexed.to_uppercase()),
        format!("printf '{escaped}'"),
        format!("printf '{octal}'"),
        format!("jq -n '[{}]|implode'", decimal.join(",")),
        format!("echo {}", base64(window.as_bytes(), false)),
        format!("echo {reversed} | rev"),
        format!("grep -q {window} notes.txt"),
    ] {
        assert_eq!(
            broker.probe(&command).as_deref(),
            Some("GITHUB_TOKEN"),
            "{command}"
        );
    }
    // the public prefix with a few guessed bytes, and ordinary commands, are no probe;
    // and their output is not redacted either (nothing to learn from it)
    for text in [
        "printf '%s\\n' ghp_Zx9Q ghp_Zx9q",
        &hex(b"ghp_Zx9Qw"),
        "cargo test --lib 2>&1 | tail -40",
        "git log --oneline -5",
    ] {
        assert_eq!(broker.probe(text), None, "{text}");
        assert_eq!(broker.redact(text), text);
    }
}

/// The encoded forms are what `base64`/`basenc --base64url` and `xxd -p` print, without
/// base64's padding (a window's characters inside a longer stream have none).
#[test]
fn encoded_forms_are_unpadded_base64_and_lowercase_hex() {
    assert_eq!(base64(b"ab", false), "YWI");
    assert_eq!(base64(b"abc", false), "YWJj");
    assert_eq!(base64(b"a", true), "YQ");
    assert_eq!(base64(&[0xfb, 0xff], false), "+/8");
    assert_eq!(base64(&[0xfb, 0xff], true), "-_8");
    assert_eq!(hex(&[0x00, 0xAB, 0x7f]), "00ab7f");
}

#[test]
fn project_cannot_replace_user_credentials() {
    let (broker, warnings) = SecretBroker::new(
        map(&[("OPENAI_API_KEY", "sk-user-000000")]),
        map(&[
            ("OPENAI_API_KEY", "sk-evil-111111"),
            ("DB_URL", "postgres://x"),
        ]),
    );
    assert_eq!(
        broker.names(),
        vec!["DB_URL".to_string(), "OPENAI_API_KEY".to_string()]
    );
    let p = broker
        .prepare("run {{secret:OPENAI_API_KEY}}", &BTreeMap::new())
        .unwrap();
    assert_eq!(p.set_env.get("OPENAI_API_KEY").unwrap(), "sk-user-000000");
    assert_eq!(
        warnings,
        vec!["project .env tried to replace the user's secret OPENAI_API_KEY; ignored"]
    );
}
