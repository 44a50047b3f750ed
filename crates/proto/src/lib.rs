//! nyx5-proto: the Nyx5/1 protocol as data and pure functions.
//!
//! No I/O, no clock and no randomness of its own: callers pass `now` and an [`crypto::Entropy`].
#![forbid(unsafe_code)]

pub mod address;
pub mod b64;
pub mod crypto;
pub mod error;
pub mod json;
pub mod limits;
pub mod time;

pub use address::Address;
pub use error::{Error, ErrorKind};
pub use json::{Object, Value};
pub use time::Timestamp;
