//! Helpers shared by the CLI tests: temporary directories, running `nyx5`, reading JSON.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use nyx5_proto::Value;
use nyx5_proto::json::Object;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A loopback port for a house a test starts, free when asked.
///
/// The port is chosen below the kernel's ephemeral range (`ip_local_port_range`), never by
/// binding port 0: a port the kernel hands out for `:0` comes from the range it also gives
/// every outgoing connection, so between this answer and the house's bind any test's client
/// socket could take it (CI saw `Address already in use` that way). Below the range only an
/// explicit bind can collide; each process starts at its own offset (from its pid) and moves
/// on with a counter, and a port something listens on now is skipped.
pub(crate) fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<usize>().ok())
        .unwrap_or(32768);
    const FIRST: usize = 10_000;
    let span = low.saturating_sub(FIRST).max(1024);
    let start = (std::process::id() as usize).wrapping_mul(7919) % span;
    for _ in 0..span {
        let k = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = (FIRST + (start + k) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below {low}")
}

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("nyx5-cli-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one run of `nyx5` did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Asserts success and returns standard output.
    pub(crate) fn ok(self) -> String {
        assert_eq!(self.code, 0, "nyx5 failed: {}", self.stderr);
        self.stdout
    }

    /// Asserts exit `code` with one `nyx5: ` line on standard error, and returns that line.
    pub(crate) fn fails(self, code: i32) -> String {
        assert_eq!(self.code, code, "expected exit {code}; stdout {:?}, stderr {:?}", self.stdout, self.stderr);
        assert!(self.stdout.is_empty(), "stdout on failure: {:?}", self.stdout);
        assert!(self.stderr.starts_with("nyx5: ") && self.stderr.ends_with('\n'), "stderr {:?}", self.stderr);
        assert_eq!(self.stderr.lines().count(), 1, "stderr {:?}", self.stderr);
        self.stderr
    }

    /// Success, with one JSON document on standard output.
    pub(crate) fn json(self) -> Object {
        let out = self.ok();
        assert_eq!(out.lines().count(), 1, "one JSON document on one line: {out}");
        object(&out)
    }

    /// Exit `code`; with `--json` the failure document, else an empty standard output. Returns
    /// the one line on standard error.
    pub(crate) fn fails_with(self, code: i32) -> (String, Option<Object>) {
        assert_eq!(self.code, code, "expected exit {code}; stdout {:?}, stderr {:?}", self.stdout, self.stderr);
        assert!(self.stderr.starts_with("nyx5: ") && self.stderr.ends_with('\n'), "stderr {:?}", self.stderr);
        assert_eq!(self.stderr.lines().count(), 1, "stderr {:?}", self.stderr);
        let doc = (!self.stdout.is_empty()).then(|| {
            let o = object(&self.stdout);
            assert_eq!(o.get("ok"), Some(&Value::Bool(false)));
            assert_eq!(o.get("exit").and_then(Value::as_safe_integer), Some(i64::from(code)));
            o
        });
        (self.stderr, doc)
    }
}

/// Runs `nyx5 args…` with `stdin` as standard input.
pub(crate) fn nyx5(args: &[&str], stdin: &[u8]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nyx5"));
    command.args(args);
    run(command, stdin)
}

/// Runs a prepared `nyx5` command with `stdin` as standard input and collects what it did.
pub(crate) fn run(mut command: Command, stdin: &[u8]) -> Run {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn nyx5");
    let mut input = child.stdin.take().expect("stdin");
    // The command may exit before reading (usage errors); a broken pipe is fine.
    let _ = input.write_all(stdin);
    drop(input);
    let out = child.wait_with_output().expect("wait for nyx5");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// Parses JSON text into an object.
pub(crate) fn object(text: &str) -> Object {
    match Value::parse_str(text.trim_end()) {
        Ok(Value::Object(o)) => o,
        other => panic!("not a JSON object: {text:?} ({other:?})"),
    }
}

/// A string member of `o`.
pub(crate) fn string(o: &Object, name: &str) -> String {
    o.get(name).and_then(Value::as_str).unwrap_or_else(|| panic!("no string `{name}` in {o:?}")).to_owned()
}

/// An agent with a key file.
pub(crate) struct Agent {
    pub(crate) address: String,
    pub(crate) file: PathBuf,
    pub(crate) sig: String,
    pub(crate) enc: String,
}

impl Agent {
    /// Makes `local@domain` a key file in `dir` and reads its public keys back.
    pub(crate) fn new(dir: &TempDir, address: &str) -> Agent {
        let file = dir.join(&format!("{address}.json"));
        let path = file.to_str().expect("utf-8 path");
        nyx5(&["keys", "new", "--out", path], b"").ok();
        let public = object(&nyx5(&["keys", "show", path, "--json"], b"").ok());
        Agent { address: address.to_owned(), sig: string(&public, "sig"), enc: string(&public, "enc"), file }
    }

    pub(crate) fn key_path(&self) -> &str {
        self.file.to_str().expect("utf-8 path")
    }

    /// `ADDRESS=ENC_PUB` for `seal --to`.
    pub(crate) fn to_arg(&self) -> String {
        format!("{}={}", self.address, self.enc)
    }
}
