//! nyx5: the command-line tool.
fn main() {}
