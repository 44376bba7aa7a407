//! Waiting instead of failing or paying (issue 32), through real Pi and the fault server: a
//! busy key backs off instead of breaking (`busy_key`), `--max-wait` bounds one job's waiting
//! (`max_wait`), `--prefer-primary` waits for a primary that states its reset (`primary`).

use std::path::{Path, PathBuf};

use crate::support::*;

mod busy_key;
mod max_wait;
mod primary;

/// Another agent dir for the same fake server and providers (another machine of a CI matrix:
/// its own health store), under the env's temp dir.
pub fn other_agent_dir(env: &TestEnv, name: &str, providers: &[ProviderSpec]) -> PathBuf {
    let dir = env.dir.path().join(name);
    std::fs::create_dir_all(&dir).expect("agent dir");
    write_models_json(&dir, &env.llm, providers);
    dir
}

/// The binary with `args` in `env`'s environment but with `agent_dir` as its agent dir.
pub fn run_in(env: &TestEnv, agent_dir: &Path, args: &[&str]) -> Output {
    let mut cmd = env.cmd(args);
    cmd.env("PI_CODING_AGENT_DIR", agent_dir);
    run_command(cmd, None, std::time::Duration::from_secs(120))
}
