//! D-Bus introspection data compared by structure: a minimal XML reader (enough for
//! introspection documents), a model of one interface (methods with their arguments' names,
//! types and directions; properties with type and access; signals; annotations) and a diff.
//! Comments, layout and attribute order do not count. Used by every test that checks a
//! checked-in `dbus/*.xml` file against a live object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

// ---- a minimal XML reader: enough for D-Bus introspection data ----------------------------

/// One element: name, attributes in document order, child elements (text is dropped).
#[derive(Debug, Clone)]
pub struct Element {
    pub name: String,
    pub attrs: Vec<(String, String)>,
    pub children: Vec<Element>,
}

impl Element {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn children<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }
}

pub fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let end = rest[i..]
            .find(';')
            .ok_or_else(|| format!("unterminated entity in {s:?}"))?;
        let ent = &rest[i + 1..i + end];
        match ent {
            "amp" => out.push('&'),
            "lt" => out.push('<'),
            "gt" => out.push('>'),
            "quot" => out.push('"'),
            "apos" => out.push('\''),
            _ if ent.starts_with("#x") => out.push(
                u32::from_str_radix(&ent[2..], 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("bad entity &{ent};"))?,
            ),
            _ if ent.starts_with('#') => out.push(
                ent[1..]
                    .parse::<u32>()
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("bad entity &{ent};"))?,
            ),
            _ => return Err(format!("unknown entity &{ent};")),
        }
        rest = &rest[i + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

pub fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')
}

/// Parses a document: prolog (`<?xml …?>`, `<!DOCTYPE …>`, comments), then one root element.
pub fn parse_xml(text: &str) -> Result<Element, String> {
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    let mut s = text;
    let skip_past = |s: &str, pat: &str, what: &str| -> Result<usize, String> {
        s.find(pat)
            .map(|i| i + pat.len())
            .ok_or_else(|| format!("unterminated {what}"))
    };
    loop {
        let Some(lt) = s.find('<') else {
            if !s.trim().is_empty() && stack.is_empty() {
                return Err(format!("text after the root element: {:?}", s.trim()));
            }
            break;
        };
        s = &s[lt..];
        if s.starts_with("<?") {
            s = &s[skip_past(s, "?>", "processing instruction")?..];
        } else if let Some(rest) = s.strip_prefix("<!--") {
            let end = rest.find("-->").ok_or("unterminated comment")?;
            // XML forbids `--` inside a comment (expat, libxml2 and GDBus reject it).
            if rest[..end].contains("--") || rest[..end].ends_with('-') {
                return Err(format!("`--` inside a comment: {:?}", &rest[..end]));
            }
            s = &rest[end + 3..];
        } else if s.starts_with("<![CDATA[") {
            s = &s[skip_past(s, "]]>", "CDATA")?..];
        } else if s.starts_with("<!") {
            // DOCTYPE; an internal subset `[ … ]` is skipped whole.
            let gt = s.find('>').ok_or("unterminated DOCTYPE")?;
            let n = match s.find('[') {
                Some(b) if b < gt => skip_past(s, "]>", "DOCTYPE subset")?,
                _ => gt + 1,
            };
            s = &s[n..];
        } else if let Some(rest) = s.strip_prefix("</") {
            let gt = rest.find('>').ok_or("unterminated end tag")?;
            let name = rest[..gt].trim();
            let done = stack
                .pop()
                .ok_or_else(|| format!("</{name}> without a start tag"))?;
            if done.name != name {
                return Err(format!("<{}> closed by </{name}>", done.name));
            }
            s = &rest[gt + 1..];
            match stack.last_mut() {
                Some(parent) => parent.children.push(done),
                None if root.is_none() => root = Some(done),
                None => return Err("more than one root element".into()),
            }
        } else {
            let mut rest = &s[1..];
            let n = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
            if n == 0 {
                return Err(format!("bad tag at {:?}", &s[..s.len().min(20)]));
            }
            let mut el = Element {
                name: rest[..n].to_string(),
                attrs: Vec::new(),
                children: Vec::new(),
            };
            rest = &rest[n..];
            let self_closing;
            loop {
                rest = rest.trim_start();
                if let Some(r) = rest.strip_prefix("/>") {
                    rest = r;
                    self_closing = true;
                    break;
                }
                if let Some(r) = rest.strip_prefix('>') {
                    rest = r;
                    self_closing = false;
                    break;
                }
                let n = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
                if n == 0 {
                    return Err(format!("bad attribute in <{}>", el.name));
                }
                let key = rest[..n].to_string();
                rest = rest[n..].trim_start();
                rest = rest
                    .strip_prefix('=')
                    .ok_or_else(|| format!("attribute {key} of <{}> has no value", el.name))?
                    .trim_start();
                let q = rest.chars().next().filter(|c| *c == '"' || *c == '\'');
                let q =
                    q.ok_or_else(|| format!("attribute {key} of <{}> is not quoted", el.name))?;
                rest = &rest[1..];
                let end = rest
                    .find(q)
                    .ok_or_else(|| format!("unterminated attribute {key}"))?;
                if el.attrs.iter().any(|(k, _)| *k == key) {
                    return Err(format!("duplicate attribute {key} in <{}>", el.name));
                }
                el.attrs.push((key, unescape(&rest[..end])?));
                rest = &rest[end + 1..];
            }
            s = rest;
            if self_closing {
                match stack.last_mut() {
                    Some(parent) => parent.children.push(el),
                    None if root.is_none() => root = Some(el),
                    None => return Err("more than one root element".into()),
                }
            } else {
                stack.push(el);
            }
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("<{}> is never closed", open.name));
    }
    root.ok_or_else(|| "no root element".into())
}

