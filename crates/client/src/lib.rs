//! nyx5-client: an agent's side of Nyx5 over `nyx5-proto` and `nyx5-rules` (issue 37 §6). The
//! one resolver and the trust rules it applies, the outbound policy, the hosts file and the
//! network port, shared by the house (`nyx5-house` re-exports them), the `nyx5` command's agent
//! verbs and the browser (`nyx5-web`, which calls [`trust`]); and the verbs' own steps, the same
//! for the command and the browser: sealing and signing a send ([`send`]), a mail's verdict
//! ([`inbox`]), a Libro operation and its receipt ([`libro`]), the profile's format and its
//! outbox's records ([`profile`]), the rules of the mail kept on the agent's side: threads and
//! search ([`kept`]); and what a client keeps between runs, over the storage port
//! ([`store`]): kept cards ([`cards`]), the profile's pins and the resolver's store over them
//! ([`pins`]), the bookmarks ([`bookmark`]). No engine, database, runtime or HTTP client: the
//! caller supplies the transport ([`ports::Net`]) and the storage ([`store::Store`]: the CLI's
//! files, a test's memory).
#![forbid(unsafe_code)]

pub mod asks;
pub mod attach;
pub mod bookmark;
pub mod cards;
pub mod hosts;
pub mod inbox;
pub mod kept;
pub mod libro;
pub mod outbound;
pub mod pins;
pub mod ports;
pub mod profile;
pub mod resolver;
pub mod send;
pub mod site;
pub mod store;
pub mod trust;
pub mod weburl;
