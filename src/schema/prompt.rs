//! How a schema is told to the model, and how a model whose answer did not conform is asked
//! once more. The schema goes at the end of the prompt message (after the attachments and the
//! prompt), so it is the same for every model, every Pi profile and every job of a batch: a
//! system prompt would need a Pi of its own per schema. Pure.

use super::load::Schema;

/// Where the schema is told, for `--explain`.
pub const HOW_TOLD: &str = "appended to the prompt: an instruction to answer with one JSON value \
that validates, and the schema itself (compact JSON)";

/// The prompt message with the schema's instruction after it.
pub fn with_instruction(message: &str, schema: &Schema) -> String {
    format!(
        "{message}\n\n{}\n{}",
        instruction(schema.draft_name()),
        schema.text()
    )
}

/// The instruction before the schema.
fn instruction(draft: &str) -> String {
    format!(
        "Answer with exactly one JSON value that validates against the JSON Schema (draft \
         {draft}) below, and nothing else: no text before or after it (one ```json fenced block \
         around it is accepted). The schema:"
    )
}

/// How a second ask begins (a fork past it recognises it by this).
pub const REASK_HEAD: &str = "Your answer does not conform to the JSON Schema given above.";

/// The second ask, in the same conversation, after an answer that did not conform: what was
/// wrong (a short list), and what to do.
pub fn reask(errors: &[String]) -> String {
    let mut text = format!("{REASK_HEAD} What is wrong with it:\n");
    for e in errors {
        text.push_str("- ");
        text.push_str(e);
        text.push('\n');
    }
    text.push_str(
        "Answer again with only the corrected JSON value, and nothing else (no explanation).",
    );
    text
}
