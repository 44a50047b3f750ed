//! Two `nyx5 serve` houses on loopback for the client and MCP tests — `a.test` (open
//! registration) and `b.test` (invitations) — with one hosts file naming both, read by the
//! houses and by the client alike, and a profile file for the agents under test.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use nyx5_proto::Value;
use nyx5_proto::json::Object;

use crate::common::{Run, TempDir, free_port, run};

/// The operator tokens of the two houses.
pub(crate) const TOKEN_A: &str = "operator-token-of-house-a-for-tests";
pub(crate) const TOKEN_B: &str = "operator-token-of-house-b-for-tests";

const READY_WAIT: Duration = Duration::from_secs(60);

/// One running house.
pub(crate) struct House {
    pub(crate) domain: String,
    pub(crate) port: u16,
    registration: &'static str,
    token: &'static str,
    child: Option<Child>,
    _lines: Option<Receiver<String>>,
    /// Environment the house is started with, beyond the defaults (see [`World::set_env_a`]).
    env: Vec<(String, String)>,
}

impl House {
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start(&mut self, dir: &std::path::Path, hosts: &std::path::Path) {
        self.start_with(dir, hosts, &[]);
    }

    fn start_with(&mut self, dir: &std::path::Path, hosts: &std::path::Path, extra: &[&str]) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_nyx5"))
            .args(["serve", "--domain", &self.domain, "--registration", self.registration, "--tick-ms", "100"])
            .args(extra)
            .args(["--admin-token", self.token, "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--db")
            .arg(dir.join(format!("{}.db", self.domain)))
            .arg("--hosts")
            .arg(hosts)
            // Every test client is 127.0.0.1: give it the whole open-registration budget.
            .env("NYX5_OPEN_REGISTRATIONS_PER_MINUTE", "1000")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let ready = format!("nyx5 serve: {} at {}", self.domain, self.url());
        let deadline = Instant::now() + READY_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines.recv_timeout(left).unwrap_or_else(|_| panic!("{} never said it was ready", self.domain));
            if line == ready {
                break;
            }
        }
        self.child = Some(child);
        self._lines = Some(lines);
    }

    /// Kills the house at once (SIGKILL), as a crash would.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for House {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One more house, `nyx5 serve --domain DOMAIN` (open registration, operator token
/// [`TOKEN_A`]) on a free port, its database in `dir` (created), reading `hosts`, with `extra`
/// options. Two houses of one domain need two directories.
pub(crate) fn spawn(dir: &std::path::Path, domain: &str, hosts: &std::path::Path, extra: &[&str]) -> House {
    std::fs::create_dir_all(dir).unwrap();
    let mut h = House {
        domain: domain.to_owned(),
        port: free_port(),
        registration: "open",
        token: TOKEN_A,
        child: None,
        _lines: None,
        env: Vec::new(),
    };
    h.start_with(dir, hosts, extra);
    h
}

/// Two houses, their hosts file and a profile.
pub(crate) struct World {
    pub(crate) dir: TempDir,
    pub(crate) a: House,
    pub(crate) b: House,
    pub(crate) hosts: PathBuf,
    pub(crate) profile: PathBuf,
}

