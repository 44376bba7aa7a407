//! README's batch recipes, run as written (issue 11): the crontab line, the GNU parallel line,
//! the Kubernetes Indexed Job (`examples/k8s-indexed-job.yaml`) and the Slurm array script
//! (`examples/slurm-array.sh`). The schedulers are not here, so each command line is taken from
//! its file and run with `sh -c` in the environment that scheduler gives (cron: a minimal one),
//! as concurrent local processes, against real Pi and the fake provider; the union of the
//! results must answer every job exactly once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::batch::*;
use crate::support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// README's recipes section.
fn recipes() -> String {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README");
    let start = readme
        .find("## Recipes: cron, GNU parallel, Kubernetes, Slurm")
        .expect("README has the recipes section");
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_string()
}

/// The first fenced block of `lang` in `text`.
fn fenced(text: &str, lang: &str) -> String {
    let open = format!("```{lang}\n");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} block"))
        + open.len();
    let len = text[start..].find("```").expect("closing fence");
    text[start..start + len].to_string()
}

/// Runs `commands` at the same time, each `sh -c`-ed by `make`; returns their outputs in order.
fn run_together(commands: Vec<Command>) -> Vec<Output> {
    std::thread::scope(|s| {
        let handles: Vec<_> = commands
            .into_iter()
            .map(|c| s.spawn(move || run_command(c, None, RUN_TIMEOUT)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("runner thread"))
            .collect()
    })
}

/// Every results file matching `dir/prefix*` must parse; returns how many success lines each
/// id has across all of them, and asserts no failure line is there.
fn union(dir: &Path, prefix: &str) -> BTreeMap<String, usize> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).expect("results dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(prefix) && name.ends_with(".jsonl") {
            all.extend(read_results(&path));
        }
    }
    for r in &all {
        assert_eq!(r["ok"], true, "{r}");
    }
    successes(&all)
}

fn assert_each_once(answered: &BTreeMap<String, usize>, ids: &[String]) {
    assert_eq!(
        answered.keys().cloned().collect::<Vec<_>>(),
        {
            let mut ids = ids.to_vec();
            ids.sort();
            ids
        },
        "every job answered"
    );
    assert!(
        answered.values().all(|n| *n == 1),
        "exactly once: {answered:?}"
    );
}

/// A work dir with `jobs.jsonl` of `n` jobs; returns it and the ids.
fn work_dir(env: &TestEnv, n: usize) -> (PathBuf, Vec<String>) {
    let dir = env.dir.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("jobs.jsonl"), jobs(n)).unwrap();
    (dir, (0..n).map(|i| format!("doc-{i}")).collect())
}

/// `sh -c script` in the env of [`TestEnv::cmd`] with the installed binaries first on PATH.
fn sh(env: &TestEnv, script: &str, cwd: &Path) -> Command {
    let mut cmd = env.other_cmd("/bin/sh", ["-c", script]);
    let mut path = bin_dir(env).into_os_string();
    path.push(":");
    path.push(env.pi.path_env());
    cmd.env("PATH", path).current_dir(cwd);
    cmd
}

#[test]
fn the_crontab_line_summarises_each_report_once_even_when_nights_overlap() {
    let env = TestEnv::new(PI_MIN, &providers());
    env.llm.set_default(Behaviour::text("Five bullet points."));
    // Cron gives HOME, so Pi and the runner find the agent dir at ~/.pi/agent.
    std::fs::create_dir_all(env.home.join(".pi")).unwrap();
    std::os::unix::fs::symlink(&env.agent_dir, env.home.join(".pi/agent")).unwrap();
    let reports = env.dir.path().join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    for i in 1..=4 {
        std::fs::write(reports.join(format!("r{i}.md")), format!("Report {i}.")).unwrap();
    }
    let bin = bin_dir(&env);
    let crontab = fenced(&recipes(), "cron");
    let mut vars = Vec::new();
    let mut command = None;
    for line in crontab
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        match line.split_once('=') {
            Some((k, v)) if k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') => {
                vars.push((k.to_string(), v.to_string()));
            }
            _ => {
                // Five time fields, then the command (cron turns an unescaped % into a newline).
                let mut rest = line;
                for _ in 0..5 {
                    rest = rest.trim_start().split_once(' ').expect("a time field").1;
                }
                assert!(
                    !rest.replace("\\%", "").contains('%'),
                    "unescaped % in {rest}"
                );
                command = Some(rest.trim_start().replace("\\%", "%"));
            }
        }
    }
    let command = command
        .expect("a crontab entry")
        .replace("/srv/reports", reports.to_str().unwrap())
        .replace("/usr/local/bin", bin.to_str().unwrap());
    let cron_cmd = || {
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &command])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("SHELL", "/bin/sh")
            .env("HOME", &env.home)
            .env("LOGNAME", "reports")
            // Not cron's: lets the test find (and clean up) what it started.
            .env("PCCR_TEST_MARKER", env.marker())
            .current_dir(&env.home);
        for (k, v) in &vars {
            cmd.env(k, v.replace("/usr/local/bin", bin.to_str().unwrap()));
        }
        cmd
    };
    // Two nights that overlap: the second finds the first still running and skips.
    for out in run_together(vec![cron_cmd(), cron_cmd()]) {
        out.assert_success();
    }
    let ids: Vec<String> = (1..=4).map(|i| format!("r{i}.md")).collect();
    assert_each_once(&union(&reports, "results"), &ids);
    assert_eq!(env.llm.requests().len(), 4, "each report sent once");
    for id in &ids {
        let summary = std::fs::read_to_string(reports.join("summaries").join(id)).unwrap();
        assert_eq!(summary, "Five bullet points.", "{id}");
    }
    let log = std::fs::read_to_string(reports.join("batch.log")).unwrap();
    assert!(
        log.contains("batch: 4 of 4 jobs done, 4 ok, 0 failed"),
        "{log}"
    );
    // The next night: one new report; only it is sent.
    std::fs::write(reports.join("r5.md"), "Report 5.").unwrap();
    run_command(cron_cmd(), None, RUN_TIMEOUT).assert_success();
    assert_eq!(env.llm.requests().len(), 5);
    assert_eq!(
        std::fs::read_to_string(reports.join("summaries/r5.md")).unwrap(),
        "Five bullet points."
    );
    env.assert_no_orphans();
}

