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
//!   would allocate for the bigger claim first). An image 0 pixels wide or high is corrupt, and
//!   so is one the decoder itself panics on (the panic is contained, see `decode`).
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
//! `types` holds the public types and limits (a leaf every room uses; re-exported here). This
//! file holds [`prepare`], which runs the rooms in order: `sniff` (what the bytes are) →
//! `container` (walked to its end, frames counted) → `decode` (bounded, from the header first)
//! → pass-through, or `fit` (re-encode until it fits) using `pixels` (downscale, orientation,
//! flattening).

mod container;
mod decode;
mod fit;
mod pixels;
mod sniff;
mod types;

use ::image::GenericImageView;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

pub use sniff::{Sniffed, sniff};
pub use types::{
    ImageError, ImageFormat, MAX_ATTACHMENT_BYTES, MAX_BASE64_LEN, MAX_IMAGES, MAX_PIXELS,
    MIN_PNG_LONG_SIDE, PreparedImage, base64_len, human_bytes,
};

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
