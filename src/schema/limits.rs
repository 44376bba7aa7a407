//! The bounds that keep schemas and answers cheap, whatever a file or a model holds. Checked
//! before parsing, so parsing and validation never see more than this.

/// The largest schema file read (it is also sent to the model with every prompt).
pub const MAX_SCHEMA_BYTES: u64 = 256 * 1024;

/// The largest answer read as JSON: past this the answer does not conform, unparsed.
pub const MAX_ANSWER_BYTES: usize = 2 * 1024 * 1024;

/// The deepest nesting of arrays and objects in an answer (serde_json's own limit, 128, is
/// never reached: a value this deep is refused by the scan first).
pub const MAX_DEPTH: usize = 64;

/// The most values (counted as containers, commas and the first value, an upper bound) in an
/// answer: what the parsed tree and the validator's walk over it may cost.
pub const MAX_VALUES: usize = 200_000;

/// Up to this many values the validator lists every error (then the first few are kept); past
/// it only the first error is looked for, so a large wrong answer cannot build a large list.
pub const FULL_REPORT_VALUES: usize = 10_000;

/// The most validation errors reported (to the model in the re-ask, and in `--json`).
pub const MAX_ERRORS: usize = 5;

/// The longest one error is worded (an error quotes the value it is about).
pub const MAX_ERROR_CHARS: usize = 200;
