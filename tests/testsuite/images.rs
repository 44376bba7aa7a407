//! Image attachments and `--task-complexity` end to end through real Pi (0.84.4 and 1.6.0): what
//! the model receives (MIME type, payload, the 1.5 MiB base64 budget, the prompt), recognition by
//! signature rather than by name, downscaling of a large photo, modality-aware failover,
//! rejections before Pi is asked anything, and the thinking level the complexity estimate
//! forwards.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::support::*;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

both_versions!(
    png_and_jpeg_reach_a_vision_model_in_order,
    signature_beats_the_file_name,
    large_photo_is_downscaled_to_fit_the_budget,
    text_only_start_model_hands_the_image_to_a_vision_model,
    image_survives_a_rate_limit_failover_intact,
    no_image_capable_model_is_exit_1_without_sending,
);

/// Largest base64 payload for one image (SPEC §1: 1.5 MiB).
const MAX_BASE64: usize = 1_572_864;
const PROMPT: &str = "describe the attached images";
const ANSWER: &str = "I see two tiny pictures.";
const FALLBACK_TEXT: &str = "Answer from the vision fallback.";

/// Size of the generated "photo": 12.2 megapixels, 4:3.
const PHOTO_W: u32 = 4032;
const PHOTO_H: u32 = 3024;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/attachments")
        .join(name)
}

/// Copies a fixture into the env's cwd as `as_name`; returns its absolute path.
fn copy_fixture(env: &TestEnv, name: &str, as_name: &str) -> PathBuf {
    let to = env.cwd.join(as_name);
    std::fs::copy(fixture(name), &to)
        .unwrap_or_else(|e| panic!("copy fixture {name} to {}: {e}", to.display()));
    to
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn run_from<'a>(env: &TestEnv, provider: &'a str, model: &'a str, extra: &[&'a str]) -> Output {
    let mut args = vec!["--no-tools", "--provider", provider, "--model", model, "-v"];
    args.extend_from_slice(extra);
    env.run(args)
}

/// The text parts of the last user message (image parts dropped).
#[track_caller]
fn user_text(req: &Request) -> String {
    req.last_user_text()
        .expect("a user message")
        .lines()
        .filter(|l| *l != "<image>")
        .collect::<Vec<_>>()
        .join("\n")
}

/// Number of image parts in the last user message.
fn user_image_parts(req: &Request) -> usize {
    req.last_user_text()
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == "<image>")
        .count()
}

/// The conversation is exactly Pi's system prompt plus one user message.
#[track_caller]
fn assert_single_user_message(req: &Request) {
    let roles: Vec<&str> = req
        .roles()
        .into_iter()
        .filter(|r| *r != "system" && *r != "developer")
        .collect();
    assert_eq!(roles, ["user"], "messages: {:?}", req.messages);
}

#[track_caller]
fn assert_image_within_budget(img: &Image) {
    assert!(
        img.bytes > 0,
        "image payload does not decode ({})",
        img.mime
    );
    assert!(
        img.base64.len() <= MAX_BASE64,
        "image base64 is {} bytes, over the {MAX_BASE64} budget",
        img.base64.len()
    );
}

fn png_and_jpeg_reach_a_vision_model_in_order(v: &str) {
    let providers = vec![ProviderSpec::new(
        "fake-a",
        "a",
        vec![ModelSpec::vision("v-main")],
    )];
    let env = TestEnv::new(v, &providers);
    let png = copy_fixture(&env, "tiny.png", "tiny.png");
    let jpg = copy_fixture(&env, "tiny.jpg", "tiny.jpg");
    env.llm.set_default(Behaviour::text(ANSWER));
    let out = run_from(
        &env,
        "fake-a",
        "v-main",
        &["@tiny.png", "@tiny.jpg", PROMPT],
    );
    out.assert_success();
    assert_eq!(out.stdout, format!("{ANSWER}\n"), "{}", out.dump());
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    let req = &reqs[0];
    assert_eq!(req.model, "v-main");
    assert_single_user_message(req);
    assert_eq!(user_text(req), PROMPT, "{:?}", req.messages);
    assert_eq!(user_image_parts(req), 2, "{:?}", req.messages);
    assert_eq!(req.images.len(), 2);
    assert_eq!(req.images[0].mime, "image/png", "order kept: PNG first");
    assert_eq!(req.images[1].mime, "image/jpeg");
    for (img, file) in req.images.iter().zip([&png, &jpg]) {
        assert_image_within_budget(img);
        // Small enough to pass through byte for byte.
        assert_eq!(
            BASE64.decode(&img.base64).expect("base64"),
            read(file),
            "{} not sent as is",
            file.display()
        );
    }
    env.assert_no_orphans();
}

