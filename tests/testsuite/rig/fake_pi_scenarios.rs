//! The fake Pi's scenarios (fixtures/fake-pi/pi) run on their own, without the project binary,
//! and the two that imitate real Pi checked against real Pi in a read-only agent dir.

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;

fn fake_pi() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-pi/pi")
}

/// The fake Pi in `scenario`, in its own process group, all pipes captured.
struct FakePi {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl FakePi {
    fn spawn(scenario: &str, env: &[(&str, &str)]) -> FakePi {
        let mut cmd = Command::new(fake_pi());
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("FAKE_PI_SCENARIO", scenario)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn().expect("spawn fake pi");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        FakePi {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, v: Value) {
        let w = self.stdin.as_mut().unwrap();
        writeln!(w, "{v}").unwrap();
        w.flush().unwrap();
    }

    /// One stdout line (without "\n") as raw bytes.
    fn line(&mut self) -> Vec<u8> {
        let mut buf = Vec::new();
        self.stdout.read_until(b'\n', &mut buf).unwrap();
        assert_eq!(buf.pop(), Some(b'\n'), "EOF instead of a line");
        buf
    }

    fn json(&mut self) -> Value {
        let l = self.line();
        serde_json::from_slice(&l)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&l)))
    }

    fn kill_group(&mut self) {
        // SAFETY: kill(2) on the process group we created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for FakePi {
    fn drop(&mut self) {
        self.kill_group();
    }
}

fn start(scenario: &str, env: &[(&str, &str)]) -> FakePi {
    let mut p = FakePi::spawn(scenario, env);
    p.send(json!({"id": "1", "type": "get_state"}));
    let st = p.json();
    assert_eq!(
        (&st["id"], &st["success"]),
        (&json!("1"), &json!(true)),
        "{st}"
    );
    p.send(json!({"id": "2", "type": "get_available_models"}));
    let m = p.json();
    assert_eq!(m["command"], "get_available_models", "{m}");
    p
}

#[test]
fn fake_pi_ok_still_answers() {
    let mut p = start("ok", &[]);
    p.send(json!({"id": "3", "type": "prompt", "message": "hi"}));
    assert_eq!(p.json()["command"], "prompt");
    assert_eq!(p.json(), json!({"type": "agent_start"}));
    assert_eq!(p.json()["message"]["content"][0]["text"], "fake answer");
    assert_eq!(p.json(), json!({"type": "agent_settled"}));
}

#[test]
fn fake_pi_no_models() {
    let mut p = FakePi::spawn("no-models", &[]);
    p.send(json!({"id": "1", "type": "get_state"}));
    let st = p.json();
    assert_eq!(st["data"]["model"]["id"], "unknown", "{st}");
    assert_eq!(st["data"]["model"]["provider"], "unknown", "{st}");
    assert_eq!(st["data"]["model"]["contextWindow"], 0, "{st}");
    p.send(json!({"id": "2", "type": "get_available_models"}));
    assert_eq!(p.json()["data"], json!({"models": []}));
    p.send(json!({"id": "3", "type": "prompt", "message": "hi"}));
    let r = p.json();
    assert_eq!(
        (&r["id"], &r["success"]),
        (&json!("3"), &json!(false)),
        "{r}"
    );
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .starts_with("No API key found for the selected model.\n\nUse /login"),
        "{r}"
    );
}

