//! Random-input tests of [`prepare`] on damaged real images: small valid files of every kind
//! (`samples::seeds`) truncated, edited, given other or bomb-sized header sizes, or followed by
//! garbage. `prepare` must answer `Ok` (with a payload that fits and decodes) or a clean `Err`:
//! never panic, never blame the encoder, never allocate more than the decoder memory bound, and
//! refuse a header claiming too many pixels before any pixel buffer exists.

use ::image::GenericImageView;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use proptest::prelude::*;
use proptest::sample::Index;

use super::alloc_probe::largest_allocation;
use super::decode::MAX_DECODER_ALLOC;
use super::samples::{Seed, SizeField, crc32, seeds, set_size};
use super::*;

/// A header refused before decoding allocates no more than this (no pixel buffer).
const HEADER_ONLY_ALLOC: usize = 1 << 20;

fn seed() -> impl Strategy<Value = &'static Seed> {
    (0..seeds().len()).prop_map(|i| &seeds()[i])
}

fn seed_named(name: &str) -> &'static Seed {
    seeds()
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no seed {name}"))
}

fn budget() -> impl Strategy<Value = usize> {
    // The real budget (pass-through for these small files), and small ones that force the
    // conversion and downscaling paths, down to budgets nothing fits.
    prop_oneof![Just(MAX_BASE64_LEN), 16usize..4096]
}

/// `prepare` under the allocation probe; checks what holds for every outcome.
fn prepare_checked(
    bytes: &[u8],
    format: ImageFormat,
    max: usize,
) -> Result<Result<PreparedImage, ImageError>, TestCaseError> {
    let (result, largest) = largest_allocation(|| prepare(bytes, format, max));
    prop_assert!(
        largest as u64 <= MAX_DECODER_ALLOC,
        "allocated {largest} bytes at once"
    );
    match &result {
        Ok(p) => {
            prop_assert!(p.base64.len() <= max, "{p:?}");
            let sent = BASE64.decode(&p.base64).expect("valid base64");
            if p.reencoded {
                prop_assert!(matches!(p.mime_type, "image/png" | "image/jpeg"), "{p:?}");
                let img = ::image::load_from_memory(&sent).expect("what is sent decodes");
                prop_assert_eq!(img.dimensions(), (p.width, p.height));
            } else {
                prop_assert_eq!(sent.as_slice(), bytes);
                prop_assert_eq!(p.mime_type, format.mime_type());
            }
        }
        // Encoding in-memory pixels we decoded ourselves failing is our bug, not the file's.
        Err(ImageError::Encode(e)) => prop_assert!(false, "encoder failed: {e}"),
        Err(e) => prop_assert!(!e.to_string().is_empty()),
    }
    Ok(result)
}

/// One change to a file.
#[derive(Debug, Clone)]
enum Edit {
    Set(Index, u8),
    FlipBit(Index, u8),
    Insert(Index, Vec<u8>),
    Remove(Index, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<Index>(), any::<u8>()).prop_map(|(at, v)| Edit::Set(at, v)),
        3 => (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Edit::FlipBit(at, bit)),
        1 => (any::<Index>(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, v)| Edit::Insert(at, v)),
        1 => (any::<Index>(), 1usize..16).prop_map(|(at, n)| Edit::Remove(at, n)),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    if bytes.is_empty() {
        return;
    }
    let len = bytes.len();
    match edit {
        Edit::Set(at, v) => bytes[at.index(len)] = *v,
        Edit::FlipBit(at, bit) => bytes[at.index(len)] ^= 1 << bit,
        Edit::Insert(at, v) => {
            let at = at.index(bytes.len() + 1);
            bytes.splice(at..at, v.iter().copied());
        }
        Edit::Remove(at, n) => {
            let at = at.index(bytes.len());
            bytes.drain(at..(at + n).min(bytes.len()));
        }
    }
}

