//! `cargo run --example demo`: the main job on an embedded default, end to end.
//!
//! Provisions Node 22 + Pi 0.84.4 under `target/pi-env` (first run: ~30 s, then cached), starts
//! the bundled fault-injecting provider on 127.0.0.1 with two providers — `primary`, which
//! answers every request with 402 "insufficient quota", and `backup`, which is healthy — and
//! runs the runner against them. The answer on stdout came through real Pi from `backup`; the
//! switch line and a summary of what each provider received are on stderr.

#[path = "../tests/testsuite/support/fake_llm.rs"]
mod fake_llm;
#[path = "../tests/testsuite/support/pi_env.rs"]
mod pi_env;

use fake_llm::{Behaviour, FakeLlm, ModelSpec, ProviderSpec, write_models_json};

fn main() {
    eprintln!(
        "demo: provisioning Node 22 and Pi {} (cached under target/pi-env)…",
        pi_env::PI_MIN
    );
    let pi = pi_env::pi(pi_env::PI_MIN);
    let agent_dir = tempfile::tempdir().expect("temp agent dir");
    let llm = FakeLlm::start();
    write_models_json(
        agent_dir.path(),
        &llm,
        &[
            ProviderSpec::new("primary", "primary", vec![ModelSpec::text("demo-model")]),
            ProviderSpec::new("backup", "backup", vec![ModelSpec::text("demo-model")]),
        ],
    );
    llm.script("primary", "demo-model", vec![Behaviour::Status402]);
    llm.script(
        "backup",
        "demo-model",
        vec![Behaviour::text(
            "Failover matters because a provider that runs out of quota at 02:00 should cost \
             one failed request, not the whole night's batch.",
        )],
    );
    eprintln!(
        "demo: fake providers on 127.0.0.1:{} (primary → 402, backup → ok)",
        llm.port()
    );
    // SAFETY: set before the runner starts and before anything reads the environment; the fake
    // server's threads never touch it.
    unsafe {
        std::env::set_var("PATH", pi.path_env());
        std::env::set_var("PI_BIN", &pi.pi_bin);
        std::env::set_var("PI_CODING_AGENT_DIR", agent_dir.path());
    }
    let args = [
        "pi-ccswitch-run",
        "--no-tools",
        "--no-context-files",
        "--provider",
        "primary",
        "--model",
        "demo-model",
        "Explain in one sentence why automatic failover matters.",
    ];
    let exit = pi_ccswitch_run::run(args.iter().map(Into::into).collect());
    for r in llm.requests() {
        eprintln!(
            "demo: provider {:<8} model {:<11} answered with {:?}",
            r.route, r.model, r.behaviour
        );
    }
    eprintln!("demo: exit code {}", exit.code());
    std::process::exit(i32::from(exit.code()));
}