// ---- the interface model compared ----------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub name: Option<String>,
    pub ty: String,
    pub direction: String,
}

impl std::fmt::Display for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}:{}",
            self.direction,
            self.name.as_deref().unwrap_or("_"),
            self.ty
        )
    }
}

/// One method, signal or property, reduced to what a client depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub args: Vec<Arg>,
    /// Property type and access (`s read`); empty for methods and signals.
    pub property: String,
    pub annotations: BTreeMap<String, String>,
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.property.is_empty() {
            write!(f, "{}", self.property)?;
        } else {
            let args: Vec<String> = self.args.iter().map(ToString::to_string).collect();
            write!(f, "({})", args.join(", "))?;
        }
        for (k, v) in &self.annotations {
            write!(f, " @{k}={v}")?;
        }
        Ok(())
    }
}

/// Members keyed `method Name`, `signal Name`, `property Name`, plus `annotation` of the
/// interface itself.
pub type Model = BTreeMap<String, Member>;

pub fn annotations(el: &Element) -> Result<BTreeMap<String, String>, String> {
    el.children("annotation")
        .map(|a| {
            let k = a.attr("name").ok_or("annotation without name")?;
            let v = a.attr("value").ok_or("annotation without value")?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

pub fn args(el: &Element, default_direction: &str) -> Result<Vec<Arg>, String> {
    el.children("arg")
        .map(|a| {
            Ok(Arg {
                name: a.attr("name").map(str::to_string),
                ty: a
                    .attr("type")
                    .ok_or_else(|| format!("arg without type in {}", el.name))?
                    .to_string(),
                direction: match el.name.as_str() {
                    // Signal arguments are always out; a direction there is meaningless.
                    "signal" => "out".into(),
                    _ => a.attr("direction").unwrap_or(default_direction).to_string(),
                },
            })
        })
        .collect()
}

pub fn model(iface: &Element) -> Result<Model, String> {
    let mut m = Model::new();
    for el in &iface.children {
        let name = || {
            el.attr("name")
                .map(str::to_string)
                .ok_or_else(|| format!("<{}> without name", el.name))
        };
        let (key, member) = match el.name.as_str() {
            "method" => (
                format!("method {}", name()?),
                Member {
                    args: args(el, "in")?,
                    property: String::new(),
                    annotations: annotations(el)?,
                },
            ),
            "signal" => (
                format!("signal {}", name()?),
                Member {
                    args: args(el, "out")?,
                    property: String::new(),
                    annotations: annotations(el)?,
                },
            ),
            "property" => (
                format!("property {}", name()?),
                Member {
                    args: Vec::new(),
                    property: format!(
                        "{} {}",
                        el.attr("type").ok_or("property without type")?,
                        el.attr("access").ok_or("property without access")?
                    ),
                    annotations: annotations(el)?,
                },
            ),
            "annotation" => continue,
            other => return Err(format!("unexpected <{other}> in <interface>")),
        };
        if m.insert(key.clone(), member).is_some() {
            return Err(format!("{key} declared twice"));
        }
    }
    let ann = annotations(iface)?;
    if !ann.is_empty() {
        m.insert(
            "interface annotations".into(),
            Member {
                args: Vec::new(),
                property: String::new(),
                annotations: ann,
            },
        );
    }
    Ok(m)
}

pub fn find_interface<'a>(node: &'a Element, name: &str) -> Option<&'a Element> {
    node.children("interface")
        .find(|i| i.attr("name") == Some(name))
}

/// Differences, one line each (`-` checked in only, `+` live only, `~` changed).
pub fn diff(checked: &Model, live: &Model) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in checked {
        match live.get(k) {
            None => out.push(format!("- {k} {v}   (in the file, not on the live object)")),
            Some(l) if l != v => out.push(format!("~ {k}\n    file: {v}\n    live: {l}")),
            Some(_) => {}
        }
    }
    for (k, v) in live {
        if !checked.contains_key(k) {
            out.push(format!(
                "+ {k} {l}   (on the live object, not in the file)",
                l = v
            ));
        }
    }
    out
}

/// Compares interface `interface` in the checked-in XML with the live `Introspect` answer:
/// one line per difference (empty when they match); `Err` when either does not parse or
/// lacks the interface.
pub fn compare(checked_xml: &str, live_xml: &str, interface: &str) -> Result<Vec<String>, String> {
    let model_of = |xml: &str, what: &str| -> Result<Model, String> {
        let root = parse_xml(xml).map_err(|e| format!("{what} XML does not parse: {e}"))?;
        let iface = find_interface(&root, interface)
            .ok_or_else(|| format!("{interface} missing from the {what} XML"))?;
        model(iface)
    };
    Ok(diff(
        &model_of(checked_xml, "checked-in")?,
        &model_of(live_xml, "live")?,
    ))
}
