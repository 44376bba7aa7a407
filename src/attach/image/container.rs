//! Walking PNG, JPEG, GIF and WebP containers to their end, so a truncated file is refused
//! even where a decoder would quietly fill in the missing part; counting animation frames.
//! Looks only at the structure (chunk lengths, markers, block sizes), never at pixels. Must
//! not: decode, allocate in proportion to anything the file claims, or loop more than once
//! over any byte.

use super::{ImageError, ImageFormat};

/// Walk the container to its end so truncation cannot go unnoticed. Returns the frame count
/// (1 for still formats).
pub(super) fn check(bytes: &[u8], format: ImageFormat) -> Result<usize, ImageError> {
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

pub(super) fn gif_frames(bytes: &[u8]) -> Result<usize, &'static str> {
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

pub(super) fn webp_frames(bytes: &[u8]) -> Result<usize, &'static str> {
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
#[path = "container_tests.rs"]
mod tests;
