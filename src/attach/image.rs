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
//!   the header before any pixel buffer is allocated.
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

use std::borrow::Cow;
use std::fmt;
use std::io::Cursor;

use ::image::codecs::jpeg::JpegEncoder;
use ::image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use ::image::metadata::Orientation;
use ::image::{
    DynamicImage, ExtendedColorType, GenericImageView, ImageBuffer, ImageDecoder, ImageEncoder,
    ImageReader, Limits,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

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

/// Decoder memory bound, so a hostile header cannot make a decoder allocate gigabytes.
const MAX_DECODER_ALLOC: u64 = 512 * 1024 * 1024;
/// Neither side may exceed this (a 65,535 × 1 strip is still within `MAX_PIXELS`).
const MAX_SIDE: u32 = 65_535;
const JPEG_QUALITY: u8 = 85;
/// Aim this far below the budget so a prediction that is a little off still fits.
const TARGET_FILL: f64 = 0.92;
/// A fitting attempt this much below the budget is worth one try at a larger size.
const GROW_BELOW: f64 = 0.55;
const MAX_ATTEMPTS: usize = 8;
/// Re-encoded images are never made smaller than this on the long side.
const MIN_LONG_SIDE: u32 = 8;

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

/// What a file's bytes are, judged by signature only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// One of the four accepted image formats (not yet proven intact: see [`prepare`]).
    Image(ImageFormat),
    /// No NUL byte and no known binary signature. Not yet checked for UTF-8: that is the
    /// caller's rule.
    Text,
    /// Anything else, described for an error message, e.g.
    /// "a PDF document (application/pdf)" or "binary data (contains NUL bytes)".
    OtherBinary(String),
}

/// Classify `bytes` by signature (module doc: "Recognition by signature only").
pub fn sniff(bytes: &[u8]) -> Sniffed {
    if let Some(format) = image_signature(bytes) {
        return Sniffed::Image(format);
    }
    // html, xml and shell-script matches are text by definition.
    let binary_kind = infer::get(bytes).filter(|k| k.matcher_type() != infer::MatcherType::Text);
    if let Some(kind) = binary_kind {
        // PDF is binary even when a minimal one happens to be plain ASCII.
        if kind.mime_type() == "application/pdf" || !looks_like_text(bytes) {
            return Sniffed::OtherBinary(describe(kind));
        }
        return Sniffed::Text;
    }
    if bytes.contains(&0) {
        let utf16 = bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]);
        return Sniffed::OtherBinary(if utf16 {
            "UTF-16 text (only UTF-8 text can be attached)".to_owned()
        } else {
            "binary data (contains NUL bytes)".to_owned()
        });
    }
    Sniffed::Text
}

/// The strict signatures of the four accepted formats. `infer` alone would call any file
/// starting with "GIF" a GIF.
fn image_signature(bytes: &[u8]) -> Option<ImageFormat> {
    let kind = infer::get(bytes)?;
    let format = match kind.mime_type() {
        "image/png" if bytes.starts_with(b"\x89PNG\r\n\x1a\n") => ImageFormat::Png,
        "image/jpeg" if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) => ImageFormat::Jpeg,
        "image/gif" if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") => {
            ImageFormat::Gif
        }
        "image/webp" if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" => {
            ImageFormat::Webp
        }
        _ => return None,
    };
    Some(format)
}

/// No NUL and no control characters a text file would not contain.
fn looks_like_text(bytes: &[u8]) -> bool {
    !bytes
        .iter()
        .any(|&b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0C | 0x1B)) || b == 0x7F)
}

