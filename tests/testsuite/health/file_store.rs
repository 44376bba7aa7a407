//! The shared health state file under real processes and real file systems: concurrent commits
//! lose nothing, bad files are quarantined, newer files are left alone, unwritable directories
//! fail cleanly, probe leases are exclusive, secrets never reach the disk.
//!
//! Multi-process tests re-run this test binary as worker processes ([`worker_process`]): the
//! workers are `#[ignore]`d tests that take their orders from the environment.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::support::{worker_order, worker_process};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use pi_ccswitch_run::clock;
use pi_ccswitch_run::failover::classify::{FailureClass, Scope};
use pi_ccswitch_run::health::cooldown::PROBE_LEASE_MS;
use pi_ccswitch_run::health::store::{
    Claim, FileStore, LOCK_FILE, Loaded, SCHEMA_VERSION, STATE_FILE, StoreError, StoreWarning,
};
use pi_ccswitch_run::health::{Delta, Health, Keys, ProbeTarget, SWITCH_LOG_LEN, SwitchEntry};
use pi_ccswitch_run::runlog::{LOG_FILE, ROTATE_BYTES as LOG_ROTATE_BYTES, RunLog};

/// The state file and the run log of one directory, with the cooldown scale given per call as
/// these tests were written (the store itself takes it once).
#[derive(Clone)]
struct Store {
    dir: PathBuf,
    lock_wait: Option<Duration>,
}

impl Store {
    fn open(dir: &Path) -> Store {
        Store {
            dir: dir.to_path_buf(),
            lock_wait: None,
        }
    }
    fn with_lock_wait(mut self, wait: Duration) -> Store {
        self.lock_wait = Some(wait);
        self
    }
    fn file(&self, scale: f64) -> FileStore {
        let store = FileStore::open(&self.dir).with_cooldown_scale(scale);
        match self.lock_wait {
            Some(w) => store.with_lock_wait(w),
            None => store,
        }
    }
    fn load(&self, now_ms: u64) -> Result<Loaded, StoreError> {
        self.file(1.0).load(now_ms)
    }
    fn commit(&self, deltas: &[Delta], scale: f64, now_ms: u64) -> Result<Loaded, StoreError> {
        self.file(scale).commit(deltas, now_ms)
    }
    fn claim_lease(
        &self,
        target: &str,
        now_ms: u64,
        scale: f64,
    ) -> Result<(Claim, Loaded), StoreError> {
        self.file(scale).claim_lease(&probe(target), now_ms)
    }
    fn update(&self, now_ms: u64, mut f: impl FnMut(&mut Health)) -> Result<Loaded, StoreError> {
        self.file(1.0).update(now_ms, &mut f)
    }
    fn state_path(&self) -> PathBuf {
        self.file(1.0).state_path()
    }
    fn lock_path(&self) -> PathBuf {
        self.file(1.0).lock_path()
    }
    fn log_path(&self) -> PathBuf {
        RunLog::new(&self.dir).path()
    }
    fn log_line(&self, now_ms: u64, line: &str) {
        let _ = RunLog::new(&self.dir).append(now_ms, line);
    }
}

/// A probe target written as in messages: `provider:NAME`, `endpoint:KEY`, `model:P/ID`; a bare
/// name is a provider.
fn probe(text: &str) -> ProbeTarget {
    for scope in [Scope::Provider, Scope::Endpoint, Scope::Model] {
        if let Some(key) = text
            .strip_prefix(scope.as_str())
            .and_then(|r| r.strip_prefix(':'))
        {
            return ProbeTarget::new(scope, key);
        }
    }
    ProbeTarget::new(Scope::Provider, text)
}

/// A fixed wall-clock base: tests pass time in, they never read it.
const T0: u64 = 1_700_000_000_000;

const ENV_MODE: &str = "PCR_HEALTH_STORE_WORKER";
const ENV_DIR: &str = "PCR_HEALTH_STORE_DIR";
const ENV_ID: &str = "PCR_HEALTH_STORE_ID";

