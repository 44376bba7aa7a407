//! `--output-schema FILE`: answers that must be one JSON value validating against a JSON Schema.
//!
//! - `load` reads and compiles a schema file once (draft 2020-12 by default; 2019-09, 7, 6 and
//!   4 by their `$schema`), refusing what cannot work before anything is sent: a missing or
//!   oversized file, text that is not JSON, a document that is not a valid schema, a reference
//!   outside the file (nothing is ever fetched, from the network or the disk), a pattern the
//!   linear-time regex engine cannot run, and a schema proven to accept no value.
//! - `extract` turns an answer into the JSON text it must be: the whole answer, or the inside
//!   of one fenced code block around it, checked against [`limits`] in one pass over the bytes
//!   before anything is parsed, so no answer can make parsing or validation deep or large.
//! - `check` validates the value and words what is wrong as a short, bounded list of errors
//!   (the re-ask sends it back to the model; `--json` shows it); `prompt` words how the schema
//!   is told to the model and how the model is asked again.
//!
//! Everything but reading the file is pure: no clock, no environment, no printing.

pub mod bounded;
pub mod check;
pub mod extract;
pub mod limits;
pub mod load;
pub mod prompt;

pub use check::{Conforming, check};
pub use extract::Rejection;
pub use load::{Schema, SchemaError};

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