fn describe(kind: infer::Type) -> String {
    use infer::MatcherType as M;
    let what = match (kind.mime_type(), kind.matcher_type()) {
        // infer files PDF under archives
        ("application/pdf", _) => "a PDF document",
        (_, M::App) => "an executable or application file",
        (_, M::Archive) => "an archive or compressed file",
        (_, M::Audio) => "an audio file",
        (_, M::Book) => "an e-book",
        (_, M::Doc) => "a document",
        (_, M::Font) => "a font",
        (_, M::Image) => "an image format other than PNG, JPEG, GIF or WebP",
        (_, M::Video) => "a video",
        (_, M::Text | M::Custom) => "a binary file",
    };
    format!("{what} ({})", kind.mime_type())
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
    let frames = check_container(bytes, format)?;
    let (img, orientation) = decode(bytes, format)?;
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

    let budget = max_base64_len / 4 * 3;
    let px = Pixels::from_image(img);
    let transparent = px.transparent();
    let source_bpp = bytes.len() as f64 / pixels(original_width, original_height);
    let done = |fit: Attempt, encoding: Encoding| PreparedImage {
        mime_type: encoding.mime_type(),
        base64: BASE64.encode(&fit.data),
        width: fit.width,
        height: fit.height,
        original_format: format,
        original_width,
        original_height,
        resized: fit.resized,
        reencoded: true,
        animated,
        flattened: transparent && encoding == Encoding::Jpeg,
    };

    let mut png_bpp = if format == ImageFormat::Png {
        // The source's own compression is a fair first guess for ours.
        source_bpp
    } else {
        2.0
    };
    // A GIF or animation frame is usually flat graphics: a lossless PNG at full size may fit.
    if must_convert {
        let whole = px.oriented(orientation)?;
        let data = encode(&whole, Encoding::Png)?;
        png_bpp = data.len() as f64 / px.pixel_count();
        if data.len() <= budget {
            let (width, height) = oriented_size(px.width, px.height, orientation);
            let fit = Attempt {
                data,
                width,
                height,
                resized: false,
            };
            return Ok(done(fit, Encoding::Png));
        }
    }

    let jpeg_bpp = if format == ImageFormat::Jpeg {
        // Re-encoding a camera JPEG (quality 90-95) at 85 takes roughly two thirds of the bytes;
        // bounded because metadata can dominate a small file.
        (source_bpp * 0.65).clamp(0.05, 1.0)
    } else {
        0.3
    };
    let fitted = if transparent {
        let min_side = MIN_PNG_LONG_SIDE.min(px.width.max(px.height));
        match shrink(&px, orientation, Encoding::Png, png_bpp, budget, min_side)? {
            Ok(fit) => Ok((fit, Encoding::Png)),
            Err(_) => shrink(
                &px,
                orientation,
                Encoding::Jpeg,
                jpeg_bpp,
                budget,
                MIN_LONG_SIDE,
            )?
            .map(|fit| (fit, Encoding::Jpeg)),
        }
    } else {
        shrink(
            &px,
            orientation,
            Encoding::Jpeg,
            jpeg_bpp,
            budget,
            MIN_LONG_SIDE,
        )?
        .map(|fit| (fit, Encoding::Jpeg))
    };
    match fitted {
        Ok((fit, encoding)) => Ok(done(fit, encoding)),
        Err(smallest) => Err(ImageError::CannotFit {
            max_base64_len,
            width: smallest.width,
            height: smallest.height,
            mime_type: smallest.encoding.mime_type(),
            base64_len: base64_len(smallest.len),
        }),
    }
}

fn pixels(width: u32, height: u32) -> f64 {
    (f64::from(width) * f64::from(height)).max(1.0)
}

fn oriented_size(width: u32, height: u32, orientation: Orientation) -> (u32, u32) {
    use Orientation as O;
    match orientation {
        O::Rotate90 | O::Rotate270 | O::Rotate90FlipH | O::Rotate270FlipH => (height, width),
        _ => (width, height),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Png,
    Jpeg,
}

impl Encoding {
    fn mime_type(self) -> &'static str {
        match self {
            Encoding::Png => "image/png",
            Encoding::Jpeg => "image/jpeg",
        }
    }
}

/// An encoded image that fits. `width`/`height` are after orientation.
struct Attempt {
    data: Vec<u8>,
    width: u32,
    height: u32,
    resized: bool,
}

/// The smallest attempt that did not fit.
struct Smallest {
    width: u32,
    height: u32,
    len: usize,
    encoding: Encoding,
}

/// A probe encodes this many evenly spaced bands of the candidate image…
const PROBE_BANDS: u32 = 12;
/// …each this many rows high (a multiple of the 16-row JPEG block height)…
const PROBE_BAND_ROWS: u32 = 16;
/// …and is only worth it for images at least this tall (smaller ones encode quickly in full).
const PROBE_MIN_ROWS: u32 = 512;
/// At most this many probes per [`shrink`].
const MAX_PROBES: usize = 2;
/// A probe predicting a size within this fraction of the target goes straight to a full encode.
const PROBE_ACCEPT: std::ops::RangeInclusive<f64> = 0.85..=1.05;