const STRESS_PROCESSES: usize = 16;
const STRESS_COMMITS: u64 = 50;
/// Every this many commits a worker also records a success.
const STRESS_SUCCESS_EVERY: u64 = 5;

const OPENAI_KEY: &str =
    "sk-proj-Xb7qJ2mWv9LdR4tZk1NcY8uHs3FpGe6Aa0Vi5Or-OxTQnB2_Ew9KzUm4Jy7Dc1Sg8Rh3Pl6Wf0Ae5Tb";
const ANTHROPIC_KEY: &str =
    "sk-ant-api03-q8Zr4Kx1Vn7Tb2Lm9Pw5Hc3Jd6Fs0Ga-Ye4Uo8Ri1Qt7Nk2Mv5Lx9Bz3Cw6Ds0Ef-Gh1Ij4Kl7MnAA";
const JWT: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6InBpIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const GOOGLE_KEY: &str = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY";
const OPAQUE: &str = "tok_9Qm2Xv7Lp4Rz8Kw1";

fn failure(at: u64, key: &str, scope: Scope, class: FailureClass, error: &str) -> Delta {
    Delta::Failure {
        at,
        key: key.to_string(),
        scope,
        class,
        error: error.to_string(),
    }
}

fn keys(provider: &str, model: &str) -> Keys {
    Keys {
        model: format!("{provider}/{model}"),
        provider: provider.to_string(),
        endpoint: format!("{provider}@http://127.0.0.1:9/v1"),
    }
}

