//! The new text of a person's reply (`email::reply`, docs/SPEC.md "Email bridge", `new_text`)
//! measured against the corpus in `tests/reply_corpus/`: one file per case, written for this
//! corpus in the formats real clients write (Gmail, Outlook desktop and web, Apple Mail, iPhone,
//! Thunderbird, Yahoo; plain and HTML; English, Spanish, Portuguese, French and German). A file is
//! the body (`.txt` plain text, `.html` an HTML body, `.eml` a whole message read by the bridge),
//! a line `#### new text ####`, and the new text expected. A case is right when the new text is
//! the expected one exactly, trailing white space of each line and of the whole aside.
#![allow(clippy::expect_used, clippy::panic, clippy::print_stdout)]

use nyx5_rules::email::{parse, reply};

const SPLIT: &str = "\n#### new text ####\n";

fn normal(text: &str) -> String {
    text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n").trim_end().to_owned()
}

fn new_text(name: &str, body: &str) -> String {
    if name.ends_with(".html") {
        reply::new_text_html(body)
    } else if name.ends_with(".eml") {
        let p = parse::parse(body.replace('\n', "\r\n").as_bytes(), 1 << 20).expect("a message");
        p.new_text.unwrap_or(p.text)
    } else {
        reply::new_text(body)
    }
}

#[test]
fn the_corpus_new_text_is_right_often_enough() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reply_corpus");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("the corpus")
        .map(|e| e.expect("an entry").file_name().into_string().expect("a name"))
        .collect();
    names.sort();
    let (mut right, mut wrong) = (0usize, Vec::new());
    for name in &names {
        let file = std::fs::read_to_string(dir.join(name)).expect("a case");
        let (body, expected) = file.split_once(SPLIT).unwrap_or_else(|| panic!("{name} has no `{SPLIT}`"));
        let got = new_text(name, body);
        if normal(&got) == normal(expected) {
            right += 1;
        } else {
            wrong.push(format!("{name}:\n--- got\n{got}\n--- expected\n{}", expected.trim_end()));
        }
    }
    let total = names.len();
    let rate = right as f64 / total as f64;
    println!("reply corpus: {right} of {total} right ({:.1}%)", rate * 100.0);
    for w in &wrong {
        println!("WRONG {w}\n");
    }
    assert!(total >= 60, "the corpus has {total} cases");
    assert!(rate >= 0.90, "{right} of {total} right: under the 90% floor");
}