/// Recompute every PNG chunk's CRC, so damage inside a chunk reaches the decoder instead of
/// failing the checksum.
fn fix_png_crcs(bytes: &mut [u8]) {
    let mut at = 8;
    while let Some(len) = bytes.get(at..at + 4) {
        let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
        let Some(end) = (at + 8).checked_add(len) else {
            return;
        };
        if end + 4 > bytes.len() {
            return;
        }
        let crc = crc32(&bytes[at + 4..end]);
        bytes[end..end + 4].copy_from_slice(&crc.to_be_bytes());
        at = end + 4;
    }
}

/// A `w` x `h` within `max_side` claiming more than [`MAX_PIXELS`], from two picks.
fn bomb_size(max_side: u32, a: Index, b: Index) -> (u32, u32) {
    let max = u64::from(max_side);
    let min_w = (MAX_PIXELS + 1).div_ceil(max);
    let w = min_w + a.index((max - min_w + 1) as usize) as u64;
    let min_h = (MAX_PIXELS + 1).div_ceil(w);
    let h = min_h + b.index((max - min_h + 1) as usize) as u64;
    (w as u32, h as u32)
}

/// `seed` with `field` stating `w` x `h`; `None` when it has no such field.
fn resized_header(seed: &Seed, field: SizeField, w: u32, h: u32) -> Option<Vec<u8>> {
    let mut bytes = seed.bytes.clone();
    set_size(&mut bytes, field, w, h).then_some(bytes)
}

/// `prepare` on a header-only bomb: the error, after checking nothing big was allocated.
fn refused_from_header(seed: &Seed, field: SizeField, w: u32, h: u32) -> ImageError {
    let bytes = resized_header(seed, field, w, h).expect("the seed has the field");
    let (result, largest) = largest_allocation(|| prepare(&bytes, seed.format, MAX_BASE64_LEN));
    assert!(
        largest <= HEADER_ONLY_ALLOC,
        "{} {field:?} {w}x{h}: allocated {largest} bytes at once ({result:?})",
        seed.name
    );
    result.expect_err("a bomb is refused")
}

proptest! {
    #![proptest_config(crate::fuzz::config(1000))]

    #[test]
    fn truncated_images_are_refused_as_corrupt(seed in seed(), cut in any::<Index>()) {
        let cut = cut.index(seed.bytes.len());
        let result = prepare_checked(&seed.bytes[..cut], seed.format, MAX_BASE64_LEN)?;
        prop_assert!(
            matches!(result, Err(ImageError::Corrupt { format, .. }) if format == seed.format),
            "{} cut at {cut}: {result:?}", seed.name
        );
    }

    #[test]
    fn edited_images_are_sent_intact_or_refused(
        seed in seed(),
        edits in proptest::collection::vec(edit(), 1..8),
        fix_crcs in any::<bool>(),
        max in budget(),
    ) {
        let mut bytes = seed.bytes.clone();
        for edit in &edits {
            apply(&mut bytes, edit);
        }
        if fix_crcs && seed.format == ImageFormat::Png {
            fix_png_crcs(&mut bytes);
        }
        let _ = prepare_checked(&bytes, seed.format, max)?;
    }

    #[test]
    fn any_small_stated_size_is_handled(
        seed in seed(),
        field in any::<Index>(),
        w in 0u32..48,
        h in 0u32..48,
        max in budget(),
    ) {
        // Sizes that disagree with the data, small enough to decode fast in a debug build.
        let fields = SizeField::of(seed.format);
        let field = fields[field.index(fields.len())];
        if let Some(bytes) = resized_header(seed, field, w, h) {
            let _ = prepare_checked(&bytes, seed.format, max)?;
        }
    }

    #[test]
    fn bomb_headers_are_refused_before_decoding(
        seed in seed(),
        field in any::<Index>(),
        a in any::<Index>(),
        b in any::<Index>(),
    ) {
        let fields = SizeField::of(seed.format);
        let field = fields[field.index(fields.len())];
        let (w, h) = bomb_size(field.max_side(), a, b);
        let Some(bytes) = resized_header(seed, field, w, h) else {
            return Ok(());
        };
        let (result, largest) =
            largest_allocation(|| prepare(&bytes, seed.format, MAX_BASE64_LEN));
        prop_assert!(
            largest <= HEADER_ONLY_ALLOC,
            "{} {field:?} {w}x{h}: allocated {largest} bytes at once ({result:?})", seed.name
        );
        // WebP sizes that disagree with each other are malformed; any other claim is the
        // image's (or its first frame's) size, too large to decode.
        let webp = seed.format == ImageFormat::Webp;
        prop_assert!(
            matches!(result, Err(ImageError::TooLarge { .. }))
                || (webp && matches!(result, Err(ImageError::Corrupt { .. }))),
            "{} {field:?} {w}x{h}: {result:?}", seed.name
        );
    }

    #[test]
    fn garbage_after_an_image_is_harmless(
        seed in seed(),
        tail in proptest::collection::vec(any::<u8>(), 1..64),
        max in budget(),
    ) {
        let mut bytes = seed.bytes.clone();
        bytes.extend_from_slice(&tail);
        let _ = prepare_checked(&bytes, seed.format, max)?;
    }
}

