//! The nightly recipes' second week (issue 28), run as README's crontabs run them (`env -i`,
//! cron's PATH, the crontab's SHELL), against real Pi: reports that can never be summarised
//! (empty, a PDF, too long for every model) are named with their reasons in the log every
//! night and in the batch's end lines, without failing the night (`--permanent-ok`); an edited
//! report gets a new summary (`--rerun-changed`), and the log says so; summaries end with a
//! newline; moving from one machine to three (and from three to two) pays for nothing twice
//! (`--resume-from` the other results files).

use std::path::{Path, PathBuf};

use super::recipes::{
    Crontab, cron_bin, crontabs, readme_keys, route_count, run_together, write_env_file,
};
use crate::support::batch::*;
use crate::support::*;

/// A reports directory, the env file and the paths README's crontabs name, localised.
struct Setup {
    env: TestEnv,
    reports: PathBuf,
    paths: Vec<(&'static str, String)>,
    tabs: Vec<Crontab>,
}

fn setup(extra_vars: &[(&'static str, String)]) -> Setup {
    let env = TestEnv::new(PI_NEWEST, &readme_providers());
    write_readme_models_json(&env.agent_dir, &env.llm);
    std::fs::create_dir_all(env.home.join(".pi")).unwrap();
    std::os::unix::fs::symlink(&env.agent_dir, env.home.join(".pi/agent")).unwrap();
    let reports = env.dir.path().join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let env_file = env.dir.path().join("pi-ccswitch-run.env");
    let mut vars = readme_keys();
    vars.extend(extra_vars.iter().cloned());
    write_env_file(&env_file, &vars, 0o600);
    let bin = cron_bin(&env);
    let paths = vec![
        ("/srv/reports", reports.display().to_string()),
        ("/shared/reports", reports.display().to_string()),
        ("/etc/pi-ccswitch-run.env", env_file.display().to_string()),
        ("/usr/local/bin", bin.display().to_string()),
    ];
    Setup {
        env,
        reports,
        paths,
        tabs: crontabs(),
    }
}

impl Setup {
    fn report(&self, name: &str, text: &str) {
        std::fs::write(self.reports.join(name), text).unwrap();
    }

    /// One night of README's single-machine crontab.
    fn night(&self) -> Output {
        run_command(
            self.tabs[0].command(&self.env.home, &self.paths, &self.env.marker()),
            None,
            RUN_TIMEOUT,
        )
    }

    fn summary(&self, id: &str) -> String {
        std::fs::read_to_string(self.reports.join("summaries").join(id))
            .unwrap_or_else(|e| panic!("summaries/{id}: {e}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.reports.join("batch.log")).unwrap()
    }
}

/// The part of `log` written since `from` bytes.
fn since(log: &str, from: usize) -> &str {
    &log[from..]
}

#[test]
fn the_nightly_script_names_what_cannot_be_summarised_and_rewrites_edited_summaries() {
    let s = setup(&[]);
    s.env
        .llm
        .set_default(Behaviour::text("Five bullet points.\n\n"));
    for i in 1..=3 {
        s.report(&format!("r{i}.md"), &format!("Report {i}."));
    }
    s.report("empty.md", "");
    s.report("scan.md", "%PDF-1.7\n%\u{e2}\u{e3}\n1 0 obj");
    // ~250,000 tokens: more than any model of README's setup takes.
    s.report("huge.md", &"word ".repeat(250_000));

    // Night 1: three summaries; the three reports that cannot have one are named, with why,
    // and the night is not a failed one (cron mails nothing).
    let out = s.night();
    out.assert_success()
        .assert_stdout_empty()
        .check(out.stderr.is_empty(), "nothing on stderr");
    assert_eq!(
        s.env.llm.requests().len(),
        3,
        "only the three readable reports"
    );
    for i in 1..=3 {
        assert_eq!(
            s.summary(&format!("r{i}.md")),
            "Five bullet points.\n",
            "one newline at the end"
        );
    }
    assert!(!s.reports.join("summaries/empty.md").exists());
    let log = s.log();
    let end = log
        .lines()
        .find(|l| l.contains("job(s) failed in their own input"))
        .unwrap_or_else(|| panic!("no end line naming them:\n{log}"));
    for needle in [
        "batch: 3 job(s) failed in their own input, and fail the same way until it changes \
         (--permanent-ok: not counted in the exit code): ",
        "empty.md: ",
        "empty.md is empty: nothing to send",
        "scan.md: binary files are not supported",
        "huge.md: failover exhausted: the request is too large for every model in scope",
    ] {
        assert!(end.contains(needle), "{needle:?} not in {end:?}");
    }

    // Night 2: nothing changed. Nothing is sent, and the log names them again, each with why.
    let from = log.len();
    s.env.llm.clear_requests();
    s.night().assert_success();
    assert!(s.env.llm.requests().is_empty());
    let log = s.log();
    let tonight = since(&log, from);
    for (id, why) in [
        ("empty.md", "is empty: nothing to send"),
        ("scan.md", "binary files are not supported"),
        (
            "huge.md",
            "the request is too large for every model in scope",
        ),
    ] {
        let line = tonight
            .lines()
            .find(|l| l.contains(&format!("job {id} (input line")))
            .unwrap_or_else(|| panic!("{id} not named tonight:\n{tonight}"));
        assert!(
            line.contains("not run again: it failed before in its unchanged input (exit")
                && line.contains(why),
            "{line}"
        );
    }
    assert!(
        tonight.contains("batch: 3 job(s) failed in their own input"),
        "{tonight}"
    );

    // Night 3: r2 was edited. Only r2 is sent again; its summary is rewritten and the log says
    // so; the others are left alone.
    s.report("r2.md", "Report 2, revised.");
    s.env
        .llm
        .set_default(Behaviour::text("Revised bullet points."));
    let from = s.log().len();
    s.env.llm.clear_requests();
    s.night().assert_success();
    let sent = s.env.llm.requests();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0]
            .last_user_text()
            .unwrap()
            .contains("Report 2, revised.")
    );
    assert_eq!(s.summary("r2.md"), "Revised bullet points.\n");
    assert_eq!(s.summary("r1.md"), "Five bullet points.\n");
    let log = s.log();
    let tonight = since(&log, from);
    assert_eq!(
        tonight.matches("rewrote summaries/").count(),
        1,
        "{tonight}"
    );
    assert!(
        tonight.contains(
            "pi-ccswitch-nightly: rewrote summaries/r2.md: the report changed since its summary"
        ),
        "{tonight}"
    );

    // A summary lost (a night cut short before writing it) comes back from the newest answer.
    std::fs::remove_file(s.reports.join("summaries/r2.md")).unwrap();
    s.env.llm.clear_requests();
    s.night().assert_success();
    assert!(s.env.llm.requests().is_empty());
    assert_eq!(s.summary("r2.md"), "Revised bullet points.\n");

    // The empty report gets content: it is summarised, and no longer named.
    s.report("empty.md", "Now there is something.");
    let from = s.log().len();
    s.night().assert_success();
    assert!(s.reports.join("summaries/empty.md").exists());
    let log = s.log();
    assert!(
        since(&log, from).contains("batch: 2 job(s) failed in their own input"),
        "{log}"
    );
    s.env.assert_no_orphans();
}

/// README's one-machine recipe for a while, then the three-machine one on the same directory,
/// then two machines: no report is sent twice, and each new one once.
#[test]
fn moving_from_one_machine_to_three_and_to_two_pays_for_nothing_twice() {
    let redis = RedisServer::start();
    let s = setup(&[("CCSWITCH_HEALTH_URL", redis.url())]);
    s.env
        .llm
        .set_default(Behaviour::text("Five bullet points."));
    for i in 1..=9 {
        s.report(&format!("r{i}.md"), &format!("Report {i}."));
    }
    s.night().assert_success();
    assert_eq!(route_count(&s.env, "z"), 9);

    let shard_tab = &s.tabs[1];
    let homes: Vec<PathBuf> = (0..3)
        .map(|i| {
            let home = s.env.dir.path().join(format!("machine-{i}"));
            write_readme_models_json(&home.join(".pi/agent"), &s.env.llm);
            home
        })
        .collect();
    let machines = |n: usize| {
        (0..n)
            .map(|i| {
                let mut paths = s.paths.clone();
                paths.insert(0, ("0/3", format!("{i}/{n}")));
                shard_tab.command(&homes[i], &paths, &s.env.marker())
            })
            .collect::<Vec<_>>()
    };
    let move_to = |n: usize, new: &str| {
        s.report(new, "A new report.");
        s.env.llm.clear_requests();
        for out in run_together(machines(n)) {
            out.assert_success()
                .assert_stdout_empty()
                .check(out.stderr.is_empty(), "nothing on stderr");
        }
        let sent: Vec<String> = s
            .env
            .llm
            .requests()
            .iter()
            .filter_map(|r| r.last_user_text().map(str::to_string))
            .collect();
        assert_eq!(sent.len(), 1, "only {new} is paid for: {sent:?}");
        assert!(sent[0].contains("A new report."), "{sent:?}");
        assert_eq!(
            std::fs::read_to_string(s.reports.join("summaries").join(new)).unwrap(),
            "Five bullet points.\n"
        );
    };
    move_to(3, "r10.md");
    // Tonight's job list would be reused by the shards of the same day: a new day's list.
    for entry in std::fs::read_dir(s.reports.join("jobs")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    move_to(2, "r11.md");
    for i in 1..=11 {
        assert!(
            s.reports.join(format!("summaries/r{i}.md")).exists(),
            "r{i}"
        );
    }
    s.env.assert_no_orphans();
}

/// README's migration note names the flag the shard script uses.
#[test]
fn readme_says_how_moving_to_shards_pays_nothing_twice() {
    for readme in ["README.md", "README.zh-CN.md"] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(readme)).unwrap();
        assert!(text.contains("--resume-from"), "{readme}");
        assert!(text.contains("--permanent-ok"), "{readme}");
    }
}
