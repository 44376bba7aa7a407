//! The one reader of `PROVIDER=VALUE[,PROVIDER=VALUE…]` lists (`--max-inflight`,
//! `CCSWITCH_MAX_INFLIGHT`, `--max-cost`): comma-separated items, each `PROVIDER=VALUE` split
//! at its first `=`, or a bare `VALUE` where the flag allows one. Blanks around an item, a
//! provider or a value are never part of it, for every flag alike (`zai = 5, 20`); what a
//! value may be is each flag's own rule (see `capacity::caps` and `budget`). Pure.

/// One item of a list, with the text it was read from (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListItem<'a> {
    /// The item as written, without the blanks around it.
    pub text: &'a str,
    /// The part before the first `=`; `None` for a bare value.
    pub provider: Option<&'a str>,
    pub value: &'a str,
}

/// The items of `list`, in order (an empty list has one empty item).
pub fn items(list: &str) -> impl Iterator<Item = ListItem<'_>> {
    list.split(',')
        .map(str::trim)
        .map(|text| match text.split_once('=') {
            Some((provider, value)) => ListItem {
                text,
                provider: Some(provider.trim()),
                value: value.trim(),
            },
            None => ListItem {
                text,
                provider: None,
                value: text,
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_split_at_commas_then_at_the_first_equals() {
        let got: Vec<_> = items("20,zai=5, a = b=c,").collect();
        assert_eq!(
            got,
            [
                ListItem {
                    text: "20",
                    provider: None,
                    value: "20"
                },
                ListItem {
                    text: "zai=5",
                    provider: Some("zai"),
                    value: "5"
                },
                ListItem {
                    text: "a = b=c",
                    provider: Some("a"),
                    value: "b=c"
                },
                ListItem {
                    text: "",
                    provider: None,
                    value: ""
                },
            ]
        );
    }
}
