//! Batch throughput through real Pi 0.84.4: 100 short jobs run three ways in one run —
//! 100 separate invocations of the runner (the baseline, like a shell loop), `--batch` with
//! `--jobs 1`, and `--batch` with `--jobs 2` — with the ratios against the baseline, and the
//! runner's own peak memory (VmHWM of the runner process; Pi's processes excluded).
//!
//! A second case streams a 200,000-line job file through `--shard 0/4000 --output FILE` (about
//! 50 jobs run): the runner's peak memory must stay under 15 MiB however long the input.
//!
//! Run: `cargo bench --bench batch` (add `-- N` for another job count; `-- shard` for the
//! streaming case only).

#![allow(clippy::disallowed_methods)]

#[path = "../tests/testsuite/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_llm::{FakeLlm, ModelSpec, ProviderSpec, write_models_json};

const BIN: &str = env!("CARGO_BIN_EXE_pi-ccswitch-run");

fn base(pi: &pi_env::PiInstall, dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("PATH", pi.path_env())
        .env("PI_BIN", &pi.pi_bin)
        .env("PI_CODING_AGENT_DIR", dir)
        .env("HOME", dir)
        .current_dir(dir)
        .args(["--no-tools", "--provider", "fake-a", "--model", "m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    cmd
}

/// Peak RSS (kB) of `child` itself, sampled from /proc until it exits.
fn wait_peak_kb(mut child: Child) -> (std::process::Output, u64) {
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut s) = stdout {
            let _ = std::io::Read::read_to_end(&mut s, &mut buf);
        }
        buf
    });
    loop {
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(kb) = text
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        {
            peak = peak.max(kb);
        }
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait().expect("wait");
    let stdout = reader.join().unwrap_or_default();
    (
        std::process::Output {
            status,
            stdout,
            stderr: Vec::new(),
        },
        peak,
    )
}

/// Lines in the streaming case's job file, and its shard count.
const STREAM_LINES: usize = 200_000;
const STREAM_SHARDS: u64 = 4000;
/// The streaming case's budget for the runner's peak RSS.
const STREAM_BUDGET_KB: u64 = 15 * 1024;

/// FNV-1a 64, as README documents it for `--shard`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// 200,000 jobs (about 150 bytes each) streamed through `--shard 0/4000 --output FILE`.
fn streaming(pi: &pi_env::PiInstall, dir: &std::path::Path, llm: &FakeLlm) {
    let jobs_path = dir.join("big.jsonl");
    let out_path = dir.join("big-results.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&jobs_path).expect("job file"));
    let mut mine = 0;
    for i in 0..STREAM_LINES {
        let id = format!("report-{i:06}");
        if fnv1a64(id.as_bytes()).is_multiple_of(STREAM_SHARDS) {
            mine += 1;
        }
        writeln!(
            file,
            "{{\"id\":\"{id}\",\"prompt\":\"Summarise report {i} of the quarterly series in five \
             bullet points, plain text, no preamble.\"}}"
        )
        .expect("write job");
    }
    file.flush().expect("flush");
    drop(file);
    let bytes = std::fs::metadata(&jobs_path).expect("size").len();
    let before = llm.requests().len();
    let mut cmd = base(pi, dir);
    cmd.args(["--batch", jobs_path.to_str().expect("utf-8"), "--jobs", "2"])
        .args(["--shard", &format!("0/{STREAM_SHARDS}")])
        .args(["--output", out_path.to_str().expect("utf-8")]);
    let t = Instant::now();
    let (out, peak) = wait_peak_kb(cmd.spawn().expect("spawn"));
    let took = t.elapsed();
    assert!(out.status.success(), "the sharded batch failed");
    let results = std::fs::read_to_string(&out_path).expect("results");
    assert_eq!(
        results.lines().count(),
        mine,
        "one result per job of the shard"
    );
    assert_eq!(
        llm.requests().len() - before,
        mine,
        "every job of the shard reached the model"
    );
    println!(
        "\n{STREAM_LINES}-line job file ({:.1} MiB), `--shard 0/{STREAM_SHARDS} --output FILE --jobs 2`: \
         {mine} jobs run\n",
        bytes as f64 / (1024.0 * 1024.0)
    );
    println!("| input lines | jobs run | wall time | runner peak RSS | budget |");
    println!("|---|---|---|---|---|");
    println!(
        "| {STREAM_LINES} | {mine} | {:.1} s | {:.1} MiB | {:.0} MiB |",
        took.as_secs_f64(),
        peak as f64 / 1024.0,
        STREAM_BUDGET_KB as f64 / 1024.0
    );
    assert!(
        peak < STREAM_BUDGET_KB,
        "peak RSS {peak} kB is over the {STREAM_BUDGET_KB} kB budget"
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_streaming = args.iter().any(|a| a == "shard");
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(100);
    let pi = pi_env::pi(pi_env::PI_MIN);
    let dir = tempfile::tempdir().expect("temp dir");
    let llm = FakeLlm::start();
    write_models_json(
        dir.path(),
        &llm,
        &[ProviderSpec::new("fake-a", "a", vec![ModelSpec::text("m")])],
    );
    if only_streaming {
        streaming(pi, dir.path(), &llm);
        return;
    }
    let jobs: String = (0..n)
        .map(|i| format!("{{\"id\":{i},\"prompt\":\"Summarise document {i}.\"}}\n"))
        .collect();

    let mut peak_single = 0;
    let t = Instant::now();
    for i in 0..n {
        let mut cmd = base(pi, dir.path());
        cmd.arg(format!("Summarise document {i}."));
        let (out, peak) = wait_peak_kb(cmd.spawn().expect("spawn"));
        assert!(out.status.success(), "invocation {i} failed");
        peak_single = peak_single.max(peak);
    }
    let separate = t.elapsed();

    let batch = |workers: &str| -> (Duration, u64) {
        let mut cmd = base(pi, dir.path());
        cmd.args(["--batch", "-", "--jobs", workers])
            .stdin(Stdio::piped());
        let t = Instant::now();
        let mut child = cmd.spawn().expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(jobs.as_bytes()).expect("write jobs");
        drop(stdin);
        let (out, peak) = wait_peak_kb(child);
        let took = t.elapsed();
        assert!(out.status.success(), "batch --jobs {workers} failed");
        let lines = String::from_utf8_lossy(&out.stdout).lines().count();
        assert_eq!(lines, n, "one result per job");
        (took, peak)
    };
    let (one, peak_one) = batch("1");
    let (two, peak_two) = batch("2");
    assert_eq!(llm.requests().len(), 3 * n, "every job reached the model");

    let s = |d: Duration| d.as_secs_f64();
    println!(
        "{n} short jobs through Pi {} (fake provider on loopback)\n",
        pi.version
    );
    println!("| how | wall time | jobs/s | speed-up vs separate | runner peak RSS |");
    println!("|---|---|---|---|---|");
    println!(
        "| {n} separate invocations (baseline) | {:.1} s | {:.1} | 1.0× | {:.1} MiB |",
        s(separate),
        n as f64 / s(separate),
        peak_single as f64 / 1024.0
    );
    println!(
        "| `--batch --jobs 1` | {:.1} s | {:.1} | {:.1}× | {:.1} MiB |",
        s(one),
        n as f64 / s(one),
        s(separate) / s(one),
        peak_one as f64 / 1024.0
    );
    println!(
        "| `--batch --jobs 2` | {:.1} s | {:.1} | {:.1}× | {:.1} MiB |",
        s(two),
        n as f64 / s(two),
        s(separate) / s(two),
        peak_two as f64 / 1024.0
    );
    streaming(pi, dir.path(), &llm);
}
