//! Test images (test builds only): the committed fixtures and images generated in code, shared
//! by every test file of the `image` module. Generated, not committed, so big inputs cost no
//! repository space.

use std::io::Cursor;
use std::sync::OnceLock;

use ::image::codecs::gif::GifEncoder;
use ::image::{DynamicImage, Frame, ImageFormat as Codec, Rgb, RgbImage, Rgba, RgbaImage};

use super::ImageFormat;

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

/// PNG's CRC-32 (ISO-HDLC), over a chunk's type and data.
pub(super) fn crc32(data: &[u8]) -> u32 {
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

fn png_chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A PNG with a valid header claiming `width` x `height` and no real pixel data.
pub(super) fn png_header_only(width: u32, height: u32) -> Vec<u8> {
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]); // 8-bit grayscale
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(&mut out, b"IDAT", &[0x78, 0x9C, 0x03, 0x00]);
    png_chunk(&mut out, b"IEND", &[]);
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

/// A small valid image the mutation tests start from.
pub(super) struct Seed {
    pub name: &'static str,
    pub format: ImageFormat,
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for Seed {
    /// The name says which seed; its bytes are the same in every run.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// One of each kind the decoders handle differently: PNG with and without alpha, JPEG with and
/// without an EXIF orientation, still and animated GIF, and WebP lossless, lossy, lossy with
/// alpha, animated lossless (hand-built) and animated lossy. Built once per test binary.
pub(super) fn seeds() -> &'static [Seed] {
    static SEEDS: OnceLock<Vec<Seed>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let rgba = DynamicImage::ImageRgba8(sprite(12, 9, 0));
        let rgb = DynamicImage::ImageRgb8(photo(16, 12));
        let seed = |name, format, bytes| Seed {
            name,
            format,
            bytes,
        };
        vec![
            seed("png-rgba", ImageFormat::Png, encode(&rgba, Codec::Png)),
            seed("png-rgb", ImageFormat::Png, encode(&rgb, Codec::Png)),
            seed("jpeg", ImageFormat::Jpeg, encode(&rgb, Codec::Jpeg)),
            seed(
                "jpeg-exif",
                ImageFormat::Jpeg,
                with_exif_rotation(&encode(&rgb, Codec::Jpeg)),
            ),
            seed("gif", ImageFormat::Gif, encode(&rgba, Codec::Gif)),
            seed("gif-animated", ImageFormat::Gif, animated_gif()),
            seed(
                "webp-lossless",
                ImageFormat::Webp,
                encode(&rgba, Codec::WebP),
            ),
            seed("webp-lossy", ImageFormat::Webp, LOSSY_WEBP.to_vec()),
            seed(
                "webp-lossy-alpha",
                ImageFormat::Webp,
                LOSSY_ALPHA_WEBP.to_vec(),
            ),
            seed("webp-animated", ImageFormat::Webp, animated_lossless_webp()),
            seed(
                "webp-animated-lossy",
                ImageFormat::Webp,
                ANIMATED_LOSSY_WEBP.to_vec(),
            ),
        ]
    })
}

/// A small RGBA picture with a transparent hole; `shift` varies it between frames.
fn sprite(width: u32, height: u32, shift: u32) -> RgbaImage {
    RgbaImage::from_fn(width, height, |x, y| {
        let hole = (3..6).contains(&x) && (2..5).contains(&y);
        let r = ((x + shift) * 20) as u8;
        Rgba([
            r,
            (y * 25) as u8,
            ((x * y) % 7 * 30) as u8,
            if hole { 0 } else { 255 },
        ])
    })
}

