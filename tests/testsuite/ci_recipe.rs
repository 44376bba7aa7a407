//! README's CI recipe, `examples/github-actions-review.yml` (issue 28), run as written: Actions
//! is not here, so each `run:` step is taken from the file, its `${{ … }}` expressions given the
//! values Actions would give, and run the way Actions runs it (`bash --noprofile --norc -eo
//! pipefail FILE`, in the workspace, with the job's and the step's `env:` and nothing else from
//! this process), step after step; the matrix's jobs run at the same time, as concurrent
//! processes. The install step is the one not run (the registry is not reachable from tests): it
//! is checked to pin the crate's version and the Pi the tests run, and its binaries are put on
//! PATH instead. Against real Pi and the fault server: the review comes from the primary; an
//! empty diff sends nothing; exit 1 that can help and exit 124 are tried again after a short
//! sleep; exit 2 fails the step at once; the log is where the artifact takes it from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::batch::*;
use crate::support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FILE: &str = "examples/github-actions-review.yml";

/// One step of the workflow: its name (or `uses:`), its `env:` and its `run:` script.
#[derive(Debug, Clone)]
struct Step {
    name: String,
    env: Vec<(String, String)>,
    run: Option<String>,
    with: Vec<(String, String)>,
    condition: Option<String>,
}

/// The job's `env:`, its matrix values, and its steps, read from the file by indentation (the
/// file is ours; a change of shape fails here, loudly).
struct Workflow {
    env: Vec<(String, String)>,
    matrix: Vec<String>,
    steps: Vec<Step>,
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// `key: value` with a trailing `# comment` dropped.
fn key_value(l: &str) -> (String, String) {
    let (k, v) = l.trim().split_once(':').unwrap_or((l.trim(), ""));
    let v = match v.find(" #") {
        Some(at) => &v[..at],
        None => v,
    };
    (k.trim().to_string(), v.trim().to_string())
}

/// The lines of the block under line `at` (deeper indented), dedented; blank lines kept.
fn block(lines: &[&str], at: usize) -> Vec<String> {
    let base = indent(lines[at]);
    let body: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || indent(l) > base)
        .copied()
        .collect();
    let cut = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let mut out: Vec<String> = body
        .iter()
        .map(|l| l.get(cut..).unwrap_or("").to_string())
        .collect();
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    out
}

fn parse(text: &str) -> Workflow {
    let lines: Vec<&str> = text.lines().collect();
    let find = |key: &str, depth: usize| {
        lines
            .iter()
            .position(|l| indent(l) == depth && l.trim() == key)
            .unwrap_or_else(|| panic!("{FILE}: no {key} at depth {depth}"))
    };
    let env_at = find("env:", 4);
    let env = block(&lines, env_at)
        .iter()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| key_value(l))
        .collect();
    let matrix_at = find("matrix:", 6);
    let (_, focus) = key_value(&block(&lines, matrix_at)[0]);
    let matrix = focus
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|v| v.trim().to_string())
        .collect();
    let steps_at = find("steps:", 4);
    let step_lines = block(&lines, steps_at);
    let mut steps = Vec::new();
    let starts: Vec<usize> = step_lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("- "))
        .map(|(i, _)| i)
        .collect();
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(step_lines.len());
        // The step's lines with the "- " taken off its first one.
        let mut own: Vec<String> = step_lines[start..end].to_vec();
        own[0] = format!("  {}", &own[0][2..]);
        let own: Vec<&str> = own.iter().map(String::as_str).collect();
        let mut step = Step {
            name: String::new(),
            env: Vec::new(),
            run: None,
            with: Vec::new(),
            condition: None,
        };
        for (i, l) in own.iter().enumerate() {
            if indent(l) != 2 {
                continue;
            }
            let (k, v) = key_value(l);
            match k.as_str() {
                "name" | "uses" if step.name.is_empty() => step.name = v,
                "if" => step.condition = Some(v),
                "run" if v == "|" => step.run = Some(block(&own, i).join("\n") + "\n"),
                "run" => step.run = Some(format!("{v}\n")),
                "env" => {
                    step.env = block(&own, i).iter().map(|l| key_value(l)).collect();
                }
                "with" => {
                    let body = block(&own, i);
                    let mut j = 0;
                    while j < body.len() {
                        let (k, v) = key_value(&body[j]);
                        if v == "|" {
                            let inner: Vec<&str> = body.iter().map(String::as_str).collect();
                            step.with.push((k, block(&inner, j).join("\n")));
                            j += 1;
                            while j < body.len() && indent(&body[j]) > 0 {
                                j += 1;
                            }
                        } else {
                            step.with.push((k, v));
                            j += 1;
                        }
                    }
                }
                _ => {}
            }
        }
        steps.push(step);
    }
    Workflow { env, matrix, steps }
}

