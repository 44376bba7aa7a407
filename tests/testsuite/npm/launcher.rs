//! The launcher (`bin/pi-ccswitch-run` of the main package): the layouts npm and pnpm make, an
//! unsupported system, a cross-built binary, a copied launcher, a binary without its exec bit.

use super::*;

/// The launcher without npm, in the layouts the package managers make: npm's global install
/// nests the platform package under the main one, pnpm links both into its store, and a chain
/// of relative symlinks leads to the command.
#[test]
fn launcher_finds_the_binary_in_each_layout() {
    let packed = host_packed();
    let stage = packed.out.join("stage");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        let st = Command::new("cp")
            .arg("-R")
            .arg(from)
            .arg(to)
            .status()
            .expect("cp");
        assert!(st.success(), "cp -R {} {}", from.display(), to.display());
    };
    let scoped = format!("@pi-ccswitch-run/{}", host_platform());
    // npm -g: <prefix>/lib/node_modules/pi-ccswitch-run/node_modules/@pi-ccswitch-run/<platform>
    let nested = dir.path().join("nested/lib/node_modules/pi-ccswitch-run");
    copy(&stage.join("pi-ccswitch-run"), &nested);
    copy(
        &stage.join(host_platform()),
        &nested.join("node_modules").join(&scoped),
    );
    std::fs::create_dir_all(dir.path().join("nested/bin")).expect("mkdir");
    symlink(
        "../lib/node_modules/pi-ccswitch-run/bin/pi-ccswitch-run",
        dir.path().join("nested/bin/pi-ccswitch-run"),
    )
    .expect("symlink");
    // pnpm: node_modules/.pnpm/<pkg>@<v>/node_modules/{pi-ccswitch-run, @scope/<platform> -> ...}
    let store = dir.path().join("pnpm/node_modules/.pnpm");
    let main_in_store = store.join(format!(
        "pi-ccswitch-run@{VERSION}/node_modules/pi-ccswitch-run"
    ));
    copy(&stage.join("pi-ccswitch-run"), &main_in_store);
    let plat_in_store = store.join(format!(
        "@pi-ccswitch-run+{}@{VERSION}/node_modules/{scoped}",
        host_platform()
    ));
    copy(&stage.join(host_platform()), &plat_in_store);
    let link = store.join(format!("pi-ccswitch-run@{VERSION}/node_modules/{scoped}"));
    std::fs::create_dir_all(link.parent().expect("parent")).expect("mkdir");
    symlink(&plat_in_store, &link).expect("symlink");
    symlink(
        format!(".pnpm/pi-ccswitch-run@{VERSION}/node_modules/pi-ccswitch-run"),
        dir.path().join("pnpm/node_modules/pi-ccswitch-run"),
    )
    .expect("symlink");
    // A relative link to a link to the command.
    symlink(
        "nested/bin/pi-ccswitch-run",
        dir.path().join("link-to-link"),
    )
    .expect("symlink");

    let env = TestEnv::new(PI_MIN, &providers());
    let want = format!("pi-ccswitch-run {VERSION}\n");
    for cmd in [
        dir.path().join("nested/bin/pi-ccswitch-run"),
        dir.path().join("link-to-link"),
        main_in_store.join("bin/pi-ccswitch-run"),
    ] {
        let out = run_command(env.other_cmd(&cmd, ["--version"]), None, RUN_TIMEOUT);
        out.check(out.code == 0, &format!("via {}", cmd.display()))
            .assert_stdout_eq(&want);
    }
    // pnpm's own shim runs the launcher as `sh FILE` from a relative path.
    let mut sh = env.other_cmd(
        "sh",
        [
            "node_modules/pi-ccswitch-run/bin/pi-ccswitch-run",
            "--version",
        ],
    );
    sh.current_dir(dir.path().join("pnpm"));
    run_command(sh, None, RUN_TIMEOUT)
        .assert_success()
        .assert_stdout_eq(&want);
}

/// The launcher with no platform package installed, on the system a fake `uname -sm` names.
fn launcher_as_if_on(uname_sm: &str) -> Output {
    let packed = host_packed();
    let launcher = packed.out.join("stage/pi-ccswitch-run/bin/pi-ccswitch-run");
    let dir = tempfile::tempdir().expect("temp dir");
    let fake_uname = dir.path().join("uname");
    std::fs::write(&fake_uname, format!("#!/bin/sh\necho '{uname_sm}'\n")).expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake_uname, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let env = TestEnv::new(PI_MIN, &providers());
    let mut cmd = env.other_cmd(&launcher, ["--version"]);
    let mut path = std::ffi::OsString::from(dir.path());
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    cmd.env("PATH", path);
    run_command(cmd, None, RUN_TIMEOUT)
}

