//! YAML output of machine configs that every reader takes the same way.
//!
//! serde_yaml_ng writes YAML 1.2: it quotes the strings that 1.2 would read
//! as something else (`true`, `null`, numbers) but writes `off`, `yes` or `n`
//! plain. Talos' decoder reads those as strings where a string is expected,
//! yet a YAML 1.1 reader (PyYAML, older Go yaml.v2 tools, some editors and
//! linters that people run on a rendered config) turns them into booleans. So
//! every string value or key that a 1.1 reader would take for a boolean is
//! written single-quoted: `auto: 'off'`.

use serde_yaml_ng::{Mapping, Value};

/// Whether a YAML 1.1 reader resolves this plain scalar to a boolean
/// (`y|n|yes|no|true|false|on|off`; the spec lists three spellings of each,
/// any case is quoted here).
pub fn is_yaml11_bool(text: &str) -> bool {
    matches!(
        text.to_ascii_lowercase().as_str(),
        "y" | "n" | "yes" | "no" | "true" | "false" | "on" | "off"
    )
}

/// Serialises one document like `serde_yaml_ng::to_string`, with every
/// YAML 1.1 boolean look-alike string single-quoted.
pub fn to_string(value: &Value) -> Result<String, serde_yaml_ng::Error> {
    // Each such string is swapped for a unique plain token, serialised, and
    // the token then replaced by the quoted string: no YAML emitter of our
    // own, and nothing else in the text can change.
    let marker = unused_marker(value);
    let mut quoted = Vec::new();
    let marked = mark(value, &marker, &mut quoted);
    let mut text = serde_yaml_ng::to_string(&marked)?;
    for (i, original) in quoted.iter().enumerate() {
        // The trailing `_` keeps token 1 from matching the start of token 10.
        text = text.replacen(&format!("{marker}{i}_"), &format!("'{original}'"), 1);
    }
    Ok(text)
}

/// A token prefix that occurs in no string of the document.
fn unused_marker(value: &Value) -> String {
    let mut marker = "kpsyaml11q".to_string();
    while contains(value, &marker) {
        marker.push('x');
    }
    marker
}

fn contains(value: &Value, needle: &str) -> bool {
    match value {
        Value::String(s) => s.contains(needle),
        Value::Sequence(items) => items.iter().any(|v| contains(v, needle)),
        Value::Mapping(map) => map
            .iter()
            .any(|(k, v)| contains(k, needle) || contains(v, needle)),
        Value::Tagged(tagged) => contains(&tagged.value, needle),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn mark(value: &Value, marker: &str, quoted: &mut Vec<String>) -> Value {
    match value {
        Value::String(s) if is_yaml11_bool(s) => {
            let token = format!("{marker}{}_", quoted.len());
            quoted.push(s.clone());
            Value::String(token)
        }
        Value::Sequence(items) => {
            Value::Sequence(items.iter().map(|v| mark(v, marker, quoted)).collect())
        }
        Value::Mapping(map) => {
            let mut out = Mapping::with_capacity(map.len());
            for (k, v) in map {
                let key = mark(k, marker, quoted);
                out.insert(key, mark(v, marker, quoted));
            }
            Value::Mapping(out)
        }
        Value::Tagged(tagged) => {
            let mut tagged = tagged.as_ref().clone();
            tagged.value = mark(&tagged.value, marker, quoted);
            Value::Tagged(Box::new(tagged))
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Value {
        serde_yaml_ng::from_str(text).expect("test YAML")
    }

    #[test]
    fn yaml11_boolean_look_alikes_are_quoted() {
        let doc = yaml(
            "auto: 'off'\nflags: [on, 'On', 'YES', 'no', 'y', 'N', 'True', 'false']\n'off': key\nbool: true\nname: offline\n",
        );
        let out = to_string(&doc).unwrap();
        assert_eq!(
            out,
            "auto: 'off'\nflags:\n- 'on'\n- 'On'\n- 'YES'\n- 'no'\n- 'y'\n- 'N'\n- 'True'\n- 'false'\n'off': key\nbool: true\nname: offline\n"
        );
        // Read back, every value is what it was.
        assert_eq!(yaml(&out), doc);
    }

    #[test]
    fn serde_yaml_ng_alone_writes_them_plain() {
        // What this module exists for: if serde_yaml_ng ever quotes these
        // itself, the module can go.
        let out = serde_yaml_ng::to_string(&yaml("auto: 'off'\nok: 'yes'\n")).unwrap();
        assert_eq!(out, "auto: off\nok: yes\n");
    }

    #[test]
    fn block_scalars_and_look_alike_substrings_are_left_alone() {
        let doc = yaml("content: |\n  enabled: on\n  other: off\nname: 'on-call'\n");
        let out = to_string(&doc).unwrap();
        assert_eq!(out, serde_yaml_ng::to_string(&doc).unwrap());
        assert_eq!(yaml(&out), doc);
    }

    #[test]
    fn a_string_holding_the_marker_does_not_confuse_it() {
        let doc = yaml("a: kpsyaml11q0_\nb: 'off'\nc: kpsyaml11q\n");
        let out = to_string(&doc).unwrap();
        assert_eq!(yaml(&out), doc);
        assert!(out.contains("b: 'off'\n"), "{out}");
    }

    #[test]
    fn recognises_every_spelling() {
        for s in [
            "y", "Y", "yes", "Yes", "YES", "n", "NO", "true", "FALSE", "on", "Off", "oFF",
        ] {
            assert!(is_yaml11_bool(s), "{s}");
        }
        for s in ["", "offline", "yes!", "0", "1", "null", "~", "nope"] {
            assert!(!is_yaml11_bool(s), "{s}");
        }
    }
}