/// `jpeg` with an APP1 EXIF segment saying "rotate 90° clockwise" (orientation 6).
fn with_exif_rotation(jpeg: &[u8]) -> Vec<u8> {
    let exif: &[u8] = b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0";
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((exif.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(exif);
    out.extend_from_slice(&jpeg[2..]);
    out
}

fn animated_gif() -> Vec<u8> {
    let mut out = Vec::new();
    let frames = (0..2).map(|i| Frame::new(sprite(12, 9, i * 5)));
    GifEncoder::new(&mut out).encode_frames(frames).unwrap();
    out
}

/// Two lossless frames in an animated WebP container (VP8X, ANIM, ANMF), built by hand: the
/// `image` crate encodes still lossless WebP only.
fn animated_lossless_webp() -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], payload: &[u8]) {
        out.extend_from_slice(kind);
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(payload);
        if payload.len() % 2 == 1 {
            out.push(0);
        }
    }
    let u24 = |v: u32| <[u8; 3]>::try_from(&v.to_le_bytes()[..3]).unwrap();
    let (w, h) = (12, 9);
    let mut body = b"WEBP".to_vec();
    let mut vp8x = vec![0x12, 0, 0, 0]; // animation and alpha
    vp8x.extend_from_slice(&u24(w - 1));
    vp8x.extend_from_slice(&u24(h - 1));
    chunk(&mut body, b"VP8X", &vp8x);
    chunk(&mut body, b"ANIM", &[255, 255, 255, 255, 0, 0]);
    for i in 0..2 {
        let still = encode(&DynamicImage::ImageRgba8(sprite(w, h, i * 5)), Codec::WebP);
        // The still's VP8L chunk (header and payload) becomes the frame's data.
        let mut anmf = [u24(0), u24(0), u24(w - 1), u24(h - 1), u24(100)].concat();
        anmf.push(0);
        anmf.extend_from_slice(&still[12..]);
        chunk(&mut body, b"ANMF", &anmf);
    }
    let mut file = b"RIFF".to_vec();
    file.extend_from_slice(&(body.len() as u32).to_le_bytes());
    file.extend_from_slice(&body);
    file
}

/// A header field that states an image's (or a frame's) dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SizeField {
    /// PNG IHDR (CRC recomputed, so the decoder believes it).
    PngIhdr,
    /// JPEG start-of-frame.
    JpegSof,
    /// GIF logical screen.
    GifScreen,
    /// GIF first image descriptor.
    GifFrame,
    /// WebP VP8X canvas.
    WebpCanvas,
    /// WebP first ANMF frame.
    WebpFrame,
    /// WebP first VP8L or VP8 bitstream header (inside the first frame when animated).
    WebpBitstream,
}

impl SizeField {
    /// The largest width or height the field can state.
    pub fn max_side(self) -> u32 {
        match self {
            SizeField::PngIhdr => i32::MAX as u32,
            SizeField::JpegSof | SizeField::GifScreen | SizeField::GifFrame => u32::from(u16::MAX),
            SizeField::WebpCanvas | SizeField::WebpFrame => 1 << 24,
            SizeField::WebpBitstream => 1 << 14,
        }
    }

    /// The fields a `format` file can have.
    pub fn of(format: ImageFormat) -> &'static [SizeField] {
        match format {
            ImageFormat::Png => &[SizeField::PngIhdr],
            ImageFormat::Jpeg => &[SizeField::JpegSof],
            ImageFormat::Gif => &[SizeField::GifScreen, SizeField::GifFrame],
            ImageFormat::Webp => &[
                SizeField::WebpCanvas,
                SizeField::WebpFrame,
                SizeField::WebpBitstream,
            ],
        }
    }
}

/// Overwrite `field` in `bytes` to state `width` x `height` (each at most `field.max_side()`;
/// 0 is stated as 1 where the field stores "size minus one"). False when the file has no such
/// field (a still WebP has no ANMF).
pub(super) fn set_size(bytes: &mut [u8], field: SizeField, width: u32, height: u32) -> bool {
    let Some(at) = size_field_offset(bytes, field) else {
        return false;
    };
    let (w, h) = (width, height);
    let put = |bytes: &mut [u8], at: usize, v: &[u8]| bytes[at..at + v.len()].copy_from_slice(v);
    let le24 = |v: u32| v.to_le_bytes()[..3].to_vec();
    match field {
        SizeField::PngIhdr => {
            put(bytes, at, &w.to_be_bytes());
            put(bytes, at + 4, &h.to_be_bytes());
            let crc = crc32(&bytes[at - 4..at + 13]);
            put(bytes, at + 13, &crc.to_be_bytes());
        }
        SizeField::JpegSof => {
            put(bytes, at, &(h as u16).to_be_bytes());
            put(bytes, at + 2, &(w as u16).to_be_bytes());
        }
        SizeField::GifScreen | SizeField::GifFrame => {
            put(bytes, at, &(w as u16).to_le_bytes());
            put(bytes, at + 2, &(h as u16).to_le_bytes());
        }
        SizeField::WebpCanvas | SizeField::WebpFrame => {
            put(bytes, at, &le24(w.saturating_sub(1)));
            put(bytes, at + 3, &le24(h.saturating_sub(1)));
        }
        SizeField::WebpBitstream if bytes[at] == 0x2F => {
            // VP8L: 14 bits each after the signature byte; keep the alpha and version bits.
            let old = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap());
            let packed = (old & 0xF000_0000) | w.saturating_sub(1) | (h.saturating_sub(1) << 14);
            put(bytes, at + 1, &packed.to_le_bytes());
        }
        SizeField::WebpBitstream => {
            // VP8: 14-bit sizes after the start code, scaling bits cleared.
            put(bytes, at + 6, &((w & 0x3FFF) as u16).to_le_bytes());
            put(bytes, at + 8, &((h & 0x3FFF) as u16).to_le_bytes());
        }
    }
    true
}

