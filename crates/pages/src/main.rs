//! `nyx5-pages SPEC.md PSL.dat DIR`: writes `DIR/spec.html` and `DIR/llms.txt`, the protocol
//! pages, and the coded Public Suffix List at `DIR` + [`nyx5_pages::psl::ASSET_PATH`], the static
//! assets the Worker serves or loads (scripts/build-app runs it).

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [spec, psl, dir] = args.as_slice() else {
        eprintln!("usage: nyx5-pages SPEC.md PSL.dat DIR");
        return ExitCode::from(2);
    };
    match write(spec, psl, Path::new(dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("nyx5-pages: {why}");
            ExitCode::FAILURE
        }
    }
}

fn write(spec: &str, psl: &str, dir: &Path) -> Result<(), String> {
    let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let md = read(spec)?;
    let coded = nyx5_pages::psl::code(&read(psl)?).map_err(|e| format!("{psl}: {e}"))?;
    let asset = dir.join(nyx5_pages::psl::ASSET_PATH.trim_start_matches('/'));
    if let Some(parent) = asset.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let files = [
        (dir.join("spec.html"), nyx5_pages::page(&md).into_bytes()),
        (dir.join("llms.txt"), nyx5_pages::llms(&md).into_bytes()),
        (asset, coded.bytes),
    ];
    for (path, bytes) in files {
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
