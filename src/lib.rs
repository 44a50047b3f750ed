//! The Worker package: the workers-rs adapter (wasm32 only: `fetch`, `scheduled` and `email`
//! events onto the house engine over D1 and Workers `fetch`) and the rendered protocol pages.

#[cfg(target_arch = "wasm32")]
mod adapter;

/// docs/SPEC.md rendered to HTML by build.rs, served at `/spec`.
pub const SPEC_HTML: &str = include_str!(concat!(env!("OUT_DIR"), "/spec.html"));
/// The `llms.txt` page: a summary followed by docs/SPEC.md.
pub const LLMS_TXT: &str = include_str!(concat!(env!("OUT_DIR"), "/llms.txt"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_page_is_rendered_from_the_markdown() {
        assert!(SPEC_HTML.starts_with("<!doctype html>"));
        assert!(SPEC_HTML.contains("<h1 id=\"nyx5-1-as-this-implementation-speaks-it\">"));
        assert!(SPEC_HTML.contains("<code>X25519+HKDF-SHA256+A256GCM</code>"));
        assert!(SPEC_HTML.contains("<table>"));
        // Markdown text is escaped, never injected as markup.
        assert!(SPEC_HTML.contains("&lt;"));
        assert!(!SPEC_HTML.contains("<id>"));
        assert!(LLMS_TXT.starts_with("# Nyx5\n"));
        assert!(LLMS_TXT.contains("X25519+HKDF-SHA256+A256GCM"));
    }
}
