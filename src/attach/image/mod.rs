//! Image attachments: recognise by signature, prove intact, fit the base64 budget. Pure on bytes.
//!
//! Owns: deciding what a file's bytes are ([`sniff`]), decoding images once to prove they are
//! intact, and producing the base64 payload Pi receives ([`prepare`]). Must not: read or write
//! files, print, or log image contents (the caller reads `@path` files and prefixes every error
//! with the path).
//!
//! ## Behaviour
//!
//! - **Recognition by signature only.** PNG (`89 50 4E 47 0D 0A 1A 0A`), JPEG (`FF D8 FF`), GIF
//!   (`GIF87a`/`GIF89a`) and WebP (`RIFF….WEBP`) are images whatever the file is called: a PNG
//!   named `notes.txt` is an image, a text file named `photo.png` is text. Other known binary
//!   signatures (PDF, zip, executables, audio, other image formats such as HEIC or BMP…) are
//!   rejected, saying what was found. Some of those signatures are plain ASCII (`MZ`, `BM`, `ID3`,
//!   `%!`…); a file that starts with one of them but is otherwise clean text (no NUL, no control
//!   characters other than tab, newline, carriage return, form feed and escape) is text — "BMI
//!   notes" is not a bitmap. PDF is always binary. Any file containing a NUL byte is binary
//!   (this includes UTF-16 text, reported as such).
//! - **Integrity.** Every image is decoded fully once, and its container is walked to its end
//!   marker (PNG `IEND`, JPEG `EOI`, GIF blocks, the RIFF size of WebP), so truncated or corrupt
//!   files are rejected even where a decoder would quietly fill in the missing part. Decoding is
//!   bounded: at most [`MAX_PIXELS`] (64 megapixels) and 512 MiB of decoder memory, checked from
//!   the header before any pixel buffer is allocated. Sizes stated inside the container count
//!   too: a GIF frame over 64 megapixels is too large even on a small logical screen, and a
//!   WebP bitstream or animation frame that disagrees with its canvas is corrupt (decoders
//!   would allocate for the bigger claim first). An image 0 pixels wide or high is corrupt.
//! - **Limits.** At most [`MAX_IMAGES`] images per run and [`MAX_ATTACHMENT_BYTES`] per
//!   attachment, each with its own error (enforced by the caller, from the file size, before
//!   reading and decoding); the base64 sent for one image is at most [`MAX_BASE64_LEN`]
//!   (1.5 MiB).
//! - **Pass-through.** A PNG, JPEG or WebP whose base64 fits is sent byte for byte as read, with
//!   its own MIME type (still decoded first, to prove it intact).
//! - **Downscaling.** Otherwise the image is scaled down in memory and re-encoded until its
//!   base64 fits. Aspect ratio is kept to the nearest pixel; pixels are area-averaged (each
//!   source pixel counts once, colour weighted by alpha so invisible pixels cannot tint edges).
//!   The size is predicted, not searched blindly: a probe encodes a dozen evenly spaced
//!   16-row bands of the candidate size to measure bytes per pixel, then one full encode
//!   usually fits between 78 % and 96 % of the budget (a miss steps down by at least 15 %).
//!   Opaque images are sent as JPEG (quality 85). 16-bit and float images are reduced to 8 bits
//!   per channel. EXIF orientation is applied when re-encoding, because re-encoding drops the
//!   EXIF tag (a passed-through file keeps its tag). The original file is never touched.
//! - **Transparency.** An image whose alpha channel is actually used (some pixel not fully
//!   opaque) is re-encoded as PNG so transparency survives, as long as a PNG at least
//!   [`MIN_PNG_LONG_SIDE`] (1024) pixels on its long side (or the full image, if smaller) fits;
//!   past that it is flattened onto a white background and sent as JPEG, which keeps far more
//!   pixels within the same budget. An alpha channel that is fully opaque is ignored (JPEG).
//! - **GIF and animation.** GIFs are always converted, to a still PNG at full size when that
//!   fits, else by the rules above (downscaled; JPEG when opaque): OpenAI accepts only
//!   non-animated GIFs and Gemini's documented image types do not include GIF. Animated images
//!   (GIF or WebP with more than one frame) are sent as their **first frame** only;
//!   [`PreparedImage::animated`] and [`PreparedImage::note`] let the caller say so. Animated PNG
//!   (APNG) is passed through like any PNG: readers that do not animate show its default image.
//! - **Formats sent.** `image/png`, `image/jpeg`, or `image/webp` (WebP only when passed
//!   through); never GIF.
//! - **Cannot fit.** If even an image 8 pixels on its long side cannot fit (only with absurd
//!   budgets), [`ImageError::CannotFit`] names the smallest attempt.
//!
//! Speed (release, 2 cores, 12-megapixel input): about 0.3-0.5 s for a JPEG or PNG photo,
//! dominated by one decode and one JPEG encode; `cargo bench --bench compress` measures it.
//!
//! ## Layout
//!
//! This file holds the public types and [`prepare`], which runs the rooms in order:
//! `sniff` (what the bytes are) → `container` (walked to its end, frames counted) → `decode`
//! (bounded, from the header first) → pass-through, or `fit` (re-encode until it fits) using
//! `pixels` (downscale, orientation, flattening).

