//! The command line as a public interface: arguments and their errors, and the generated
//! completions and man page.

mod args;
mod completions;