/// Find a large size (within a few encodes) whose `encoding` fits `budget` raw bytes.
///
/// The first size comes from `bytes_per_pixel_guess`; for big candidates a cheap probe (a
/// sample of rows encoded alone) corrects the guess before the full encode; after a full
/// encode the measured bytes per pixel predicts the next size. `Ok(Err(smallest))`: nothing at
/// least `min_long_side` on its long side fits.
fn shrink(
    px: &Pixels,
    orientation: Orientation,
    encoding: Encoding,
    bytes_per_pixel_guess: f64,
    budget: usize,
    min_long_side: u32,
) -> Result<Result<Attempt, Smallest>, ImageError> {
    let (w0, h0) = (px.width, px.height);
    let total = px.pixel_count();
    let target = budget as f64 * TARGET_FILL;
    let mut want_pixels = target / bytes_per_pixel_guess.max(1e-3);
    let mut probes = MAX_PROBES;
    let mut best: Option<Attempt> = None;
    let mut smallest_fail: Option<Smallest> = None;
    // Pixel counts known to be too big, and known to fit.
    let mut too_big = f64::INFINITY;
    let mut fits = 0.0_f64;
    let at_most = |want: f64, too_big: f64| want.min(too_big * 0.95);

    for _ in 0..MAX_ATTEMPTS {
        let (w, h) = scaled(w0, h0, (want_pixels / total).sqrt());
        let p = pixels(w, h);
        if p >= too_big || p <= fits || w.max(h) < min_long_side {
            break;
        }
        if probes > 0 && h >= PROBE_MIN_ROWS {
            probes -= 1;
            let sample = px.sample(w, h, PROBE_BANDS, PROBE_BAND_ROWS);
            let per_pixel = encode(&sample, encoding)?.len() as f64 / sample.pixel_count();
            if !PROBE_ACCEPT.contains(&(per_pixel * p / target)) {
                let next = at_most(target / per_pixel, too_big);
                if scaled(w0, h0, (next / total).sqrt()) != (w, h) {
                    want_pixels = next;
                    continue;
                }
            }
        }
        let resized = (w, h) != (w0, h0);
        let small = px.resized(w, h);
        let upright = small.oriented(orientation)?;
        let data = encode(&upright, encoding)?;
        let per_pixel = data.len() as f64 / p;
        if data.len() <= budget {
            fits = p;
            let good_enough = data.len() as f64 >= budget as f64 * GROW_BELOW;
            let (width, height) = oriented_size(w, h, orientation);
            best = Some(Attempt {
                data,
                width,
                height,
                resized,
            });
            if !resized || good_enough {
                break;
            }
            // Too conservative: one more try at the predicted size, below what is known too big.
            want_pixels = at_most(target / per_pixel, too_big);
        } else {
            too_big = p;
            smallest_fail = Some(Smallest {
                width: w,
                height: h,
                len: data.len(),
                encoding,
            });
            // Smaller images cost more bytes per pixel, so never step by less than 15 %.
            want_pixels = (target / per_pixel).min(p * 0.85);
        }
    }
    if let Some(fit) = best {
        return Ok(Ok(fit));
    }
    if let Some(fail) = smallest_fail {
        return Ok(Err(fail));
    }
    // No full encode happened: the prediction was already below the minimum size. Try the
    // minimum once.
    let (w, h) = scaled(w0, h0, f64::from(min_long_side) / f64::from(w0.max(h0)));
    let small = px.resized(w, h);
    let upright = small.oriented(orientation)?;
    let data = encode(&upright, encoding)?;
    Ok(if data.len() <= budget {
        let (width, height) = oriented_size(w, h, orientation);
        Ok(Attempt {
            data,
            width,
            height,
            resized: (w, h) != (w0, h0),
        })
    } else {
        Err(Smallest {
            width: w,
            height: h,
            len: data.len(),
            encoding,
        })
    })
}

/// `(w0, h0)` scaled by `scale` (capped at 1), aspect ratio kept, each side at least 1.
fn scaled(w0: u32, h0: u32, scale: f64) -> (u32, u32) {
    let scale = if scale.is_finite() {
        scale.clamp(0.0, 1.0)
    } else {
        1.0
    };
    if scale >= 1.0 {
        return (w0, h0);
    }
    let side = |s: u32| ((f64::from(s) * scale).round() as u32).clamp(1, s);
    (side(w0), side(h0))
}

