//! The public types and limits of image attachments, shared by every room (`sniff`,
//! `container`, `decode`, `fit`, `pixels`). A leaf: the rooms use it and `image` re-exports it,
//! so no room reaches back up into `image` for a type while `image` drives the rooms.

use std::fmt;

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

    /// The `image` crate's name for it (for the decoder).
    pub(super) fn codec(self) -> ::image::ImageFormat {
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
    /// Standard base64 with padding; at most the `max_base64_len` given to [`prepare`](super::prepare).
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
