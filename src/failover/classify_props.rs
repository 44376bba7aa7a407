//! Random-input tests of the classifier: adversarial UTF-8 around the markers never panics,
//! neutral text around a real provider error never changes its class, the linear-time searches
//! find what the plain ones found, and long texts cost little.

use std::sync::OnceLock;

use proptest::prelude::*;

use super::*;

fn classify_text(error_message: &str) -> Classification {
    classify(&Observation {
        error_message,
        stop_reason: "error",
        ..Observation::default()
    })
}

/// Every marker string, first and second parts alike, plus the ignored phrases.
fn marker_strings() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = IGNORED.to_vec();
    let lists = RULES
        .iter()
        .map(|r| r.markers)
        .chain([NOT_CONTEXT, OVERLOAD_ON_4XX]);
    for list in lists {
        for m in list {
            match *m {
                Sub(s) | Word(s) => out.push(s),
                Near(first, seconds, _) => {
                    out.push(first);
                    out.extend(seconds);
                }
            }
        }
    }
    out
}

/// Text that is evidence of nothing: no ASCII letter or digit, nothing a marker begins or ends
/// with (see the test below). Chosen
/// to be awkward: multi-byte, case-changing outside ASCII (İ, ẞ, Kelvin K, long s, the ﬀ
/// ligature), combining marks, right-to-left text and overrides, joiners, emoji, NUL.
const NEUTRAL: &[&str] = &[
    " ",
    "\t",
    "\n",
    "。",
    "，",
    "、",
    "!",
    "(",
    ")",
    "{",
    "}",
    "\"",
    "'",
    "é",
    "ß",
    "İ",
    "ẞ",
    "\u{212a}",
    "ſ",
    "ﬀ",
    "Ω",
    "ж",
    "ب",
    "א",
    "\u{301}",
    "\u{308}",
    "\u{202e}",
    "\u{200f}",
    "\u{200d}",
    "\u{feff}",
    "😀",
    "👩\u{200d}💻",
    "🇫🇷",
    "\u{0}",
    "日",
    "本",
    "雨",
    "猫",
];

/// So no marker can start or end inside neutral text glued to a message, and no word marker
/// can lose its word boundary to it.
#[test]
fn neutral_text_cannot_begin_or_end_a_marker() {
    let neutral: Vec<char> = NEUTRAL.iter().flat_map(|p| p.chars()).collect();
    assert!(neutral.iter().all(|c| !c.is_ascii_alphanumeric()));
    for m in marker_strings() {
        let ends = [m.chars().next(), m.chars().last()];
        let hit = ends.iter().flatten().find(|c| neutral.contains(c));
        assert!(hit.is_none(), "{m:?} begins or ends with {hit:?}");
    }
}

/// Strings made of the given pieces, picked by random words (fast to generate and shrink).
fn made_of(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<u16>(), 0..max).prop_map(move |picks| {
        picks
            .iter()
            .map(|&p| pieces[usize::from(p) % pieces.len()])
            .collect()
    })
}

fn neutral() -> impl Strategy<Value = String> {
    made_of(NEUTRAL, 12)
}

/// Marker parts, status shapes, link schemes and awkward chars, for text where a panic would
/// hide: offsets near multi-byte chars, markers cut or doubled, links inside links.
const PIECES: &[&str] = &[
    "402",
    "429: ",
    "503 ",
    "error (",
    "): ",
    "API error: ",
    "{\"error\":{\"code\":",
    "got status: ",
    ". ",
    "quota",
    "QUOTA",
    "insufficient_quota",
    "rate limit",
    "Rate-Limit",
    "余额不足",
    "token",
    "非法",
    "api key",
    "API_KEY",
    "expired",
    "account",
    "suspended",
    "violat",
    "polic",
    "blocked by",
    "safety",
    "monthly",
    "limit",
    "stopped with:",
    "sensitive",
    "安全策略",
    "拦截",
    "dns",
    "tls",
    "context window",
    "check quota",
    "https://",
    "http://",
    "x.y/billing",
    "_",
    "-",
    " ",
    "1",
    "é",
    "İ",
    "ẞ",
    "\u{212a}",
    "\u{301}",
    "\u{202e}",
    "😀",
    "日",
    "\u{0}",
    "\u{10ffff}",
];

