//! nyx5-house: the house engine; arrives with the house issue.
#![forbid(unsafe_code)]
