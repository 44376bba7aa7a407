use ::image::codecs::jpeg::JpegEncoder;
use ::image::{DynamicImage, GenericImageView, Rgba, RgbaImage};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::container::gif_frames;
use super::pixels::Pixels;
use super::samples::{encode, fixture, noise, noise_rgb, photo, png_header_only};
use super::*;

fn decode_b64(p: &PreparedImage) -> DynamicImage {
    let raw = BASE64.decode(&p.base64).unwrap();
    ::image::load_from_memory(&raw).unwrap()
}

fn assert_aspect(p: &PreparedImage) {
    let expected = f64::from(p.original_height) * f64::from(p.width) / f64::from(p.original_width);
    assert!(
        (f64::from(p.height) - expected).abs() <= 1.0,
        "{}x{} from {}x{}",
        p.width,
        p.height,
        p.original_width,
        p.original_height
    );
}

#[test]
fn each_fixture_kind_prepares() {
    let png = prepare(&fixture("tiny.png"), ImageFormat::Png, MAX_BASE64_LEN).unwrap();
    assert_eq!(png.mime_type, "image/png");
    assert!(!png.reencoded);
    let jpg = prepare(&fixture("tiny.jpg"), ImageFormat::Jpeg, MAX_BASE64_LEN).unwrap();
    assert_eq!(jpg.mime_type, "image/jpeg");
    let webp = prepare(&fixture("tiny.webp"), ImageFormat::Webp, MAX_BASE64_LEN).unwrap();
    assert_eq!(webp.mime_type, "image/webp");
    assert!(!webp.reencoded);
    let gif = prepare(&fixture("tiny.gif"), ImageFormat::Gif, MAX_BASE64_LEN).unwrap();
    assert_eq!(gif.mime_type, "image/png");
    assert!(gif.reencoded && !gif.animated && !gif.resized);
    assert_eq!(
        gif.note(MAX_BASE64_LEN).as_deref(),
        Some("converted from GIF to PNG")
    );
    assert_eq!(
        (gif.width, gif.height),
        (gif.original_width, gif.original_height)
    );
}

#[test]
fn image_that_fits_is_passed_through_byte_for_byte() {
    for name in ["tiny.png", "tiny.jpg", "tiny.webp"] {
        let bytes = fixture(name);
        let Sniffed::Image(format) = sniff(&bytes) else {
            panic!("{name}")
        };
        let p = prepare(&bytes, format, MAX_BASE64_LEN).unwrap();
        assert_eq!(BASE64.decode(&p.base64).unwrap(), bytes, "{name}");
        assert!(!p.resized && !p.reencoded, "{name}");
        assert_eq!(p.note(MAX_BASE64_LEN), None);
    }
}

#[test]
fn truncated_png_is_rejected() {
    let err = prepare(&fixture("truncated.png"), ImageFormat::Png, MAX_BASE64_LEN).unwrap_err();
    assert!(matches!(
        err,
        ImageError::Corrupt {
            format: ImageFormat::Png,
            ..
        }
    ));
    let msg = err.to_string();
    assert!(msg.starts_with("corrupt or truncated PNG image ("), "{msg}");
    assert!(msg.ends_with("re-export or re-download it"), "{msg}");
}

#[test]
fn truncated_images_of_every_format_are_rejected() {
    let img = DynamicImage::ImageRgb8(photo(64, 48));
    for (format, codec) in [
        (ImageFormat::Png, ::image::ImageFormat::Png),
        (ImageFormat::Jpeg, ::image::ImageFormat::Jpeg),
        (ImageFormat::Gif, ::image::ImageFormat::Gif),
        (ImageFormat::Webp, ::image::ImageFormat::WebP),
    ] {
        let bytes = encode(&img, codec);
        assert!(prepare(&bytes, format, MAX_BASE64_LEN).is_ok(), "{format}");
        for cut in [bytes.len() / 2, bytes.len() - 1] {
            let err = prepare(&bytes[..cut], format, MAX_BASE64_LEN).unwrap_err();
            assert!(
                matches!(err, ImageError::Corrupt { .. }),
                "{format} cut at {cut}: {err}"
            );
        }
    }
    // A JPEG that lost only its end-of-image marker: the decoder would accept it.
    let jpg = fixture("tiny.jpg");
    let err = prepare(&jpg[..jpg.len() - 2], ImageFormat::Jpeg, MAX_BASE64_LEN).unwrap_err();
    assert!(err.to_string().contains("end-of-image marker"), "{err}");
}

