use super::*;
use crate::attach::image::samples::noise;

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