fn encode(px: &Pixels, encoding: Encoding) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    let result = match encoding {
        Encoding::Jpeg => {
            // JPEG has no alpha: composite onto white (a no-op for opaque pixels).
            let flat;
            let px = if px.layout.has_alpha() {
                flat = px.flattened();
                &flat
            } else {
                px
            };
            JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY).write_image(
                &px.data,
                px.width,
                px.height,
                px.layout.color_type(),
            )
        }
        // Fast (fdeflate) is ~25x quicker than the default level for ~10 % more bytes.
        Encoding::Png => {
            PngEncoder::new_with_quality(&mut out, CompressionType::Fast, PngFilter::Adaptive)
                .write_image(&px.data, px.width, px.height, px.layout.color_type())
        }
    };
    result.map_err(|e| ImageError::Encode(e.to_string()))?;
    Ok(out)
}

/// Channel layouts both encoders accept, 8 bits per channel, alpha last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    L,
    La,
    Rgb,
    Rgba,
}

impl Layout {
    fn channels(self) -> usize {
        match self {
            Layout::L => 1,
            Layout::La => 2,
            Layout::Rgb => 3,
            Layout::Rgba => 4,
        }
    }

    fn has_alpha(self) -> bool {
        matches!(self, Layout::La | Layout::Rgba)
    }

    fn color_type(self) -> ExtendedColorType {
        match self {
            Layout::L => ExtendedColorType::L8,
            Layout::La => ExtendedColorType::La8,
            Layout::Rgb => ExtendedColorType::Rgb8,
            Layout::Rgba => ExtendedColorType::Rgba8,
        }
    }
}

/// Decoded pixels, row-major, `layout.channels()` bytes per pixel.
#[derive(Clone)]
struct Pixels {
    data: Vec<u8>,
    width: u32,
    height: u32,
    layout: Layout,
}

impl Pixels {
    /// Takes the decoder's buffer without copying when it is already 8-bit; 16-bit and float
    /// images are reduced to 8 bits (what every model input is anyway).
    fn from_image(img: DynamicImage) -> Pixels {
        let (width, height) = img.dimensions();
        let (layout, data) = match img {
            DynamicImage::ImageLuma8(b) => (Layout::L, b.into_raw()),
            DynamicImage::ImageLumaA8(b) => (Layout::La, b.into_raw()),
            DynamicImage::ImageRgb8(b) => (Layout::Rgb, b.into_raw()),
            DynamicImage::ImageRgba8(b) => (Layout::Rgba, b.into_raw()),
            other => match (other.color().has_color(), other.color().has_alpha()) {
                (false, false) => (Layout::L, other.to_luma8().into_raw()),
                (false, true) => (Layout::La, other.to_luma_alpha8().into_raw()),
                (true, false) => (Layout::Rgb, other.to_rgb8().into_raw()),
                (true, true) => (Layout::Rgba, other.to_rgba8().into_raw()),
            },
        };
        Pixels {
            data,
            width,
            height,
            layout,
        }
    }

    fn into_image(self) -> Result<DynamicImage, ImageError> {
        let (w, h, data) = (self.width, self.height, self.data);
        let mismatch = || ImageError::Encode("pixel buffer does not match its size".to_owned());
        Ok(match self.layout {
            Layout::L => {
                DynamicImage::ImageLuma8(ImageBuffer::from_raw(w, h, data).ok_or_else(mismatch)?)
            }
            Layout::La => {
                DynamicImage::ImageLumaA8(ImageBuffer::from_raw(w, h, data).ok_or_else(mismatch)?)
            }
            Layout::Rgb => {
                DynamicImage::ImageRgb8(ImageBuffer::from_raw(w, h, data).ok_or_else(mismatch)?)
            }
            Layout::Rgba => {
                DynamicImage::ImageRgba8(ImageBuffer::from_raw(w, h, data).ok_or_else(mismatch)?)
            }
        })
    }

    fn pixel_count(&self) -> f64 {
        pixels(self.width, self.height)
    }

