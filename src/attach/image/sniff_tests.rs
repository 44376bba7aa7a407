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