fn workflow() -> Workflow {
    parse(&std::fs::read_to_string(Path::new(ROOT).join(FILE)).expect("the workflow"))
}

/// `text` with every `${{ expr }}` replaced by `values[expr]`; an expression the test does not
/// know fails it (a new one needs a value here).
fn expand(text: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("${{") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("}}").expect("closing }}") + at;
        let expr = rest[at + 3..end].trim();
        out.push_str(
            values
                .get(expr)
                .unwrap_or_else(|| panic!("{FILE}: no value for ${{{{ {expr} }}}}")),
        );
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A repository with a pull request: `origin/main` is the base, HEAD adds `change`.
struct Repo {
    dir: PathBuf,
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn repo(env: &TestEnv, name: &str, change: Option<&str>) -> Repo {
    let dir = env.dir.path().join(name).join("workspace");
    std::fs::create_dir_all(dir.join(".github/pi")).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("app.py"), "def add(a, b):\n    return a + b\n").unwrap();
    git(&dir, &["add", "app.py"]);
    git(&dir, &["commit", "-q", "-m", "base"]);
    git(&dir, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
    if let Some(change) = change {
        std::fs::write(dir.join("app.py"), change).unwrap();
        git(&dir, &["commit", "-q", "-am", "the change"]);
    }
    // The user's models.json, committed where the workflow copies it from (README's setup on
    // the fault server, Pi's own deepseek routed to it too).
    write_readme_models_json(&dir.join(".github/pi"), &env.llm);
    Repo { dir }
}

/// What Actions gives the job for this matrix value.
fn values(repo: &Repo, focus: &str, keys: bool) -> BTreeMap<&'static str, String> {
    let mut v = BTreeMap::new();
    v.insert("github.workspace", repo.dir.display().to_string());
    v.insert("github.base_ref", "main".to_string());
    v.insert("matrix.focus", focus.to_string());
    for (k, val) in README_KEYS {
        let expr = match k {
            "ZHIPU_API_KEY" => "secrets.ZHIPU_API_KEY",
            "DASHSCOPE_API_KEY" => "secrets.DASHSCOPE_API_KEY",
            _ => "secrets.DEEPSEEK_API_KEY",
        };
        // A fork's pull request: every secret is the empty string.
        v.insert(expr, if keys { val.to_string() } else { String::new() });
    }
    v
}

/// One matrix job: every `run:` step but the install, in order, as Actions runs them; stops at
/// the first that fails (as Actions does). `test_env`: the test's own additions (never
/// README's), e.g. `PI_OFFLINE=1`. Returns the outputs of the steps that ran.
fn matrix_job(
    env: &TestEnv,
    repo: &Repo,
    focus: &str,
    keys: bool,
    test_env: &[(&str, &str)],
) -> Vec<(String, Output)> {
    let wf = workflow();
    let values = values(repo, focus, keys);
    let mut path = bin_dir(env).into_os_string();
    path.push(":/usr/bin:/bin");
    let mut outputs = Vec::new();
    for (i, step) in wf.steps.iter().enumerate() {
        let Some(run) = &step.run else { continue };
        if run.starts_with("npm install -g ") {
            continue;
        }
        let script = env.dir.path().join(format!("step-{focus}-{i}.sh"));
        std::fs::write(&script, expand(run, &values)).unwrap();
        let mut cmd = Command::new("/usr/bin/env");
        cmd.arg("-i")
            .arg(format!("PATH={}", path.to_string_lossy()))
            .arg(format!("HOME={}", env.home.display()))
            .arg("CI=true")
            .arg("GITHUB_ACTIONS=true")
            .arg(format!("GITHUB_WORKSPACE={}", repo.dir.display()))
            .arg(format!("PCCR_TEST_MARKER={}", env.marker()));
        for (k, v) in wf.env.iter().chain(step.env.iter()) {
            cmd.arg(format!("{k}={}", expand(v, &values)));
        }
        for (k, v) in test_env {
            cmd.arg(format!("{k}={v}"));
        }
        cmd.args(["bash", "--noprofile", "--norc", "-eo", "pipefail"])
            .arg(&script)
            .current_dir(&repo.dir);
        let out = run_command(cmd, None, RUN_TIMEOUT);
        let failed = out.code != 0;
        outputs.push((step.name.clone(), out));
        if failed {
            break;
        }
    }
    outputs
}

/// Each matrix job's value, workspace and steps that ran.
type MatrixRun = Vec<(String, Repo, Vec<(String, Output)>)>;

/// The matrix: one job per value, all at once, each in a workspace of its own (as each runner
/// checks out its own), against the same fault server.
fn matrix(env: &TestEnv, change: Option<&str>, test_env: &[(&str, &str)]) -> MatrixRun {
    let wf = workflow();
    let repos: Vec<(String, Repo)> = wf
        .matrix
        .iter()
        .map(|focus| (focus.clone(), repo(env, &format!("runner-{focus}"), change)))
        .collect();
    let results: Vec<Vec<(String, Output)>> = std::thread::scope(|s| {
        let handles: Vec<_> = repos
            .iter()
            .map(|(focus, repo)| s.spawn(move || matrix_job(env, repo, focus, true, test_env)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("job"))
            .collect()
    });
    repos
        .into_iter()
        .zip(results)
        .map(|((focus, repo), outs)| (focus, repo, outs))
        .collect()
}

/// The test's own environment: Pi 1.6.0 would fetch the built-in deepseek catalogue from the
/// internet at start-up; nothing may leave loopback.
const OFFLINE: (&str, &str) = ("PI_OFFLINE", "1");

#[test]
fn the_workflow_pins_the_release_and_uploads_the_log() {
    let wf = workflow();
    let install = wf
        .steps
        .iter()
        .find_map(|s| {
            s.run
                .as_deref()
                .filter(|r| r.starts_with("npm install -g "))
        })
        .expect("an install step");
    assert_eq!(
        install.trim(),
        format!(
            "npm install -g @earendil-works/pi-coding-agent@{PI_MIN} pi-ccswitch-run@{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(wf.matrix.len() >= 2, "a matrix: {:?}", wf.matrix);
    let upload = wf
        .steps
        .iter()
        .find(|s| s.name == "actions/upload-artifact@v4")
        .expect("an upload step");
    assert_eq!(
        upload.condition.as_deref(),
        Some("always()"),
        "uploads after a failure too"
    );
    let paths = upload
        .with
        .iter()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.clone())
        .expect("path:");
    assert!(paths.contains("review-${{ matrix.focus }}.log"), "{paths}");
    for (k, _) in &wf.env {
        assert!(!k.is_empty());
    }
    // The keys come from the secrets, and nothing else is a secret.
    let secrets: Vec<&str> = wf
        .env
        .iter()
        .filter(|(_, v)| v.contains("secrets."))
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        secrets,
        ["ZHIPU_API_KEY", "DASHSCOPE_API_KEY", "DEEPSEEK_API_KEY"]
    );
}

/// Both matrix jobs at once: each review comes from the primary, with the diff, in its file;
/// the run log is there for the artifact.
#[test]
fn the_matrix_reviews_the_diff_on_the_primary() {
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    env.llm
        .set_default(Behaviour::text("app.py:2 subtracts nothing; fine."));
    let jobs = matrix(&env, Some("def add(a, b):\n    return a - b\n"), &[OFFLINE]);
    for (focus, repo, steps) in &jobs {
        let names: Vec<&str> = steps.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["Providers", "Diff", "Review"], "{focus}");
        for (name, out) in steps {
            out.assert_success().check(true, name);
        }
        assert_eq!(
            std::fs::read_to_string(repo.dir.join(format!("review-{focus}.md"))).unwrap(),
            "app.py:2 subtracts nothing; fine.\n"
        );
        assert!(repo.dir.join(format!("review-{focus}.log")).exists());
    }
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 2, "one request per matrix job");
    for r in &requests {
        assert_eq!(r.route, "z", "the primary the workflow names");
        let text = r.last_user_text().unwrap();
        assert!(
            text.contains("-    return a + b") && text.contains("+    return a - b"),
            "{text}"
        );
    }
    let mut foci: Vec<bool> = ["correctness", "security"]
        .iter()
        .map(|f| {
            requests.iter().any(|r| {
                r.last_user_text()
                    .unwrap()
                    .contains(&format!("for {f} problems"))
            })
        })
        .collect();
    foci.dedup();
    assert_eq!(foci, [true]);
    env.assert_no_orphans();
}

