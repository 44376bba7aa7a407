//! Re-encoding a decoded image until its base64 fits the budget: PNG or JPEG, transparency
//! kept or flattened, size predicted from measured bytes per pixel and cheap row probes (module
//! doc of `image`: "Downscaling", "Transparency", "GIF and animation"). Must not: decode, or
//! touch the file's own bytes (pass-through is decided before this runs).

use ::image::DynamicImage;
use ::image::codecs::jpeg::JpegEncoder;
use ::image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use ::image::metadata::Orientation;
use ::image::{GenericImageView, ImageEncoder};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::pixels::{Pixels, area};
use super::types::{ImageError, ImageFormat, MIN_PNG_LONG_SIDE, PreparedImage, base64_len};

const JPEG_QUALITY: u8 = 85;
/// Aim this far below the budget so a prediction that is a little off still fits.
const TARGET_FILL: f64 = 0.92;
/// A fitting attempt this much below the budget is worth one try at a larger size.
const GROW_BELOW: f64 = 0.55;
const MAX_ATTEMPTS: usize = 8;
/// Re-encoded images are never made smaller than this on the long side.
const MIN_LONG_SIDE: u32 = 8;

/// A decoded image that cannot be sent as the file's own bytes.
pub(super) struct Source {
    pub img: DynamicImage,
    /// EXIF orientation, applied because re-encoding drops the tag.
    pub orientation: Orientation,
    pub format: ImageFormat,
    /// More than one frame: only the first was decoded, and it must be converted.
    pub animated: bool,
    /// Size of the file, for a first guess at bytes per pixel.
    pub file_len: usize,
}

/// Re-encode `source` (converted, downscaled or both) so its base64 is at most
/// `max_base64_len`.
pub(super) fn reencode(source: Source, max_base64_len: usize) -> Result<PreparedImage, ImageError> {
    let Source {
        img,
        orientation,
        format,
        animated,
        file_len,
    } = source;
    let (original_width, original_height) = img.dimensions();
    let must_convert = format == ImageFormat::Gif || animated;
    let budget = max_base64_len / 4 * 3;
    let px = Pixels::from_image(img);
    let transparent = px.transparent();
    let source_bpp = file_len as f64 / area(original_width, original_height);
    let done = |fit: FitAttempt, encoding: Encoding| PreparedImage {
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
            let fit = FitAttempt {
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

fn oriented_size(width: u32, height: u32, orientation: Orientation) -> (u32, u32) {
    use Orientation as O;
    match orientation {
        O::Rotate90 | O::Rotate270 | O::Rotate90FlipH | O::Rotate270FlipH => (height, width),
        _ => (width, height),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
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
struct FitAttempt {
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
) -> Result<Result<FitAttempt, Smallest>, ImageError> {
    let (w0, h0) = (px.width, px.height);
    let total = px.pixel_count();
    let target = budget as f64 * TARGET_FILL;
    let mut want_pixels = target / bytes_per_pixel_guess.max(1e-3);
    let mut probes = MAX_PROBES;
    let mut best: Option<FitAttempt> = None;
    let mut smallest_fail: Option<Smallest> = None;
    // Pixel counts known to be too big, and known to fit.
    let mut too_big = f64::INFINITY;
    let mut fits = 0.0_f64;
    let at_most = |want: f64, too_big: f64| want.min(too_big * 0.95);

    for _ in 0..MAX_ATTEMPTS {
        let (w, h) = scaled(w0, h0, (want_pixels / total).sqrt());
        let p = area(w, h);
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
            best = Some(FitAttempt {
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
        Ok(FitAttempt {
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
pub(super) fn scaled(w0: u32, h0: u32, scale: f64) -> (u32, u32) {
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

pub(super) fn encode(px: &Pixels, encoding: Encoding) -> Result<Vec<u8>, ImageError> {
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
