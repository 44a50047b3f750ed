//! Whom an email may be trusted to come from (docs/SPEC.md "Email bridge", "Trust"): only what a
//! trusted receiver's `Authentication-Results` (RFC 8601) says, never the `From` header alone.
//!
//! Pure. [`read`] reads one header's value into its authserv-id and results, with comments and
//! quoted strings taken for what they are (text inside them is never a result). [`dmarc_pass`]
//! decides whether the receivers the house trusts say DMARC passed for a From domain: only the
//! topmost run of headers whose authserv-id is trusted counts (a receiver adds its header above
//! everything the sender wrote, so anything lower may be the sender's own), and within that run
//! every `dmarc` result must be `pass` for that very domain, and there must be one.

/// One `method=result` of an `Authentication-Results` header, with its properties.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResInfo {
    /// The method, lower case, without its version (`dmarc`, `dkim`, `spf`, …).
    pub method: String,
    /// The result, lower case; empty when the entry could not be read.
    pub result: String,
    /// `ptype.property` (lower case) and value pairs, in order; `reason` is one too.
    pub props: Vec<(String, String)>,
    /// The entry did not follow the grammar after its method (a result or property was missing).
    pub malformed: bool,
}

impl ResInfo {
    /// Whether this entry says DMARC passed for `domain` (compared without case and a final dot):
    /// `dmarc=pass`, well formed, with at least one `header.from` and every one of them `domain`.
    pub fn dmarc_passes_for(&self, domain: &str) -> bool {
        let mut froms = self.props.iter().filter(|(k, _)| k == "header.from").map(|(_, v)| v.as_str()).peekable();
        self.method == "dmarc"
            && self.result == "pass"
            && !self.malformed
            && froms.peek().is_some()
            && froms.all(|v| same_domain(v, domain))
    }
}

/// One `Authentication-Results` header, read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthResults {
    /// The authserv-id, lower case.
    pub authserv_id: String,
    pub results: Vec<ResInfo>,
}

/// A domain as a DMARC `header.from` names it (a bare domain; an address's domain is taken).
fn same_domain(value: &str, domain: &str) -> bool {
    let v = value.rsplit_once('@').map_or(value, |(_, d)| d).trim_end_matches('.');
    let d = domain.trim_end_matches('.');
    !d.is_empty() && v.eq_ignore_ascii_case(d)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Semi,
    Eq,
    /// A run of characters that are not blanks, controls or `( ) " ; =`.
    Word(String),
    /// A quoted string's content, escapes resolved. Never a method, result or property name.
    Quoted(String),
    /// `.` or `/`, which may stand between blanks and comments (`policy . expired`, `dkim / 1`).
    Sep(char),
}

/// Splits a header value into tokens; comments (nested, with `\` escapes) and blanks are dropped,
/// and words joined by `.` or `/` are one word again (`header.from`, `dkim/1`, `gmail.com`).
/// An unclosed comment or quoted string runs to the end.
fn lex(value: &str) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::new();
    for t in split(value) {
        match (out.last_mut(), t) {
            (Some(Tok::Word(w)), Tok::Word(next)) if w.ends_with(['.', '/']) => w.push_str(&next),
            (Some(Tok::Word(w)), Tok::Sep(c)) => w.push(c),
            (_, Tok::Sep(c)) => out.push(Tok::Word(c.to_string())),
            (_, t) => out.push(t),
        }
    }
    out
}

fn split(value: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = value.chars().peekable();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut Vec<Tok>| {
        if !word.is_empty() {
            out.push(Tok::Word(std::mem::take(word)));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '(' => {
                flush(&mut word, &mut out);
                let mut depth = 1usize;
                while depth > 0 {
                    match chars.next() {
                        None => break,
                        Some('\\') => {
                            chars.next();
                        }
                        Some('(') => depth += 1,
                        Some(')') => depth -= 1,
                        Some(_) => {}
                    }
                }
            }
            '"' => {
                flush(&mut word, &mut out);
                let mut text = String::new();
                loop {
                    match chars.next() {
                        None | Some('"') => break,
                        Some('\\') => text.extend(chars.next()),
                        Some(c) => text.push(c),
                    }
                }
                out.push(Tok::Quoted(text));
            }
            ';' => {
                flush(&mut word, &mut out);
                out.push(Tok::Semi);
            }
            '=' => {
                flush(&mut word, &mut out);
                out.push(Tok::Eq);
            }
            '.' | '/' => {
                flush(&mut word, &mut out);
                out.push(Tok::Sep(c));
            }
            // A stray `)` separates, as a blank does.
            c if c == ')' || c.is_whitespace() || c.is_control() => flush(&mut word, &mut out),
            c => word.push(c),
        }
    }
    flush(&mut word, &mut out);
    out
}