/// The link blanking before it skipped links inside links (the reference for the new one).
fn normalise_reference(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut in_url = vec![false; lower.len()];
    for scheme in ["https://", "http://"] {
        for (start, _) in lower.match_indices(scheme) {
            let len = lower[start..]
                .find(|c: char| !is_url_char(c))
                .unwrap_or(lower.len() - start);
            in_url[start..start + len].fill(true);
        }
    }
    let mut out: String = lower
        .char_indices()
        .map(|(i, c)| match c {
            _ if in_url[i] => ' ',
            '_' | '-' => ' ',
            c => c,
        })
        .collect();
    for phrase in IGNORED {
        out = out.replace(phrase, &" ".repeat(phrase.len()));
    }
    out
}

/// `Near` as it was before its search was limited to a window (the reference).
fn near_reference(norm: &str, first: &str, seconds: &[&str], gap: usize) -> Option<(usize, usize)> {
    norm.match_indices(first).find_map(|(i, _)| {
        let from = i + first.len();
        let rest = &norm[from..];
        seconds
            .iter()
            .filter_map(|s| rest.find(s).map(|j| (j, s.len())))
            .filter(|&(j, _)| rest[..j].chars().count() <= gap)
            .min_by_key(|&(j, _)| j)
            .map(|(j, len)| (i, from + j + len))
    })
}

/// The error corpus in `fixtures/errors` (name, message), read once.
fn fixtures() -> &'static [(String, String)] {
    static CORPUS: OnceLock<Vec<(String, String)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/errors");
        let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("fixtures/errors")
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "txt"))
            .map(|p| {
                let raw = std::fs::read_to_string(&p).expect("a fixture");
                let name = p
                    .file_name()
                    .expect("a name")
                    .to_string_lossy()
                    .into_owned();
                (name, raw.strip_suffix('\n').unwrap_or(&raw).to_string())
            })
            .collect();
        out.sort();
        out
    })
}

/// One fixture, by any index.
fn known(i: usize) -> (&'static str, &'static str) {
    let all = fixtures();
    let (name, text) = &all[i % all.len()];
    (name, text)
}

#[track_caller]
fn same_verdict(a: &Classification, b: &Classification, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        (a.class, a.scope, a.status, a.matched.as_str()),
        (b.class, b.scope, b.status, b.matched.as_str()),
        "{}",
        what
    );
    Ok(())
}

/// `İ` and `ẞ` change length under Unicode lower-casing; here they must not matter at all.
#[test]
fn case_changing_letters_next_to_markers() {
    for (text, class, matched) in [
        ("İquotaİ", FailureClass::Quota, "quota"),
        ("ẞ402: x", FailureClass::Unknown, "unrecognised"),
        ("402: İẞ\u{212a}", FailureClass::Quota, "status 402"),
        ("\u{212a}rate_limitẞ", FailureClass::RateLimit, "rate_limit"),
        ("余额不足\u{301}", FailureClass::Quota, "余额不足"),
        ("\u{202e}DNS\u{202c} lookup", FailureClass::Endpoint, "dns"),
        ("api keyİ无效", FailureClass::Auth, "api keyİ无效"),
        ("api key 无效", FailureClass::Auth, "api key 无效"),
    ] {
        let c = classify_text(text);
        assert_eq!((c.class, c.matched.as_str()), (class, matched), "{text}");
    }
}

/// Found by measuring: a message full of a `Near` marker's first part searched the whole rest
/// of the text after each one (120 KB of "token " took 9 s in a debug build).
#[test]
fn many_near_firsts_cost_linear_time() {
    let text = "token account monthly api key ".repeat(2_000);
    assert!(text.len() < MAX_CLASSIFIED);
    within_a_second(|| {
        assert_eq!(classify_text(&text).class, FailureClass::Unknown);
    });
    let found = format!("{text} token 无效");
    within_a_second(|| {
        let c = classify_text(&found);
        assert_eq!(
            (c.class, c.matched.as_str()),
            (FailureClass::Auth, "token 无效")
        );
    });
}

/// Found by measuring: each `https://` of `https://https://…` blanked to the end of the
/// text again (64 KB took 50 s in a debug build).
#[test]
fn links_inside_links_cost_linear_time() {
    let text = "https://".repeat(8_000);
    within_a_second(|| {
        assert_eq!(normalise(&text), " ".repeat(text.len()));
    });
}

/// A huge body (an HTML error page, an echoed prompt) is searched only at its start.
#[test]
fn only_the_start_of_a_huge_message_is_searched() {
    let pad = "é".repeat(MAX_CLASSIFIED); // two bytes each: the cut falls inside one
    let early = format!("503 overloaded {pad}");
    let late = format!("{pad} rate limit");
    within_a_second(|| {
        let c = classify_text(&early);
        assert_eq!(
            (c.class, c.matched.as_str()),
            (FailureClass::Endpoint, "status 503")
        );
        let c = classify_text(&late);
        assert_eq!(
            (c.class, c.matched.as_str()),
            (FailureClass::Unknown, "unrecognised")
        );
    });
    assert_eq!(head("aé", 2), "a");
    assert_eq!(head("aé", 3), "aé");
    assert_eq!(head("", 5), "");
}