#[test]
fn every_seed_prepares() {
    for seed in seeds() {
        let p = prepare(&seed.bytes, seed.format, MAX_BASE64_LEN)
            .unwrap_or_else(|e| panic!("{}: {e}", seed.name));
        assert_eq!(p.animated, seed.name.contains("animated"), "{}", seed.name);
    }
}

/// The decompression bombs named in the task, each refused from its header.
#[test]
fn classic_bombs_are_refused_from_the_header() {
    for (seed, field, side, detail) in [
        (
            "png-rgb",
            SizeField::PngIhdr,
            65_535,
            "65535x65535, 4294.8 megapixels",
        ),
        (
            "jpeg",
            SizeField::JpegSof,
            65_535,
            "65535x65535, 4294.8 megapixels",
        ),
        (
            "gif",
            SizeField::GifScreen,
            65_535,
            "65535x65535, 4294.8 megapixels",
        ),
    ] {
        let err = refused_from_header(seed_named(seed), field, side, side);
        let ImageError::TooLarge { detail: found, .. } = &err else {
            panic!("{seed}: {err:?}")
        };
        assert_eq!(found, detail, "{seed}");
    }
    // The most a VP8X canvas can state, around small frames.
    let seed = seed_named("webp-animated");
    let err = refused_from_header(seed, SizeField::WebpCanvas, 1 << 24, 1 << 24);
    assert_eq!(
        err,
        ImageError::TooLarge {
            format: ImageFormat::Webp,
            detail: "16777216x16777216, 281474976.7 megapixels".to_owned()
        }
    );
}

/// Found by `bomb_headers_are_refused_before_decoding`: a 144-byte WebP whose VP8X canvas is
/// 16x12 but whose VP8 bitstream claimed 3907x16381 made the decoder allocate 64 MB before
/// finding the data missing.
#[test]
fn webp_bitstream_larger_than_its_canvas_is_refused_before_allocating() {
    let seed = seed_named("webp-lossy-alpha");
    let err = refused_from_header(seed, SizeField::WebpBitstream, 3907, 16_381);
    assert_eq!(
        err,
        ImageError::Corrupt {
            format: ImageFormat::Webp,
            detail: "the WebP bitstream size differs from the canvas size".to_owned()
        }
    );
}

/// Found by `bomb_headers_are_refused_before_decoding`: a GIF whose logical screen is 12x9 but
/// whose first frame claimed 977x65507 made the decoder allocate 256 MB for that frame.
#[test]
fn gif_frame_claiming_too_many_pixels_is_refused_before_allocating() {
    let seed = seed_named("gif");
    let err = refused_from_header(seed, SizeField::GifFrame, 977, 65_507);
    assert_eq!(
        err,
        ImageError::TooLarge {
            format: ImageFormat::Gif,
            detail: "a frame of 977x65507, 64.0 megapixels".to_owned()
        }
    );
}