    /// Some pixel is not fully opaque.
    fn transparent(&self) -> bool {
        let c = self.layout.channels();
        self.layout.has_alpha() && self.data.chunks_exact(c).any(|p| p[c - 1] != u8::MAX)
    }

    /// `self` at `width` x `height` (borrowed when the size is unchanged).
    fn resized(&self, width: u32, height: u32) -> Cow<'_, Pixels> {
        if (width, height) == (self.width, self.height) {
            return Cow::Borrowed(self);
        }
        let all_rows: Vec<u32> = (0..height).collect();
        Cow::Owned(self.downscaled_rows(width, height, &all_rows))
    }

    /// Only `rows` (indices into the `width` x `height` result) of `self` downscaled, stacked.
    fn downscaled_rows(&self, width: u32, height: u32, rows: &[u32]) -> Pixels {
        let data = match self.layout {
            Layout::L => box_downscale::<1>(self, width, height, rows),
            Layout::La => box_downscale::<2>(self, width, height, rows),
            Layout::Rgb => box_downscale::<3>(self, width, height, rows),
            Layout::Rgba => box_downscale::<4>(self, width, height, rows),
        };
        Pixels {
            data,
            width,
            height: rows.len() as u32,
            layout: self.layout,
        }
    }

    /// A size probe for `self` at `width` x `height`: `bands` strips of `band_rows` rows spread
    /// evenly over the result, stacked. Only those rows are computed, so probing a candidate
    /// size costs a fraction of resizing to it.
    fn sample(&self, width: u32, height: u32, bands: u32, band_rows: u32) -> Pixels {
        let band_rows = band_rows.min(height);
        let mut rows = Vec::with_capacity((bands * band_rows) as usize);
        for band in 0..bands {
            let start = (u64::from(band) * u64::from(height) / u64::from(bands)) as u32;
            let start = (start / 16 * 16).min(height - band_rows);
            rows.extend(start..start + band_rows);
        }
        self.downscaled_rows(width, height, &rows)
    }

    /// EXIF orientation applied (re-encoding drops the tag that told viewers to rotate).
    fn oriented(&self, orientation: Orientation) -> Result<Cow<'_, Pixels>, ImageError> {
        if orientation == Orientation::NoTransforms {
            return Ok(Cow::Borrowed(self));
        }
        let mut img = self.clone().into_image()?;
        img.apply_orientation(orientation);
        Ok(Cow::Owned(Pixels::from_image(img)))
    }

    /// Composited onto white, alpha dropped.
    fn flattened(&self) -> Pixels {
        let (layout, c) = match self.layout {
            Layout::La => (Layout::L, 2),
            Layout::Rgba => (Layout::Rgb, 4),
            other => {
                return Pixels {
                    layout: other,
                    ..self.clone()
                };
            }
        };
        let mut data = Vec::with_capacity(self.data.len() / c * (c - 1));
        for px in self.data.chunks_exact(c) {
            let a = u32::from(px[c - 1]);
            for &v in &px[..c - 1] {
                data.push(((u32::from(v) * a + 255 * (255 - a) + 127) / 255) as u8);
            }
        }
        Pixels {
            data,
            width: self.width,
            height: self.height,
            layout,
        }
    }
}

