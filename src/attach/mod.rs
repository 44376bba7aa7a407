//! `@path` attachments. The only reads of user input files.

pub mod image;
