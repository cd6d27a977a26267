//! Bounded text: what sandcap writes back (denials, warnings, status messages, logs) is cut to a
//! known size whatever the client sent, always on a character boundary.

use std::fmt::Write as _;

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` cut to at most `max` bytes, ending in `...` when it was cut.
pub fn clip(s: &str, max: usize) -> String {
    const ELLIPSIS: &str = "...";
    if s.len() <= max {
        return s.to_string();
    }
    format!("{}{ELLIPSIS}", prefix(s, max.saturating_sub(ELLIPSIS.len())))
}

/// The longest key a field path shows in full.
const MAX_PATH_KEY: usize = 64;

/// Appends `key` to a field path: `.key` when it reads as a field name, else `["key"]`
/// (JSON-quoted); either way cut to [`MAX_PATH_KEY`] bytes, so a path stays one line and bounded
/// whatever keys an object has.
pub fn push_key(path: &mut String, key: &str) {
    let plain = !key.is_empty()
        && key.len() <= MAX_PATH_KEY
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-$@".contains(&b));
    if plain {
        let _ = write!(path, ".{key}");
    } else {
        let _ = write!(path, "[{}]", serde_json::Value::String(clip(key, MAX_PATH_KEY)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_quoted_and_cut_unless_plain() {
        let mut path = "spec".to_string();
        push_key(&mut path, "pluginKey");
        push_key(&mut path, "a b\n");
        push_key(&mut path, &"é".repeat(100));
        assert!(path.starts_with("spec.pluginKey[\"a b\\n\"][\"éé"), "{path}");
        assert!(path.ends_with("...\"]") && path.len() < 100, "{path}");
    }

    #[test]
    fn clip_keeps_short_text_and_cuts_long_text_on_a_boundary() {
        assert_eq!(clip("short", 10), "short");
        let cut = clip(&"😀".repeat(10), 10);
        assert!(cut.len() <= 10 && cut.ends_with("..."), "{cut}");
    }
}
