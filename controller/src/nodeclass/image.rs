//! The Talos image URL template of a NodeClass.

use super::TalosImage;

/// Substitutes `{version}`, `{schematic}` and `{arch}` in the template. Any other
/// placeholder, an unbalanced brace, a non-HTTP(S) URL, a missing schematic that
/// the template uses, or a file that is not `.raw.xz`/`.raw.zst` is an error:
/// the install writes whatever the URL serves onto the disk, so a template that
/// is almost right is worse than none.
pub fn resolve_image_url(image: &TalosImage, arch: &str) -> Result<String, String> {
    let template = image.url_template.as_str();
    if !(template.starts_with("https://") || template.starts_with("http://")) {
        return Err("urlTemplate must be an http(s) URL".into());
    }
    if !(template.ends_with(".raw.xz") || template.ends_with(".raw.zst")) {
        return Err("urlTemplate must end in .raw.xz or .raw.zst".into());
    }
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest.as_bytes()[open] == b'}' {
            return Err(format!(
                "unbalanced '}}' in urlTemplate at {:?}",
                &rest[open..]
            ));
        }
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| "unclosed '{' in urlTemplate".to_string())?;
        let value = match &after[..close] {
            "version" => non_empty("version", &image.version)?,
            "schematic" => non_empty("schematic", &image.schematic)?,
            "arch" => arch,
            other => return Err(format!("unknown placeholder {{{other}}} in urlTemplate")),
        };
        out.push_str(value);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn non_empty<'a>(name: &str, value: &'a str) -> Result<&'a str, String> {
    if value.is_empty() {
        Err(format!(
            "urlTemplate uses {{{name}}} but image.{name} is empty"
        ))
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(template: &str, schematic: &str) -> TalosImage {
        TalosImage {
            url_template: template.into(),
            version: "v1.13.9".into(),
            schematic: schematic.into(),
            sha256: None,
        }
    }

    #[test]
    fn substitutes_placeholders() {
        let img = image(
            "https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz",
            "abc123",
        );
        assert_eq!(
            resolve_image_url(&img, "arm64").unwrap(),
            "https://factory.talos.dev/image/abc123/v1.13.9/metal-arm64.raw.xz"
        );
        let plain = image("http://127.0.0.1:8080/talos-{version}-{arch}.raw.zst", "");
        assert_eq!(
            resolve_image_url(&plain, "amd64").unwrap(),
            "http://127.0.0.1:8080/talos-v1.13.9-amd64.raw.zst"
        );
    }

    #[test]
    fn rejects_bad_templates() {
        for (template, schematic) in [
            ("https://x/{schematic}/metal-{arch}.raw.xz", ""),
            ("https://x/{flavour}/metal-{arch}.raw.xz", "s"),
            ("https://x/{version/metal.raw.xz", "s"),
            ("https://x/version}/metal.raw.xz", "s"),
            ("https://x/metal-{arch}.iso", "s"),
            ("ftp://x/metal-{arch}.raw.xz", "s"),
        ] {
            assert!(
                resolve_image_url(&image(template, schematic), "amd64").is_err(),
                "{template} accepted"
            );
        }
    }
}