fn switch(at: u64, from: &str, to: &str, reason: &str) -> Delta {
    Delta::Switch(SwitchEntry {
        at,
        from: from.to_string(),
        to: to.to_string(),
        reason: reason.to_string(),
    })
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Spawns `n` copies of this test binary running `worker` and releases them together (each
/// blocks on stdin until the parent closes it). Returns their stdouts; fails on any failure.
fn run_workers(worker: &str, mode: &str, dir: &Path, n: usize) -> Vec<String> {
    let mut children = Vec::new();
    for id in 0..n {
        let child = worker_process(module_path!(), worker)
            .env(ENV_MODE, mode)
            .env(ENV_DIR, dir)
            .env(ENV_ID, id.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        children.push(child);
    }
    // Closing every stdin is the start signal.
    for child in &mut children {
        drop(child.stdin.take());
    }
    let mut outputs = Vec::new();
    for (id, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "worker {id} failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(stdout);
    }
    outputs
}

/// In a worker process: blocks until the parent releases all workers at once.
fn wait_for_start() {
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink).unwrap();
}

/// Worker body for the stress test: 50 commits of failures, switches and some successes.
#[test]
#[ignore = "a worker process of stress_concurrent_processes_lose_no_update"]
fn stress_worker() {
    assert_eq!(worker_order(ENV_MODE), "stress");
    let dir = PathBuf::from(worker_order(ENV_DIR));
    let id: u64 = worker_order(ENV_ID).parse().unwrap();
    let store = Store::open(&dir);
    wait_for_start();
    for i in 0..STRESS_COMMITS {
        let at = T0 + i;
        let mut deltas = vec![
            failure(
                at,
                "p",
                Scope::Provider,
                FailureClass::Quota,
                "402: insufficient_quota",
            ),
            failure(
                at,
                &format!("p/w{id}"),
                Scope::Model,
                FailureClass::Model,
                "404: model not found",
            ),
            switch(at, &format!("p/w{id}"), "q/m", "quota"),
        ];
        if i % STRESS_SUCCESS_EVERY == 0 {
            deltas.push(Delta::Success {
                at,
                keys: keys("p", "m"),
            });
        }
        let loaded = store
            .commit(&deltas, 1.0, at)
            .unwrap_or_else(|e| panic!("worker {id} commit {i}: {e}"));
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        store.log_line(at, &format!("worker {id} commit {i}"));
    }
}

#[test]
fn stress_concurrent_processes_lose_no_update() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("agent");
    let started = clock::now().instant;
    run_workers("stress_worker", "stress", &dir, STRESS_PROCESSES);
    let elapsed = started.elapsed();
    let n = STRESS_PROCESSES as u64;
    eprintln!(
        "stress: {STRESS_PROCESSES} processes x {STRESS_COMMITS} commits = {} commits in {} ms",
        n * STRESS_COMMITS,
        elapsed.as_millis()
    );

    let raw = fs::read_to_string(dir.join(STATE_FILE)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(json["schema_version"], SCHEMA_VERSION);

    let loaded = Store::open(&dir).load(T0 + 10_000).unwrap();
    assert!(loaded.warnings.is_empty());
    let h = &loaded.health;
    assert_eq!(h.providers["p"].total_failures, n * STRESS_COMMITS);
    assert_eq!(h.switches, n * STRESS_COMMITS);
    assert_eq!(h.switch_log.len(), SWITCH_LOG_LEN);
    assert_eq!(
        h.models["p/m"].total_successes,
        n * STRESS_COMMITS / STRESS_SUCCESS_EVERY
    );
    for id in 0..STRESS_PROCESSES {
        let r = &h.models[&format!("p/w{id}")];
        assert_eq!(r.total_failures, STRESS_COMMITS, "worker {id}");
        // All 50 land inside the first cooldown: one outage, so the breaker counts one
        // consecutive failure (no compounding), while the total counts every one.
        assert_eq!(r.consecutive_failures, 1, "worker {id}");
    }

    let log = fs::read_to_string(dir.join(LOG_FILE)).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines.len() as u64,
        n * STRESS_COMMITS,
        "every log line kept"
    );
    for line in &lines {
        let (time, rest) = line.split_once(' ').unwrap();
        assert!(
            time.starts_with("2023-11-14T22:13:20.") && time.ends_with('Z'),
            "{line}"
        );
        assert!(rest.starts_with("worker "), "{line}");
    }

    assert_eq!(
        names_in(&dir),
        sorted(vec![LOCK_FILE.into(), STATE_FILE.into(), LOG_FILE.into()]),
        "no temp file left behind"
    );
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[test]
fn file_format_is_versioned_pretty_json_readable_by_a_new_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    let loaded = store
        .commit(
            &[
                failure(
                    T0,
                    "fake-a",
                    Scope::Provider,
                    FailureClass::Quota,
                    "402: insufficient_quota",
                ),
                switch(T0 + 1, "fake-a/alpha-1", "fake-b/beta-1", "quota"),
            ],
            1.0,
            T0 + 2,
        )
        .unwrap();
    assert_eq!(loaded.updated_at, Some(T0 + 2));
    let raw = fs::read_to_string(store.state_path()).unwrap();
    assert!(raw.starts_with("{\n  \"schema_version\": 1,\n  \"updated_at\": 1700000000002,\n"));
    assert!(raw.ends_with("}\n"));
    let json: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let quota = &json["providers"]["fake-a"];
    assert_eq!(quota["total_failures"], 1);
    assert_eq!(quota["cooldown_until"], T0 + 30 * 60_000);
    assert_eq!(quota["last_class"], "quota");
    assert_eq!(json["switches"], 1);
    assert_eq!(json["switch_log"][0]["to"], "fake-b/beta-1");

    let again = Store::open(tmp.path()).load(T0 + 3).unwrap();
    assert_eq!(again.health, loaded.health);
    assert_eq!(again.updated_at, Some(T0 + 2));

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(store.state_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "state file is private");
    }
}

