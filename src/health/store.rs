//! The shared health state file: lock, atomic replace, merge, quarantine. Only state-dir I/O.
//! PLACEHOLDER: replaced by the health issue.