#[test]
fn fake_pi_huge_lines() {
    // Exact sizes on a small line, both kinds.
    let mut p = start("huge-line", &[("FAKE_PI_LINE_BYTES", "1000")]);
    p.send(json!({"id": "3", "type": "prompt", "message": "hi"}));
    assert_eq!(p.json()["command"], "prompt");
    assert_eq!(p.json()["type"], "agent_start");
    let big = p.line();
    assert_eq!(big.len(), 1000);
    let v: Value = serde_json::from_slice(&big).unwrap();
    assert_eq!(v["type"], "message_update");
    assert_eq!(v["x"].as_str().unwrap().len(), 1000 - 32);
    assert!(v["x"].as_str().unwrap().bytes().all(|b| b == b'a'));
    assert_eq!(p.json()["type"], "message_end");
    assert_eq!(p.json()["type"], "agent_settled");

    let mut p = start("huge-response-line", &[("FAKE_PI_LINE_BYTES", "5000")]);
    p.send(json!({"id": "p7", "type": "prompt", "message": "hi"}));
    let big = p.line();
    assert_eq!(big.len(), 5000);
    let v: Value = serde_json::from_slice(&big).unwrap();
    assert_eq!(
        (&v["id"], &v["type"], &v["command"], &v["success"]),
        (
            &json!("p7"),
            &json!("response"),
            &json!("prompt"),
            &json!(true)
        )
    );
    assert_eq!(p.json()["type"], "agent_start");
    assert_eq!(p.json()["type"], "message_end");
    assert_eq!(p.json()["type"], "agent_settled");

    // The default: 64 MiB, made quickly.
    let mut p = start("huge-line", &[]);
    let t = Instant::now();
    p.send(json!({"id": "3", "type": "prompt", "message": "hi"}));
    p.line();
    p.line();
    let big = p.line();
    let took = t.elapsed();
    assert_eq!(big.len(), 64 << 20);
    assert!(big.starts_with(br#"{"type":"message_update","x":"aaa"#));
    assert!(big.ends_with(br#"aaa"}"#));
    assert_eq!(p.json()["type"], "message_end");
    eprintln!("rig[fake-pi]: 64 MiB line in {:.2}s", took.as_secs_f64());
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// Reads `n` bytes of an endless line: no newline in them, and the writer is still going.
fn endless(p: &mut FakePi, n: usize) {
    let mut got = 0;
    let mut buf = vec![0u8; 64 * 1024];
    while got < n {
        let k = p.stdout.read(&mut buf).unwrap();
        assert!(k > 0, "endless line ended after {got} bytes");
        assert!(!buf[..k].contains(&b'\n'), "a newline after {got} bytes");
        got += k;
    }
    assert!(p.child.try_wait().unwrap().is_none(), "the writer stopped");
}

#[test]
fn fake_pi_endless_lines() {
    let mut p = start("endless-line", &[]);
    p.send(json!({"id": "3", "type": "prompt", "message": "hi"}));
    assert_eq!(p.json()["command"], "prompt");
    // `agent_start` precedes the endless line on the same stream.
    let mut head = [0u8; 23];
    p.stdout.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"{\"type\":\"agent_start\"}\n");
    endless(&mut p, 8 << 20);

    let mut p = FakePi::spawn("endless-line-at-start", &[]);
    endless(&mut p, 8 << 20);
    p.kill_group();
    let code = p.child.wait().unwrap();
    assert_eq!(code.signal(), Some(libc::SIGKILL));
}

/// Children of `pid` (from /proc/*/stat).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

#[test]
fn fake_pi_ignore_stdin_survives_polite_signals() {
    let mut p = FakePi::spawn("ignore-stdin", &[("FAKE_PI_SLEEP_S", "120")]);
    let pid = p.child.id();
    // Wait for the exec: before it the shell has not set its traps yet.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cmdline(pid).starts_with("sleep") {
        assert!(
            Instant::now() < deadline,
            "no exec of sleep: {:?}",
            cmdline(pid)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(cmdline(pid), "sleep 120");
    assert!(children_of(pid).is_empty(), "{:?}", children_of(pid));
    p.send(json!({"id": "1", "type": "get_state"}));
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: kill(2) on our child.
        unsafe { libc::kill(pid as i32, sig) };
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "a polite signal killed it"
    );
    // Nothing was answered.
    let mut probe = [0u8; 1];
    let fd = std::os::fd::AsRawFd::as_raw_fd(p.stdout.get_ref());
    // SAFETY: fcntl on a pipe fd we own, to make one read non-blocking.
    unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
    let r = p.stdout.read(&mut probe);
    assert_eq!(r.unwrap_err().kind(), ErrorKind::WouldBlock);
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let st = p.child.wait().unwrap();
    assert_eq!(st.signal(), Some(libc::SIGKILL));
}

#[test]
fn fake_pi_die_at_start_node_stack() {
    for (errno, text, num) in [
        (None, "EACCES: permission denied", "-13"),
        (Some("EROFS"), "EROFS: read-only file system", "-30"),
    ] {
        let mut cmd = Command::new(fake_pi());
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("FAKE_PI_SCENARIO", "die-at-start-node-stack")
            .env("PI_CODING_AGENT_DIR", "/ro/agent");
        if let Some(e) = errno {
            cmd.env("FAKE_PI_ERRNO", e);
        }
        let out = run_command(cmd, None, Duration::from_secs(10));
        out.assert_code(1).assert_stdout_empty();
        let lines = out.stderr_lines();
        assert_eq!(
            lines[4],
            format!("Error: {text}, mkdir '/ro/agent/trust.json.lock'"),
            "{}",
            out.stderr
        );
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("    at ")).count(),
            10
        );
        assert!(lines.contains(&format!("  errno: {num},").as_str()));
        assert_eq!(lines.last(), Some(&"Node.js v22.23.5"));
    }
}

/// Real Pi in an agent dir it cannot write, as a non-root user (root ignores permissions):
/// 1.6.0 dies at start like `die-at-start-node-stack`; 0.84.4 starts with no models like
/// `no-models`. Keeps both fixtures honest.
#[test]
fn real_pi_in_an_unwritable_agent_dir_matches_the_fixtures() {
    // SAFETY: geteuid(2) has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for version in [PI_MIN, PI_NEWEST] {
        let env = TestEnv::new(
            version,
            &[ProviderSpec::new(
                "fake-a",
                "a",
                vec![ModelSpec::text("alpha-1")],
            )],
        );
        // World-traversable so the unprivileged user can reach the (unwritable) agent dir.
        for d in [env.dir.path(), &env.agent_dir] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        for d in [&env.home, &env.cwd] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let args = [
            "--mode",
            "rpc",
            "--no-session",
            "--offline",
            "--no-extensions",
        ];
        let cmd = if root {
            let mut c = env.other_cmd(
                "setpriv",
                [
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--",
                    env.pi.pi_bin.to_str().unwrap(),
                ]
                .into_iter()
                .chain(args),
            );
            c.env("PI_OFFLINE", "1");
            c
        } else {
            // Not root: the dir's owner can still write it, so take the write bit away.
            std::fs::set_permissions(&env.agent_dir, std::fs::Permissions::from_mode(0o555))
                .unwrap();
            env.pi_cmd(args)
        };
        let input = b"{\"id\":\"1\",\"type\":\"get_state\"}\n{\"id\":\"2\",\"type\":\"get_available_models\"}\n";
        let out = run_command(cmd, Some(input), Duration::from_secs(30));
        eprintln!(
            "rig[{version}]: unwritable agent dir: exit {} after {:.2}s",
            out.code,
            out.elapsed.as_secs_f64()
        );
        if version == PI_NEWEST {
            out.assert_code(1).assert_stdout_empty();
            let lines = out.stderr_lines();
            let lock = env.agent_dir.join("trust.json.lock");
            assert!(
                lines.contains(
                    &format!(
                        "Error: EACCES: permission denied, mkdir '{}'",
                        lock.display()
                    )
                    .as_str()
                ),
                "{}",
                out.dump()
            );
            assert_eq!(
                lines.iter().filter(|l| l.starts_with("    at ")).count(),
                10,
                "{}",
                out.dump()
            );
            assert!(
                lines.last().unwrap().starts_with("Node.js v22."),
                "{}",
                out.dump()
            );
        } else {
            out.assert_success();
            let lines = out.json_lines();
            assert_eq!(lines.len(), 2, "{}", out.dump());
            assert_eq!(lines[0]["data"]["model"]["id"], "unknown", "{}", out.dump());
            assert_eq!(lines[1]["data"], json!({"models": []}), "{}", out.dump());
        }
        if !root {
            std::fs::set_permissions(&env.agent_dir, std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
    }
}