/// One `resinfo` (the tokens between two `;`): `method=result` then `name=value` pairs.
fn resinfo(toks: &[Tok]) -> Option<ResInfo> {
    let mut it = toks.iter();
    let method = match it.next()? {
        Tok::Word(w) => w.split('/').next().unwrap_or_default().to_ascii_lowercase(),
        _ => return Some(ResInfo { malformed: true, ..ResInfo::default() }),
    };
    let mut info = ResInfo { method, ..ResInfo::default() };
    match (it.next(), it.next()) {
        (Some(Tok::Eq), Some(Tok::Word(r))) => info.result = r.to_ascii_lowercase(),
        _ => {
            info.malformed = true;
            return Some(info);
        }
    }
    loop {
        match (it.next(), it.next(), it.next()) {
            (None, _, _) => break,
            (Some(Tok::Word(name)), Some(Tok::Eq), Some(Tok::Word(v) | Tok::Quoted(v))) => {
                info.props.push((name.to_ascii_lowercase(), v.clone()));
            }
            _ => {
                info.malformed = true;
                break;
            }
        }
    }
    Some(info)
}

/// Reads an `Authentication-Results` value: `authserv-id [version] ; resinfo ; …` (RFC 8601 §2.2).
/// None when it names no authserv-id. `; none` and empty entries are skipped.
pub fn read(value: &str) -> Option<AuthResults> {
    let toks = lex(value);
    let mut parts = toks.split(|t| *t == Tok::Semi);
    let authserv_id = match parts.next()?.first()? {
        Tok::Word(w) | Tok::Quoted(w) if !w.is_empty() => w.to_ascii_lowercase(),
        _ => return None,
    };
    let results = parts.filter(|p| !matches!(p, [] | [Tok::Word(_)])).filter_map(resinfo).collect();
    Some(AuthResults { authserv_id, results })
}

/// Whether `id` is one of `trusted` (authserv-ids, compared without case).
pub fn is_trusted(id: &str, trusted: &[String]) -> bool {
    trusted.iter().any(|t| t.eq_ignore_ascii_case(id))
}

