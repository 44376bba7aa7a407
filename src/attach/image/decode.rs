//! Decoding an image once, with bounded memory: dimensions and the decoder's memory estimate
//! are checked from the header before any pixel buffer is allocated. Also reads the EXIF
//! orientation and maps decoder errors to [`ImageError`]. A decoder that panics on hostile
//! bytes refuses the file instead of ending the run. Must not: resize, re-encode, or decide
//! what is sent.

use std::cell::Cell;
use std::io::Cursor;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use ::image::metadata::Orientation;
use ::image::{DynamicImage, ImageDecoder, ImageReader, Limits};

use super::types::{ImageError, ImageFormat, MAX_PIXELS};

/// Decoder memory bound, so a hostile header cannot make a decoder allocate gigabytes.
pub(super) const MAX_DECODER_ALLOC: u64 = 512 * 1024 * 1024;
/// Neither side may exceed this (a 65,535 × 1 strip is still within `MAX_PIXELS`).
const MAX_SIDE: u32 = 65_535;

fn decoder_limits() -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_DECODER_ALLOC);
    limits
}

/// Decode fully, with bounded memory. Also returns the EXIF orientation (applied only when the
/// image is re-encoded).
pub(super) fn decode(
    bytes: &[u8],
    format: ImageFormat,
) -> Result<(DynamicImage, Orientation), ImageError> {
    contain_panics(format, || decode_unguarded(bytes, format))
}

thread_local! {
    /// Set while this thread runs a decoder under [`contain_panics`].
    static IN_DECODER: Cell<bool> = const { Cell::new(false) };
}

/// Run `decode` so that a panic inside it becomes [`ImageError::Corrupt`]. The decoders are
/// third-party code reading bytes anyone can craft, and the container walk cannot foresee
/// every way they fail (image-webp 0.2.4 indexes out of bounds on some damaged animations);
/// one bad attachment must be refused with exit 2, not abort a run or a batch. The panic's
/// own message is kept off stderr on this thread only: it would read as a crash of this tool.
fn contain_panics<T>(
    format: ImageFormat,
    decode: impl FnOnce() -> Result<T, ImageError>,
) -> Result<T, ImageError> {
    static QUIET_HOOK: Once = Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !IN_DECODER.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = IN_DECODER.with(|flag| flag.replace(true));
    // Nothing decoded survives a panic: the decoder and its buffers are dropped with it.
    let result = panic::catch_unwind(AssertUnwindSafe(decode));
    IN_DECODER.with(|flag| flag.set(was));
    result.unwrap_or_else(|_| {
        Err(ImageError::Corrupt {
            format,
            detail: "the decoder failed on malformed data".to_owned(),
        })
    })
}

fn decode_unguarded(
    bytes: &[u8],
    format: ImageFormat,
) -> Result<(DynamicImage, Orientation), ImageError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format.codec());
    reader.limits(decoder_limits());
    let mut decoder = reader.into_decoder().map_err(|e| decode_error(e, format))?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > MAX_PIXELS
        || decoder.total_bytes() > MAX_DECODER_ALLOC
    {
        return Err(ImageError::TooLarge {
            format,
            detail: size_detail(width, height),
        });
    }
    // A GIF's logical screen may be 0 wide; nothing can be sent (or re-encoded) from that.
    if width == 0 || height == 0 {
        return Err(ImageError::Corrupt {
            format,
            detail: format!("no pixels: {width}x{height}"),
        });
    }
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let img = DynamicImage::from_decoder(decoder).map_err(|e| decode_error(e, format))?;
    Ok((img, orientation))
}

/// "10000x8000, 80.0 megapixels".
pub(super) fn size_detail(width: u32, height: u32) -> String {
    let megapixels = (u64::from(width) * u64::from(height)) as f64 / 1e6;
    format!("{width}x{height}, {megapixels:.1} megapixels")
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
