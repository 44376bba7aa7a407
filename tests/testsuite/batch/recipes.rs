//! README's batch recipes, run as written (issue 11): the crontab lines and the cron scripts they
//! call (`examples/cron-nightly.sh`, `examples/cron-three-machines.sh`), the GNU parallel line,
//! the Kubernetes Indexed Job (`examples/k8s-indexed-job.yaml`) and the Slurm array script
//! (`examples/slurm-array.sh`). The schedulers are not here, so each command line is taken from
//! its file and run in the environment that scheduler gives (cron: `env -i`, its `PATH` and the
//! crontab's variables, under the crontab's `SHELL`), as concurrent local processes, against
//! real Pi and the fake provider; the union of the results must answer every job exactly once.
//! The cron recipes' exit status is checked too (issue 21): 0 when all is answered, the batch's
//! code when keys are missing, 75 when a lock refuses the run, each with its message.

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
pub(super) fn run_together(commands: Vec<Command>) -> Vec<Output> {
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
pub(super) fn union(dir: &Path, prefix: &str) -> BTreeMap<String, usize> {
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

pub(super) fn assert_each_once(answered: &BTreeMap<String, usize>, ids: &[String]) {
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

/// README's providers and keys (see [`readme_providers`]): the recipes name `--model` and
/// `--models` from README's "Set up providers".
fn readme_setup(v: &str) -> TestEnv {
    let mut env = TestEnv::new(v, &readme_providers());
    write_readme_models_json(&env.agent_dir, &env.llm);
    for (k, val) in readme_keys() {
        env.env(k, val);
    }
    env
}

/// Every request went to the primary the recipe names.
fn all_to_the_primary(env: &TestEnv) {
    let routes: Vec<String> = env.llm.requests().iter().map(|r| r.route.clone()).collect();
    assert!(
        !routes.is_empty() && routes.iter().all(|r| r == "z"),
        "{routes:?}"
    );
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

/// One crontab of README: its variable lines and its one entry's command.
pub(super) struct Crontab {
    vars: Vec<(String, String)>,
    command: String,
}

/// Every ```cron block of README's recipes section, in order.
pub(super) fn crontabs() -> Vec<Crontab> {
    let text = recipes();
    let mut tabs = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("```cron\n") {
        let block = fenced(&rest[at..], "cron");
        tabs.push(parse_crontab(&block));
        rest = &rest[at + 8..];
    }
    tabs
}

fn parse_crontab(block: &str) -> Crontab {
    let mut vars = Vec::new();
    let mut command = None;
    for line in block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        match line.split_once('=') {
            Some((k, v)) if k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') => {
                vars.push((k.to_string(), v.to_string()));
            }
            _ => {
                assert!(command.is_none(), "one entry per crontab: {block}");
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
    Crontab {
        vars,
        command: command.expect("a crontab entry"),
    }
}

impl Crontab {
    /// The entry as cron runs it: `env -i` with what cron sets (`PATH=/usr/bin:/bin`, `HOME`,
    /// `LOGNAME`, `SHELL=/bin/sh`), then the crontab's variables, the command given to the
    /// crontab's `SHELL` with `-c`, in HOME. README's example paths become the test's
    /// (`paths`). `marker` is not cron's: it lets the test find (and clean up) what it started.
    pub(super) fn command(&self, home: &Path, paths: &[(&str, String)], marker: &str) -> Command {
        let localise = |text: &str| {
            paths
                .iter()
                .fold(text.to_string(), |t, (from, to)| t.replace(from, to))
        };
        let mut env = vec![
            "PATH=/usr/bin:/bin".to_string(),
            format!("HOME={}", home.display()),
            "LOGNAME=reports".to_string(),
            "SHELL=/bin/sh".to_string(),
        ];
        let mut shell = "/bin/sh".to_string();
        for (k, v) in &self.vars {
            let v = localise(v);
            if k == "SHELL" {
                shell = v.clone();
            }
            env.push(format!("{k}={v}"));
        }
        env.push(format!("PCCR_TEST_MARKER={marker}"));
        let mut cmd = Command::new("/usr/bin/env");
        cmd.arg("-i")
            .args(env)
            .args([shell.as_str(), "-c", &localise(&self.command)])
            .current_dir(home);
        cmd
    }
}

/// The cron scripts, each installed in `bin` under the name README's `install` line gives it.
const CRON_SCRIPTS: [(&str, &str); 2] = [
    ("examples/cron-nightly.sh", "pi-ccswitch-nightly"),
    (
        "examples/cron-three-machines.sh",
        "pi-ccswitch-nightly-shard",
    ),
];

/// [`bin_dir`] plus the cron scripts, as README says to install them (symlinks to the files,
/// so what runs is exactly what README shows).
pub(super) fn cron_bin(env: &TestEnv) -> PathBuf {
    let bin = bin_dir(env);
    for (file, name) in CRON_SCRIPTS {
        let link = bin.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink(Path::new(ROOT).join(file), &link).unwrap();
        }
    }
    bin
}

/// An env file as README describes it: `KEY=value` lines, owner-only.
pub(super) fn write_env_file(path: &Path, vars: &[(&str, String)], mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let text: String = std::iter::once("# pi-ccswitch-run keys\n".to_string())
        .chain(vars.iter().map(|(k, v)| format!("{k}={v}\n")))
        .collect();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The env file's keys. Plus `PI_OFFLINE=1`, which is the test's, not README's: with a key for
/// its built-in `deepseek` provider Pi 1.6.0 fetches that provider's catalogue from pi.dev at
/// start-up, and nothing may leave loopback.
pub(super) fn readme_keys() -> Vec<(&'static str, String)> {
    README_KEYS
        .iter()
        .map(|(k, v)| (*k, v.to_string()))
        .chain(std::iter::once(("PI_OFFLINE", "1".to_string())))
        .collect()
}

/// Holds the flock(2) lock `flock -n` tries, as a run that is still going would.
pub(super) fn hold_lock(path: &Path) -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.lock().unwrap();
    file
}

pub(super) fn route_count(env: &TestEnv, route: &str) -> usize {
    env.llm
        .requests()
        .iter()
        .filter(|r| r.route == route)
        .count()
}

/// README shows each cron script whole, in both languages, and says how to install it.
#[test]
fn both_readmes_show_the_cron_scripts_as_they_are() {
    for readme in ["README.md", "README.zh-CN.md"] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(readme)).unwrap();
        for (file, name) in CRON_SCRIPTS {
            let script = std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap();
            let shown = format!("<details><summary>{file}</summary>\n\n```bash\n{script}```\n");
            assert!(
                text.contains(&shown),
                "{readme} does not show {file} as it is"
            );
            assert!(
                text.contains(&format!("/usr/local/bin/{name}`")),
                "{readme} does not say to install {file} as /usr/local/bin/{name}"
            );
            let mode = std::os::unix::fs::PermissionsExt::mode(
                &std::fs::metadata(Path::new(ROOT).join(file))
                    .unwrap()
                    .permissions(),
            );
            assert_eq!(mode & 0o111, 0o111, "{file} is executable");
        }
    }
}

/// A single machine, README's way: one summary per report, each sent once to the primary the
/// recipe names; a second run while the first holds the lock exits 75 saying so; the next night
/// sends only the new report; a night the primary is out of quota goes to the first backup of
/// `--models`.
#[test]
fn the_nightly_cron_script_summarises_each_report_once_and_says_when_its_lock_refuses() {
    let env = TestEnv::new(PI_MIN, &readme_providers());
    write_readme_models_json(&env.agent_dir, &env.llm);
    env.llm.set_default(Behaviour::text("Five bullet points."));
    // Cron gives HOME, so Pi and the runner find the agent dir at ~/.pi/agent.
    std::fs::create_dir_all(env.home.join(".pi")).unwrap();
    std::os::unix::fs::symlink(&env.agent_dir, env.home.join(".pi/agent")).unwrap();
    let reports = env.dir.path().join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    for i in 1..=4 {
        std::fs::write(reports.join(format!("r{i}.md")), format!("Report {i}.")).unwrap();
    }
    let env_file = env.dir.path().join("pi-ccswitch-run.env");
    write_env_file(&env_file, &readme_keys(), 0o600);
    let bin = cron_bin(&env);
    let tabs = crontabs();
    let tab = &tabs[0];
    assert!(tab.command.starts_with("pi-ccswitch-nightly /srv/reports "));
    assert!(
        tab.vars
            .iter()
            .any(|(k, v)| k == "SHELL" && v == "/bin/bash")
    );
    let paths = [
        ("/srv/reports", reports.display().to_string()),
        ("/etc/pi-ccswitch-run.env", env_file.display().to_string()),
        ("/usr/local/bin", bin.display().to_string()),
    ];
    let night = || {
        run_command(
            tab.command(&env.home, &paths, &env.marker()),
            None,
            RUN_TIMEOUT,
        )
    };
    // Silent when all went well: cron mails whatever a job prints.
    let out = night();
    out.assert_success()
        .assert_stdout_empty()
        .check(out.stderr.is_empty(), "nothing on stderr");
    let ids: Vec<String> = (1..=4).map(|i| format!("r{i}.md")).collect();
    assert_each_once(&union(&reports, "results"), &ids);
    let requests = env.llm.requests();
    assert_eq!(requests.len(), 4, "each report sent once");
    assert!(
        requests
            .iter()
            .all(|r| r.route == "z" && r.bearer() == Some("zhipu-test-key")),
        "to the primary the recipe names, with the key from the env file"
    );
    for id in &ids {
        let summary = std::fs::read_to_string(reports.join("summaries").join(id)).unwrap();
        assert_eq!(summary, "Five bullet points.\n", "{id}");
    }
    let log = std::fs::read_to_string(reports.join("batch.log")).unwrap();
    assert!(
        log.contains("batch: 4 of 4 jobs done, 4 ok, 0 failed"),
        "{log}"
    );
    // The previous night still running: refused, non-zero, and it says so.
    {
        let _held = hold_lock(&reports.join(".batch.lock"));
        night().assert_code(75).assert_stderr_contains(&format!(
            "pi-ccswitch-nightly: the previous run in {} still holds .batch.lock; not starting",
            reports.display()
        ));
    }
    assert_eq!(
        env.llm.requests().len(),
        4,
        "nothing sent by the refused run"
    );
    // The next night: one new report; only it is sent.
    std::fs::write(reports.join("r5.md"), "Report 5.").unwrap();
    night().assert_success();
    assert_eq!(env.llm.requests().len(), 5);
    assert_eq!(
        std::fs::read_to_string(reports.join("summaries/r5.md")).unwrap(),
        "Five bullet points.\n"
    );
    // A night the primary is out of quota: the first backup of --models answers.
    env.llm.script("z", "*", vec![Behaviour::Status402]);
    std::fs::write(reports.join("r6.md"), "Report 6.").unwrap();
    night().assert_success();
    let routes: Vec<String> = env.llm.requests()[5..]
        .iter()
        .map(|r| r.route.clone())
        .collect();
    assert_eq!(routes, ["z", "q"]);
    assert_eq!(
        std::fs::read_to_string(reports.join("summaries/r6.md")).unwrap(),
        "Five bullet points.\n"
    );
    env.assert_no_orphans();
}

/// Cron's environment without the keys: the night fails — exit 2 from the batch, one line on
/// stderr saying where to look, and the log names the missing variables; an env file others
/// can read, or none, is refused (78) before anything runs.
#[test]
fn the_nightly_cron_script_fails_loudly_without_its_keys() {
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    write_readme_models_json(&env.agent_dir, &env.llm);
    std::fs::create_dir_all(env.home.join(".pi")).unwrap();
    std::os::unix::fs::symlink(&env.agent_dir, env.home.join(".pi/agent")).unwrap();
    let reports = env.dir.path().join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    std::fs::write(reports.join("r1.md"), "Report 1.").unwrap();
    let env_file = env.dir.path().join("pi-ccswitch-run.env");
    let bin = cron_bin(&env);
    let tabs = crontabs();
    let paths = [
        ("/srv/reports", reports.display().to_string()),
        ("/etc/pi-ccswitch-run.env", env_file.display().to_string()),
        ("/usr/local/bin", bin.display().to_string()),
    ];
    let night = || {
        run_command(
            tabs[0].command(&env.home, &paths, &env.marker()),
            None,
            RUN_TIMEOUT,
        )
    };
    // No env file at all.
    night().assert_code(78).assert_stderr_contains(&format!(
        "pi-ccswitch-nightly: {} is missing or not owned by",
        env_file.display()
    ));
    // One that others can read.
    write_env_file(&env_file, &readme_keys(), 0o644);
    night().assert_code(78).assert_stderr_contains(&format!(
        "{} can be read by others; chmod 600",
        env_file.display()
    ));
    // One without the keys: the batch fails, and so does the night.
    write_env_file(&env_file, &[("UNRELATED", "1".to_string())], 0o600);
    let out = night();
    out.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains(&format!(
            "pi-ccswitch-nightly: the batch in {0} failed with exit 2; see {0}/batch.log",
            reports.display()
        ));
    let log = std::fs::read_to_string(reports.join("batch.log")).unwrap();
    for needle in [
        "warning: models.json: provider zhipu: apiKey refers to $ZHIPU_API_KEY, which is not set \
         here (cron starts with an almost empty environment: source an env file)",
        "provider dashscope: apiKey refers to $DASHSCOPE_API_KEY, which is not set here",
        "no provider has credentials",
    ] {
        assert!(log.contains(needle), "batch.log lacks {needle:?}:\n{log}");
    }
    assert!(env.llm.requests().is_empty(), "nothing was sent");
    assert!(!reports.join("summaries/r1.md").exists());
    // With the keys the same night works.
    write_env_file(&env_file, &readme_keys(), 0o600);
    night().assert_success();
    assert!(reports.join("summaries/r1.md").exists());
    env.assert_no_orphans();
}

/// README's three-machine recipe: three "machines" (each its own HOME and agent dir, its own
/// shard number) run at once on one shared directory and one real Redis, against real Pi. The
/// primary is out of quota: the machines share its breaker through Redis. The union of the
/// results answers every report exactly once; the next night (a new job list, three new
/// reports) pays for nothing twice and sends nothing to the primary; a shard still running is
/// refused (75, with a message) while the other shards run.
#[test]
fn the_three_machine_cron_recipe_answers_every_report_once_and_pays_nothing_twice() {
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    let redis = RedisServer::start();
    env.llm.set_default(Behaviour::text("Five bullet points."));
    env.llm.script("z", "*", vec![Behaviour::Status402]);
    let shared = env.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let report = |i: usize| std::fs::write(shared.join(format!("r{i}.md")), format!("Report {i}."));
    for i in 1..=12 {
        report(i).unwrap();
    }
    let env_file = env.dir.path().join("pi-ccswitch-run.env");
    let mut vars = readme_keys();
    vars.push(("CCSWITCH_HEALTH_URL", redis.url()));
    write_env_file(&env_file, &vars, 0o600);
    let bin = cron_bin(&env);
    let tabs = crontabs();
    let tab = &tabs[1];
    assert!(
        tab.command
            .starts_with("pi-ccswitch-nightly-shard 0/3 /shared/reports "),
        "{}",
        tab.command
    );
    let homes: Vec<PathBuf> = (0..3)
        .map(|i| {
            let home = env.dir.path().join(format!("machine-{i}"));
            write_readme_models_json(&home.join(".pi/agent"), &env.llm);
            home
        })
        .collect();
    let machine = |i: usize| {
        let paths = [
            ("0/3", format!("{i}/3")),
            ("/shared/reports", shared.display().to_string()),
            ("/etc/pi-ccswitch-run.env", env_file.display().to_string()),
            ("/usr/local/bin", bin.display().to_string()),
        ];
        tab.command(&homes[i], &paths, &env.marker())
    };
    for out in run_together((0..3).map(machine).collect()) {
        out.assert_success()
            .assert_stdout_empty()
            .check(out.stderr.is_empty(), "nothing on stderr");
    }
    let ids = |n: usize| (1..=n).map(|i| format!("r{i}.md")).collect::<Vec<_>>();
    assert_each_once(&union(&shared.join("results"), "shard-"), &ids(12));
    for id in ids(12) {
        assert_eq!(
            std::fs::read_to_string(shared.join("summaries").join(&id)).unwrap(),
            "Five bullet points.\n",
            "{id}"
        );
    }
    // Every report answered by the first backup of --models, once; the primary's breaker is
    // in Redis.
    assert_eq!(route_count(&env, "q"), 12);
    assert_eq!(route_count(&env, "d") + route_count(&env, "builtin"), 0);
    assert_eq!(
        redis_cmd(&redis, &["EXISTS", "pi-ccswitch-run:v1:rec:provider:zhipu"]),
        Resp::Int(1)
    );
    // One job list, written once; no temporary file left behind.
    let list: Vec<String> = std::fs::read_dir(shared.join("jobs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(list.len(), 1, "{list:?}");
    assert!(list[0].ends_with(".jsonl"), "{list:?}");
    let tonight = shared.join("jobs").join(&list[0]);
    assert_eq!(
        std::fs::read_to_string(&tonight).unwrap().lines().count(),
        12
    );
    for i in 0..3 {
        let log = std::fs::read_to_string(shared.join(format!("logs/shard-{i}.log"))).unwrap();
        assert!(log.contains("batch: "), "shard {i}: {log}");
    }

    // The next night: yesterday's list is yesterday's, three new reports arrive, and shard 1
    // is still running from before.
    std::fs::rename(&tonight, shared.join("jobs/2000-01-01.jsonl")).unwrap();
    for i in 13..=15 {
        report(i).unwrap();
    }
    env.llm.clear_requests();
    let held = hold_lock(&shared.join("locks/shard-1.lock"));
    let outs = run_together((0..3).map(machine).collect());
    outs[0].assert_success();
    outs[2].assert_success();
    outs[1].assert_code(75).assert_stderr_contains(&format!(
        "pi-ccswitch-nightly-shard: shard 1/3 is still running in {} (locks/shard-1.lock is \
         held); not starting",
        shared.display()
    ));
    drop(held);
    let list_inode = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(shared.join("jobs").join(&list[0])).unwrap(),
    );
    run_command(machine(1), None, RUN_TIMEOUT).assert_success();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(
            &std::fs::metadata(shared.join("jobs").join(&list[0])).unwrap()
        ),
        list_inode,
        "tonight's list is the one the first machine wrote"
    );
    assert_each_once(&union(&shared.join("results"), "shard-"), &ids(15));
    assert_eq!(
        route_count(&env, "z"),
        0,
        "the primary's breaker came from Redis"
    );
    assert_eq!(
        route_count(&env, "q"),
        3,
        "only the new reports were paid for"
    );
    env.assert_no_orphans();
}

#[test]
fn the_gnu_parallel_line_answers_every_job_once() {
    let env = readme_setup(PI_MIN);
    let (dir, ids) = work_dir(&env, 8);
    let text = recipes();
    let block = fenced(
        &text[text
            .find("**GNU parallel**")
            .expect("a GNU parallel recipe")..],
        "sh",
    );
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
    all_to_the_primary(&env);
    env.assert_no_orphans();
}

#[test]
fn the_kubernetes_indexed_job_answers_every_job_once() {
    let env = readme_setup(PI_MIN);
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
    all_to_the_primary(&env);
    env.assert_no_orphans();
}

#[test]
fn the_slurm_array_script_answers_every_job_once() {
    let env = readme_setup(PI_MIN);
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
    all_to_the_primary(&env);
    env.assert_no_orphans();
}
