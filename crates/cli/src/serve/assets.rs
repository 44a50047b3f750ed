//! `nyx5 serve --app DIR`: the browser client's static files (scripts/build-app writes them to
//! build/site), read once at start and answered from memory under `/app/`, with the headers of
//! the directory's `_headers` file — the same file the Worker's static assets apply, so both
//! runtimes send the client with one Content-Security-Policy. Pages and the API stay the
//! engine's; only `GET`/`HEAD` of `/app` and below are answered here.

use std::collections::BTreeMap;
use std::path::Path;

use nyx5_house::web;
use nyx5_house::{Request as HouseRequest, Response as HouseResponse};

/// Bounds on what is read at start: the client is a handful of files under a megabyte.
const MAX_FILES: usize = 64;
const MAX_BYTES: usize = 16 * 1024 * 1024;

/// One `_headers` rule: a path, or a prefix ending in `*`, and the headers it adds.
type Rule = (String, Vec<(&'static str, String)>);

/// The files under `app/`, by request path, and the `_headers` rules.
#[derive(Debug, Default)]
pub(super) struct Assets {
    files: BTreeMap<String, (&'static str, Vec<u8>)>,
    rules: Vec<Rule>,
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "wasm" => "application/wasm",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The `_headers` format as Workers reads it: a line at the margin is a path pattern, indented
/// `Name: value` lines below it are its headers, `#` starts a comment.
fn parse_headers(text: &str) -> Result<Vec<Rule>, String> {
    let mut rules: Vec<Rule> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if !line.starts_with([' ', '\t']) {
            rules.push((trimmed.to_owned(), Vec::new()));
            continue;
        }
        let (name, value) = trimmed.split_once(':').ok_or_else(|| format!("_headers:{}: not `Name: value`", n + 1))?;
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(format!("_headers:{}: {name:?} is not a header name", n + 1));
        }
        let rule = rules.last_mut().ok_or_else(|| format!("_headers:{}: a header before any path", n + 1))?;
        // Read once at start and kept for the life of the process.
        rule.1.push((Box::leak(name.into_boxed_str()), value.trim().to_owned()));
    }
    Ok(rules)
}

impl Assets {
    /// Reads `root/_headers` and every file under `root/app`.
    pub(super) fn load(root: &Path) -> Result<Assets, String> {
        let headers = root.join("_headers");
        let rules = match std::fs::read_to_string(&headers) {
            Ok(text) => parse_headers(&text)?,
            Err(e) => return Err(format!("{}: {e}", headers.display())),
        };
        let mut assets = Assets { files: BTreeMap::new(), rules };
        let mut pending = vec![root.join("app")];
        let mut bytes = 0usize;
        while let Some(dir) = pending.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for entry in entries {
                let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                let rel = path.strip_prefix(root).map_err(|e| e.to_string())?;
                let url = format!("/{}", rel.to_string_lossy().replace('\\', "/"));
                let body = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                bytes += body.len();
                if assets.files.len() >= MAX_FILES || bytes > MAX_BYTES {
                    return Err(format!("{}: more than {MAX_FILES} files or {MAX_BYTES} bytes", root.display()));
                }
                assets.files.insert(url.clone(), (content_type(&url), body));
            }
        }
        if !assets.files.contains_key("/app/index.html") {
            return Err(format!("{}: no app/index.html (run scripts/build-app)", root.display()));
        }
        Ok(assets)
    }

    /// The answer for `/app` and below, or `None` for every other request.
    pub(super) fn answer(&self, req: &HouseRequest) -> Option<HouseResponse> {
        let path = req.path.as_str();
        if path != "/app" && !path.starts_with("/app/") {
            return None;
        }
        if req.method != "GET" && req.method != "HEAD" {
            return None;
        }
        if path == "/app" {
            // The page loads `./app.js`: it must be read at `/app/`, as the Worker's assets do.
            return Some(web::finish(
                req,
                HouseResponse::bytes(308, "text/plain", Vec::new()).with_header("location", "/app/"),
            ));
        }
        let key = if path.ends_with('/') { format!("{path}index.html") } else { path.to_owned() };
        let (kind, body) = self.files.get(&key)?;
        // Revalidated every time, as Workers sends its assets; the tag makes that cheap.
        let mut resp = web::page(kind, body.clone(), 0);
        resp.headers.retain(|(k, _)| *k != "content-security-policy" && *k != "referrer-policy");
        for (pattern, headers) in &self.rules {
            let hit = match pattern.strip_suffix('*') {
                Some(prefix) => key.starts_with(prefix) || path.starts_with(prefix),
                None => pattern == path || *pattern == key,
            };
            if hit {
                resp.headers.extend(headers.iter().cloned());
            }
        }
        Some(web::finish(req, resp))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_client_is_answered_with_the_headers_file_s_policy() {
        let dir = std::env::temp_dir().join(format!("nyx5-assets-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("app/pkg")).unwrap();
        std::fs::write(dir.join("app/index.html"), "<!doctype html>").unwrap();
        std::fs::write(dir.join("app/pkg/x.wasm"), [0, 97, 115, 109]).unwrap();
        std::fs::write(dir.join("_headers"), "# c\n/app/*\n  Content-Security-Policy: default-src 'none'\n").unwrap();
        let assets = Assets::load(&dir).unwrap();
        let get = |p: &str, m: &str| assets.answer(&HouseRequest::new(m, p, vec![], vec![]));
        let page = get("/app/", "GET").unwrap();
        assert_eq!((page.status, page.content_type), (200, "text/html; charset=utf-8"));
        assert_eq!(page.header("content-security-policy"), Some("default-src 'none'"));
        assert_eq!(page.header("access-control-allow-origin"), Some("*"));
        assert_eq!(get("/app/pkg/x.wasm", "HEAD").unwrap().content_type, "application/wasm");
        let moved = get("/app", "GET").unwrap();
        assert_eq!((moved.status, moved.header("location")), (308, Some("/app/")));
        // Not the client's: the engine answers (a 404 in its error shape, a 405, a page).
        assert!(get("/app/missing.js", "GET").is_none());
        assert!(get("/app/", "POST").is_none());
        assert!(get("/spec", "GET").is_none());
        assert!(get("/application", "GET").is_none());
        std::fs::write(dir.join("_headers"), "  X-Early: 1\n").unwrap();
        assert!(Assets::load(&dir).unwrap_err().contains("before any path"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