mod container;
mod decode;
mod fit;
mod pixels;
mod sniff;

use std::fmt;

use ::image::GenericImageView;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

pub use sniff::{Sniffed, sniff};

/// Largest base64 payload sent for one image: 1.5 MiB.
pub const MAX_BASE64_LEN: usize = 1_572_864;
/// Most images one run may attach.
pub const MAX_IMAGES: usize = 20;
/// Largest attachment file accepted: 20 MiB.
pub const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;
/// Largest image decoded, in pixels (64 megapixels: a 12-MP photo is far below).
pub const MAX_PIXELS: u64 = 64_000_000;
/// A transparent image is flattened to JPEG rather than sent as a PNG smaller than this.
pub const MIN_PNG_LONG_SIDE: u32 = 1024;

/// An image format accepted as an attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageFormat {
    pub fn name(self) -> &'static str {
        match self {
            ImageFormat::Png => "PNG",
            ImageFormat::Jpeg => "JPEG",
            ImageFormat::Gif => "GIF",
            ImageFormat::Webp => "WebP",
        }
    }

    pub fn mime_type(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Gif => "image/gif",
            ImageFormat::Webp => "image/webp",
        }
    }

    fn codec(self) -> ::image::ImageFormat {
        match self {
            ImageFormat::Png => ::image::ImageFormat::Png,
            ImageFormat::Jpeg => ::image::ImageFormat::Jpeg,
            ImageFormat::Gif => ::image::ImageFormat::Gif,
            ImageFormat::Webp => ::image::ImageFormat::WebP,
        }
    }
}

impl fmt::Display for ImageFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An image ready for Pi's `prompt.images`: `{type:"image", data: base64, mimeType}`.
#[derive(Clone, PartialEq, Eq)]
pub struct PreparedImage {
    /// `image/png`, `image/jpeg` or `image/webp` (never GIF).
    pub mime_type: &'static str,
    /// Standard base64 with padding; at most the `max_base64_len` given to [`prepare`].
    pub base64: String,
    /// Dimensions of the image sent (after EXIF orientation when re-encoded).
    pub width: u32,
    pub height: u32,
    /// The file's format.
    pub original_format: ImageFormat,
    /// Dimensions of the image as stored in the file.
    pub original_width: u32,
    pub original_height: u32,
    /// The pixel size was reduced to fit the budget.
    pub resized: bool,
    /// The bytes sent are not the file's own bytes (converted, resized or both).
    pub reencoded: bool,
    /// The source had several frames; only the first is sent.
    pub animated: bool,
    /// Transparency was flattened onto white to fit the budget.
    pub flattened: bool,
}

impl PreparedImage {
    /// A one-line note for stderr when the image sent differs from the file, e.g.
    /// "downscaled from 4000x3000 to 3373x2529 and re-encoded as JPEG to fit 1.5 MiB",
    /// "converted from GIF to PNG; animated image: only its first frame is sent".
    pub fn note(&self, max_base64_len: usize) -> Option<String> {
        if !self.reencoded {
            return None;
        }
        let format = match self.mime_type {
            "image/png" => "PNG",
            "image/jpeg" => "JPEG",
            _ => "WebP",
        };
        let from = self.original_format.name();
        let limit = human_bytes(max_base64_len as u64);
        let mut note = if self.resized {
            format!(
                "downscaled from {}x{} to {}x{} and re-encoded as {format} to fit {limit}",
                self.original_width, self.original_height, self.width, self.height,
            )
        } else if from == format {
            format!("re-encoded as {format} to fit {limit}")
        } else if self.original_format == ImageFormat::Gif || self.animated {
            // converted for compatibility, not size
            format!("converted from {from} to {format}")
        } else {
            format!("converted from {from} to {format} to fit {limit}")
        };
        if self.animated {
            note.push_str("; animated image: only its first frame is sent");
        }
        if self.flattened {
            note.push_str("; transparency flattened onto white");
        }
        Some(note)
    }
}

