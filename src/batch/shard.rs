//! Stable names for jobs across runs, processes and machines: FNV-1a 64 over a job's canonical
//! id (which shard runs it, which recorded result belongs to it) and over its canonical input
//! (did the job change since its answer was recorded). Pure: no I/O.
//!
//! The hash is part of the public contract (README documents it with a snippet to compute it):
//! FNV-1a, 64 bits, offset basis 0xcbf29ce484222325, prime 0x100000001b3, over the bytes given,
//! with wrapping multiplication. It must never change: shards of one job file are often run by
//! different releases on different machines.

use std::hash::{BuildHasher as _, Hasher as _};

use crate::cli::Shard;

/// Which job a line or a recorded result is, for `--resume` and duplicate detection: a 128-bit
/// SipHash of the canonical id under two keys drawn at random by this process. The public FNV
/// hash above decides shards only; were it also the identity, anyone who names files (ids come
/// from file names in the cron recipe) could craft an id that collides with a victim's and get
/// the victim's job skipped as a duplicate or as already answered. Without the keys nobody can
/// construct a collision, and by chance one is about as likely as 2^-128 per pair.
#[derive(Debug, Clone)]
pub struct Identities {
    keys: [std::collections::hash_map::RandomState; 2],
}

/// One job's identity (see [`Identities`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity(u64, u64);

impl Identities {
    pub fn new() -> Identities {
        Identities {
            keys: [
                std::collections::hash_map::RandomState::new(),
                std::collections::hash_map::RandomState::new(),
            ],
        }
    }

    /// The identity of a canonical id (`JobId::canonical`).
    pub fn of(&self, canonical: &str) -> Identity {
        let [a, b] = self.keys.each_ref().map(|k| {
            let mut h = k.build_hasher();
            h.write(canonical.as_bytes());
            h.finish()
        });
        Identity(a, b)
    }
}

impl Default for Identities {
    fn default() -> Identities {
        Identities::new()
    }
}

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 over `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.update(bytes);
    h.finish()
}

/// An incremental FNV-1a 64 (also an `io::Write`, so JSON can be hashed as it is encoded,
/// without building the text).
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Fnv {
    pub fn new() -> Fnv {
        Fnv(OFFSET_BASIS)
    }

    pub fn update(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv::new()
    }
}

impl std::io::Write for Fnv {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The shard (0..count) a job with this id hash belongs to.
pub fn shard_of(id_hash: u64, count: u64) -> u64 {
    id_hash % count.max(1)
}

/// Whether this process runs a line: every line without `--shard`; with it, a line with a
/// usable id goes to its id's shard, a line without one is reported by shard 0 only (so each
/// invalid line is reported exactly once across the shards).
pub fn runs_here(shard: Option<Shard>, id_hash: Option<u64>) -> bool {
    match (shard, id_hash) {
        (None, _) => true,
        (Some(s), Some(h)) => shard_of(h, s.count) == s.index,
        (Some(s), None) => s.index == 0,
    }
}

/// A hash as 16 lowercase hex digits (how `input_hash` is written).
pub fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// The inverse of [`hex`]: exactly 16 hex digits.
pub fn parse_hex(s: &str) -> Option<u64> {
    if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Identities tell ids apart even where FNV collides, and agree within one process.
    #[test]
    fn identities_are_keyed_per_process_and_stable_within_it() {
        let ids = Identities::new();
        assert_eq!(ids.of("doc-1"), ids.of("doc-1"));
        assert_ne!(ids.of("doc-1"), ids.of("doc-2"));
        // Two known FNV-1a 64 collisions are different identities.
        let (x, y) = fnv_collision();
        assert_eq!(fnv1a64(x.as_bytes()), fnv1a64(y.as_bytes()));
        assert_ne!(ids.of(&x), ids.of(&y));
        assert_ne!(
            Identities::new().of("doc-1"),
            ids.of("doc-1"),
            "another process (another key) gives another value"
        );
    }

    /// Two file-name-shaped ids with the same FNV-1a 64 (0x9418fc7e2216fcd0), found with
    /// Pollard's rho in about 2^32 hash evaluations (minutes on one core): FNV is no defence
    /// against anyone who wants a collision.
    fn fnv_collision() -> (String, String) {
        (
            "doc-d831c0ba600f3b28.md".to_string(),
            "doc-60f8a289aa18ee04.md".to_string(),
        )
    }

    #[test]
    fn fnv1a64_matches_the_published_test_vectors() {
        // From the FNV reference (draft-eastlake-fnv): the empty string, "a" and "foobar".
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_documented_examples_hold() {
        // README quotes these: keep them in step.
        assert_eq!(hex(fnv1a64(b"doc-1")), "42d4e5ab72fc8a9b");
        assert_eq!(fnv1a64(b"doc-1") % 4, 3);
        assert_eq!(fnv1a64(b"42") % 4, 3);
    }

    #[test]
    fn incremental_equals_one_shot() {
        let mut h = Fnv::new();
        h.update(b"foo");
        h.update(b"bar");
        assert_eq!(h.finish(), fnv1a64(b"foobar"));
    }

    #[test]
    fn shards_partition_and_idless_lines_go_to_shard_zero() {
        let shard = |index, count| Some(Shard { index, count });
        for h in [0u64, 1, 2, 3, u64::MAX, 0x1234_5678_9abc_def0] {
            let owners = (0..3).filter(|i| runs_here(shard(*i, 3), Some(h))).count();
            assert_eq!(owners, 1, "hash {h:x}");
        }
        assert!(runs_here(shard(0, 3), None));
        assert!(!runs_here(shard(1, 3), None));
        assert!(runs_here(None, None));
        assert!(runs_here(None, Some(7)));
        assert_eq!(shard_of(7, 0), 0, "a zero count never divides by zero");
    }

    #[test]
    fn hex_round_trips_and_rejects_other_shapes() {
        for h in [0u64, 1, u64::MAX, 0xdead_beef] {
            assert_eq!(parse_hex(&hex(h)), Some(h));
        }
        assert_eq!(hex(1), "0000000000000001");
        for bad in [
            "",
            "1",
            "+000000000000001",
            "000000000000000g",
            "00000000000000001",
        ] {
            assert_eq!(parse_hex(bad), None, "{bad}");
        }
    }
}