/// Where `field`'s first byte (or its chunk payload, for WebP bitstreams) is.
fn size_field_offset(bytes: &[u8], field: SizeField) -> Option<usize> {
    match field {
        SizeField::PngIhdr => (&bytes[12..16] == b"IHDR").then_some(16),
        SizeField::JpegSof => {
            let mut at = 2;
            while bytes.get(at) == Some(&0xFF) {
                let marker = bytes[at + 1];
                if matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC) {
                    return Some(at + 5);
                }
                at += 2 + usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
            }
            None
        }
        SizeField::GifScreen => Some(6),
        SizeField::GifFrame => {
            let table = |flags: u8| {
                if flags & 0x80 != 0 {
                    3 << ((flags & 7) + 1)
                } else {
                    0
                }
            };
            let mut at = 13 + table(bytes[10]);
            while bytes[at] == 0x21 {
                at += 2;
                while bytes[at] != 0 {
                    at += 1 + usize::from(bytes[at]);
                }
                at += 1;
            }
            (bytes[at] == 0x2C).then_some(at + 5)
        }
        SizeField::WebpCanvas | SizeField::WebpFrame | SizeField::WebpBitstream => {
            let mut at = 12;
            while at + 8 <= bytes.len() {
                let kind = &bytes[at..at + 4];
                let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
                let payload = at + 8;
                match (field, kind) {
                    (SizeField::WebpCanvas, b"VP8X") => return Some(payload + 4),
                    (SizeField::WebpFrame, b"ANMF") => return Some(payload + 6),
                    (SizeField::WebpBitstream, b"VP8L" | b"VP8 ") => return Some(payload),
                    // Step into the frame: its data chunks follow its 16-byte header.
                    (SizeField::WebpBitstream, b"ANMF") => {
                        at = payload + 16;
                        continue;
                    }
                    _ => {}
                }
                at = payload + len + (len & 1);
            }
            None
        }
    }
}

// Made once with libwebp 1.2.4 from a 16x12 gradient (`cwebp -q 40`; with a transparent hole
// for the alpha one; `img2webp -lossy -q 40` over two such frames for the animated one): no
// Rust encoder writes lossy WebP.
const LOSSY_WEBP: &[u8] = &[
    0x52, 0x49, 0x46, 0x46, 0x52, 0x00, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50, 0x38, 0x20,
    0x46, 0x00, 0x00, 0x00, 0xf0, 0x01, 0x00, 0x9d, 0x01, 0x2a, 0x10, 0x00, 0x0c, 0x00, 0x03, 0x80,
    0x5a, 0x25, 0xb0, 0x02, 0x74, 0x01, 0x0e, 0xc4, 0xbe, 0x91, 0x31, 0x00, 0x00, 0xfe, 0xf5, 0xdc,
    0x4a, 0x75, 0x9d, 0x35, 0x91, 0x86, 0x03, 0x46, 0x16, 0xb1, 0xe8, 0xee, 0x08, 0x9d, 0x82, 0x53,
    0x4f, 0x7c, 0xdd, 0xac, 0xcb, 0xb7, 0x7c, 0x51, 0xb6, 0xf6, 0x40, 0xe1, 0x9d, 0xdf, 0xc1, 0x8f,
    0xf9, 0xcc, 0xcc, 0x7f, 0xc4, 0xc2, 0x6a, 0x39, 0x20, 0x00,
];

const LOSSY_ALPHA_WEBP: &[u8] = &[
    0x52, 0x49, 0x46, 0x46, 0x88, 0x00, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50, 0x38, 0x58,
    0x0a, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x41, 0x4c,
    0x50, 0x48, 0x15, 0x00, 0x00, 0x00, 0x01, 0x0f, 0x30, 0xff, 0x11, 0x11, 0x42, 0x2c, 0x98, 0x20,
    0xe4, 0x4f, 0xbb, 0x2b, 0x87, 0x88, 0xfe, 0x07, 0xd0, 0x00, 0x00, 0x00, 0x56, 0x50, 0x38, 0x20,
    0x4c, 0x00, 0x00, 0x00, 0xf0, 0x01, 0x00, 0x9d, 0x01, 0x2a, 0x10, 0x00, 0x0c, 0x00, 0x03, 0x80,
    0x5a, 0x25, 0xb0, 0x02, 0x74, 0x01, 0x1f, 0xdb, 0x60, 0xdc, 0xde, 0x10, 0x00, 0xfe, 0xf5, 0xdc,
    0x4d, 0x3d, 0x3d, 0x88, 0x20, 0x24, 0x24, 0x1d, 0x17, 0xf4, 0x97, 0xe1, 0x16, 0xbb, 0x98, 0x98,
    0xd6, 0xc8, 0xf6, 0x1c, 0xd3, 0xb5, 0xc2, 0xd9, 0x41, 0x19, 0xf5, 0xb4, 0x33, 0x86, 0x15, 0xd4,
    0xf9, 0x49, 0xf8, 0x3f, 0x3f, 0x51, 0xcb, 0xa7, 0xf8, 0x18, 0x4d, 0x47, 0x24, 0x00, 0x00, 0x00,
];