impl fmt::Debug for PreparedImage {
    /// Never prints the payload (it can be megabytes and is user content).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedImage")
            .field("mime_type", &self.mime_type)
            .field("base64_len", &self.base64.len())
            .field("width", &self.width)
            .field("height", &self.height)
            .field("original_format", &self.original_format)
            .field("original_width", &self.original_width)
            .field("original_height", &self.original_height)
            .field("resized", &self.resized)
            .field("reencoded", &self.reencoded)
            .field("animated", &self.animated)
            .field("flattened", &self.flattened)
            .finish()
    }
}

/// Why an image cannot be sent. Messages are lowercase and say what to do; the caller prefixes
/// the file path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    /// Truncated or corrupt data.
    Corrupt { format: ImageFormat, detail: String },
    /// A valid file using a feature the decoder does not support.
    Unsupported { format: ImageFormat, detail: String },
    /// Larger than [`MAX_PIXELS`], a side above 65,535 or the decoder memory bound. `detail`
    /// says what was found, e.g. "10000x8000, 80.0 megapixels".
    TooLarge { format: ImageFormat, detail: String },
    /// Even the smallest attempt did not fit the base64 budget.
    CannotFit {
        max_base64_len: usize,
        width: u32,
        height: u32,
        mime_type: &'static str,
        base64_len: usize,
    },
    /// The encoder failed (not expected for in-memory buffers).
    Encode(String),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Corrupt { format, detail } => write!(
                f,
                "corrupt or truncated {format} image ({detail}); re-export or re-download it"
            ),
            ImageError::Unsupported { format, detail } => write!(
                f,
                "unsupported {format} variant ({detail}); re-save it as a standard PNG or JPEG"
            ),
            ImageError::TooLarge { format, detail } => write!(
                f,
                "{format} image is too large to decode ({detail}); the limit is {} megapixels: \
                 downscale it before attaching",
                MAX_PIXELS / 1_000_000
            ),
            ImageError::CannotFit {
                max_base64_len,
                width,
                height,
                mime_type,
                base64_len,
            } => write!(
                f,
                "image cannot be made to fit the {} limit for one image: the smallest attempt \
                 ({width}x{height} {mime_type}) still needs {} of base64; crop or shrink it first",
                human_bytes(*max_base64_len as u64),
                human_bytes(*base64_len as u64)
            ),
            ImageError::Encode(detail) => write!(f, "could not re-encode the image: {detail}"),
        }
    }
}

impl std::error::Error for ImageError {}

/// "1.5 MiB", "20 MiB", "830 KiB", "12 bytes".
pub fn human_bytes(n: u64) -> String {
    const KIB: f64 = 1024.0;
    let x = n as f64;
    let (value, unit) = if x >= KIB * KIB {
        (x / (KIB * KIB), "MiB")
    } else if x >= KIB {
        (x / KIB, "KiB")
    } else {
        return format!("{n} bytes");
    };
    let text = format!("{value:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {unit}")
}

/// Base64 length of `n` raw bytes (padded).
pub fn base64_len(n: usize) -> usize {
    n.div_ceil(3).saturating_mul(4)
}

/// Prove `bytes` is an intact `format` image and produce the payload to send, at most
/// `max_base64_len` bytes of base64 (normally [`MAX_BASE64_LEN`]). See the module doc for what
/// is passed through, converted, downscaled or flattened.
pub fn prepare(
    bytes: &[u8],
    format: ImageFormat,
    max_base64_len: usize,
) -> Result<PreparedImage, ImageError> {
    let frames = container::check(bytes, format)?;
    let (img, orientation) = decode::decode(bytes, format)?;
    let (original_width, original_height) = img.dimensions();
    let animated = frames > 1;

    let must_convert = format == ImageFormat::Gif || animated;
    if !must_convert && base64_len(bytes.len()) <= max_base64_len {
        return Ok(PreparedImage {
            mime_type: format.mime_type(),
            base64: BASE64.encode(bytes),
            width: original_width,
            height: original_height,
            original_format: format,
            original_width,
            original_height,
            resized: false,
            reencoded: false,
            animated: false,
            flattened: false,
        });
    }

    fit::reencode(
        fit::Source {
            img,
            orientation,
            format,
            animated,
            file_len: bytes.len(),
        },
        max_base64_len,
    )
}

#[cfg(test)]
mod alloc_probe;
#[cfg(test)]
mod mutation_tests;
#[cfg(test)]
mod samples;
#[cfg(test)]
mod tests;