#[test]
fn corrupt_or_unknown_version_files_are_quarantined_and_commits_continue() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    let cases: [&[u8]; 5] = [
        b"{\"schema_version\": 1, \"models\": {",
        b"",
        b"{\"schema_version\": 0}",
        // The extension's layout under our name: no `schema_version`.
        b"{\"schemaVersion\": 2, \"models\": {}, \"providers\": {}}",
        b"{\"schema_version\": 1, \"providers\": []}",
    ];
    for (i, bad) in cases.iter().enumerate() {
        let now = T0 + i as u64 * 1000;
        fs::write(store.state_path(), bad).unwrap();

        // A plain read moves it aside and says so.
        let loaded = store.load(now).unwrap();
        assert_eq!(loaded.health, Health::default());
        let [StoreWarning::Quarantined { moved_to, .. }] = loaded.warnings.as_slice() else {
            panic!("case {i}: {:?}", loaded.warnings);
        };
        let warning = loaded.warnings[0].to_string();
        assert!(warning.contains("moved it to"), "{warning}");
        assert_eq!(
            moved_to,
            &tmp.path().join(format!("{STATE_FILE}.corrupt-{now}"))
        );
        assert_eq!(fs::read(moved_to).unwrap(), *bad, "case {i}: kept verbatim");
        assert!(!store.state_path().exists());

        // Commits carry on from empty health.
        let after = store
            .commit(
                &[failure(
                    now,
                    "p",
                    Scope::Provider,
                    FailureClass::Auth,
                    "401",
                )],
                1.0,
                now,
            )
            .unwrap();
        assert!(after.warnings.is_empty());
        assert_eq!(after.health.providers["p"].total_failures, 1);
        fs::remove_file(store.state_path()).unwrap();
    }

    // A commit that meets a bad file quarantines it too (same millisecond: a new name).
    fs::write(store.state_path(), b"garbage").unwrap();
    let loaded = store
        .commit(
            &[failure(T0, "p", Scope::Provider, FailureClass::Auth, "401")],
            1.0,
            T0,
        )
        .unwrap();
    let [StoreWarning::Quarantined { moved_to, .. }] = loaded.warnings.as_slice() else {
        panic!("{:?}", loaded.warnings);
    };
    assert_eq!(
        moved_to,
        &tmp.path().join(format!("{STATE_FILE}.corrupt-{T0}-1"))
    );
    assert_eq!(fs::read(moved_to).unwrap(), b"garbage");
    assert_eq!(loaded.health.providers["p"].total_failures, 1);
    let corrupt = names_in(tmp.path())
        .into_iter()
        .filter(|n| n.contains(".corrupt-"))
        .count();
    assert_eq!(corrupt, cases.len() + 1);
}

#[test]
fn newer_schema_file_is_never_moved_or_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    let newer = b"{\n  \"schema_version\": 2,\n  \"updated_at\": 1,\n  \"models\": {\"a/b\": {\"shape\": \"new\"}},\n  \"leases\": []\n}\n";
    fs::write(store.state_path(), newer).unwrap();

    let loaded = store.load(T0).unwrap();
    assert_eq!(loaded.health, Health::default());
    assert!(matches!(
        loaded.warnings.as_slice(),
        [StoreWarning::NewerSchema { found: 2, .. }]
    ));
    assert!(loaded.warnings[0].to_string().contains("schema version 2"));

    let delta = [failure(T0, "p", Scope::Provider, FailureClass::Auth, "401")];
    let err = store.commit(&delta, 1.0, T0).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 2, .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("not overwriting"), "{message}");
    assert!(matches!(
        store.claim_lease("p", T0, 1.0),
        Err(StoreError::NewerSchema { .. })
    ));
    assert!(matches!(
        store.update(T0, |h| h.switches = 0),
        Err(StoreError::NewerSchema { .. })
    ));
    store.log_line(T0, "logging still works");

    assert_eq!(
        fs::read(store.state_path()).unwrap(),
        newer,
        "byte-identical"
    );
    let names = names_in(tmp.path());
    assert!(
        !names
            .iter()
            .any(|n| n.contains("corrupt") || n.contains("tmp")),
        "{names:?}"
    );
}

