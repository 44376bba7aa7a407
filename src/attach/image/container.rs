//! Walking PNG, JPEG, GIF and WebP containers to their end, so a truncated file is refused
//! even where a decoder would quietly fill in the missing part; counting animation frames;
//! refusing frame sizes stated inside the container that a decoder would allocate for before
//! its own checks (GIF frames, WebP canvas, frames and bitstreams). Looks only at the
//! structure (chunk lengths, markers, block sizes, stated sizes), never at pixels. Must
//! not: decode, allocate in proportion to anything the file claims, or loop more than once
//! over any byte.

use super::decode::size_detail;
use super::types::{ImageError, ImageFormat, MAX_PIXELS};

/// Walk the container to its end so truncation cannot go unnoticed. Returns the frame count
/// (1 for still formats).
pub(super) fn check(bytes: &[u8], format: ImageFormat) -> Result<usize, ImageError> {
    let result = match format {
        ImageFormat::Png => png_complete(bytes).map(|()| 1).map_err(Flaw::from),
        ImageFormat::Jpeg => jpeg_complete(bytes).map(|()| 1).map_err(Flaw::from),
        ImageFormat::Gif => gif_frames(bytes),
        ImageFormat::Webp => webp_frames(bytes),
    };
    result.map_err(|flaw| match flaw {
        Flaw::Corrupt(detail) => ImageError::Corrupt {
            format,
            detail: detail.to_owned(),
        },
        Flaw::TooLarge(detail) => ImageError::TooLarge { format, detail },
    })
}

/// Why a walk stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Flaw {
    /// Truncated or malformed structure.
    Corrupt(&'static str),
    /// A frame claims more than [`MAX_PIXELS`]; what it claims.
    TooLarge(String),
}

impl From<&'static str> for Flaw {
    fn from(detail: &'static str) -> Flaw {
        Flaw::Corrupt(detail)
    }
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

/// Also refuses a frame claiming more than [`MAX_PIXELS`]: the decoder allocates a buffer for
/// the whole frame even when the logical screen is tiny (a 60-byte file asked for 256 MB).
/// Frames larger than the screen are not refused as such: browsers show them clipped.
pub(super) fn gif_frames(bytes: &[u8]) -> Result<usize, Flaw> {
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
            None => return Err(Flaw::Corrupt("data ends before the GIF trailer")),
            Some(0x3B) => return Ok(frames.max(1)),
            Some(0x21) => at = skip_sub_blocks(bytes, at + 2)?,
            Some(0x2C) => {
                let flags = *bytes.get(at + 9).ok_or(TRUNCATED)?;
                let w = u16::from_le_bytes([bytes[at + 5], bytes[at + 6]]);
                let h = u16::from_le_bytes([bytes[at + 7], bytes[at + 8]]);
                if u64::from(w) * u64::from(h) > MAX_PIXELS {
                    let frame = size_detail(u32::from(w), u32::from(h));
                    return Err(Flaw::TooLarge(format!("a frame of {frame}")));
                }
                // descriptor (10 bytes), local color table, LZW minimum code size
                at = skip_sub_blocks(bytes, at + 10 + color_table(flags) + 1)?;
                frames += 1;
            }
            // Junk after the last frame is tolerated too.
            Some(_) if frames > 0 => return Ok(frames),
            Some(_) => return Err(Flaw::Corrupt("malformed block structure")),
        }
    }
}

/// The RIFF size must cover the file, a VP8X canvas may not claim more than [`MAX_PIXELS`],
/// and every frame must agree with the canvas: a bitstream or animation frame claiming more
/// pixels than the canvas makes the decoder allocate for its claim before it finds the data
/// missing (a 144-byte file asked for 64 MB), and libwebp refuses such files too.
pub(super) fn webp_frames(bytes: &[u8]) -> Result<usize, Flaw> {
    let size = le_u32(bytes, 4).ok_or(TRUNCATED)? as usize;
    if size.saturating_add(8) > bytes.len() {
        return Err(TRUNCATED.into());
    }
    let riff = &bytes[..size + 8];
    let mut chunks = riff_chunks(riff, 12);
    let Some(first) = chunks.next() else {
        return Err(TRUNCATED.into());
    };
    let (kind, vp8x) = first?;
    if kind != b"VP8X" {
        // Simple format: the bitstream's own size is the image size, checked by the decoder
        // from the header before it allocates.
        return Ok(1);
    }
    let (flags, canvas) = match vp8x {
        [flags, _, _, _, size @ ..] => (*flags, frame_size(size).ok_or(TRUNCATED)?),
        _ => return Err(TRUNCATED.into()),
    };
    if u64::from(canvas.0) * u64::from(canvas.1) > MAX_PIXELS {
        return Err(Flaw::TooLarge(size_detail(canvas.0, canvas.1)));
    }
    let animated = flags & 0x02 != 0;
    let mut frames = 0;
    for chunk in chunks {
        let (kind, payload) = chunk?;
        match kind {
            b"ANMF" if animated => {
                let (x, y) = (
                    2 * le_u24(payload, 0).ok_or(TRUNCATED)?,
                    2 * le_u24(payload, 3).ok_or(TRUNCATED)?,
                );
                let (w, h) = frame_size(payload.get(6..).ok_or(TRUNCATED)?).ok_or(TRUNCATED)?;
                if x + w > canvas.0 || y + h > canvas.1 {
                    return Err("an animation frame lies outside the WebP canvas".into());
                }
                if frame_bitstream(payload)? != (w, h) {
                    return Err("a WebP frame's bitstream size differs from the frame's".into());
                }
                frames += 1;
            }
            b"VP8 " | b"VP8L"
                if !animated && bitstream_size(kind, payload).is_some_and(|s| s != canvas) =>
            {
                return Err("the WebP bitstream size differs from the canvas size".into());
            }
            _ => {}
        }
    }
    Ok(frames.max(1))
}