const ANIMATED_LOSSY_WEBP: &[u8] = &[
    0x52, 0x49, 0x46, 0x46, 0x44, 0x01, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50, 0x38, 0x58,
    0x0a, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x41, 0x4e,
    0x49, 0x4d, 0x06, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x41, 0x4e, 0x4d, 0x46,
    0x82, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x0b, 0x00, 0x00,
    0x64, 0x00, 0x00, 0x02, 0x41, 0x4c, 0x50, 0x48, 0x15, 0x00, 0x00, 0x00, 0x01, 0x0f, 0x30, 0xff,
    0x11, 0x11, 0x42, 0x2c, 0x98, 0x20, 0xe4, 0x4f, 0xbb, 0x2b, 0x87, 0x88, 0xfe, 0x07, 0xd0, 0x00,
    0x00, 0x00, 0x56, 0x50, 0x38, 0x20, 0x4c, 0x00, 0x00, 0x00, 0xf0, 0x01, 0x00, 0x9d, 0x01, 0x2a,
    0x10, 0x00, 0x0c, 0x00, 0x03, 0x80, 0x5a, 0x25, 0xb0, 0x02, 0x74, 0x01, 0x1f, 0xdb, 0x60, 0xdc,
    0xde, 0x10, 0x00, 0xfe, 0xf5, 0xdc, 0x4d, 0x3d, 0x3d, 0x88, 0x20, 0x24, 0x24, 0x1d, 0x17, 0xf4,
    0x97, 0xe1, 0x16, 0xbb, 0x98, 0x98, 0xd6, 0xc8, 0xf6, 0x1c, 0xd3, 0xb5, 0xc2, 0xd9, 0x41, 0x19,
    0xf5, 0xb4, 0x33, 0x86, 0x15, 0xd4, 0xf9, 0x49, 0xf8, 0x3f, 0x3f, 0x51, 0xcb, 0xa7, 0xf8, 0x18,
    0x4d, 0x47, 0x24, 0x00, 0x00, 0x00, 0x41, 0x4e, 0x4d, 0x46, 0x8e, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00, 0x41, 0x4c,
    0x50, 0x48, 0x15, 0x00, 0x00, 0x00, 0x01, 0x0f, 0x30, 0xff, 0x11, 0x11, 0x42, 0x2c, 0x98, 0x20,
    0xe4, 0x4f, 0xbb, 0x2b, 0x87, 0x88, 0xfe, 0x07, 0xd0, 0x00, 0x00, 0x00, 0x56, 0x50, 0x38, 0x20,
    0x58, 0x00, 0x00, 0x00, 0xd4, 0x01, 0x00, 0x9d, 0x01, 0x2a, 0x10, 0x00, 0x0c, 0x00, 0x00, 0x00,
    0x5a, 0x25, 0xb0, 0x02, 0x74, 0x01, 0x1f, 0x30, 0x28, 0xb3, 0x90, 0x00, 0xfe, 0xf1, 0x84, 0x13,
    0xe5, 0x8c, 0xfd, 0x98, 0x2c, 0x72, 0x92, 0x44, 0xda, 0x23, 0x8f, 0xaa, 0x04, 0xc4, 0x45, 0xb2,
    0xa4, 0x68, 0xee, 0xb7, 0x40, 0x84, 0x2f, 0x95, 0xe6, 0x72, 0x6e, 0xf3, 0xd0, 0xdd, 0xac, 0xcb,
    0xed, 0xe2, 0xc9, 0x4d, 0xec, 0x7b, 0x1f, 0x76, 0x08, 0x63, 0xdd, 0xae, 0x6b, 0xae, 0x6d, 0x61,
    0x7d, 0x3d, 0xaf, 0xcf, 0x38, 0xf5, 0x0d, 0xf6, 0xaf, 0xaf, 0xc0, 0x00,
];
