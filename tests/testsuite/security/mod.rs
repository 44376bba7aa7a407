//! Hostile inputs and processes, secrets that must never leak, and running on untrusted
//! documents.

mod answers;
mod escaped_tools;
mod hidden_keys;
mod inputs;
mod planted_files;
mod secrets;
mod untrusted_documents;
