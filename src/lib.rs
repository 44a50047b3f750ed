//! The Worker package: the workers-rs adapter (wasm32 only: `fetch`, `scheduled` and `email`
//! events onto the house engine over D1 and Workers `fetch`). Natively it builds nothing but its
//! build script's check that `migrations/` and the engine's embedded list agree.

#[cfg(target_arch = "wasm32")]
mod adapter;