#[test]
fn the_gnu_parallel_line_answers_every_job_once() {
    let env = TestEnv::new(PI_MIN, &providers());
    let (dir, ids) = work_dir(&env, 8);
    let block = fenced(&recipes(), "sh");
    let line = block
        .lines()
        .find(|l| l.starts_with("parallel "))
        .expect("a parallel line");
    // `parallel -jN TEMPLATE ::: ARGS`: one process per argument, `{}` replaced by it.
    let (head, args) = line.split_once(" ::: ").expect("::: arguments");
    let template = head
        .split_once(' ')
        .map(|(_, rest)| rest.trim_start())
        .and_then(|rest| rest.strip_prefix("-j4 "))
        .expect("parallel -j4 …");
    let commands = args
        .split_whitespace()
        .map(|a| sh(&env, &template.replace("{}", a), &dir))
        .collect::<Vec<_>>();
    assert_eq!(commands.len(), 4);
    for out in run_together(commands) {
        out.assert_success().assert_stdout_empty();
    }
    assert_each_once(&union(&dir, "results-"), &ids);
    env.assert_no_orphans();
}

#[test]
fn the_kubernetes_indexed_job_answers_every_job_once() {
    let env = TestEnv::new(PI_MIN, &providers());
    let (dir, ids) = work_dir(&env, 8);
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("examples/k8s-indexed-job.yaml"))
        .expect("manifest");
    assert!(manifest.contains("\n  completionMode: Indexed\n"));
    let n: usize = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("completions: "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("completions: N");
    // The container's `args: - |` block, dedented.
    let lines: Vec<&str> = manifest.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == "- |")
        .expect("a literal block in args");
    let indent = |l: &str| l.len() - l.trim_start().len();
    let body: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| indent(l) > indent(lines[at]))
        .copied()
        .collect();
    let cut = indent(body[0]);
    let script = body
        .iter()
        .map(|l| &l[cut..])
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        script.contains(&format!("--shard \"$JOB_COMPLETION_INDEX/{n}\"")),
        "{script}"
    );
    let script = script.replace("/data", dir.to_str().unwrap());
    let commands = (0..n)
        .map(|i| {
            let mut cmd = sh(&env, &script, &env.cwd);
            cmd.env("JOB_COMPLETION_INDEX", i.to_string());
            cmd
        })
        .collect();
    for out in run_together(commands) {
        out.assert_success().assert_stdout_empty();
    }
    assert_each_once(&union(&dir.join("results"), "shard-"), &ids);
    env.assert_no_orphans();
}

#[test]
fn the_slurm_array_script_answers_every_job_once() {
    let env = TestEnv::new(PI_MIN, &providers());
    let (dir, ids) = work_dir(&env, 8);
    let script_path = Path::new(ROOT).join("examples/slurm-array.sh");
    let script = std::fs::read_to_string(&script_path).expect("script");
    let (first, last): (usize, usize) = script
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --array="))
        .and_then(|r| r.split_once('-'))
        .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
        .expect("#SBATCH --array=A-B");
    let cpus = script
        .lines()
        .find_map(|l| l.strip_prefix("#SBATCH --cpus-per-task="))
        .expect("#SBATCH --cpus-per-task=");
    let count = last - first + 1;
    let commands = (first..=last)
        .map(|id| {
            let mut cmd = sh(&env, &format!("sh {}", script_path.display()), &dir);
            cmd.env("SLURM_ARRAY_JOB_ID", "4242")
                .env("SLURM_JOB_ID", (4243 + id).to_string())
                .env("SLURM_ARRAY_TASK_ID", id.to_string())
                .env("SLURM_ARRAY_TASK_COUNT", count.to_string())
                .env("SLURM_ARRAY_TASK_MIN", first.to_string())
                .env("SLURM_ARRAY_TASK_MAX", last.to_string())
                .env("SLURM_CPUS_PER_TASK", cpus);
            cmd
        })
        .collect();
    for out in run_together(commands) {
        out.assert_success().assert_stdout_empty();
    }
    assert_each_once(&union(&dir.join("results"), "shard-"), &ids);
    env.assert_no_orphans();
}