#[test]
fn garbage_after_a_signature_is_corrupt() {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.extend_from_slice(&[0x55; 64]);
    let err = prepare(&bytes, ImageFormat::Png, MAX_BASE64_LEN).unwrap_err();
    assert!(matches!(err, ImageError::Corrupt { .. }), "{err}");
}

#[test]
fn hostile_header_is_refused_before_allocating() {
    // 60000x60000 = 3.6 gigapixels claimed by a 60-byte file: refused from the header.
    let err = prepare(
        &png_header_only(60_000, 60_000),
        ImageFormat::Png,
        MAX_BASE64_LEN,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ImageError::TooLarge {
            format: ImageFormat::Png,
            detail: "60000x60000, 3600.0 megapixels".to_owned()
        }
    );
    // A side beyond the decoder's dimension limit.
    let err = prepare(
        &png_header_only(100_000, 1),
        ImageFormat::Png,
        MAX_BASE64_LEN,
    )
    .unwrap_err();
    assert!(matches!(err, ImageError::TooLarge { .. }), "{err}");
}

#[test]
fn too_many_pixels_is_a_clear_error() {
    let err = prepare(
        &png_header_only(10_000, 8_000),
        ImageFormat::Png,
        MAX_BASE64_LEN,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "PNG image is too large to decode (10000x8000, 80.0 megapixels); the limit is 64 \
         megapixels: downscale it before attaching"
    );
    // Exactly at the limit the header is accepted (and the missing pixel data is then
    // reported as corruption, not size).
    let err = prepare(
        &png_header_only(8_000, 8_000),
        ImageFormat::Png,
        MAX_BASE64_LEN,
    )
    .unwrap_err();
    assert!(matches!(err, ImageError::Corrupt { .. }), "{err}");
}

#[test]
fn large_jpeg_is_downscaled_under_the_limit_keeping_aspect() {
    let mut bytes = Vec::new();
    JpegEncoder::new_with_quality(&mut bytes, 100)
        .encode_image(&noise_rgb(1400, 1000))
        .unwrap();
    assert!(
        base64_len(bytes.len()) > MAX_BASE64_LEN,
        "test image too small"
    );
    let p = prepare(&bytes, ImageFormat::Jpeg, MAX_BASE64_LEN).unwrap();
    assert!(p.base64.len() <= MAX_BASE64_LEN);
    assert_eq!(p.mime_type, "image/jpeg");
    assert!(p.resized && p.reencoded);
    assert!(p.width < 1400 && p.width > 300, "{p:?}");
    assert_aspect(&p);
    assert_eq!(decode_b64(&p).dimensions(), (p.width, p.height));
    let note = p.note(MAX_BASE64_LEN).unwrap();
    assert!(note.starts_with("downscaled from 1400x1000 to "), "{note}");
    assert!(
        note.ends_with("re-encoded as JPEG to fit 1.5 MiB"),
        "{note}"
    );
}

#[test]
fn large_opaque_png_becomes_a_jpeg_under_the_limit() {
    let bytes = encode(&noise_rgb(800, 600), ::image::ImageFormat::Png);
    assert!(
        base64_len(bytes.len()) > MAX_BASE64_LEN,
        "test image too small"
    );
    let p = prepare(&bytes, ImageFormat::Png, MAX_BASE64_LEN).unwrap();
    assert!(p.base64.len() <= MAX_BASE64_LEN);
    assert_eq!(p.mime_type, "image/jpeg");
    assert!(!p.flattened);
    assert_aspect(&p);
}

#[test]
fn opaque_alpha_channel_is_ignored() {
    let mut rgba = noise(800, 600, 4);
    rgba.iter_mut().skip(3).step_by(4).for_each(|a| *a = 255);
    let img = DynamicImage::ImageRgba8(RgbaImage::from_raw(800, 600, rgba).unwrap());
    let bytes = encode(&img, ::image::ImageFormat::Png);
    assert!(
        base64_len(bytes.len()) > MAX_BASE64_LEN,
        "test image too small"
    );
    let p = prepare(&bytes, ImageFormat::Png, MAX_BASE64_LEN).unwrap();
    assert_eq!(p.mime_type, "image/jpeg");
    assert!(!p.flattened);
}