fn signature_beats_the_file_name(v: &str) {
    let providers = vec![ProviderSpec::new(
        "fake-a",
        "a",
        vec![ModelSpec::vision("v-main")],
    )];
    let env = TestEnv::new(v, &providers);
    let photo = copy_fixture(&env, "photo-named.txt", "photo-named.txt");
    let text = copy_fixture(&env, "text-named.png", "text-named.png");
    let out = run_from(
        &env,
        "fake-a",
        "v-main",
        &["@photo-named.txt", "@text-named.png", PROMPT],
    );
    out.assert_success();
    assert_eq!(out.stdout, format!("{DEFAULT_TEXT}\n"), "{}", out.dump());
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    let req = &reqs[0];
    assert_eq!(req.images.len(), 1, "only the JPEG is an image");
    assert_eq!(req.images[0].mime, "image/jpeg");
    assert_image_within_budget(&req.images[0]);
    assert_eq!(BASE64.decode(&req.images[0].base64).unwrap(), read(&photo));
    let msg = user_text(req);
    let content = String::from_utf8(read(&text)).expect("text fixture is UTF-8");
    assert!(
        msg.contains(&format!("<file name=\"{}\">", text.display())),
        "text-named.png not wrapped as text: {msg:?}"
    );
    assert!(msg.contains(content.trim_end()), "{msg:?}");
    assert!(
        !msg.contains("photo-named.txt"),
        "the JPEG must not be wrapped as text: {msg:?}"
    );
    assert!(msg.ends_with(PROMPT), "{msg:?}");
}

/// A 12-megapixel JPEG of noise over a gradient (noise compresses badly, so it is far over the
/// budget), generated once per test process.
fn photo_jpeg() -> &'static [u8] {
    static PHOTO: OnceLock<Vec<u8>> = OnceLock::new();
    PHOTO.get_or_init(|| {
        let mut state: u32 = 0x2545_f491;
        let mut noise = move || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 24) as u8
        };
        let img = image::ImageBuffer::from_fn(PHOTO_W, PHOTO_H, |x, y| {
            let base = [
                (x * 160 / PHOTO_W) as u8,
                (y * 160 / PHOTO_H) as u8,
                ((x + y) * 80 / (PHOTO_W + PHOTO_H)) as u8,
            ];
            image::Rgb(base.map(|b| b.saturating_add(noise() / 3)))
        });
        let mut bytes = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 90)
            .encode_image(&img)
            .expect("encode the test photo");
        bytes
    })
}

fn large_photo_is_downscaled_to_fit_the_budget(v: &str) {
    let original = photo_jpeg();
    let b64_len = original.len().div_ceil(3) * 4;
    assert!(
        b64_len > MAX_BASE64 && original.len() < 20 * 1024 * 1024,
        "test photo must need compression yet be accepted: {} bytes",
        original.len()
    );
    let providers = vec![ProviderSpec::new(
        "fake-a",
        "a",
        vec![ModelSpec::vision("v-main")],
    )];
    let env = TestEnv::new(v, &providers);
    let path = env.cwd.join("photo.jpg");
    std::fs::write(&path, original).expect("write the test photo");
    let out = run_from(&env, "fake-a", "v-main", &["@photo.jpg", PROMPT]);
    out.assert_success();
    assert_eq!(out.stdout, format!("{DEFAULT_TEXT}\n"), "{}", out.dump());
    out.assert_stderr_contains(&format!("downscaled from {PHOTO_W}x{PHOTO_H}"))
        .assert_stderr_contains("photo.jpg");
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    assert_eq!(user_text(&reqs[0]), PROMPT);
    assert_eq!(reqs[0].images.len(), 1);
    let img = &reqs[0].images[0];
    assert_eq!(img.mime, "image/jpeg");
    assert_image_within_budget(img);
    let sent = BASE64.decode(&img.base64).expect("base64");
    let decoded = image::load_from_memory(&sent).expect("the sent image decodes");
    let (w, h) = (decoded.width(), decoded.height());
    assert!(w < PHOTO_W && h < PHOTO_H, "not downscaled: {w}x{h}");
    let want = f64::from(PHOTO_W) / f64::from(PHOTO_H);
    let got = f64::from(w) / f64::from(h);
    assert!(
        (got / want - 1.0).abs() <= 0.01,
        "aspect ratio changed: {w}x{h} from {PHOTO_W}x{PHOTO_H}"
    );
    assert!(read(&path) == original, "the original file was modified");
}