impl World {
    pub(crate) fn new(name: &str) -> World {
        let dir = TempDir::new(name);
        let hosts = dir.join("hosts.json");
        let profile = dir.join("profile").join("agents.json");
        let house = |domain: &str, registration, token| House {
            domain: domain.to_owned(),
            port: free_port(),
            registration,
            token,
            child: None,
            _lines: None,
            env: Vec::new(),
        };
        let mut a = house("a.test", "open", TOKEN_A);
        let mut b = house("b.test", "invite", TOKEN_B);
        std::fs::write(&hosts, format!(r#"{{"a.test":{{"url":"{}"}},"b.test":{{"url":"{}"}}}}"#, a.url(), b.url()))
            .unwrap();
        a.start(dir.path(), &hosts);
        b.start(dir.path(), &hosts);
        World { dir, a, b, hosts, profile }
    }

    /// Starts house a again (same database and port) after [`House::kill`].
    pub(crate) fn restart_a(&mut self) {
        let hosts = self.hosts.clone();
        self.a.start(self.dir.path(), &hosts);
    }

    /// Stops house a and starts it again (same database and port) with `name=value` in its
    /// environment (a quota, say), kept for later restarts.
    pub(crate) fn set_env_a(&mut self, name: &str, value: &str) {
        self.a.kill();
        self.a.env.push((name.to_owned(), value.to_owned()));
        self.restart_a();
    }

    /// Stops house a and starts it again (same database and port) with `extra` options.
    pub(crate) fn restart_a_with(&mut self, extra: &[&str]) {
        self.a.kill();
        let hosts = self.hosts.clone();
        self.a.start_with(self.dir.path(), &hosts, extra);
    }

    /// Stops house b and starts it again (same database and port) with `extra` options.
    pub(crate) fn restart_b_with(&mut self, extra: &[&str]) {
        self.b.kill();
        let hosts = self.hosts.clone();
        self.b.start_with(self.dir.path(), &hosts, extra);
    }

    /// `nyx5 args…` with this world's profile and hosts file (DNS off).
    pub(crate) fn nyx5(&self, args: &[&str]) -> Run {
        self.nyx5_in(args, b"")
    }

    pub(crate) fn nyx5_in(&self, args: &[&str], stdin: &[u8]) -> Run {
        let mut command = self.command();
        command.args(args);
        run(command, stdin)
    }

    /// The `nyx5` command with this world's environment, its pipes ready.
    pub(crate) fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nyx5"));
        c.env("NYX5_AGENT", &self.profile)
            .env("NYX5_HOSTS", &self.hosts)
            .env("NYX5_DOH", "off")
            .env_remove("NYX5_ADMIN_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// `ana@a.test` registered (open) and `bo@b.test` registered with an invitation.
    pub(crate) fn two_agents(&self) {
        self.two_agents_as("ana@a.test");
    }

    /// `first` (an address at a.test, the profile's first agent) registered, and `bo@b.test`
    /// registered with an invitation.
    pub(crate) fn two_agents_as(&self, first: &str) {
        self.nyx5(&["init", first, "--house", &self.a.url()]).ok();
        self.nyx5(&["init", "bo@b.test", "--house", &self.b.url()]).ok();
        self.nyx5(&["register", "--json"]).json();
        let invite = self.nyx5(&["invite", "new", "--house", "b.test", "--admin-token", TOKEN_B, "--json"]).json();
        let code = invite.get("code").and_then(Value::as_str).unwrap().to_owned();
        self.nyx5(&["register", "--as", "bo@b.test", "--invite", &code, "--json"]).json();
    }

    /// Polls `bo@b.test`'s inbox (JSON) until `pred` holds of its envelopes.
    pub(crate) fn wait_inbox(&self, who: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let o = self.nyx5(&["inbox", "--as", who, "--json"]).json();
            let list = o.get("envelopes").and_then(Value::as_array).unwrap().to_vec();
            if pred(&list) {
                return list;
            }
            assert!(Instant::now() < deadline, "the inbox of {who} never got there: {list:?}");
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// A string member.
pub(crate) fn s(o: &Object, name: &str) -> String {
    o.get(name).and_then(Value::as_str).unwrap_or_else(|| panic!("no string `{name}` in {o:?}")).to_owned()
}

/// An object member.
pub(crate) fn obj<'a>(o: &'a Object, name: &str) -> &'a Object {
    o.get(name).and_then(Value::as_object).unwrap_or_else(|| panic!("no object `{name}` in {o:?}"))
}

/// A running `nyx5 mcp --as WHO` over stdio, initialized (one request at a time).
pub(crate) struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    id: i64,
}

impl Mcp {
    pub(crate) fn start(w: &World, who: &str) -> Mcp {
        let mut child = w.command().args(["mcp", "--as", who]).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp { child, stdin, stdout, id: 0 };
        m.request(
            "initialize",
            r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}"#,
        );
        m
    }

    pub(crate) fn request(&mut self, method: &str, params: &str) -> Object {
        self.id += 1;
        writeln!(self.stdin, r#"{{"jsonrpc":"2.0","id":{},"method":"{method}","params":{params}}}"#, self.id).unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        // Answers may carry a whole file (an attachment, base64): a generous bound.
        match Value::parse(line.trim_end().as_bytes(), 64 << 20).unwrap() {
            Value::Object(o) => obj(&o, "result").clone(),
            _ => panic!("{line}"),
        }
    }

    /// A tool's structured answer (panics on isError).
    pub(crate) fn call(&mut self, name: &str, args: &Value) -> Object {
        let r = self.request("tools/call", &format!(r#"{{"name":"{name}","arguments":{}}}"#, args.canonical_string()));
        assert_ne!(r.get("isError"), Some(&Value::Bool(true)), "{name}: {r:?}");
        r.get("structuredContent").and_then(Value::as_object).unwrap().clone()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An MCP client that declares `elicitation` (it can ask its human), speaking line by line.
pub(crate) struct ElicitingMcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl ElicitingMcp {
    pub(crate) fn start(w: &World, who: &str) -> ElicitingMcp {
        let mut child = w.command().args(["mcp", "--as", who]).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = ElicitingMcp { child, stdin, stdout };
        c.send(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"t","version":"1"}}}"#,
        );
        c.read();
        c
    }

    pub(crate) fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub(crate) fn read(&mut self) -> Object {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        Value::parse_str(line.trim_end()).unwrap().as_object().unwrap().clone()
    }
}

impl Drop for ElicitingMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