/// Each `(kind, payload)` of the RIFF chunks in `bytes` from `at` on. A chunk whose payload
/// runs past the end is an error; a missing final padding byte is tolerated.
fn riff_chunks(
    bytes: &[u8],
    mut at: usize,
) -> impl Iterator<Item = Result<(&[u8], &[u8]), &'static str>> {
    std::iter::from_fn(move || {
        if at >= bytes.len() {
            return None;
        }
        let chunk = (|| {
            let kind = bytes.get(at..at + 4).ok_or(TRUNCATED)?;
            let len = le_u32(bytes, at + 4).ok_or(TRUNCATED)? as usize;
            let payload = bytes.get(at + 8..).and_then(|rest| rest.get(..len));
            // header, payload, padding to an even size
            at = at
                .saturating_add(8)
                .saturating_add(len)
                .saturating_add(len & 1);
            Ok((kind, payload.ok_or(TRUNCATED)?))
        })();
        if chunk.is_err() {
            at = bytes.len();
        }
        Some(chunk)
    })
}

/// The size stated by an ANMF frame's bitstream, found where the decoder reads it: the first
/// chunk of the frame data, or the one right after an `ALPH` chunk, which must then be lossy.
/// The decoder does not compare a bitstream that follows `ALPH` with the frame's size, and
/// fills the frame from whatever chunk comes next: image-webp 0.2.4 panics on a frame whose
/// `VP8 ` tag after `ALPH` was damaged (the same fault as the open image-rs/image-webp#182), so
/// both are refused here.
fn frame_bitstream(anmf: &[u8]) -> Result<(u32, u32), &'static str> {
    const MISSING: &str = "a WebP animation frame has no VP8 or VP8L bitstream";
    let mut chunks = riff_chunks(anmf, 16);
    let (kind, payload) = chunks.next().ok_or(MISSING)??;
    let (kind, payload) = if kind == b"ALPH" {
        match chunks.next().ok_or(MISSING)?? {
            (b"VP8 ", payload) => (b"VP8 ".as_slice(), payload),
            _ => return Err("a WebP animation frame's alpha is not followed by a VP8 bitstream"),
        }
    } else {
        (kind, payload)
    };
    if !matches!(kind, b"VP8 " | b"VP8L") {
        return Err(MISSING);
    }
    bitstream_size(kind, payload).ok_or("a WebP animation frame's bitstream header is unreadable")
}

/// Width and height stated by a VP8 key frame or VP8L header; `None` when the header is not
/// recognisable (the decoder reports that).
fn bitstream_size(kind: &[u8], payload: &[u8]) -> Option<(u32, u32)> {
    let size = match kind {
        b"VP8 " => {
            let start_code = payload.get(3..6)?;
            if start_code != [0x9D, 0x01, 0x2A] {
                return None;
            }
            let w = u16::from_le_bytes([*payload.get(6)?, *payload.get(7)?]) & 0x3FFF;
            let h = u16::from_le_bytes([*payload.get(8)?, *payload.get(9)?]) & 0x3FFF;
            (u32::from(w), u32::from(h))
        }
        _ => {
            if *payload.first()? != 0x2F {
                return None;
            }
            let bits = le_u32(payload, 1)?;
            ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
        }
    };
    Some(size)
}

/// A VP8X canvas or ANMF frame size: two 24-bit "minus one" fields.
fn frame_size(bytes: &[u8]) -> Option<(u32, u32)> {
    Some((le_u24(bytes, 0)? + 1, le_u24(bytes, 3)? + 1))
}

fn le_u24(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(3)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], 0]))
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
#[path = "container_tests.rs"]
mod tests;
