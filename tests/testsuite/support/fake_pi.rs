//! The scripted fake `pi` (`fixtures/fake-pi/pi`) in a temp dir of its own: for what real Pi
//! cannot be made to do, and for grammar tests that must prove Pi was never started.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{BIN, Output, RUN_TIMEOUT, run_command};

/// The fake `pi` script.
pub fn fake_pi() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-pi/pi")
}

/// A temp dir with an agent dir, HOME and cwd; every command the fake Pi receives is logged.
pub struct FakePi {
    pub dir: tempfile::TempDir,
}

impl FakePi {
    pub fn new() -> FakePi {
        FakePi {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Where the fake Pi logs what it received (absent until Pi starts).
    pub fn log_path(&self) -> PathBuf {
        self.path("pi-commands.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn pi_was_started(&self) -> bool {
        self.log_path().exists()
    }

    /// `program` (the binary, or a symlink to it) with `args`, a minimal environment
    /// (PATH=/usr/bin:/bin) and the fake Pi playing `scenario`.
    pub fn cmd_of<S: AsRef<OsStr>>(&self, program: &Path, scenario: &str, args: &[S]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", self.dir.path())
            .env("PI_CODING_AGENT_DIR", self.path("agent"))
            .env("PI_BIN", fake_pi())
            .env("FAKE_PI_SCENARIO", scenario)
            .env("FAKE_PI_LOG", self.log_path())
            .current_dir(self.dir.path());
        cmd
    }

    pub fn cmd<S: AsRef<OsStr>>(&self, scenario: &str, args: &[S]) -> Command {
        self.cmd_of(Path::new(BIN), scenario, args)
    }

    pub fn run<S: AsRef<OsStr>>(&self, scenario: &str, args: &[S]) -> Output {
        run_command(self.cmd(scenario, args), None, RUN_TIMEOUT)
    }
}

impl Default for FakePi {
    fn default() -> Self {
        FakePi::new()
    }
}
