use proptest::prelude::*;

use super::*;
use crate::attach::image::samples::fixture;
use crate::attach::image::{ImageFormat, MAX_BASE64_LEN, prepare};

#[test]
fn sniffs_each_image_fixture_by_signature() {
    assert_eq!(
        sniff(&fixture("tiny.png")),
        Sniffed::Image(ImageFormat::Png)
    );
    assert_eq!(
        sniff(&fixture("tiny.jpg")),
        Sniffed::Image(ImageFormat::Jpeg)
    );
    assert_eq!(
        sniff(&fixture("tiny.gif")),
        Sniffed::Image(ImageFormat::Gif)
    );
    assert_eq!(
        sniff(&fixture("animated.gif")),
        Sniffed::Image(ImageFormat::Gif)
    );
    assert_eq!(
        sniff(&fixture("tiny.webp")),
        Sniffed::Image(ImageFormat::Webp)
    );
    assert_eq!(
        sniff(&fixture("truncated.png")),
        Sniffed::Image(ImageFormat::Png)
    );
}

#[test]
fn signature_beats_extension() {
    assert_eq!(
        sniff(&fixture("photo-named.txt")),
        Sniffed::Image(ImageFormat::Jpeg)
    );
    assert_eq!(sniff(&fixture("text-named.png")), Sniffed::Text);
    let p = prepare(
        &fixture("photo-named.txt"),
        ImageFormat::Jpeg,
        MAX_BASE64_LEN,
    )
    .unwrap();
    assert_eq!(p.mime_type, "image/jpeg");
}

#[test]
fn text_fixtures_are_text_and_nul_is_binary() {
    assert_eq!(sniff(&fixture("bom.txt")), Sniffed::Text);
    assert_eq!(sniff(&fixture("latin1.txt")), Sniffed::Text);
    assert_eq!(sniff(&fixture("empty.txt")), Sniffed::Text);
    assert_eq!(
        sniff(&fixture("nul.bin")),
        Sniffed::OtherBinary("binary data (contains NUL bytes)".to_owned())
    );
    assert_eq!(
        sniff(b"\xFF\xFEh\0i\0"),
        Sniffed::OtherBinary("UTF-16 text (only UTF-8 text can be attached)".to_owned())
    );
}

#[test]
fn pdf_is_rejected_naming_what_was_found() {
    let Sniffed::OtherBinary(found) = sniff(&fixture("doc.pdf")) else {
        panic!("pdf not binary");
    };
    assert_eq!(found, "a PDF document (application/pdf)");
}

#[test]
fn other_binaries_are_named() {
    let zip = b"PK\x03\x04\x14\0\0\0\x08\0";
    let Sniffed::OtherBinary(found) = sniff(zip) else {
        panic!()
    };
    assert!(found.contains("application/zip"), "{found}");
    let mut elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0\x3e\0".to_vec();
    elf.resize(64, 0);
    let Sniffed::OtherBinary(found) = sniff(&elf) else {
        panic!()
    };
    assert!(found.starts_with("an executable"), "{found}");
    let bmp = b"BM\x36\x00\x0c\x00\x00\x00\x00\x00\x36\x00\x00\x00";
    let Sniffed::OtherBinary(found) = sniff(bmp) else {
        panic!()
    };
    assert_eq!(
        found,
        "an image format other than PNG, JPEG, GIF or WebP (image/bmp)"
    );
}

#[test]
fn text_starting_like_a_weak_signature_is_text() {
    for text in [
        "BMI notes\n",
        "MZ is a postcode prefix\n",
        "ID3 tags\n",
        "%!PS-Adobe-3.0\n",
        "GIF is pronounced…\n",
        "<html><body>x</body></html>\n",
        "#!/bin/sh\necho hi\n",
    ] {
        assert_eq!(sniff(text.as_bytes()), Sniffed::Text, "{text}");
    }
}

/// The accepted format whose full signature `bytes` starts with, if any.
fn signature_of(bytes: &[u8]) -> Option<ImageFormat> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(ImageFormat::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(ImageFormat::Jpeg)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(ImageFormat::Gif)
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some(ImageFormat::Webp)
    } else {
        None
    }
}

/// Starts of files: the four image signatures, other binary signatures, and the ASCII ones
/// that clean text may begin with.
const PREFIXES: &[&[u8]] = &[
    b"\x89PNG\r\n\x1a\n",
    b"\xFF\xD8\xFF",
    b"GIF87a",
    b"GIF89a",
    b"RIFF\x24\0\0\0WEBP",
    b"RIFF\x24\0\0\0WAVE",
    b"RIFF\x24\0\0\0AVI ",
    b"%PDF-1.4",
    b"PK\x03\x04",
    b"\x7fELF",
    b"BM",
    b"MZ",
    b"ID3",
    b"%!",
    b"GIF8",
    b"\xFF\xD8",
    b"\x89PNG",
    b"\xFF\xFE",
    b"<?xml ",
    b"#!/bin/sh\n",
];

/// Any bytes; or a known prefix, possibly with one byte changed, then any bytes or clean text.
fn file_start() -> impl Strategy<Value = Vec<u8>> {
    let tail = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..48),
        proptest::collection::vec(0x20u8..0x7F, 0..48),
    ];
    let prefixed = (
        proptest::sample::select(PREFIXES),
        proptest::option::of((any::<proptest::sample::Index>(), any::<u8>())),
        tail,
    )
        .prop_map(|(prefix, change, tail)| {
            let mut bytes = prefix.to_vec();
            if let Some((at, value)) = change {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            bytes.extend_from_slice(&tail);
            bytes
        });
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..64), prefixed]
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn an_image_is_reported_exactly_when_its_signature_starts_the_bytes(bytes in file_start()) {
        let sniffed = sniff(&bytes);
        match signature_of(&bytes) {
            Some(format) => prop_assert_eq!(sniffed, Sniffed::Image(format)),
            None => prop_assert!(!matches!(sniffed, Sniffed::Image(_)), "{sniffed:?}"),
        }
    }

    #[test]
    fn text_never_contains_nul_and_binary_says_what_it_is(bytes in file_start()) {
        match sniff(&bytes) {
            Sniffed::Text => prop_assert!(!bytes.contains(&0)),
            Sniffed::OtherBinary(what) => prop_assert!(!what.is_empty()),
            Sniffed::Image(_) => {}
        }
    }

    #[test]
    fn clean_text_is_text_whatever_it_starts_with(
        prefix in proptest::sample::select(PREFIXES),
        text in "[ -~\t\n]{0,48}",
    ) {
        // Only the prefix's printable bytes: what a text file starting like it would hold.
        let mut bytes: Vec<u8> = prefix
            .iter()
            .copied()
            .filter(|b| (0x20..0x7F).contains(b) || *b == b'\n')
            .collect();
        bytes.extend_from_slice(text.as_bytes());
        let expected = match signature_of(&bytes) {
            Some(format) => Sniffed::Image(format),
            None if bytes.starts_with(b"%PDF") => {
                Sniffed::OtherBinary("a PDF document (application/pdf)".to_owned())
            }
            None => Sniffed::Text,
        };
        prop_assert_eq!(sniff(&bytes), expected);
    }
}
