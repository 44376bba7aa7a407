//! `--task-complexity` → Pi thinking level. Pure: no I/O, no clock, no environment.
//!
//! Owns the `auto` estimate and the precedence rule between `--thinking` and
//! `--task-complexity`. It never talks to Pi; the caller forwards the level it returns (Pi clamps
//! it to what the model supports).
//!
//! ## Precedence
//!
//! - `--thinking L` given: `L` is used as is, `--task-complexity` is ignored.
//! - `--task-complexity low|medium|high`: that level.
//! - `--task-complexity auto`: the estimate below.
//! - neither flag: no level is sent; the model keeps its default reasoning.
//!
//! ## The `auto` estimate
//!
//! Deterministic: the same input always gives the same level. The first rule that matches wins.
//!
//! 1. **high** when any of:
//!    - the whole input (prompt plus attached text files) is at least 20,000 characters
//!      (Unicode characters, not bytes: 20,000 Chinese characters count as 20,000);
//!    - at least 4 images are attached;
//!    - at least 2 text files are attached (several sources);
//!    - the prompt asks for work across several sources (multi-source cue, below).
//! 2. **medium** when any of:
//!    - at least 1 image is attached;
//!    - the prompt asks for a structured summary (summary cue, below).
//! 3. **low** otherwise (short text, no cue).
//!
//! Cues are looked for in the prompt words only, never in attached file contents (a document that
//! happens to contain "compare" does not make the task harder). English cues are matched
//! case-insensitively on whole words (a cue ending in `*` matches any word starting that way, so
//! `summar*` matches "Summary", "summarise", "summarize"; "table" does not match "vegetable");
//! Chinese cues are matched as substrings.
//!
//! | level | English cues | Chinese cues |
//! |---|---|---|
//! | high | `compar*` (compare, comparison), `contrast*`, `synthesi*` (synthesis, synthesise, synthesize), `combin*` (combine), `across`, `cross-referenc*` / `cross referenc*`, `multiple` or `several` followed by `sources`, `documents`, `docs`, `files`, `papers`, `articles` or `reports` | 综合, 对比, 比较一下, 进行比较, 做比较, 作比较, 相比较, 比较分析, 异同, 多个来源, 多方来源, 多份, 多篇, 多个文件, 多个文档, 跨文档, 跨文件, 跨来源, 跨多, 汇总多 |
//! | medium | `summar*` (summary, summarise, summarize), `outline*`, `bullet*` (bullet points), `table`, `tables`, `tabulate`, `tabular`, `report`, `reports`, `tl;dr`, `tldr`, `key points` | 要点, 总结, 摘要, 概括, 提纲, 大纲, 表格, 报告, 汇总, 归纳 |
//!
//! Chinese 比较 alone is not a cue: it is also the everyday adverb "rather" (比较重要 = "rather
//! important"); only its comparing forms above are.

use std::fmt;
use std::str::FromStr;

/// Input length (in characters) from which `auto` picks `high`.
pub const HIGH_INPUT_CHARS: usize = 20_000;
/// Number of images from which `auto` picks `high`.
pub const HIGH_IMAGES: usize = 4;
/// Number of attached text files from which `auto` picks `high` (several sources).
pub const HIGH_FILES: usize = 2;

/// The value of `--task-complexity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Complexity {
    Auto,
    Low,
    Medium,
    High,
}

/// A thinking level this module can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Low,
    Medium,
    High,
}

