//! Reading Redis replies: bounded reads, lenient decoding (a key of the wrong type or a reply
//! of another shape reads as empty, never as an error), and index sets read page by page up to
//! a cap.

use redis::Value;

use super::layout::{BATCH, MAX_VALUE_BYTES};

/// An `SSCAN` reply as (next cursor, members); anything else (an error for a key of the wrong
/// type) is an empty last page.
pub(super) fn scan_page(v: &Value) -> (u64, Vec<Vec<u8>>) {
    match v {
        Value::Array(parts) => {
            let cursor = parts
                .first()
                .and_then(int)
                .and_then(|c| u64::try_from(c).ok())
                .unwrap_or(0);
            let members = match parts.get(1) {
                Some(Value::Array(items)) => items.iter().map(bytes).collect(),
                _ => Vec::new(),
            };
            (cursor, members)
        }
        _ => (0, Vec::new()),
    }
}

/// `GETRANGE key 0 MAX-1`: a record, bounded (missing keys read as empty).
pub(super) fn getrange(p: &mut redis::Pipeline, key: &str) {
    p.cmd("GETRANGE").arg(key).arg(0).arg(MAX_VALUE_BYTES - 1);
}

/// The bytes of a string reply; anything else (nil, an error, a wrong type) is empty.
pub(super) fn bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::BulkString(b) => b.clone(),
        Value::SimpleString(s) => s.as_bytes().to_vec(),
        _ => Vec::new(),
    }
}

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        other => std::str::from_utf8(&bytes(other)).ok()?.trim().parse().ok(),
    }
}

/// The members of the set `index` from its first `SSCAN` page `first` on, at most `cap`.
pub(super) fn scan_index(
    con: &mut redis::Connection,
    index: &str,
    first: &Value,
    cap: usize,
) -> redis::RedisResult<Vec<String>> {
    let (mut cursor, page) = scan_page(first);
    let mut seen: std::collections::BTreeSet<String> = page
        .into_iter()
        .filter_map(|m| String::from_utf8(m).ok())
        .collect();
    while cursor != 0 && seen.len() < cap {
        let (next, page): (u64, Vec<Vec<u8>>) = redis::cmd("SSCAN")
            .arg(index)
            .arg(cursor)
            .arg("COUNT")
            .arg(BATCH)
            .query(con)?;
        seen.extend(page.into_iter().filter_map(|m| String::from_utf8(m).ok()));
        cursor = next;
    }
    Ok(seen.into_iter().take(cap).collect())
}