#[test]
fn transparent_png_stays_png_while_it_can() {
    // Gradient with light grain and a transparent hole: too big as is (with this budget),
    // fits as a smaller PNG no smaller than MIN_PNG_LONG_SIDE.
    let base = photo(1200, 900);
    let img = RgbaImage::from_fn(1200, 900, |x, y| {
        let [r, g, b] = base.get_pixel(x, y).0;
        let hole = (450..750).contains(&x) && (300..600).contains(&y);
        Rgba([r, g, b, if hole { 0 } else { 255 }])
    });
    let bytes = encode(&DynamicImage::ImageRgba8(img), ::image::ImageFormat::Png);
    let max = base64_len(bytes.len()) * 9 / 10;
    let p = prepare(&bytes, ImageFormat::Png, max).unwrap();
    assert!(p.base64.len() <= max);
    assert_eq!(p.mime_type, "image/png");
    assert!(p.resized && !p.flattened);
    assert!(p.width.max(p.height) >= MIN_PNG_LONG_SIDE, "{p:?}");
    assert_aspect(&p);
    let out = decode_b64(&p).to_rgba8();
    let (cx, cy) = (p.width / 2, p.height / 2);
    assert_eq!(out.get_pixel(cx, cy).0[3], 0, "hole lost its transparency");
    assert_eq!(out.get_pixel(2, 2).0[3], 255);
}

#[test]
fn transparent_image_that_cannot_fit_as_png_is_flattened_onto_white() {
    let mut rgba = noise(600, 450, 4);
    for (i, px) in rgba.chunks_exact_mut(4).enumerate() {
        px[3] = if i % 600 < 60 { 0 } else { 255 };
    }
    let img = DynamicImage::ImageRgba8(RgbaImage::from_raw(600, 450, rgba).unwrap());
    let bytes = encode(&img, ::image::ImageFormat::Png);
    // Far too small for a full-size PNG of noise, enough for a smaller JPEG.
    let max = 100 * 1024;
    let p = prepare(&bytes, ImageFormat::Png, max).unwrap();
    assert!(p.base64.len() <= max);
    assert_eq!(p.mime_type, "image/jpeg");
    assert!(p.flattened && p.resized);
    assert_aspect(&p);
    let out = decode_b64(&p).to_rgb8();
    let [r, g, b] = out.get_pixel(1, p.height / 2).0;
    assert!(
        r > 230 && g > 230 && b > 230,
        "transparent edge not white: {r},{g},{b}"
    );
    assert!(
        p.note(max)
            .unwrap()
            .ends_with("transparency flattened onto white")
    );
}

#[test]
fn tiny_png_with_alpha_keeps_alpha_when_passed_through() {
    let bytes = fixture("tiny.png");
    let img = ::image::load_from_memory(&bytes).unwrap();
    assert!(
        Pixels::from_image(img).transparent(),
        "fixture should have transparent pixels"
    );
    let p = prepare(&bytes, ImageFormat::Png, MAX_BASE64_LEN).unwrap();
    assert!(decode_b64(&p).color().has_alpha());
}

#[test]
fn animated_gif_sends_its_first_frame_as_png() {
    let bytes = fixture("animated.gif");
    assert_eq!(gif_frames(&bytes), Ok(3));
    let p = prepare(&bytes, ImageFormat::Gif, MAX_BASE64_LEN).unwrap();
    assert_eq!(p.mime_type, "image/png");
    assert!(p.animated && p.reencoded && !p.resized);
    let first = ::image::load_from_memory(&bytes).unwrap().to_rgba8();
    assert_eq!(decode_b64(&p).to_rgba8(), first);
    assert_eq!(
        p.note(MAX_BASE64_LEN).as_deref(),
        Some("converted from GIF to PNG; animated image: only its first frame is sent")
    );
}

#[test]
fn exif_orientation_is_applied_when_reencoding() {
    // A 4x2 JPEG with an APP1 EXIF segment saying "rotate 90° clockwise" (orientation 6).
    let img = DynamicImage::ImageRgb8(photo(400, 200));
    let plain = encode(&img, ::image::ImageFormat::Jpeg);
    let exif: &[u8] = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0";
    let mut bytes = plain[..2].to_vec();
    bytes.extend_from_slice(&[0xFF, 0xE1]);
    bytes.extend_from_slice(&((exif.len() + 2) as u16).to_be_bytes());
    bytes.extend_from_slice(exif);
    bytes.extend_from_slice(&plain[2..]);
    // Passed through: untouched, stored dimensions.
    let p = prepare(&bytes, ImageFormat::Jpeg, MAX_BASE64_LEN).unwrap();
    assert!(!p.reencoded);
    assert_eq!((p.width, p.height), (400, 200));
    // Re-encoded: rotated, because the EXIF tag is dropped.
    let p = prepare(&bytes, ImageFormat::Jpeg, base64_len(bytes.len()) - 4).unwrap();
    assert!(p.reencoded);
    assert!(p.height > p.width, "{p:?}");
    assert_eq!(decode_b64(&p).dimensions(), (p.width, p.height));
}