/// Area-average downscale: every source pixel counts once, in exactly one target pixel (integer
/// cell boundaries). Colour is averaged weighted by alpha, so fully transparent pixels (whose
/// colour is arbitrary) do not darken or tint the edges. Much faster than a convolution filter
/// on 12-megapixel sources, and as good for the large reductions done here.
///
/// Computes only the result rows listed in `rows` (all of them for a plain resize); the same
/// size unchanged is a copy of those rows.
fn box_downscale<const C: usize>(src: &Pixels, width: u32, height: u32, rows: &[u32]) -> Vec<u8> {
    let alpha = C == 2 || C == 4;
    let (sw, sh) = (src.width as usize, src.height as usize);
    let (dw, dh) = (width.max(1) as usize, height.max(1) as usize);
    let xs: Vec<usize> = (0..=dw).map(|x| x * sw / dw).collect();
    let mut sums = vec![[0u64; C]; dw];
    let mut out = Vec::with_capacity(dw * rows.len() * C);
    let y_edge = |y: usize| y * sh / dh;
    for oy in rows.iter().map(|&y| (y as usize).min(dh - 1)) {
        let (y0, y1) = (y_edge(oy), y_edge(oy + 1));
        sums.iter_mut().for_each(|s| *s = [0; C]);
        for sy in y0..y1 {
            let row = &src.data[sy * sw * C..(sy + 1) * sw * C];
            for (ox, sum) in sums.iter_mut().enumerate() {
                for px in row[xs[ox] * C..xs[ox + 1] * C].chunks_exact(C) {
                    if alpha {
                        let a = u64::from(px[C - 1]);
                        for ch in 0..C - 1 {
                            sum[ch] += u64::from(px[ch]) * a;
                        }
                        sum[C - 1] += a;
                    } else {
                        for ch in 0..C {
                            sum[ch] += u64::from(px[ch]);
                        }
                    }
                }
            }
        }
        for (ox, sum) in sums.iter().enumerate() {
            let n = ((xs[ox + 1] - xs[ox]) as u64 * (y1 - y0) as u64).max(1);
            if alpha {
                let a = sum[C - 1];
                for &s in &sum[..C - 1] {
                    out.push((s + a / 2).checked_div(a).unwrap_or(0) as u8);
                }
                out.push(((a + n / 2) / n) as u8);
            } else {
                for &s in sum {
                    out.push(((s + n / 2) / n) as u8);
                }
            }
        }
    }
    out
}

fn decoder_limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODER_ALLOC);
    limits
}

/// Decode fully, with bounded memory. Also returns the EXIF orientation (applied only when the
/// image is re-encoded).
fn decode(bytes: &[u8], format: ImageFormat) -> Result<(DynamicImage, Orientation), ImageError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format.codec());
    reader.limits(decoder_limits());
    let mut decoder = reader.into_decoder().map_err(|e| decode_error(e, format))?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > MAX_PIXELS
        || decoder.total_bytes() > MAX_DECODER_ALLOC
    {
        return Err(ImageError::TooLarge {
            format,
            detail: format!(
                "{width}x{height}, {:.1} megapixels",
                (u64::from(width) * u64::from(height)) as f64 / 1e6
            ),
        });
    }
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let img = DynamicImage::from_decoder(decoder).map_err(|e| decode_error(e, format))?;
    Ok((img, orientation))
}

fn decode_error(e: ::image::ImageError, format: ImageFormat) -> ImageError {
    use ::image::ImageError as E;
    match e {
        E::Unsupported(u) => ImageError::Unsupported {
            format,
            detail: u.to_string(),
        },
        E::Limits(l) => ImageError::TooLarge {
            format,
            detail: l.to_string(),
        },
        E::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => ImageError::Corrupt {
            format,
            detail: "data ends too early".to_owned(),
        },
        other => ImageError::Corrupt {
            format,
            detail: other.to_string(),
        },
    }
}

/// Walk the container to its end so truncation cannot go unnoticed. Returns the frame count
/// (1 for still formats).
fn check_container(bytes: &[u8], format: ImageFormat) -> Result<usize, ImageError> {
    let result = match format {
        ImageFormat::Png => png_complete(bytes).map(|()| 1),
        ImageFormat::Jpeg => jpeg_complete(bytes).map(|()| 1),
        ImageFormat::Gif => gif_frames(bytes),
        ImageFormat::Webp => webp_frames(bytes),
    };
    result.map_err(|detail| ImageError::Corrupt {
        format,
        detail: detail.to_owned(),
    })
}

const TRUNCATED: &str = "data ends too early";

fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn png_complete(bytes: &[u8]) -> Result<(), &'static str> {
    let mut at = 8;
    loop {
        let len = be_u32(bytes, at).ok_or(TRUNCATED)? as usize;
        let kind = bytes.get(at + 4..at + 8).ok_or(TRUNCATED)?;
        // length, type, data, CRC
        let end = at
            .checked_add(12)
            .and_then(|x| x.checked_add(len))
            .ok_or(TRUNCATED)?;
        if end > bytes.len() {
            return Err(TRUNCATED);
        }
        if kind == b"IEND" {
            return Ok(());
        }
        at = end;
    }
}