impl Level {
    /// The spelling Pi's `--thinking` / `set_thinking_level` expects.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Low => "low",
            Level::Medium => "medium",
            Level::High => "high",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Complexity {
    /// Every accepted spelling, in help order.
    pub const VALUES: [&'static str; 4] = ["auto", "low", "medium", "high"];

    pub fn as_str(self) -> &'static str {
        match self {
            Complexity::Auto => "auto",
            Complexity::Low => "low",
            Complexity::Medium => "medium",
            Complexity::High => "high",
        }
    }
}

impl fmt::Display for Complexity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--task-complexity` got a value other than auto, low, medium or high.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseComplexityError {
    value: String,
}

impl fmt::Display for ParseComplexityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid task complexity '{}': use auto, low, medium or high",
            self.value
        )
    }
}

impl std::error::Error for ParseComplexityError {}

impl FromStr for Complexity {
    type Err = ParseComplexityError;

    /// Case-insensitive; surrounding whitespace is not accepted (a shell would have split it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Complexity::Auto),
            "low" => Ok(Complexity::Low),
            "medium" => Ok(Complexity::Medium),
            "high" => Ok(Complexity::High),
            _ => Err(ParseComplexityError {
                value: s.to_owned(),
            }),
        }
    }
}

/// What the estimate looks at. Built by the caller after reading the attachments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signals<'a> {
    /// The prompt words as the user typed them (cues are searched here only).
    pub prompt: &'a str,
    /// Characters of the whole text sent: prompt plus every `<file>` block.
    pub input_chars: usize,
    /// Number of attached text files (`<file>` blocks; skipped empty files not counted).
    pub files: usize,
    /// Number of attached images.
    pub images: usize,
}

impl<'a> Signals<'a> {
    /// Signals for a prompt with no text files: the input is the prompt itself.
    pub fn from_prompt(prompt: &'a str, images: usize) -> Self {
        Signals {
            prompt,
            input_chars: prompt.chars().count(),
            files: 0,
            images,
        }
    }
}

/// The `auto` estimate (rules in the module doc).
pub fn estimate(s: &Signals<'_>) -> Level {
    if s.input_chars >= HIGH_INPUT_CHARS
        || s.images >= HIGH_IMAGES
        || s.files >= HIGH_FILES
        || has_cue(s.prompt, &HIGH_EN, HIGH_ZH)
        || has_multi_source_phrase(s.prompt)
    {
        Level::High
    } else if s.images >= 1 || has_cue(s.prompt, &MEDIUM_EN, MEDIUM_ZH) {
        Level::Medium
    } else {
        Level::Low
    }
}

/// The level for an explicit `--task-complexity` value.
pub fn thinking_level(c: Complexity, s: &Signals<'_>) -> &'static str {
    match c {
        Complexity::Auto => estimate(s).as_str(),
        Complexity::Low => Level::Low.as_str(),
        Complexity::Medium => Level::Medium.as_str(),
        Complexity::High => Level::High.as_str(),
    }
}

/// The thinking level to forward to Pi, if any: an explicit `--thinking` wins, else
/// `--task-complexity`, else `None` (leave the model's default alone).
pub fn effective_thinking<'t>(
    thinking: Option<&'t str>,
    complexity: Option<Complexity>,
    s: &Signals<'_>,
) -> Option<&'t str> {
    match (thinking, complexity) {
        (Some(explicit), _) => Some(explicit),
        (None, Some(c)) => Some(thinking_level(c, s)),
        (None, None) => None,
    }
}

/// An English cue: a whole word, or (`prefix`) any word starting with it. Multi-word cues are
/// consecutive words.
struct Cue {
    words: &'static [&'static str],
    prefix: bool,
}

const fn word(w: &'static [&'static str]) -> Cue {
    Cue {
        words: w,
        prefix: false,
    }
}

const fn stem(w: &'static [&'static str]) -> Cue {
    Cue {
        words: w,
        prefix: true,
    }
}

const HIGH_EN: [Cue; 7] = [
    stem(&["compar"]),
    stem(&["contrast"]),
    stem(&["synthesi"]),
    stem(&["combin"]),
    word(&["across"]),
    // "cross-reference" splits into two words
    stem(&["cross", "referenc"]),
    stem(&["crossreferenc"]),
];

const HIGH_ZH: &[&str] = &[
    "综合",
    "对比",
    "比较一下",
    "进行比较",
    "做比较",
    "作比较",
    "相比较",
    "比较分析",
    "异同",
    "多个来源",
    "多方来源",
    "多份",
    "多篇",
    "多个文件",
    "多个文档",
    "跨文档",
    "跨文件",
    "跨来源",
    "跨多",
    "汇总多",
];

const MEDIUM_EN: [Cue; 12] = [
    stem(&["summar"]),
    stem(&["outline"]),
    stem(&["bullet"]),
    word(&["table"]),
    word(&["tables"]),
    word(&["tabulate"]),
    word(&["tabular"]),
    word(&["report"]),
    word(&["reports"]),
    word(&["tl", "dr"]),
    word(&["tldr"]),
    word(&["key", "points"]),
];

const MEDIUM_ZH: &[&str] = &[
    "要点", "总结", "摘要", "概括", "提纲", "大纲", "表格", "报告", "汇总", "归纳",
];

const MULTI_WORDS: [&str; 2] = ["multiple", "several"];
const SOURCE_WORDS: [&str; 7] = [
    "sources",
    "documents",
    "docs",
    "files",
    "papers",
    "articles",
    "reports",
];

/// Lowercased ASCII words of `text` (runs of ASCII letters and digits). CJK text yields nothing.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

fn has_cue(text: &str, english: &[Cue], chinese: &[&str]) -> bool {
    if chinese.iter().any(|cue| text.contains(cue)) {
        return true;
    }
    let ws = words(text);
    english.iter().any(|cue| {
        ws.windows(cue.words.len()).any(|window| {
            window.iter().zip(cue.words).enumerate().all(|(i, (w, c))| {
                // Only the last word of a stem cue is a prefix; earlier words match whole.
                if cue.prefix && i + 1 == cue.words.len() {
                    w.starts_with(c)
                } else {
                    w == c
                }
            })
        })
    })
}

/// "multiple sources", "several documents", … (the two words adjacent).
fn has_multi_source_phrase(text: &str) -> bool {
    words(text).windows(2).any(|pair| {
        MULTI_WORDS.contains(&pair[0].as_str()) && SOURCE_WORDS.contains(&pair[1].as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(prompt: &str) -> Level {
        estimate(&Signals::from_prompt(prompt, 0))
    }

    #[test]
    fn parses_every_value_case_insensitively() {
        assert_eq!("auto".parse(), Ok(Complexity::Auto));
        assert_eq!("low".parse(), Ok(Complexity::Low));
        assert_eq!("Medium".parse(), Ok(Complexity::Medium));
        assert_eq!("HIGH".parse(), Ok(Complexity::High));
        for v in Complexity::VALUES {
            let c: Complexity = v.parse().unwrap();
            assert_eq!(c.to_string(), v);
        }
    }

    #[test]
    fn rejects_other_values_naming_them() {
        let err = "extreme".parse::<Complexity>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid task complexity 'extreme': use auto, low, medium or high"
        );
        assert!("".parse::<Complexity>().is_err());
        assert!(" low".parse::<Complexity>().is_err());
    }

    #[test]
    fn short_text_is_low() {
        assert_eq!(auto("what is 2+2?"), Level::Low);
        assert_eq!(auto(""), Level::Low);
        assert_eq!(auto("修复这个函数的错误"), Level::Low);
    }

    #[test]
    fn input_length_edge_counts_characters() {
        let below = "a".repeat(HIGH_INPUT_CHARS - 1);
        let at = "a".repeat(HIGH_INPUT_CHARS);
        assert_eq!(auto(&below), Level::Low);
        assert_eq!(auto(&at), Level::High);
        // 19,999 three-byte characters are ~60,000 bytes but still below the threshold.
        let zh_below = "字".repeat(HIGH_INPUT_CHARS - 1);
        assert!(zh_below.len() > HIGH_INPUT_CHARS);
        assert_eq!(auto(&zh_below), Level::Low);
        assert_eq!(auto(&"字".repeat(HIGH_INPUT_CHARS)), Level::High);
    }

    #[test]
    fn input_chars_include_attached_text() {
        let s = Signals {
            prompt: "fix it",
            input_chars: HIGH_INPUT_CHARS,
            files: 1,
            images: 0,
        };
        assert_eq!(estimate(&s), Level::High);
        let s = Signals {
            input_chars: HIGH_INPUT_CHARS - 1,
            ..s
        };
        assert_eq!(estimate(&s), Level::Low);
    }

    #[test]
    fn image_count_edges() {
        let at = |n| estimate(&Signals::from_prompt("describe", n));
        assert_eq!(at(0), Level::Low);
        assert_eq!(at(1), Level::Medium);
        assert_eq!(at(3), Level::Medium);
        assert_eq!(at(4), Level::High);
        assert_eq!(at(20), Level::High);
    }

    #[test]
    fn file_count_edges() {
        let at = |files| {
            estimate(&Signals {
                prompt: "fix the bug",
                input_chars: 100,
                files,
                images: 0,
            })
        };
        assert_eq!(at(0), Level::Low);
        assert_eq!(at(1), Level::Low);
        assert_eq!(at(2), Level::High);
    }

    #[test]
    fn every_english_high_cue() {
        for p in [
            "compare these two approaches",
            "a comparison of A and B",
            "Contrast the designs",
            "synthesis of the findings",
            "Synthesise the notes",
            "synthesize the notes",
            "combine the results",
            "look across the codebase",
            "cross-reference the logs",
            "cross reference the logs",
            "crossreference them",
            "use multiple sources",
            "read several documents",
            "merge multiple files",
            "these several papers",
            "multiple docs",
            "several articles",
            "multiple reports",
        ] {
            assert_eq!(auto(p), Level::High, "{p}");
        }
    }

    #[test]
    fn every_chinese_high_cue() {
        for cue in HIGH_ZH {
            assert_eq!(auto(&format!("请{cue}这些材料")), Level::High, "{cue}");
        }
        assert_eq!(auto("综合分析这些数据"), Level::High);
        assert_eq!(auto("跨多个仓库查找"), Level::High);
        assert_eq!(auto("汇总多份周报"), Level::High);
    }

    #[test]
    fn every_english_medium_cue() {
        for p in [
            "summary please",
            "Summarise this",
            "summarize this",
            "SUMMARIZATION of the text",
            "outline the chapter",
            "give me bullet points",
            "bulleted list",
            "put it in a table",
            "two tables",
            "tabulate the data",
            "tabular form",
            "write a report",
            "weekly reports",
            "tl;dr",
            "TLDR",
            "the key points",
        ] {
            assert_eq!(auto(p), Level::Medium, "{p}");
        }
    }

    #[test]
    fn every_chinese_medium_cue() {
        for cue in MEDIUM_ZH {
            assert_eq!(auto(&format!("请给出{cue}")), Level::Medium, "{cue}");
        }
    }

    #[test]
    fn cues_are_case_insensitive() {
        assert_eq!(auto("COMPARE"), Level::High);
        assert_eq!(auto("CoMbInE"), Level::High);
        assert_eq!(auto("MULTIPLE SOURCES"), Level::High);
        assert_eq!(auto("Cross-Reference"), Level::High);
        assert_eq!(auto("SUMMARY"), Level::Medium);
        assert_eq!(auto("Table"), Level::Medium);
        assert_eq!(auto("Key Points"), Level::Medium);
    }

    #[test]
    fn cues_need_whole_words() {
        assert_eq!(auto("I like vegetables"), Level::Low);
        assert_eq!(auto("a comfortable chair"), Level::Low);
        assert_eq!(auto("the reporter said"), Level::Low);
        assert_eq!(auto("multiple choices"), Level::Low);
        assert_eq!(auto("several sources"), Level::High);
        assert_eq!(auto("acrossing"), Level::Low);
        // 比较 alone is the adverb "rather"
        assert_eq!(auto("这个问题比较重要"), Level::Low);
    }

    #[test]
    fn cues_in_attached_files_do_not_count() {
        let s = Signals {
            prompt: "fix the typo",
            input_chars: 500,
            files: 1,
            images: 0,
        };
        assert_eq!(estimate(&s), Level::Low);
    }

    #[test]
    fn high_beats_medium() {
        assert_eq!(auto("summarise and compare"), Level::High);
        assert_eq!(
            estimate(&Signals::from_prompt("summary", HIGH_IMAGES)),
            Level::High
        );
    }

    #[test]
    fn explicit_levels_ignore_the_input() {
        let long = "a".repeat(HIGH_INPUT_CHARS);
        let s = Signals::from_prompt(&long, 10);
        assert_eq!(thinking_level(Complexity::Low, &s), "low");
        assert_eq!(thinking_level(Complexity::Medium, &s), "medium");
        assert_eq!(thinking_level(Complexity::Auto, &s), "high");
        let s = Signals::from_prompt("hi", 0);
        assert_eq!(thinking_level(Complexity::High, &s), "high");
        assert_eq!(thinking_level(Complexity::Auto, &s), "low");
    }

    #[test]
    fn explicit_thinking_wins_and_no_flag_changes_nothing() {
        let s = Signals::from_prompt("compare", 0);
        assert_eq!(
            effective_thinking(Some("minimal"), Some(Complexity::High), &s),
            Some("minimal")
        );
        assert_eq!(effective_thinking(Some("xhigh"), None, &s), Some("xhigh"));
        assert_eq!(
            effective_thinking(None, Some(Complexity::Auto), &s),
            Some("high")
        );
        assert_eq!(effective_thinking(None, None, &s), None);
    }
}
