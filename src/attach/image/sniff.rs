//! What a file's bytes are, judged by signature only (module doc of `image`: "Recognition by
//! signature only"). Owns the four accepted image signatures, the text-vs-binary rule for weak
//! ASCII signatures, and the wording that names a rejected binary. Must not: decode, check
//! integrity (a signature is a claim, proven by `container` and `decode`), or do any I/O.

use super::types::ImageFormat;

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

#[cfg(test)]
#[path = "sniff_tests.rs"]
mod tests;
