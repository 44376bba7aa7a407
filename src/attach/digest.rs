//! What a job's attachments contain, as hashes: SHA-256 of each file's bytes (reported in the
//! result line) and one 64-bit content hash over all of them (what `--resume` keeps per job, to
//! tell whether the files changed since: `--rerun-changed`, and whether a job that failed
//! for its content could fare better now). Pure, and a leaf: `attach::content_hash_of` reads the
//! files (with the rules of `@file`) and hashes them with these.

use ring::digest::{SHA256, digest};

/// SHA-256 of one attachment's bytes.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = digest(&SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The content hash of a job: the first 8 bytes of SHA-256 over its attachments' SHA-256s, in
/// order (so the same files in another order, or one file more, differ).
pub fn content_hash(digests: &[[u8; 32]]) -> u64 {
    let joined: Vec<u8> = digests.iter().flatten().copied().collect();
    let d = sha256(&joined);
    let mut head = [0u8; 8];
    head.copy_from_slice(&d[..8]);
    u64::from_be_bytes(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha256_and_order_matters() {
        // The published SHA-256 of "abc".
        assert_eq!(
            hex(&sha256(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let (a, b) = (sha256(b"a"), sha256(b"b"));
        assert_ne!(content_hash(&[a, b]), content_hash(&[b, a]));
        assert_ne!(content_hash(&[a]), content_hash(&[a, a]));
        assert_eq!(content_hash(&[a, b]), content_hash(&[a, b]));
    }

    #[test]
    fn files_are_hashed_as_they_are_now() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.md");
        std::fs::write(&p, "v1").unwrap();
        let files = [p.display().to_string()];
        let v1 = crate::attach::content_hash_of(&files).unwrap();
        assert_eq!(v1, content_hash(&[sha256(b"v1")]));
        std::fs::write(&p, "v2").unwrap();
        assert_ne!(crate::attach::content_hash_of(&files).unwrap(), v1);
        assert_eq!(
            crate::attach::content_hash_of(&[dir.path().join("gone").display().to_string()]),
            None
        );
    }
}