fn jpeg_complete(bytes: &[u8]) -> Result<(), &'static str> {
    let no_end = "data ends before the end-of-image marker";
    let mut at = 2;
    loop {
        // Skip anything up to a marker, then fill bytes.
        while *bytes.get(at).ok_or(no_end)? != 0xFF {
            at += 1;
        }
        while *bytes.get(at).ok_or(no_end)? == 0xFF {
            at += 1;
        }
        let marker = bytes[at];
        at += 1;
        match marker {
            0xD9 => return Ok(()),
            0x01 | 0xD0..=0xD8 | 0x00 => {}
            _ => {
                let len = bytes.get(at..at + 2).ok_or(no_end)?;
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                if len < 2 {
                    return Err("malformed segment length");
                }
                at += len;
                if at > bytes.len() {
                    return Err(no_end);
                }
                if marker == 0xDA {
                    // Entropy-coded data: stop at the first real marker (not a stuffed 00,
                    // a restart marker or fill).
                    loop {
                        let rel = bytes[at..].iter().position(|&b| b == 0xFF).ok_or(no_end)?;
                        at += rel;
                        match bytes.get(at + 1) {
                            None => return Err(no_end),
                            Some(0x00 | 0xD0..=0xD7) => at += 2,
                            Some(_) => break,
                        }
                    }
                }
            }
        }
    }
}

fn gif_frames(bytes: &[u8]) -> Result<usize, &'static str> {
    fn skip_sub_blocks(bytes: &[u8], mut at: usize) -> Result<usize, &'static str> {
        loop {
            let n = usize::from(*bytes.get(at).ok_or(TRUNCATED)?);
            at += 1 + n;
            if n == 0 {
                return Ok(at);
            }
            if at > bytes.len() {
                return Err(TRUNCATED);
            }
        }
    }
    fn color_table(flags: u8) -> usize {
        if flags & 0x80 != 0 {
            3 << ((flags & 0x07) + 1)
        } else {
            0
        }
    }
    let flags = *bytes.get(10).ok_or(TRUNCATED)?;
    let mut at = 13 + color_table(flags);
    let mut frames = 0;
    loop {
        match bytes.get(at) {
            None => return Err("data ends before the GIF trailer"),
            Some(0x3B) => return Ok(frames.max(1)),
            Some(0x21) => at = skip_sub_blocks(bytes, at + 2)?,
            Some(0x2C) => {
                let flags = *bytes.get(at + 9).ok_or(TRUNCATED)?;
                // descriptor (10 bytes), local color table, LZW minimum code size
                at = skip_sub_blocks(bytes, at + 10 + color_table(flags) + 1)?;
                frames += 1;
            }
            // Junk after the last frame is tolerated too.
            Some(_) if frames > 0 => return Ok(frames),
            Some(_) => return Err("malformed block structure"),
        }
    }
}

