//! What a model's answer text is before anyone sees it: whether it says anything at all, and a
//! form that is safe to put on a terminal. Pure: no I/O (whether stdout is a terminal is the
//! caller's question, `output`'s).

/// An answer that shows nothing: only whitespace, control characters (NUL), zero-width
/// characters or byte-order marks. Such an answer is empty (exit 2), as a whitespace-only one
/// always was: `U+200B` alone is no more an answer than a space (issue 29).
pub fn is_blank(text: &str) -> bool {
    text.chars().all(|c| {
        c.is_whitespace()
            || c.is_control()
            || matches!(
                c,
                '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' | '\u{feff}' | '\u{00ad}'
            )
    })
}

/// The answer for a terminal: escape sequences (CSI `ESC [ …`, OSC `ESC ] … BEL/ST` such as
/// window titles and hyperlinks, DCS/APC/PM/SOS strings, and two-byte `ESC x`) are dropped,
/// and so are other control characters but line feed and tab; a CR before LF is kept as the
/// line end, a lone CR (which would let later text overwrite earlier text) is dropped. A model
/// (or a document it was fed) must not be able to move the cursor, recolour, retitle or clear
/// the user's terminal, or hide text on it. Output to a pipe or file is left as it is.
pub fn for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\u{1b}' => skip_escape(&mut chars),
            // C1 introducers of strings: their body runs to ST.
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\u{9b}' => skip_csi(&mut chars),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After an ESC: the rest of its sequence.
fn skip_escape(chars: &mut Chars<'_>) {
    match chars.peek().copied() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            chars.next();
            skip_string(chars);
        }
        // `ESC (`-style charset selections take one more character.
        Some('(' | ')' | '*' | '+' | '#' | '%') => {
            chars.next();
            chars.next();
        }
        Some(c) if !c.is_control() => {
            chars.next();
        }
        _ => {}
    }
}

/// CSI parameters and intermediates, then its final byte.
fn skip_csi(chars: &mut Chars<'_>) {
    while let Some(&c) = chars.peek() {
        chars.next();
        if ('\u{40}'..='\u{7e}').contains(&c) || !('\u{20}'..='\u{3f}').contains(&c) {
            break;
        }
    }
}

/// A string sequence (OSC, DCS, …) up to BEL or ST (`ESC \` or U+009C). An unterminated one
/// runs to the end: a terminal would swallow it too.
fn skip_string(chars: &mut Chars<'_>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' if chars.peek() == Some(&'\\') => {
                chars.next();
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_answers() {
        for blank in [
            "",
            " ",
            "\n\t",
            "\u{200b}",
            "\0",
            "\u{feff}",
            "\u{feff}\u{200b} \0\n",
            "\u{1b}",
        ] {
            assert!(is_blank(blank), "{blank:?}");
        }
        for text in ["a", "\u{200b}a", "。", "0", "\u{feff}ok"] {
            assert!(!is_blank(text), "{text:?}");
        }
    }

    #[test]
    fn terminal_sequences_are_dropped() {
        let cases = [
            ("plain\ttext\nline", "plain\ttext\nline"),
            ("\u{1b}[31mred\u{1b}[0m", "red"),
            ("\u{1b}]0;owned\u{7}title", "title"),
            ("\u{1b}]8;;http://x\u{1b}\\link\u{1b}]8;;\u{1b}\\", "link"),
            ("a\u{1b}[2J\u{1b}[Hb", "ab"),
            ("rm -rf /\rsafe", "rm -rf /safe"),
            ("crlf\r\nline", "crlf\nline"),
            ("bell\u{7}\u{8}x", "bellx"),
            ("\u{9b}31mc1\u{90}dcs\u{9c}!", "c1!"),
            ("\u{1b}(Bcharset", "charset"),
            ("unterminated \u{1b}]0;title", "unterminated "),
            ("trailing \u{1b}", "trailing "),
            ("中文\u{1b}[1m粗体", "中文粗体"),
        ];
        for (input, want) in cases {
            assert_eq!(for_terminal(input), want, "{input:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn nothing_a_terminal_acts_on_survives(s in "\\PC*|[\\x00-\\x7f\\u{80}-\\u{9f}a-z]{0,64}") {
            let out = for_terminal(&s);
            proptest::prop_assert!(out.chars().all(|c| c == '\n' || c == '\t' || !c.is_control()), "{:?}", out);
            proptest::prop_assert!(out.len() <= s.len());
            proptest::prop_assert_eq!(for_terminal(&out), out.clone());
        }
    }
}