fn text_only_start_model_hands_the_image_to_a_vision_model(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("t-main")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::vision("v-other")]),
    ];
    let env = TestEnv::new(v, &providers);
    let png = copy_fixture(&env, "tiny.png", "tiny.png");
    env.llm
        .script("b", "v-other", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_from(&env, "fake-a", "t-main", &["@tiny.png", PROMPT]);
    out.assert_success()
        .assert_stderr_contains("switch fake-a/t-main → fake-b/v-other (modality)");
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"), "{}", out.dump());
    assert!(
        env.llm.requests_to("a", "t-main").is_empty(),
        "the text-only model must never see the request\n{}",
        out.dump()
    );
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    let fb = &reqs[0];
    assert_eq!((fb.route.as_str(), fb.model.as_str()), ("b", "v-other"));
    assert_single_user_message(fb);
    assert_eq!(user_text(fb), PROMPT);
    assert_eq!(fb.images.len(), 1);
    assert_eq!(fb.images[0].mime, "image/png");
    assert_eq!(BASE64.decode(&fb.images[0].base64).unwrap(), read(&png));
    env.assert_no_orphans();
}

/// fake-b/m has the start model's id on another provider (ranked first for an ordinary
/// failover) but is text-only: the image must go to fake-c's vision model instead.
fn image_survives_a_rate_limit_failover_intact(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::vision("m")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("m")]),
        ProviderSpec::new("fake-c", "c", vec![ModelSpec::vision("v-next")]),
    ];
    let env = TestEnv::new(v, &providers);
    let jpg = copy_fixture(&env, "tiny.jpg", "tiny.jpg");
    env.llm.script("a", "m", vec![Behaviour::rate_limited()]);
    env.llm
        .script("c", "v-next", vec![Behaviour::text(FALLBACK_TEXT)]);
    let out = run_from(&env, "fake-a", "m", &["@tiny.jpg", PROMPT]);
    out.assert_success()
        .assert_stderr_contains("switch fake-a/m → fake-c/v-next (rate_limit)");
    assert_eq!(out.stdout, format!("{FALLBACK_TEXT}\n"), "{}", out.dump());
    assert!(
        env.llm.requests_to("b", "m").is_empty(),
        "the text-only model must never see the request\n{}",
        out.dump()
    );
    let first = env.llm.requests_to("a", "m");
    let fb = env.llm.requests_to("c", "v-next");
    assert_eq!(first.len(), 1, "{}", out.dump());
    assert_eq!(fb.len(), 1, "{}", out.dump());
    assert_single_user_message(&fb[0]);
    assert_eq!(user_text(&fb[0]), PROMPT);
    assert_eq!(first[0].images.len(), 1);
    assert_eq!(fb[0].images.len(), 1);
    assert_eq!(fb[0].images[0].mime, "image/jpeg");
    assert_eq!(
        fb[0].images[0].base64, first[0].images[0].base64,
        "the fallback got a different image"
    );
    assert_eq!(BASE64.decode(&fb[0].images[0].base64).unwrap(), read(&jpg));
    env.assert_no_orphans();
}

