use super::*;
use crate::attach::image::samples::fixture;

#[test]
fn gif_frames_counts_still_gifs_as_one() {
    assert_eq!(gif_frames(&fixture("tiny.gif")), Ok(1));
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