#[cfg(unix)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Unwritable state directories fail with a `StoreError` (the caller warns and continues in
/// memory) and leave what is there untouched. Permission bits do not stop root, so the cases
/// that always hold are paths that cannot be created by anyone.
#[test]
fn unwritable_directories_fail_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let delta = [failure(T0, "p", Scope::Provider, FailureClass::Auth, "401")];

    // The agent dir's parent is a regular file: the dir can never exist.
    let file = tmp.path().join("not-a-dir");
    fs::write(&file, b"x").unwrap();
    let store = Store::open(&file.join("agent"));
    assert_eq!(store.load(T0).unwrap().health, Health::default());
    let err = store.commit(&delta, 1.0, T0).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Io {
                action: "create state directory",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("cannot create state directory"));
    store.log_line(T0, "best effort, no panic");

    // The agent dir is itself a regular file.
    let store = Store::open(&file);
    assert!(store.commit(&delta, 1.0, T0).is_err());
    assert!(store.claim_lease("p", T0, 1.0).is_err());
    assert_eq!(fs::read(&file).unwrap(), b"x");

    // An existing directory nobody may create files in, root included.
    #[cfg(target_os = "linux")]
    {
        let store = Store::open(Path::new("/proc"));
        assert_eq!(store.load(T0).unwrap().health, Health::default());
        let err = store.commit(&delta, 1.0, T0).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Io {
                    action: "open lock file",
                    ..
                }
            ),
            "{err:?}"
        );
        store.log_line(T0, "best effort, no panic");
    }

    // Permission bits, where they apply (not as root).
    #[cfg(unix)]
    if !is_root() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tmp.path().join("ro");
        let store = Store::open(&dir);
        store.commit(&delta, 1.0, T0).unwrap();
        let before = fs::read(store.state_path()).unwrap();
        fs::remove_file(store.lock_path()).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
        let err = store.commit(&delta, 1.0, T0 + 1);
        let loaded = store.load(T0 + 1);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(err, Err(StoreError::Io { .. })), "{err:?}");
        assert_eq!(loaded.unwrap().health.providers["p"].total_failures, 1);
        assert_eq!(fs::read(store.state_path()).unwrap(), before);
    }
}

#[test]
fn missing_directories_are_created_on_first_write_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("home").join(".pi").join("agent");
    let store = Store::open(&dir);
    let loaded = store.load(T0).unwrap();
    assert_eq!(loaded.health, Health::default());
    assert!(loaded.warnings.is_empty());
    assert!(!dir.exists(), "reading creates nothing");

    store
        .commit(&[switch(T0, "a/x", "b/y", "auth")], 1.0, T0)
        .unwrap();
    assert!(dir.join(STATE_FILE).is_file());
    assert_eq!(store.load(T0).unwrap().health.switches, 1);

    let log_dir = tmp.path().join("elsewhere").join("agent");
    Store::open(&log_dir).log_line(T0, "hello");
    let log = fs::read_to_string(log_dir.join(LOG_FILE)).unwrap();
    assert_eq!(log, "2023-11-14T22:13:20.000Z hello\n");
}

/// Worker body for the cross-process lease race: prints what it got.
#[test]
#[ignore = "a worker process of lease_race_between_processes_has_one_winner"]
fn lease_worker() {
    assert_eq!(worker_order(ENV_MODE), "lease");
    let dir = PathBuf::from(worker_order(ENV_DIR));
    let store = Store::open(&dir);
    wait_for_start();
    let (claim, _) = store.claim_lease("p", T0 + 10_000, 0.001).unwrap();
    // On a line of its own: libtest prints "test lease_worker ... " just before.
    println!("\nCLAIM={claim:?}");
}

/// Opens provider `p`'s breaker for 1.8 s (quota, cooldown scale 0.001) at T0.
fn open_provider_breaker(store: &Store) {
    store
        .commit(
            &[failure(
                T0,
                "p",
                Scope::Provider,
                FailureClass::Quota,
                "402",
            )],
            0.001,
            T0,
        )
        .unwrap();
}

#[test]
fn lease_race_between_processes_has_one_winner() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    open_provider_breaker(&store);
    let outputs = run_workers("lease_worker", "lease", tmp.path(), 6);
    let claims: Vec<&str> = outputs
        .iter()
        .flat_map(|o| o.lines())
        .filter_map(|l| l.strip_prefix("CLAIM="))
        .collect();
    assert_eq!(claims.len(), 6, "{outputs:?}");
    assert_eq!(
        claims.iter().filter(|c| **c == "Claimed").count(),
        1,
        "{claims:?}"
    );
    assert_eq!(
        claims.iter().filter(|c| **c == "Held").count(),
        5,
        "{claims:?}"
    );
}

