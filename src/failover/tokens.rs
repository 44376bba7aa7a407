//! How many tokens a request needs, roughly, for the context-window check.

/// A rough token count of the request for the context-window check, meant never to
/// overestimate, so a model is only ever excluded when it surely cannot fit: four characters
/// per token for alphabetic text, and one per character for Chinese, Japanese and Korean
/// (their tokenizers give about one token per character or more; four per token was 2.5× low
/// for a Chinese report).
pub fn estimate_tokens(prompt: &str) -> u64 {
    let (cjk, other) = prompt.chars().fold((0usize, 0usize), |(cjk, other), c| {
        if is_cjk(c) {
            (cjk + 1, other)
        } else {
            (cjk, other + 1)
        }
    });
    u64::try_from(cjk.saturating_add(other.div_ceil(4))).unwrap_or(u64::MAX)
}

/// Han, kana, Hangul and the CJK punctuation and full-width forms that come with them.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{2E80}'..='\u{2FDF}'     // radicals
        | '\u{3000}'..='\u{30FF}'   // CJK punctuation, hiragana, katakana
        | '\u{3100}'..='\u{31FF}'   // bopomofo, kana extensions
        | '\u{3400}'..='\u{4DBF}'   // Han extension A
        | '\u{4E00}'..='\u{9FFF}'   // Han
        | '\u{AC00}'..='\u{D7AF}'   // Hangul syllables
        | '\u{F900}'..='\u{FAFF}'   // compatibility ideographs
        | '\u{FF00}'..='\u{FFEF}'   // full-width forms
        | '\u{20000}'..='\u{3134F}' // Han extensions B–G
    )
}
