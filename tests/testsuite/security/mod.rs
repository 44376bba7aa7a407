//! Hostile inputs and processes, secrets that must never leak, and running on untrusted
//! documents.

mod inputs;
mod secrets;
mod untrusted_documents;