fn no_image_capable_model_is_exit_1_without_sending(v: &str) {
    let providers = vec![
        ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("t-main")]),
        ProviderSpec::new("fake-b", "b", vec![ModelSpec::text("t-other")]),
    ];
    let env = TestEnv::new(v, &providers);
    copy_fixture(&env, "tiny.png", "tiny.png");
    let out = run_from(&env, "fake-a", "t-main", &["@tiny.png", PROMPT]);
    out.assert_code(1);
    assert!(
        out.stderr.to_lowercase().contains("image"),
        "stderr does not say why\n{}",
        out.dump()
    );
    assert!(out.stdout.is_empty(), "{}", out.dump());
    assert!(
        env.llm.requests().is_empty(),
        "nothing may be sent\n{}",
        out.dump()
    );
    env.assert_no_orphans();
}

// ---------------------------------------------------------------------------------------------
// Rejections: exit 2 before Pi is asked anything (one Pi version is enough).

fn only_vision() -> Vec<ProviderSpec> {
    vec![ProviderSpec::new(
        "fake-a",
        "a",
        vec![ModelSpec::vision("v-main")],
    )]
}

/// Runs with `attachments` and checks the rejection contract; returns the output.
#[track_caller]
fn rejected(env: &TestEnv, attachments: &[String]) -> Output {
    let mut extra: Vec<&str> = attachments.iter().map(String::as_str).collect();
    extra.push(PROMPT);
    let out = run_from(env, "fake-a", "v-main", &extra);
    out.assert_code(2);
    assert!(out.stdout.is_empty(), "{}", out.dump());
    assert!(
        env.llm.requests().is_empty(),
        "Pi must not be asked\n{}",
        out.dump()
    );
    out
}

#[test]
fn truncated_png_is_rejected_naming_the_file() {
    let env = TestEnv::new(PI_MIN, &only_vision());
    let path = copy_fixture(&env, "truncated.png", "truncated.png");
    let out = rejected(&env, &["@truncated.png".into()]);
    let err = out.stderr.to_lowercase();
    out.assert_stderr_contains(&path.display().to_string())
        .check(
            err.contains("truncated") || err.contains("corrupt"),
            "stderr should say what is wrong with the image",
        );
}

/// A 332-byte animated WebP whose first frame has alpha but a damaged `VP8 ` tag after it made
/// image-webp 0.2.4 panic inside the decoder: stderr showed the panic and "reading the
/// attachments failed: task 1 panicked …" without naming the file. It is a corrupt image like
/// any other.
#[test]
fn crafted_webp_that_crashed_the_decoder_is_rejected() {
    let env = TestEnv::new(PI_MIN, &only_vision());
    let path = copy_fixture(
        &env,
        "frame-without-bitstream.webp",
        "frame-without-bitstream.webp",
    );
    let out = rejected(&env, &["@frame-without-bitstream.webp".into()]);
    out.assert_stderr_contains(&path.display().to_string())
        .assert_stderr_contains("WebP")
        .check(!out.stderr.contains("panicked"), "no panic on stderr");
}

#[test]
fn pdf_is_rejected() {
    let env = TestEnv::new(PI_MIN, &only_vision());
    let path = copy_fixture(&env, "doc.pdf", "doc.pdf");
    let out = rejected(&env, &["@doc.pdf".into()]);
    out.assert_stderr_contains(&path.display().to_string())
        .assert_stderr_contains("PDF");
}

#[test]
fn attachment_over_20_mib_is_rejected() {
    let env = TestEnv::new(PI_MIN, &only_vision());
    let path = env.cwd.join("huge.png");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(25 * 1024 * 1024).expect("set_len");
    drop(f);
    let out = rejected(&env, &["@huge.png".into()]);
    out.assert_stderr_contains(&path.display().to_string())
        .check(
            out.stderr.to_lowercase().contains("too large"),
            "stderr should say the file is too large",
        );
}

#[test]
fn twenty_one_images_are_rejected() {
    let env = TestEnv::new(PI_MIN, &only_vision());
    let args: Vec<String> = (1..=21)
        .map(|i| {
            copy_fixture(&env, "tiny.png", &format!("img{i:02}.png"));
            format!("@img{i:02}.png")
        })
        .collect();
    let out = rejected(&env, &args);
    out.check(
        out.stderr.to_lowercase().contains("too many images"),
        "stderr should say there are too many images",
    );
}

