//! Text cut to a length while it is written: a validation error quotes the value it is about,
//! and a value can be megabytes long, so the words are never built whole. Pure.

use std::fmt::{self, Write as _};

/// `value`'s `Display`, cut to `max` characters (an ellipsis marks the cut), on one line.
pub fn display(value: &impl fmt::Display, max: usize) -> String {
    let mut out = CappedText {
        text: String::new(),
        left: max,
        cut: false,
    };
    // The writer refuses past the limit, which ends the formatting early: that is the point.
    let _ = write!(out, "{value}");
    let mut text = out.text;
    if out.cut {
        text.push('…');
    }
    text
}

struct CappedText {
    text: String,
    left: usize,
    cut: bool,
}

impl fmt::Write for CappedText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if self.left == 0 {
                self.cut = true;
                return Err(fmt::Error);
            }
            // One line: a line break (or other control character) in a value is shown escaped.
            if c.is_control() {
                let escaped: String = c.escape_default().collect();
                if escaped.chars().count() > self.left {
                    self.cut = true;
                    return Err(fmt::Error);
                }
                self.left -= escaped.chars().count();
                self.text.push_str(&escaped);
            } else {
                self.left -= 1;
                self.text.push(c);
            }
        }
        Ok(())
    }
}