#[test]
fn lease_is_exclusive_until_it_expires() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    open_provider_breaker(&store);

    // Still cooling: nobody may probe.
    assert_eq!(
        store.claim_lease("p", T0 + 1, 0.001).unwrap().0,
        Claim::Cooling
    );

    // Half-open: claimants at the same instant, each with its own store (own lock handle).
    let half_open = T0 + 2_000;
    let claimants = 8;
    let barrier = Arc::new(Barrier::new(claimants));
    let handles: Vec<_> = (0..claimants)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            let dir = tmp.path().to_path_buf();
            std::thread::spawn(move || {
                let store = Store::open(&dir);
                barrier.wait();
                store.claim_lease("p", half_open, 0.001).unwrap().0
            })
        })
        .collect();
    let claims: Vec<Claim> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        claims.iter().filter(|c| **c == Claim::Claimed).count(),
        1,
        "{claims:?}"
    );
    assert_eq!(
        claims.iter().filter(|c| **c == Claim::Held).count(),
        claimants - 1
    );
    let lease_until = store.load(half_open).unwrap().health.providers["p"].lease_until;
    assert_eq!(lease_until, Some(half_open + PROBE_LEASE_MS));

    // Just before expiry it is still held; after expiry a new claim wins.
    let before = half_open + PROBE_LEASE_MS - 1;
    assert_eq!(
        store.claim_lease("p", before, 0.001).unwrap().0,
        Claim::Held
    );
    let expired = half_open + PROBE_LEASE_MS;
    let (claim, loaded) = store.claim_lease("p", expired, 0.001).unwrap();
    assert_eq!(claim, Claim::Claimed);
    assert!(claim.granted());
    assert_eq!(
        loaded.health.providers["p"].lease_until,
        Some(expired + PROBE_LEASE_MS)
    );

    // The probe succeeds: the breaker closes and no lease is needed any more.
    store
        .commit(
            &[Delta::Success {
                at: expired + 1,
                keys: keys("p", "m"),
            }],
            0.001,
            expired + 1,
        )
        .unwrap();
    let (claim, loaded) = store.claim_lease("p", expired + 2, 0.001).unwrap();
    assert_eq!(claim, Claim::NotNeeded);
    assert_eq!(loaded.health.providers["p"].lease_until, None);
    let unchanged = fs::read(store.state_path()).unwrap();
    assert_eq!(
        store
            .claim_lease("never-failed", expired + 3, 0.001)
            .unwrap()
            .0,
        Claim::NotNeeded
    );
    assert_eq!(
        fs::read(store.state_path()).unwrap(),
        unchanged,
        "no needless write"
    );
}

#[test]
fn lock_wait_is_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path()).with_lock_wait(Duration::from_millis(200));
    store.commit(&[], 1.0, T0).unwrap();
    let held = fs::File::options()
        .read(true)
        .write(true)
        .open(store.lock_path())
        .unwrap();
    held.lock().unwrap();
    let started = clock::now().instant;
    let err = store
        .commit(&[switch(T0, "a/x", "b/y", "quota")], 1.0, T0)
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(err, StoreError::LockTimeout { .. }), "{err:?}");
    assert!(err.to_string().contains("health state lock"), "{err}");
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    held.unlock().unwrap();
    let loaded = store
        .commit(&[switch(T0, "a/x", "b/y", "quota")], 1.0, T0)
        .unwrap();
    assert_eq!(
        loaded.health.switches, 1,
        "the timed-out commit wrote nothing"
    );
}