/// An empty diff (the pull request changes nothing the diff shows): nothing is sent, the step
/// succeeds and says so.
#[test]
fn an_empty_diff_sends_nothing() {
    let env = TestEnv::new(PI_MIN, &readme_providers());
    let jobs = matrix(&env, None, &[OFFLINE]);
    for (focus, repo, steps) in &jobs {
        let (name, out) = steps.last().unwrap();
        assert_eq!(name, "Review");
        out.assert_success()
            .assert_stdout_contains("The diff is empty: nothing to review.");
        assert!(repo.dir.join(format!("review-{focus}.md")).exists());
    }
    assert!(env.llm.requests().is_empty());
}

/// Runs one matrix job in the background; once its log says `needle` (its first try ended),
/// every request gets `then` from there on.
fn job_then(
    env: &TestEnv,
    repo: &Repo,
    focus: &str,
    test_env: &[(&str, &str)],
    needle: &str,
    then: Behaviour,
) -> Vec<(String, Output)> {
    let log = repo.dir.join(format!("review-{focus}.log"));
    std::thread::scope(|s| {
        let job = s.spawn(|| matrix_job(env, repo, focus, true, test_env));
        let limit = std::time::Instant::now() + RUN_TIMEOUT;
        while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains(needle)) {
            assert!(
                std::time::Instant::now() < limit && !job.is_finished(),
                "the job's log never said {needle:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        env.llm.set_default(then);
        job.join().expect("job")
    })
}

/// Every provider in scope down: exit 1 that can help, a short sleep, and the second try
/// answers. Every candidate hanging past the deadline: exit 124, a sleep, and the second try
/// answers. No secrets (a fork's pull request): exit 2, at once, no second try.
#[test]
fn the_review_step_retries_what_can_help_and_fails_what_cannot() {
    // Breakers of a few ms (the test's: cooldowns scaled down), so the retry hint is short.
    let fast = [OFFLINE, ("CCSWITCH_COOLDOWN_SCALE", "0.001")];
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    let r = repo(&env, "down", Some("print('changed')\n"));
    env.llm.set_default(Behaviour::Status503);
    let steps = job_then(
        &env,
        &r,
        "correctness",
        &fast,
        "try 1: exit 1; trying again in ",
        Behaviour::text("Reviewed."),
    );
    let (_, out) = steps.last().unwrap();
    out.assert_success()
        .assert_stdout_contains("try 1: exit 1; trying again in 1s")
        .assert_stdout_lacks("try 2");
    assert_eq!(
        std::fs::read_to_string(r.dir.join("review-correctness.md")).unwrap(),
        "Reviewed.\n"
    );
    let log = std::fs::read_to_string(r.dir.join("review-correctness.log")).unwrap();
    assert!(
        log.contains("failover exhausted") && log.contains("retry: retrying later could help"),
        "{log}"
    );
    let routes: Vec<String> = env.llm.requests().iter().map(|q| q.route.clone()).collect();
    assert_eq!(routes.last().map(String::as_str), Some("z"), "{routes:?}");
    for route in ["z", "q", "d"] {
        assert!(
            routes.iter().any(|r| r == route),
            "{route} was tried: {routes:?}"
        );
    }

    // The deadline: every candidate hangs on the first try.
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    let r = repo(&env, "slow", Some("print('changed')\n"));
    env.llm.set_hang_limit(std::time::Duration::from_secs(10));
    env.llm.set_default(Behaviour::Hang);
    let mut short = fast.to_vec();
    short.push(("TIMEOUT_MS", "2500"));
    let steps = job_then(
        &env,
        &r,
        "security",
        &short,
        "try 1: exit 124",
        Behaviour::text("Reviewed."),
    );
    let (_, out) = steps.last().unwrap();
    out.assert_success()
        .assert_stdout_contains("try 1: exit 124; trying again in 5s")
        .assert_stdout_lacks("try 2");
    assert_eq!(
        std::fs::read_to_string(r.dir.join("review-security.md")).unwrap(),
        "Reviewed.\n"
    );

    // No secrets: exit 2 from the runner, the step fails with its reason, once.
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    let r = repo(&env, "fork", Some("print('changed')\n"));
    let steps = matrix_job(&env, &r, "correctness", false, &[OFFLINE]);
    let (name, out) = steps.last().unwrap();
    assert_eq!(name, "Review");
    out.assert_code(2)
        .assert_stdout_contains("::error::no review (exit 2): ")
        .assert_stdout_lacks("trying again");
    assert!(env.llm.requests().is_empty());
    env.assert_no_orphans();
}

/// README shows the workflow whole, in both languages.
#[test]
fn both_readmes_show_the_workflow_as_it_is() {
    let text = std::fs::read_to_string(Path::new(ROOT).join(FILE)).unwrap();
    for readme in ["README.md", "README.zh-CN.md"] {
        let doc = std::fs::read_to_string(Path::new(ROOT).join(readme)).unwrap();
        let shown = format!("<details><summary>{FILE}</summary>\n\n```yaml\n{text}```\n");
        assert!(
            doc.contains(&shown),
            "{readme} does not show {FILE} as it is"
        );
    }
}