#[test]
fn twenty_images_are_all_sent() {
    let env = TestEnv::new(PI_MIN, &only_vision());
    let mut args: Vec<String> = (1..=20)
        .map(|i| {
            copy_fixture(&env, "tiny.png", &format!("img{i:02}.png"));
            format!("@img{i:02}.png")
        })
        .collect();
    args.push(PROMPT.into());
    let extra: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_from(&env, "fake-a", "v-main", &extra);
    out.assert_success();
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    assert_eq!(reqs[0].images.len(), 20);
    assert!(reqs[0].images.iter().all(|i| i.mime == "image/png"));
}

// ---------------------------------------------------------------------------------------------
// --task-complexity → --thinking → the request's reasoning_effort (one Pi version is enough).

fn reasoning_providers() -> Vec<ProviderSpec> {
    vec![ProviderSpec::new(
        "fake-r",
        "r",
        vec![
            ModelSpec::text("r").reasoning(),
            ModelSpec::vision("rv").reasoning(),
            ModelSpec::text("plain"),
        ],
    )]
}

/// Runs `extra` on `fake-r/<model>` and returns the one request's reasoning_effort.
#[track_caller]
fn effort(env: &TestEnv, model: &str, extra: &[&str]) -> Option<String> {
    env.llm.clear_requests();
    let out = run_from(env, "fake-r", model, extra);
    out.assert_success();
    assert_eq!(out.stdout, format!("{DEFAULT_TEXT}\n"), "{}", out.dump());
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    reqs[0].reasoning_effort.clone()
}

/// What Pi itself puts in the request for `fake-r/r` when run without any thinking flag.
fn pi_own_default_effort(env: &TestEnv) -> Option<String> {
    env.llm.clear_requests();
    let out = run_command(
        env.pi_cmd([
            "-p",
            "--no-session",
            "--no-extensions",
            "--no-tools",
            "--provider",
            "fake-r",
            "--model",
            "r",
            "what is 2+2?",
        ]),
        None,
        RUN_TIMEOUT,
    );
    out.assert_success();
    let reqs = env.llm.requests();
    assert_eq!(reqs.len(), 1, "{}", out.dump());
    reqs[0].reasoning_effort.clone()
}

/// Without either flag the runner leaves the model's default alone; `high` and a short `auto`
/// prompt change it.
#[test]
fn task_complexity_sets_the_level_and_no_flag_leaves_the_default() {
    let env = TestEnv::new(PI_MIN, &reasoning_providers());
    let default = effort(&env, "r", &["what is 2+2?"]);
    assert_eq!(
        default,
        pi_own_default_effort(&env),
        "without flags the runner changed Pi's default reasoning"
    );
    let high = effort(&env, "r", &["--task-complexity", "high", "what is 2+2?"]);
    assert_eq!(high.as_deref(), Some("high"));
    let low = effort(&env, "r", &["--task-complexity", "auto", "what is 2+2?"]);
    assert_eq!(low.as_deref(), Some("low"), "a short question is low");
    assert_ne!(default, high, "no flag must not force a level");
    assert_ne!(default, low, "no flag must not force a level");
}

/// An explicit `--thinking` beats `--task-complexity`; `auto` with an image is medium; a
/// non-reasoning model gets the level clamped away by Pi and the run still succeeds.
#[test]
fn explicit_thinking_wins_and_images_count() {
    let env = TestEnv::new(PI_MIN, &reasoning_providers());
    copy_fixture(&env, "tiny.png", "tiny.png");
    for level in ["medium", "low"] {
        assert_eq!(
            effort(
                &env,
                "r",
                &[
                    "--thinking",
                    level,
                    "--task-complexity",
                    "high",
                    "what is 2+2?"
                ]
            )
            .as_deref(),
            Some(level),
            "an explicit --thinking {level} wins over --task-complexity high"
        );
    }
    assert_eq!(
        effort(
            &env,
            "rv",
            &["--task-complexity", "auto", "@tiny.png", "what is this?"]
        )
        .as_deref(),
        Some("medium"),
        "any image is at least medium"
    );
    assert_eq!(
        effort(
            &env,
            "plain",
            &["--task-complexity", "high", "what is 2+2?"]
        ),
        None,
        "Pi clamps the level to a non-reasoning model"
    );
}
