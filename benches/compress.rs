//! `cargo bench --bench compress`: how long `attach::image::prepare` takes to fit a 12-megapixel
//! image under the 1.5 MiB base64 budget, against a plain decode of the same bytes measured in
//! the same run. Inputs are generated in memory (nothing big is committed). Prints a markdown
//! table on stdout.

#![expect(clippy::print_stdout, reason = "a benchmark reports on stdout")]

use std::hint::black_box;
use std::io::Cursor;
use std::time::Duration;

use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{DynamicImage, ImageFormat as Codec, Rgb, RgbImage, RgbaImage};
use pi_ccswitch_run::attach::image::{ImageFormat, MAX_BASE64_LEN, PreparedImage, prepare};
use pi_ccswitch_run::clock;

const WIDTH: u32 = 4000;
const HEIGHT: u32 = 3000;
const RUNS: usize = 5;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }
}

/// Smooth random field: a grid of random values every `cell` pixels, bilinearly interpolated.
struct ValueNoise {
    cell: u32,
    cols: u32,
    values: Vec<f32>,
}

impl ValueNoise {
    fn new(rng: &mut Rng, cell: u32) -> Self {
        let cols = WIDTH / cell + 2;
        let rows = HEIGHT / cell + 2;
        let values = (0..cols * rows)
            .map(|_| rng.next() as f32 / u32::MAX as f32)
            .collect();
        ValueNoise { cell, cols, values }
    }

    fn at(&self, x: u32, y: u32) -> f32 {
        let (cx, cy) = (x / self.cell, y / self.cell);
        let fx = (x % self.cell) as f32 / self.cell as f32;
        let fy = (y % self.cell) as f32 / self.cell as f32;
        let v = |c: u32, r: u32| self.values[(r * self.cols + c) as usize];
        let top = v(cx, cy) * (1.0 - fx) + v(cx + 1, cy) * fx;
        let bottom = v(cx, cy + 1) * (1.0 - fx) + v(cx + 1, cy + 1) * fx;
        top * (1.0 - fy) + bottom * fy
    }
}

/// Photo-like: sky-to-ground gradient, large and medium smooth structures, hard-edged
/// "objects", fine texture and sensor grain, so JPEG neither explodes nor collapses.
fn photo() -> RgbImage {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let large = ValueNoise::new(&mut rng, 400);
    let medium = ValueNoise::new(&mut rng, 60);
    let texture = ValueNoise::new(&mut rng, 6);
    RgbImage::from_fn(WIDTH, HEIGHT, |x, y| {
        let g = y as f32 / HEIGHT as f32;
        let shape = large.at(x, y) * 0.6 + medium.at(x, y) * 0.3 + texture.at(x, y) * 0.1;
        // Hard edges: a few discs of different brightness.
        let disc = [
            (1200.0, 1400.0, 500.0),
            (2900.0, 1900.0, 700.0),
            (3300.0, 700.0, 250.0),
        ]
        .iter()
        .filter(|(cx, cy, r)| {
            let (dx, dy) = (x as f32 - cx, y as f32 - cy);
            dx * dx + dy * dy < r * r
        })
        .count() as f32;
        let grain = (rng.next() % 13) as f32 - 6.0;
        let c = |base: f32| (base + grain).clamp(0.0, 255.0) as u8;
        Rgb([
            c(60.0 + 120.0 * shape + 40.0 * g + 30.0 * disc),
            c(80.0 + 100.0 * shape + 20.0 * (1.0 - g) + 10.0 * disc),
            c(140.0 * (1.0 - g) + 80.0 * shape - 20.0 * disc),
        ])
    })
}

fn jpeg(img: &RgbImage, quality: u8) -> Vec<u8> {
    let mut out = Vec::new();
    JpegEncoder::new_with_quality(&mut out, quality)
        .encode_image(img)
        .expect("in-memory JPEG encode");
    out
}

fn png(img: &DynamicImage) -> Vec<u8> {
    let mut out = Vec::new();
    img.write_with_encoder(PngEncoder::new_with_quality(
        &mut out,
        CompressionType::Default,
        FilterType::Adaptive,
    ))
    .expect("in-memory PNG encode");
    out
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn time<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(RUNS);
    let mut last = None;
    for _ in 0..RUNS {
        let start = clock::now().instant;
        let out = black_box(f());
        times.push(clock::now().instant.duration_since(start));
        last = Some(out);
    }
    (median(times), last.expect("RUNS > 0"))
}

fn mib(n: usize) -> String {
    format!("{:.2} MiB", n as f64 / 1024.0 / 1024.0)
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let start = clock::now().instant;
    let rgb = photo();
    let mut rgba = DynamicImage::ImageRgb8(rgb.clone()).to_rgba8();
    // A transparent vignette so the alpha channel is really used.
    for (x, y, px) in rgba.enumerate_pixels_mut() {
        let (dx, dy) = (
            x as f32 / WIDTH as f32 - 0.5,
            y as f32 / HEIGHT as f32 - 0.5,
        );
        if dx * dx + dy * dy > 0.2 {
            px.0[3] = 0;
        }
    }
    let rgba: RgbaImage = rgba;
    let cases: Vec<(&str, ImageFormat, Codec, Vec<u8>)> = vec![
        ("JPEG q92", ImageFormat::Jpeg, Codec::Jpeg, jpeg(&rgb, 92)),
        (
            "JPEG q50 (fits: passed through)",
            ImageFormat::Jpeg,
            Codec::Jpeg,
            jpeg(&rgb, 50),
        ),
        (
            "PNG RGB",
            ImageFormat::Png,
            Codec::Png,
            png(&DynamicImage::ImageRgb8(rgb.clone())),
        ),
        (
            "PNG RGBA (transparent corners)",
            ImageFormat::Png,
            Codec::Png,
            png(&DynamicImage::ImageRgba8(rgba)),
        ),
    ];
    println!(
        "inputs generated in {} ms; {RUNS} runs each, median; budget {} of base64\n",
        ms(clock::now().instant.duration_since(start)),
        mib(MAX_BASE64_LEN)
    );
    println!(
        "| input ({WIDTH}x{HEIGHT}) | input size | output | output size (base64) | output dimensions | prepare ms | decode ms | prepare / decode |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (name, format, codec, bytes) in &cases {
        let (decode_time, _) = time(|| {
            image::ImageReader::with_format(Cursor::new(bytes), *codec)
                .decode()
                .expect("decode generated image")
        });
        let (prepare_time, prepared): (Duration, PreparedImage) =
            time(|| prepare(bytes, *format, MAX_BASE64_LEN).expect("prepare generated image"));
        assert!(prepared.base64.len() <= MAX_BASE64_LEN);
        println!(
            "| {name} | {} | {} | {} | {}x{} | {} | {} | {:.2} |",
            mib(bytes.len()),
            prepared.mime_type,
            mib(prepared.base64.len()),
            prepared.width,
            prepared.height,
            ms(prepare_time),
            ms(decode_time),
            prepare_time.as_secs_f64() / decode_time.as_secs_f64()
        );
    }
}
