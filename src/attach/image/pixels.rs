//! 8-bit pixel buffers and the pixel operations fitting needs: area-average downscaling (whole
//! images or only sampled rows), EXIF orientation, flattening onto white, detecting used
//! transparency. Must not: decode, encode or choose sizes (that is `fit`).

use std::borrow::Cow;

use ::image::metadata::Orientation;
use ::image::{DynamicImage, ExtendedColorType, GenericImageView, ImageBuffer};

use super::types::ImageError;

/// Area in pixels, at least 1 (a divisor for bytes per pixel).
pub(super) fn area(width: u32, height: u32) -> f64 {
    (f64::from(width) * f64::from(height)).max(1.0)
}

/// Channel layouts both encoders accept, 8 bits per channel, alpha last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Layout {
    L,
    La,
    Rgb,
    Rgba,
}

impl Layout {
    pub(super) fn channels(self) -> usize {
        match self {
            Layout::L => 1,
            Layout::La => 2,
            Layout::Rgb => 3,
            Layout::Rgba => 4,
        }
    }

    pub(super) fn has_alpha(self) -> bool {
        matches!(self, Layout::La | Layout::Rgba)
    }

    pub(super) fn color_type(self) -> ExtendedColorType {
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
pub(super) struct Pixels {
    pub data: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub layout: Layout,
}

impl Pixels {
    /// Takes the decoder's buffer without copying when it is already 8-bit; 16-bit and float
    /// images are reduced to 8 bits (what every model input is anyway).
    pub(super) fn from_image(img: DynamicImage) -> Pixels {
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

    pub(super) fn pixel_count(&self) -> f64 {
        area(self.width, self.height)
    }

    /// Some pixel is not fully opaque.
    pub(super) fn transparent(&self) -> bool {
        let c = self.layout.channels();
        self.layout.has_alpha() && self.data.chunks_exact(c).any(|p| p[c - 1] != u8::MAX)
    }

    /// `self` at `width` x `height` (borrowed when the size is unchanged).
    pub(super) fn resized(&self, width: u32, height: u32) -> Cow<'_, Pixels> {
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
    pub(super) fn sample(&self, width: u32, height: u32, bands: u32, band_rows: u32) -> Pixels {
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
    pub(super) fn oriented(&self, orientation: Orientation) -> Result<Cow<'_, Pixels>, ImageError> {
        if orientation == Orientation::NoTransforms {
            return Ok(Cow::Borrowed(self));
        }
        let mut img = self.clone().into_image()?;
        img.apply_orientation(orientation);
        Ok(Cow::Owned(Pixels::from_image(img)))
    }

    /// Composited onto white, alpha dropped.
    pub(super) fn flattened(&self) -> Pixels {
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

#[cfg(test)]
#[path = "pixels_tests.rs"]
mod tests;