#[expect(
    clippy::disallowed_methods,
    reason = "a test's bound on time, not the product's clock"
)]
#[track_caller]
fn within_a_second(f: impl FnOnce()) {
    let start = std::time::Instant::now();
    f();
    let took = start.elapsed();
    // Linear work here takes milliseconds; the quadratic versions took many seconds.
    assert!(took < std::time::Duration::from_secs(3), "took {took:?}");
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    /// Marker-rich text with multi-byte and case-changing chars anywhere: no panic, offsets of
    /// the normalised copy are offsets of the original, and the quote is a piece of the text.
    #[test]
    fn adversarial_text_never_panics(text in made_of(PIECES, 40)) {
        let norm = normalise(&text);
        prop_assert_eq!(norm.len(), text.len());
        for i in 0..=text.len() {
            prop_assert_eq!(norm.is_char_boundary(i), text.is_char_boundary(i), "at {}", i);
        }
        let c = classify_text(&text);
        if c.class != FailureClass::Unknown && !c.matched.starts_with("status ") {
            prop_assert!(
                text.to_ascii_lowercase().contains(&c.matched),
                "{:?} not in {:?}",
                c.matched,
                text
            );
        }
    }

    #[test]
    fn any_string_never_panics(text in any::<String>()) {
        let c = classify_text(&text);
        prop_assert!(!c.matched.is_empty());
        prop_assert_eq!(normalise(&text).len(), text.len());
    }

    /// The linear-time link blanking and `Near` search give what the plain ones gave.
    #[test]
    fn linear_searches_find_what_the_plain_ones_found(text in made_of(PIECES, 40)) {
        let norm = normalise(&text);
        prop_assert_eq!(&norm, &normalise_reference(&text));
        let nears = RULES.iter().flat_map(|r| r.markers).filter_map(|m| match *m {
            Near(first, seconds, gap) => Some((first, seconds, gap)),
            _ => None,
        });
        for (first, seconds, gap) in nears {
            prop_assert_eq!(
                find(&norm, Near(first, seconds, gap)),
                near_reference(&norm, first, seconds, gap),
                "{}",
                first
            );
        }
    }

    /// Neutral text after a real provider error never changes the verdict.
    #[test]
    fn appended_neutral_text_keeps_the_verdict(i in any::<usize>(), tail in neutral()) {
        let (name, text) = known(i);
        same_verdict(&classify_text(&format!("{text}{tail}")), &classify_text(text), name)?;
    }

    /// Neutral text before one: whitespace keeps any verdict; other text keeps the verdict of a
    /// message whose status is not read from its start anyway.
    #[test]
    fn prepended_neutral_text_keeps_the_verdict(
        i in any::<usize>(),
        lead in neutral(),
        blank in made_of(&[" ", "\t", "\n"], 4),
    ) {
        let (name, text) = known(i);
        let verdict = classify_text(text);
        same_verdict(&classify_text(&format!("{blank}{text}")), &verdict, name)?;
        if status_prefix(text).is_none() {
            same_verdict(&classify_text(&format!("{lead}{text}")), &verdict, name)?;
        }
    }

    /// A marker with awkward chars glued to either side still means the same.
    #[test]
    fn markers_glued_to_multibyte_text_still_count(
        which in any::<prop::sample::Index>(),
        lead in neutral(),
        tail in neutral(),
    ) {
        const GLUED: &[&str] = &[
            "quota", "Insufficient_Quota", "余额不足", "rate limit", "RATE-LIMIT", "限流",
            "context window", "上下文长度", "invalid api key", "鉴权", "敏感词", "content_filter",
            "overloaded", "超时", "dns", "model not found", "模型不存在", "account was suspended",
            "stopped with: SAFETY",
        ];
        let marker = GLUED[which.index(GLUED.len())];
        let alone = classify_text(marker);
        prop_assert_ne!(alone.class, FailureClass::Unknown);
        let glued = format!("{lead}{marker}{tail}");
        same_verdict(&classify_text(&glued), &alone, &glued)?;
        // A status is read from the start only; what follows it does not matter.
        for status in ["402: ", "429 "] {
            let with = format!("{status}{tail}");
            prop_assert_eq!(classify_text(&with).status, status_prefix(status));
        }
    }
}