fn webp_frames(bytes: &[u8]) -> Result<usize, &'static str> {
    let size = bytes.get(4..8).ok_or(TRUNCATED)?;
    let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
    if size.saturating_add(8) > bytes.len() {
        return Err(TRUNCATED);
    }
    let animated = bytes.get(12..16) == Some(b"VP8X".as_slice())
        && bytes.get(20).is_some_and(|flags| flags & 0x02 != 0);
    if !animated {
        return Ok(1);
    }
    // Count ANMF chunks inside the ANIM container.
    let mut at: usize = 12;
    let mut frames = 0;
    while let Some(kind) = bytes.get(at..at.saturating_add(4)) {
        let len = bytes.get(at + 4..at + 8).ok_or(TRUNCATED)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if kind == b"ANMF" {
            frames += 1;
        }
        // header, payload, padding to an even size
        at = at
            .saturating_add(8)
            .saturating_add(len)
            .saturating_add(len & 1);
    }
    Ok(frames.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::image::{Rgb, RgbImage, Rgba, RgbaImage};

    fn fixture(name: &str) -> Vec<u8> {
        let path = format!("{}/fixtures/attachments/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn decode_b64(p: &PreparedImage) -> DynamicImage {
        let raw = BASE64.decode(&p.base64).unwrap();
        ::image::load_from_memory(&raw).unwrap()
    }

    /// Smooth gradients plus light deterministic grain.
    fn photo(width: u32, height: u32) -> RgbImage {
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

    fn encode(img: &DynamicImage, format: ::image::ImageFormat) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, format).unwrap();
        out.into_inner()
    }

    fn assert_aspect(p: &PreparedImage) {
        let expected =
            f64::from(p.original_height) * f64::from(p.width) / f64::from(p.original_width);
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

    /// A PNG with a valid header claiming `width` x `height` and no real pixel data.
    fn png_header_only(width: u32, height: u32) -> Vec<u8> {
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

    /// Every byte random: incompressible, so a small image is big in bytes (fast tests).
    fn noise(width: u32, height: u32, channels: usize) -> Vec<u8> {
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

    fn noise_rgb(width: u32, height: u32) -> DynamicImage {
        DynamicImage::ImageRgb8(RgbImage::from_raw(width, height, noise(width, height, 3)).unwrap())
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
    fn gif_frames_counts_still_gifs_as_one() {
        assert_eq!(gif_frames(&fixture("tiny.gif")), Ok(1));
    }

    #[test]
    fn exif_orientation_is_applied_when_reencoding() {
        // A 4x2 JPEG with an APP1 EXIF segment saying "rotate 90° clockwise" (orientation 6).
        let img = DynamicImage::ImageRgb8(photo(400, 200));
        let plain = encode(&img, ::image::ImageFormat::Jpeg);
        let exif: &[u8] =
            b"Exif\0\0MM\0\x2a\0\0\0\x08\0\x01\x01\x12\0\x03\0\0\0\x01\0\x06\0\0\0\0\0\0";
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
            msg.starts_with("image cannot be made to fit the 100 bytes limit for one image: the smallest attempt ("),
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

    #[test]
    fn box_downscale_averages_exactly_and_ignores_hidden_colour() {
        // 4x2 RGB -> 2x1: each output pixel is the mean of a 2x2 cell.
        let px = Pixels {
            data: vec![
                0, 0, 0, 10, 10, 10, 100, 0, 0, 100, 0, 0, //
                20, 20, 20, 30, 30, 30, 100, 0, 0, 100, 0, 4,
            ],
            width: 4,
            height: 2,
            layout: Layout::Rgb,
        };
        let small = px.resized(2, 1);
        assert_eq!(small.data, vec![15, 15, 15, 100, 0, 1]);
        // A fully transparent pixel's colour (here green) must not tint the result.
        let px = Pixels {
            data: vec![255, 0, 0, 255, 0, 255, 0, 0],
            width: 2,
            height: 1,
            layout: Layout::Rgba,
        };
        assert_eq!(px.resized(1, 1).data, vec![255, 0, 0, 128]);
        // Fully transparent everywhere: no division by zero.
        let px = Pixels {
            data: vec![9, 9, 9, 0, 9, 9, 9, 0],
            width: 2,
            height: 1,
            layout: Layout::Rgba,
        };
        assert_eq!(px.resized(1, 1).data, vec![0, 0, 0, 0]);
    }

    #[test]
    fn probe_rows_match_the_full_resize() {
        let data = noise(700, 600, 3);
        let px = Pixels {
            data,
            width: 700,
            height: 600,
            layout: Layout::Rgb,
        };
        let (w, h) = (350, 300);
        let full = px.resized(w, h);
        let sample = px.sample(w, h, 4, 16);
        assert_eq!(sample.height, 64);
        let stride = w as usize * 3;
        for band in 0..4usize {
            let start = (band * 300 / 4) / 16 * 16;
            assert_eq!(
                &sample.data[band * 16 * stride..(band + 1) * 16 * stride],
                &full.data[start * stride..(start + 16) * stride]
            );
        }
    }

    #[test]
    fn flattening_composites_onto_white() {
        let px = Pixels {
            data: vec![0, 0, 0, 0, 0, 0, 0, 255, 200, 100, 0, 128],
            width: 3,
            height: 1,
            layout: Layout::Rgba,
        };
        assert_eq!(
            px.flattened().data,
            vec![255, 255, 255, 0, 0, 0, 227, 177, 127]
        );
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
        chunk(&mut body, b"ANMF", &[0; 17]);
        chunk(&mut body, b"ANMF", &[0; 16]);
        let mut file = b"RIFF".to_vec();
        file.extend_from_slice(&(body.len() as u32).to_le_bytes());
        file.extend_from_slice(&body);
        assert_eq!(webp_frames(&file), Ok(2));
        assert!(webp_frames(&file[..file.len() - 1]).is_err());
        assert_eq!(webp_frames(&fixture("tiny.webp")), Ok(1));
    }
}