/// Found while probing stated sizes: a GIF with a 0-wide logical screen decoded to an empty
/// image, and was then blamed on the encoder ("could not re-encode the image: Zero width not
/// allowed").
#[test]
fn gif_with_an_empty_logical_screen_is_corrupt() {
    for (w, h) in [(0, 0), (0, 5), (5, 0)] {
        let bytes = resized_header(seed_named("gif"), SizeField::GifScreen, w, h)
            .expect("GIFs have a screen");
        assert_eq!(
            prepare(&bytes, ImageFormat::Gif, MAX_BASE64_LEN),
            Err(ImageError::Corrupt {
                format: ImageFormat::Gif,
                detail: format!("no pixels: {w}x{h}")
            })
        );
    }
}

/// `webp-animated-lossy` with its first frame's bitstream damaged: the `VP8 ` tag after the
/// frame's `ALPH` chunk renamed `WP8 ` and, when `taller`, the bitstream's stated height one
/// more than the frame's.
fn first_frame_bitstream_damaged(rename: bool, taller: bool) -> Vec<u8> {
    let mut bytes = seed_named("webp-animated-lossy").bytes.clone();
    let alph = bytes
        .windows(4)
        .position(|w| w == b"ALPH")
        .expect("an ALPH chunk");
    let vp8 = alph
        + bytes[alph..]
            .windows(4)
            .position(|w| w == b"VP8 ")
            .expect("VP8 after ALPH");
    if rename {
        bytes[vp8] = b'W';
    }
    if taller {
        // tag, size, frame tag (3), start code (3), width (2), then the height
        bytes[vp8 + 8 + 8] += 1;
    }
    bytes
}

/// Found by `edited_images_are_sent_intact_or_refused` (CI, seed `webp-animated-lossy`, two
/// bit flips): a frame whose alpha is followed by a chunk that is not `VP8 ` made image-webp
/// 0.2.4 index out of bounds ("range end index 16 out of range for slice of length 0"), which
/// ended the run. The container walk now refuses it before decoding.
#[test]
fn webp_frame_whose_alpha_is_not_followed_by_a_bitstream_is_refused() {
    for taller in [false, true] {
        let bytes = first_frame_bitstream_damaged(true, taller);
        assert_eq!(
            prepare(&bytes, ImageFormat::Webp, MAX_BASE64_LEN),
            Err(ImageError::Corrupt {
                format: ImageFormat::Webp,
                detail: "a WebP animation frame's alpha is not followed by a VP8 bitstream"
                    .to_owned()
            })
        );
    }
}

/// The decoder does not compare a bitstream after `ALPH` with its frame's size either.
#[test]
fn webp_frame_whose_bitstream_after_alpha_is_taller_is_refused() {
    let bytes = first_frame_bitstream_damaged(false, true);
    assert_eq!(
        prepare(&bytes, ImageFormat::Webp, MAX_BASE64_LEN),
        Err(ImageError::Corrupt {
            format: ImageFormat::Webp,
            detail: "a WebP frame's bitstream size differs from the frame's".to_owned()
        })
    );
}

/// The same file given straight to the decoder, past the container walk: the decoder's panic
/// is contained and the file refused, so the next decoder bug refuses one attachment instead
/// of ending the run.
#[test]
fn a_panicking_decoder_refuses_the_file() {
    let bytes = first_frame_bitstream_damaged(true, true);
    assert_eq!(
        super::decode::decode(&bytes, ImageFormat::Webp).map(|_| ()),
        Err(ImageError::Corrupt {
            format: ImageFormat::Webp,
            detail: "the decoder failed on malformed data".to_owned()
        })
    );
    // Contained once, the next decode on the thread still works and still reports panics.
    let seed = seed_named("webp-animated-lossy");
    assert!(super::decode::decode(&seed.bytes, ImageFormat::Webp).is_ok());
}
