//! A job's `--output-schema` (or batch `schema` field): the file as the user named it and the
//! schema it compiled to, shared by every job that names it. Loading reads the file (a
//! regular file, bounded; see `schema::load`), once per file per batch.

use std::sync::Arc;

use crate::schema::{Schema, SchemaError};

/// A schema in force for a job.
#[derive(Debug, Clone)]
pub struct OutputSchema {
    /// The path as given (for messages, `--explain` and `--json`).
    pub file: String,
    pub schema: Arc<Schema>,
}

/// A schema file that cannot be used: which file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSchema {
    pub file: String,
    pub error: SchemaError,
}

impl std::fmt::Display for BadSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            crate::redact::printable(&self.file),
            self.error
        )
    }
}

impl std::error::Error for BadSchema {}

impl OutputSchema {
    /// Reads and compiles `file` (relative paths from the working directory).
    pub fn load(file: &str) -> Result<OutputSchema, BadSchema> {
        Schema::read(std::path::Path::new(file))
            .map(|schema| OutputSchema {
                file: file.to_string(),
                schema: Arc::new(schema),
            })
            .map_err(|error| BadSchema {
                file: file.to_string(),
                error,
            })
    }
}

/// The schemas a batch's jobs named, loaded once each; the most recent few are kept (a job
/// file may name any number of schema files; memory must not grow with them).
#[derive(Debug, Default)]
pub struct SchemaCache {
    loaded: std::collections::VecDeque<Result<OutputSchema, BadSchema>>,
}

/// How many schema files a batch keeps compiled at once.
const KEPT: usize = 16;

impl SchemaCache {
    /// The schema in `file`, loaded now unless it was lately.
    pub fn get(&mut self, file: &str) -> Result<OutputSchema, BadSchema> {
        let name = |r: &Result<OutputSchema, BadSchema>| match r {
            Ok(s) => s.file == file,
            Err(b) => b.file == file,
        };
        if let Some(hit) = self.loaded.iter().find(|r| name(r)) {
            return hit.clone();
        }
        let loaded = OutputSchema::load(file);
        if self.loaded.len() == KEPT {
            self.loaded.pop_front();
        }
        self.loaded.push_back(loaded.clone());
        loaded
    }
}
