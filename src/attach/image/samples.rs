//! Test images (test builds only): the committed fixtures and images generated in code, shared
//! by every test file of the `image` module. Generated, not committed, so big inputs cost no
//! repository space.

use std::io::Cursor;

use ::image::{DynamicImage, Rgb, RgbImage};

pub(super) fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/attachments/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Smooth gradients plus light deterministic grain.
pub(super) fn photo(width: u32, height: u32) -> RgbImage {
    let mut seed: u32 = 0x9E37_79B9;
    RgbImage::from_fn(width, height, |x, y| {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let grain = (seed % 9) as i32 - 4;
        let c = |v: u32| (v as i32 + grain).clamp(0, 255) as u8;
        Rgb([
            c(x * 255 / width),
            c(y * 255 / height),
            c(((x / 7 + y / 5) * 3) % 256),
        ])
    })
}

pub(super) fn encode(img: &DynamicImage, format: ::image::ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// A PNG with a valid header claiming `width` x `height` and no real pixel data.
pub(super) fn png_header_only(width: u32, height: u32) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]); // 8-bit grayscale
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &[0x78, 0x9C, 0x03, 0x00]);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Every byte random: incompressible, so a small image is big in bytes (fast tests).
pub(super) fn noise(width: u32, height: u32, channels: usize) -> Vec<u8> {
    let mut seed: u32 = 0x2545_F491;
    (0..width as usize * height as usize * channels)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed >> 24) as u8
        })
        .collect()
}

pub(super) fn noise_rgb(width: u32, height: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(RgbImage::from_raw(width, height, noise(width, height, 3)).unwrap())
}
