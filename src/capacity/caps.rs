//! `--max-inflight PROVIDER=N[,PROVIDER=N…]` (and `CCSWITCH_MAX_INFLIGHT`): the most requests
//! a provider may have in flight, from the user who knows the plan. Pure.

use std::collections::BTreeMap;

use super::MAX_LIMIT;

/// Parses `text` (`zhipu=3,dashscope=2`; blanks around the parts are allowed). An empty part,
/// a missing `=`, an empty provider, a count that is not a whole number from 1 to
/// [`MAX_LIMIT`], or a provider named twice is an error that names the part.
pub fn parse_caps(text: &str) -> Result<BTreeMap<String, u32>, String> {
    let mut caps = BTreeMap::new();
    for item in crate::provider_list::items(text) {
        let part = item.text.trim();
        let (Some(provider), count) = (item.provider, item.value) else {
            return Err(format!(
                "'{part}' is not PROVIDER=N (e.g. zhipu=3)",
                part = crate::redact::printable(part)
            ));
        };
        let (provider, count) = (provider.trim(), count.trim());
        if provider.is_empty() {
            return Err(format!(
                "'{}' names no provider",
                crate::redact::printable(part)
            ));
        }
        let n = match count.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(format!(
                    "'{}': the count must be a whole number from 1 to {MAX_LIMIT}",
                    crate::redact::printable(part)
                ));
            }
        };
        if caps.insert(provider.to_string(), n).is_some() {
            return Err(format!(
                "provider '{}' is named twice",
                crate::redact::printable(provider)
            ));
        }
    }
    Ok(caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_and_bad_ones_name_the_part() {
        let caps = parse_caps(" zhipu=3, dashscope = 2 ").unwrap();
        assert_eq!(caps.get("zhipu"), Some(&3));
        assert_eq!(caps.get("dashscope"), Some(&2));
        for (bad, says) in [
            ("", "'' is not PROVIDER=N"),
            ("zhipu", "'zhipu' is not PROVIDER=N"),
            ("zhipu=", "'zhipu=': the count must be"),
            ("zhipu=0", "'zhipu=0': the count must be"),
            ("zhipu=-1", "'zhipu=-1': the count must be"),
            ("zhipu=1.5", "'zhipu=1.5': the count must be"),
            ("zhipu=x", "'zhipu=x': the count must be"),
            ("zhipu=257", "from 1 to 256"),
            ("=3", "'=3' names no provider"),
            ("a=1,,b=2", "'' is not PROVIDER=N"),
            ("a=1,a=2", "provider 'a' is named twice"),
        ] {
            let e = parse_caps(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_fails_without_panic(text in "\\PC{0,40}") {
            let _ = parse_caps(&text);
        }
    }
}