/// On a system no platform package covers, one line says so and points at `cargo install`; under
/// Git Bash on Windows (no Windows package is published yet), one line names the missing one.
#[test]
fn launcher_on_an_unsupported_system_is_one_line_exit_2() {
    let out = launcher_as_if_on("FreeBSD amd64");
    out.assert_code(2).assert_stdout_empty();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.dump());
    out.assert_stderr_contains("FreeBSD amd64")
        .assert_stderr_contains(&format!(
            "cargo install pi-ccswitch-run --version {VERSION}"
        ));
    let out = launcher_as_if_on("MINGW64_NT-10.0-19045 x86_64");
    out.assert_code(2).assert_stdout_empty();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.dump());
    out.assert_stderr_contains(&format!("@pi-ccswitch-run/win32-x64-msvc@{VERSION}"));
}

/// A cross-built binary run here: `--version` and one real failover, the binary started through
/// `PCCR_CROSS_RUNNER` (e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`). Run by `npm/cross-check`
/// (too slow for every `cargo test` and it needs a release build of another target).
#[test]
#[ignore = "needs a cross-built binary; run by npm/cross-check"]
fn cross_built_binary_answers_and_fails_over() {
    let bin = std::env::var_os("PCCR_CROSS_BIN")
        .map(PathBuf::from)
        .expect("set PCCR_CROSS_BIN to the binary to check (npm/cross-check does)");
    let runner = std::env::var("PCCR_CROSS_RUNNER").unwrap_or_default();
    let dir = tempfile::tempdir().expect("temp dir");
    let wrapper = dir.path().join("pi-ccswitch-run");
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec {runner} {} \"$@\"\n",
            quote(&bin.to_string_lossy())
        ),
    )
    .expect("write wrapper");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let env = TestEnv::new(PI_MIN, &providers());
    let out = run_command(env.other_cmd(&wrapper, ["--version"]), None, RUN_TIMEOUT);
    out.assert_success()
        .assert_stdout_eq(&format!("pi-ccswitch-run {VERSION}\n"));
    eprintln!("cross: {} --version: {}", bin.display(), out.stdout.trim());
    assert_failover(&wrapper);
    eprintln!("cross: failover 402 → healthy provider: ok");
}

/// README's pinning example names the current version (in both languages), so a release that
/// bumps Cargo.toml's version cannot leave it behind.
#[test]
fn readme_pins_the_crate_version() {
    for readme in ["README.md", "README.zh-CN.md"] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(readme))
            .unwrap_or_else(|e| panic!("read {readme}: {e}"));
        let pin = format!("npm i -D --save-exact pi-ccswitch-run@{VERSION} ");
        assert!(text.contains(&pin), "{readme} lacks {pin:?}");
    }
}

/// Issue 29: a launcher copied out of its package says so (it said the platform package "is
/// not installed", which was not true), in one line with exit 2.
#[test]
fn a_copied_launcher_says_it_was_copied() {
    let packed = host_packed();
    let launcher = packed.out.join("stage/pi-ccswitch-run/bin/pi-ccswitch-run");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("bin/pi-ccswitch-run");
    std::fs::create_dir_all(copy.parent().expect("parent")).expect("mkdir");
    std::fs::copy(&launcher, &copy).expect("copy the launcher");
    let env = TestEnv::new(PI_MIN, &providers());
    let out = run_command(env.other_cmd(&copy, ["--version"]), None, RUN_TIMEOUT);
    out.assert_code(2).assert_stdout_empty();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.dump());
    out.assert_stderr_contains("is not inside the npm package pi-ccswitch-run")
        .assert_stderr_lacks("is not installed");
}

/// Issue 29: a platform binary without its exec bit gives the launcher's one line and exit 2,
/// not the shell's `Permission denied` and 126.
#[test]
fn a_binary_without_its_exec_bit_is_one_line_exit_2() {
    use std::os::unix::fs::PermissionsExt;
    let packed = host_packed();
    let stage = packed.out.join("stage");
    let dir = tempfile::tempdir().expect("temp dir");
    let main = dir.path().join("lib/node_modules/pi-ccswitch-run");
    let plat = main.join(format!("node_modules/@pi-ccswitch-run/{}", host_platform()));
    for (from, to) in [
        (stage.join("pi-ccswitch-run"), &main),
        (stage.join(host_platform()), &plat),
    ] {
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        let st = Command::new("cp")
            .arg("-R")
            .arg(&from)
            .arg(to)
            .status()
            .expect("cp");
        assert!(st.success());
    }
    let bin = plat.join("bin/pi-ccswitch-run");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let env = TestEnv::new(PI_MIN, &providers());
    let out = run_command(
        env.other_cmd(main.join("bin/pi-ccswitch-run"), ["--version"]),
        None,
        RUN_TIMEOUT,
    );
    out.assert_code(2).assert_stdout_empty();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.dump());
    out.assert_stderr_contains("is not executable")
        .assert_stderr_contains("chmod +x");
}
