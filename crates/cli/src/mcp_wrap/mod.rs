//! `nyx5 mcp --wrap AUTHORITY.json -- CMD ARGS…`: another MCP server's tools, served through the
//! authorities a person wrote for them (docs/SPEC.md "Wrapping another MCP server").
//!
//! The wrapped server is a child speaking JSON-RPC lines on its standard input and output. Every
//! message passes through as it is, except: a `tools/list` answer loses the tools its authority
//! prohibits, and the others carry hints set from their authority; a `tools/call` is judged
//! first ([`Authority::judge`]) — refused, it never reaches the child; to be approved, it waits
//! for a human (by `elicitation/create` when the client offers elicitation, else by a file that
//! `nyx5 mcp-approve` or `nyx5 mcp-decline` decides) while every other message keeps flowing.
//! Requests the child sends the client go out under ids of ours (`nyx5-wrap-c-N`) and their
//! answers come back under the child's; our own requests are `nyx5-wrap-e-N`. The server's own
//! hints never decide anything: they only earn a warning when they disagree with the authority.
//!
//! Its rooms, by job: [`rules`] decides (the authority file, a call's verdict, what a listed tool
//! shows, what an approval request and a decision file mean, which lines pass; no I/O: no file,
//! clock, process or randomness); [`store`] keeps (the approvals directory: requests, decisions
//! and the hour's counts, under its lock); [`proxy`] moves the lines between the client and the
//! child, and waits for humans; [`approvals`] is the person's side (`nyx5 mcp-approvals`,
//! `mcp-approve`, `mcp-decline`).
//!
//! [`Authority::judge`]: nyx5_proto::authority::Authority::judge

mod approvals;
mod proxy;
mod rules;
mod store;

pub(crate) use approvals::{DecideArgs, ListArgs, decide, list};
pub(crate) use proxy::{DEFAULT_TIMEOUT_S, WrapArgs, run};
