//! servelab-core: the Rust half of servelab.
//!
//! Plain Rust, tested with `cargo test` without Python. The Python bindings live in `py/`
//! only, behind the `python` cargo feature that maturin switches on.

pub mod blocks;
pub mod cost;
pub mod error;
pub mod sim;

#[cfg(feature = "python")]
mod py;
