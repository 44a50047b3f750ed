//! The Worker adapter; arrives with the Worker issue.