#[test]
fn secrets_in_errors_never_reach_the_file_or_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    let error = format!(
        "401: Incorrect API key provided: {OPENAI_KEY}.\nrequest headers: Authorization: Bearer {JWT}\n\
         x-api-key: {ANTHROPIC_KEY}\nurl: https://generativelanguage.googleapis.com/v1beta/models?key={GOOGLE_KEY}&alt=sse"
    );
    store
        .commit(
            &[
                failure(T0, "p", Scope::Provider, FailureClass::Auth, &error),
                failure(T0, "p/m", Scope::Model, FailureClass::Unknown, &error),
                failure(T0, "p@x", Scope::Endpoint, FailureClass::Endpoint, &error),
                switch(T0, "p/m", "q/m", &format!("auth: Bearer {OPAQUE}")),
            ],
            1.0,
            T0,
        )
        .unwrap();
    // A management edit that stores raw text is scrubbed on the way out as well.
    store
        .update(T0 + 1, |h| {
            h.models.entry("q/m".into()).or_default().last_error =
                Some(format!("authorization={OPAQUE}"));
        })
        .unwrap();
    store.log_line(T0, &format!("attempt failed: {error}"));
    store.log_line(T0, &format!("retry with Bearer {OPAQUE}"));

    let state = fs::read_to_string(store.state_path()).unwrap();
    let log = fs::read_to_string(store.log_path()).unwrap();
    for secret in [OPENAI_KEY, ANTHROPIC_KEY, JWT, GOOGLE_KEY, OPAQUE] {
        let chars: Vec<char> = secret.chars().collect();
        for w in chars.windows(8) {
            let w: String = w.iter().collect();
            assert!(!state.contains(&w), "{w:?} in state file:\n{state}");
            assert!(!log.contains(&w), "{w:?} in log:\n{log}");
        }
    }
    assert!(state.contains("[redacted]"));
    assert_eq!(
        log.lines().count(),
        2,
        "newlines in errors never split log lines"
    );
    let stored = &store.load(T0).unwrap().health.providers["p"];
    let last = stored.last_error.as_deref().unwrap();
    assert!(
        last.starts_with("401: Incorrect API key provided: [redacted]."),
        "{last}"
    );
    assert!(last.chars().count() <= 400);

    // A quarantine warning never quotes a secret from the bad file.
    fs::write(
        store.state_path(),
        format!("{{\"schema_version\": 1, \"switches\": \"{OPENAI_KEY}\"}}"),
    )
    .unwrap();
    let loaded = store.load(T0 + 5).unwrap();
    let warning = loaded.warnings[0].to_string();
    assert!(!warning.contains("Xb7qJ2mW"), "{warning}");
}

#[test]
fn log_rotates_keeping_three_generations() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path());
    let line = "x".repeat(999);
    let per_file = (LOG_ROTATE_BYTES / 1000 + 2) as usize;
    // Enough to fill the log five times over: only .1, .2 and .3 may remain.
    for i in 0..per_file * 5 {
        store.log_line(T0 + i as u64, &line);
    }
    let names = names_in(tmp.path());
    assert_eq!(
        names,
        sorted(vec![
            LOCK_FILE.into(),
            LOG_FILE.into(),
            format!("{LOG_FILE}.1"),
            format!("{LOG_FILE}.2"),
            format!("{LOG_FILE}.3"),
        ])
    );
    let max = LOG_ROTATE_BYTES + 1100;
    for name in names.iter().filter(|n| n.starts_with(LOG_FILE)) {
        let len = fs::metadata(tmp.path().join(name)).unwrap().len();
        assert!(len <= max, "{name}: {len}");
    }
    for n in 1..=3 {
        let len = fs::metadata(tmp.path().join(format!("{LOG_FILE}.{n}")))
            .unwrap()
            .len();
        assert!(
            len > LOG_ROTATE_BYTES,
            "generation {n} is a full log: {len}"
        );
    }
    // Newest lines are in the live log, older generations hold older lines.
    let live = fs::read_to_string(store.log_path()).unwrap();
    let one = fs::read_to_string(tmp.path().join(format!("{LOG_FILE}.1"))).unwrap();
    assert!(live.lines().next().unwrap() > one.lines().last().unwrap());
}