/// Whether the trusted receivers say DMARC passed for `from_domain`. `headers` are the message's
/// `Authentication-Results` in order, topmost first (None where one could not be read). Only the
/// leading run whose authserv-ids are all in `trusted` is read; in it there must be at least one
/// `dmarc` result, and every `dmarc` result must pass for `from_domain`.
pub fn dmarc_pass(headers: &[Option<AuthResults>], trusted: &[String], from_domain: &str) -> bool {
    let mut passed = false;
    let run = headers.iter().map_while(|h| h.as_ref().filter(|h| is_trusted(&h.authserv_id, trusted)));
    for h in run {
        for r in h.results.iter().filter(|r| r.method == "dmarc") {
            if !r.dmarc_passes_for(from_domain) {
                return false;
            }
            passed = true;
        }
    }
    passed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn pass(headers: &[&str], trusted: &[&str], domain: &str) -> bool {
        let read: Vec<Option<AuthResults>> = headers.iter().map(|h| read(h)).collect();
        dmarc_pass(&read, &ids(trusted), domain)
    }

    /// A comment may nest; all of it is skipped, so nothing inside it reads as a property.
    #[test]
    fn nested_comments_hide_what_they_hold() {
        let r = read("mx.h.test; dmarc=pass (note (nested) header.from=evil.example) header.from=example.com").unwrap();
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].props, [("header.from".to_owned(), "example.com".to_owned())]);
        assert!(!r.results[0].malformed);
    }

    /// An entry that does not start with a method is malformed; an empty quoted authserv-id is
    /// none at all.
    #[test]
    fn an_entry_without_a_method_is_malformed_and_an_empty_id_is_none() {
        let r = read("mx.h.test; \"x\"=pass").unwrap();
        assert_eq!(r.results.len(), 1);
        assert!(r.results[0].malformed);
        assert_eq!((r.results[0].method.as_str(), r.results[0].result.as_str()), ("", ""));
        assert!(read("\"\"; dmarc=pass header.from=example.com").is_none());
        assert_eq!(read("\"MX.h.test\"; dmarc=pass").unwrap().authserv_id, "mx.h.test");
    }

    #[test]
    fn reads_the_rfc_8601_examples() {
        // RFC 8601 Appendix B. Service provided, nothing authenticated.
        let a = read("example.org 1; none").unwrap();
        assert_eq!(a.authserv_id, "example.org");
        assert!(a.results.is_empty());
        // SPF with a property.
        let a = read("example.com;\r\n spf=pass smtp.mailfrom=example.net").unwrap();
        assert_eq!(a.results[0].method, "spf");
        assert_eq!(a.results[0].result, "pass");
        assert_eq!(a.results[0].props, vec![("smtp.mailfrom".to_owned(), "example.net".to_owned())]);
        // Several results, a comment, an address as a value.
        let a = read(
            "example.com;\r\n auth=pass (cram-md5) smtp.auth=sender@example.net;\r\n spf=pass smtp.mailfrom=example.net",
        )
        .unwrap();
        assert_eq!(a.results.len(), 2);
        assert_eq!(a.results[0].props[0], ("smtp.auth".to_owned(), "sender@example.net".to_owned()));
        // A version, reasons, a header.i with only a domain after `@`.
        let a = read(
            "example.com 1;\r\n dkim=pass reason=\"good signature\" header.i=@mail-router.example.net;\r\n \
             dkim=fail reason=\"bad signature\" header.i=@newyork.example.com",
        )
        .unwrap();
        assert_eq!(a.results[1].result, "fail");
        assert_eq!(a.results[1].props[0], ("reason".to_owned(), "bad signature".to_owned()));
        assert_eq!(a.results[1].props[1], ("header.i".to_owned(), "@newyork.example.com".to_owned()));
        // The comment-heavy example: comments and blanks around every token, `/` and `.` too.
        let a = read(
            "foo.example.net (foobar) 1 (baz);\r\n    dkim (Because I like it) / 1 (One yay) = (wait for it) \
             fail\r\n      policy (A dot can go here) . (like that) expired\r\n      (this surprised me) = \
             (as I wasn't expecting it) 1362471462",
        )
        .unwrap();
        assert_eq!(a.authserv_id, "foo.example.net");
        assert_eq!(a.results[0].method, "dkim");
        assert_eq!(a.results[0].result, "fail");
        assert_eq!(a.results[0].props, vec![("policy.expired".to_owned(), "1362471462".to_owned())]);
        assert!(!a.results[0].malformed);
    }

    #[test]
    fn reads_what_cloudflare_writes() {
        let cf = "mx.cloudflare.net;\r\n\tdkim=pass header.d=gmail.com header.s=20251104 header.b=L6CZ3OJ0;\r\n\t\
                  dmarc=pass header.from=gmail.com policy.dmarc=none;\r\n\tspf=none (mx.cloudflare.net: no SPF \
                  records found for postmaster@mail.google.com) smtp.helo=mail.google.com;\r\n\tspf=pass \
                  (mx.cloudflare.net: domain of a@gmail.com designates 2607:f8b0::1 as permitted sender) \
                  smtp.mailfrom=a@gmail.com;\r\n\tarc=pass smtp.remote-ip=\"2607:f8b0::1\"";
        assert!(pass(&[cf], &["mx.cloudflare.net"], "gmail.com"));
        assert!(pass(&[cf], &["MX.Cloudflare.NET"], "GMail.com."));
        assert!(!pass(&[cf], &["mx.example.org"], "gmail.com"));
        assert!(!pass(&[cf], &["mx.cloudflare.net"], "example.com"));
        // A sender's quoted MAIL FROM closes the receiver's comment early and smuggles a `dmarc=pass`
        // entry in; the receiver's own verdict in the same header outvotes it.
        let smuggled = "mx.cloudflare.net;\r\n\tspf=pass (mx.cloudflare.net: domain of \
                        \"a);dmarc=pass header.from=bank.test;(x\"@evil.test designates 192.0.2.1 as permitted \
                        sender) smtp.mailfrom=\"a);dmarc=pass header.from=bank.test;(x\"@evil.test;\r\n\t\
                        dmarc=fail header.from=bank.test policy.dmarc=none";
        let got = read(smuggled).unwrap();
        assert!(got.results.iter().any(|r| r.dmarc_passes_for("bank.test")), "{got:?}");
        assert!(!pass(&[smuggled], &["mx.cloudflare.net"], "bank.test"));
    }

    #[test]
    fn only_a_real_pass_for_the_from_domain_counts() {
        let t = &["mx.h.test"];
        assert!(pass(&["mx.h.test; dmarc=pass header.from=a.test"], t, "a.test"));
        assert!(pass(&["mx.h.test; dmarc=pass header.from=user@a.test"], t, "a.test"));
        for hostile in [
            // No header.from: a pass for which domain?
            "mx.h.test; dmarc=pass",
            // Mismatched or extended domains.
            "mx.h.test; dmarc=pass header.from=b.test",
            "mx.h.test; dmarc=pass header.from=a.test.evil.test",
            "mx.h.test; dmarc=pass header.from=a.test header.from=b.test",
            // The pass, or its domain, inside a comment.
            "mx.h.test; dmarc=fail (dmarc=pass header.from=a.test) header.from=a.test",
            "mx.h.test; dmarc=none (header.from=a.test; dmarc=pass) header.from=a.test",
            "mx.h.test; dmarc=pass (header.from=a.test)",
            "mx.h.test; dmarc=pass (unclosed header.from=a.test",
            "mx.h.test; dmarc=fail (\\) dmarc=pass header.from=a.test) header.from=a.test",
            // Inside a quoted string.
            "mx.h.test; dmarc=fail reason=\"x; dmarc=pass header.from=a.test\" header.from=a.test",
            "mx.h.test; spf=pass reason=\"; dmarc=pass header.from=a.test",
            // Other results, and a pass split off its domain by `;`.
            "mx.h.test; dmarc=fail header.from=a.test",
            "mx.h.test; dmarc=temperror header.from=a.test",
            "mx.h.test; dmarc=pass; header.from=a.test",
            "mx.h.test; dmarc = ; header.from=a.test",
            "mx.h.test; dmarc=pass header.from",
            // A pass next to a failure in the trusted header.
            "mx.h.test; dmarc=pass header.from=a.test; dmarc=fail header.from=a.test",
            // The trusted id in a comment is no id.
            "evil.test (mx.h.test); dmarc=pass header.from=a.test",
            "(mx.h.test) evil.test; dmarc=pass header.from=a.test",
            "; dmarc=pass header.from=a.test",
            "",
        ] {
            assert!(!pass(&[hostile], t, "a.test"), "{hostile}");
        }
    }

    #[test]
    fn only_the_topmost_trusted_headers_count() {
        let t = &["mx.h.test"];
        let good = "mx.h.test; dmarc=pass header.from=a.test";
        // An untrusted header above the trusted one ends the run before it starts.
        assert!(!pass(&["evil.test; dmarc=pass header.from=a.test", good], t, "a.test"));
        assert!(!pass(&["unreadable", good], t, "a.test"));
        // Below the trusted one, anything the sender wrote is ignored, trusted id or not.
        assert!(pass(&[good, "evil.test; dmarc=fail header.from=a.test"], t, "a.test"));
        let real_fail = "mx.h.test; dmarc=fail header.from=a.test";
        assert!(!pass(&[real_fail, "evil.test; dmarc=pass header.from=a.test"], t, "a.test"));
        // A forgery of the trusted id below the receiver's own verdict cannot outvote it.
        assert!(!pass(&[real_fail, good], t, "a.test"));
        // A receiver that writes one header per method: the run spans them.
        assert!(pass(&["mx.h.test; dkim=pass header.d=a.test", good], t, "a.test"));
        // Nothing trusted, or no DMARC result at all: no pass.
        assert!(!pass(&["mx.h.test; spf=pass smtp.mailfrom=a.test"], t, "a.test"));
        assert!(!pass(&[good], &[], "a.test"));
        assert!(!pass(&[], t, "a.test"));
    }

    #[test]
    fn hostile_values_are_read_without_panic() {
        for v in ["(((((", "\"", "\\", "a;;;;=;=", "=(", "a; =b c=", "\u{0}\u{7f};é=ü", ")x;y=z"] {
            let _ = read(v);
            let _ = dmarc_pass(&[read(v)], &ids(&["x"]), "a.test");
        }
        let deep = "(".repeat(100_000);
        assert!(read(&format!("mx.h.test {deep}; dmarc=pass header.from=a.test")).unwrap().results.is_empty());
    }
}
