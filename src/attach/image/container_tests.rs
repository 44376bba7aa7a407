use proptest::prelude::*;

use super::*;
use crate::attach::image::samples::{fixture, seeds};

#[test]
fn gif_frames_counts_still_gifs_as_one() {
    assert_eq!(gif_frames(&fixture("tiny.gif")), Ok(1));
}

#[test]
fn gif_structure_edges() {
    let gif = fixture("animated.gif");
    // Trailer missing: truncated.
    assert!(gif_frames(&gif[..gif.len() - 1]).is_err());
    // Junk after the last frame: tolerated.
    let mut junk = gif[..gif.len() - 1].to_vec();
    junk.extend_from_slice(b"junk");
    assert_eq!(gif_frames(&junk), Ok(3));
}

#[test]
fn webp_animation_is_detected_from_its_chunks() {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], payload: &[u8]) {
        out.extend_from_slice(kind);
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        if payload.len() % 2 == 1 {
            out.push(0);
        }
    }
    let mut body = b"WEBP".to_vec();
    chunk(&mut body, b"VP8X", &[0x02, 0, 0, 0, 7, 0, 0, 7, 0, 0]);
    chunk(&mut body, b"ANIM", &[0; 6]);
    // A 1x1 frame at the origin (all header fields zero) holding a 1x1 VP8L header.
    let mut frame = vec![0; 16];
    chunk(&mut frame, b"VP8L", &[0x2F, 0, 0, 0, 0]);
    chunk(&mut body, b"ANMF", &frame);
    chunk(&mut body, b"ANMF", &frame);
    let riff = |body: &[u8]| {
        let mut file = b"RIFF".to_vec();
        file.extend_from_slice(&(body.len() as u32).to_le_bytes());
        file.extend_from_slice(body);
        file
    };
    let file = riff(&body);
    assert_eq!(webp_frames(&file), Ok(2));
    assert!(webp_frames(&file[..file.len() - 1]).is_err());
    assert_eq!(webp_frames(&fixture("tiny.webp")), Ok(1));
    // A frame without a bitstream is not a frame.
    chunk(&mut body, b"ANMF", &[0; 16]);
    assert_eq!(
        webp_frames(&riff(&body)),
        Err(Flaw::Corrupt(
            "a WebP animation frame has no VP8 or VP8L bitstream"
        ))
    );
}

/// A format's signature followed by anything, so the walk gets past the first bytes.
fn after_signature() -> impl Strategy<Value = (ImageFormat, Vec<u8>)> {
    let format = proptest::sample::select(&[
        ImageFormat::Png,
        ImageFormat::Jpeg,
        ImageFormat::Gif,
        ImageFormat::Webp,
    ]);
    (format, proptest::collection::vec(any::<u8>(), 0..256)).prop_map(|(format, tail)| {
        let mut bytes = match format {
            ImageFormat::Png => b"\x89PNG\r\n\x1a\n".to_vec(),
            ImageFormat::Jpeg => vec![0xFF, 0xD8, 0xFF],
            ImageFormat::Gif => b"GIF89a".to_vec(),
            ImageFormat::Webp => b"RIFF".to_vec(),
        };
        bytes.extend_from_slice(&tail);
        (format, bytes)
    })
}

proptest! {
    #![proptest_config(crate::fuzz::config(2000))]

    #[test]
    fn walks_end_on_any_bytes((format, bytes) in after_signature()) {
        // Ok means at least one frame; errors are corruption or a frame too large.
        match check(&bytes, format) {
            Ok(frames) => prop_assert!(frames >= 1),
            Err(ImageError::Corrupt { .. } | ImageError::TooLarge { .. }) => {}
            Err(other) => prop_assert!(false, "{other:?}"),
        }
    }

    #[test]
    fn a_cut_anywhere_is_noticed(seed in 0..seeds().len(), cut in any::<proptest::sample::Index>()) {
        let seed = &seeds()[seed];
        prop_assert!(check(&seed.bytes, seed.format).is_ok(), "{}", seed.name);
        let cut = cut.index(seed.bytes.len());
        prop_assert!(check(&seed.bytes[..cut], seed.format).is_err(), "{} at {cut}", seed.name);
    }
}

#[test]
fn frames_are_counted_in_every_seed() {
    for seed in seeds() {
        let expected = if seed.name.contains("animated") { 2 } else { 1 };
        assert_eq!(
            check(&seed.bytes, seed.format),
            Ok(expected),
            "{}",
            seed.name
        );
    }
}

/// Long runs of fill bytes or empty blocks are walked once, not rescanned.
#[test]
fn long_runs_are_walked_in_linear_time() {
    let mut jpeg = vec![0xFF, 0xD8];
    jpeg.resize(1 << 20, 0xFF);
    assert!(jpeg_complete(&jpeg).is_err());
    let mut gif = b"GIF89a\x01\0\x01\0\0\0\0".to_vec();
    for _ in 0..(1 << 18) {
        gif.extend_from_slice(&[0x21, 0xF9, 0]);
    }
    assert_eq!(
        gif_frames(&gif),
        Err(Flaw::Corrupt("data ends before the GIF trailer"))
    );
}
