//! Secret masking and truncation for every error that is printed or stored. Pure.
//! PLACEHOLDER: replaced by the full rule set.

/// Masks secrets, removes control characters and caps the length.
pub fn redact(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(400).collect()
}
