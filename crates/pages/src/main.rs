//! `nyx5-pages SPEC.md DIR`: writes `DIR/spec.html` and `DIR/llms.txt`, the protocol pages the
//! Worker serves as static assets (scripts/build-app runs it).

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [source, dir] = args.as_slice() else {
        eprintln!("usage: nyx5-pages SPEC.md DIR");
        return ExitCode::from(2);
    };
    let md = match std::fs::read_to_string(source) {
        Ok(md) => md,
        Err(e) => {
            eprintln!("nyx5-pages: cannot read {source}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (name, text) in [("spec.html", nyx5_pages::page(&md)), ("llms.txt", nyx5_pages::llms(&md))] {
        let path = Path::new(dir).join(name);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("nyx5-pages: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