#[test]
fn cannot_fit_is_a_clear_error() {
    let err = prepare(&fixture("tiny.jpg"), ImageFormat::Jpeg, 100).unwrap_err();
    let ImageError::CannotFit {
        max_base64_len: 100,
        base64_len,
        mime_type: "image/jpeg",
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert!(base64_len > 100);
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "image cannot be made to fit the 100 bytes limit for one image: the smallest attempt ("
        ),
        "{msg}"
    );
    assert!(msg.ends_with("of base64; crop or shrink it first"), "{msg}");
}

#[test]
fn limits_are_the_documented_values() {
    assert_eq!(MAX_BASE64_LEN, 1_572_864);
    assert_eq!(human_bytes(MAX_BASE64_LEN as u64), "1.5 MiB");
    assert_eq!(human_bytes(MAX_ATTACHMENT_BYTES), "20 MiB");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(MAX_IMAGES, 20);
    assert_eq!(base64_len(0), 0);
    assert_eq!(base64_len(1), 4);
    assert_eq!(base64_len(3), 4);
    assert_eq!(base64_len(4), 8);
    assert_eq!(BASE64.encode([0u8; 1000]).len(), base64_len(1000));
}

#[test]
fn payload_is_never_debug_printed() {
    let p = prepare(&fixture("tiny.png"), ImageFormat::Png, MAX_BASE64_LEN).unwrap();
    let shown = format!("{p:?}");
    assert!(!shown.contains(&p.base64), "{shown}");
    assert!(shown.contains("base64_len"));
}

#[test]
fn passthrough_boundary_is_inclusive() {
    let mut bytes = Vec::new();
    JpegEncoder::new_with_quality(&mut bytes, 100)
        .encode_image(&noise_rgb(64, 64))
        .unwrap();
    let exact = base64_len(bytes.len());
    let p = prepare(&bytes, ImageFormat::Jpeg, exact).unwrap();
    assert!(!p.reencoded);
    assert_eq!(p.base64.len(), exact);
    // One byte less: re-encoded at quality 85, which fits at full size here.
    let p = prepare(&bytes, ImageFormat::Jpeg, exact - 1).unwrap();
    assert!(p.reencoded && !p.resized);
    assert!(p.base64.len() < exact);
    assert_eq!(
        p.note(exact - 1),
        Some(format!(
            "re-encoded as JPEG to fit {}",
            human_bytes((exact - 1) as u64)
        ))
    );
}

#[test]
fn opaque_png_converted_at_full_size_says_so() {
    let bytes = encode(&noise_rgb(64, 64), ::image::ImageFormat::Png);
    let max = base64_len(bytes.len()) - 1;
    let p = prepare(&bytes, ImageFormat::Png, max).unwrap();
    assert_eq!(p.mime_type, "image/jpeg");
    assert!(!p.resized);
    assert_eq!(
        p.note(max),
        Some(format!(
            "converted from PNG to JPEG to fit {}",
            human_bytes(max as u64)
        ))
    );
}

#[test]
fn grayscale_and_sixteen_bit_sources_are_handled() {
    // 8-bit gray: stays gray through the JPEG path.
    let gray = ::image::GrayImage::from_raw(900, 700, noise(900, 700, 1)).unwrap();
    let bytes = encode(&DynamicImage::ImageLuma8(gray), ::image::ImageFormat::Png);
    let max = 64 * 1024;
    let p = prepare(&bytes, ImageFormat::Png, max).unwrap();
    assert!(p.base64.len() <= max && p.resized);
    assert_eq!(p.mime_type, "image/jpeg");
    assert_eq!(decode_b64(&p).color(), ::image::ColorType::L8);
    assert_aspect(&p);
    // 16-bit RGBA with transparency: reduced to 8 bits, transparency kept in a PNG.
    let img = ::image::ImageBuffer::<Rgba<u16>, Vec<u16>>::from_fn(300, 200, |x, y| {
        let a = if x < 150 { 0 } else { u16::MAX };
        Rgba([(x * 200) as u16, (y * 300) as u16, 40_000, a])
    });
    let bytes = encode(&DynamicImage::ImageRgba16(img), ::image::ImageFormat::Png);
    let max = base64_len(bytes.len()) - 1;
    let p = prepare(&bytes, ImageFormat::Png, max).unwrap();
    assert_eq!(p.mime_type, "image/png");
    let out = decode_b64(&p);
    assert_eq!(out.color(), ::image::ColorType::Rgba8);
    assert_eq!(out.to_rgba8().get_pixel(0, 0).0[3], 0);
}
