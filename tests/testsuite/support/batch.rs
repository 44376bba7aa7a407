//! Helpers the batch tests share:
//! the two-provider setup, job files, and reading result lines back.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

/// `prim` (route a) and `back` (route b), one text model `m` each.
pub fn providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("prim", "a", vec![ModelSpec::text("m")]),
        ProviderSpec::new("back", "b", vec![ModelSpec::text("m")]),
    ]
}

/// Start from prim/m, no tools.
pub const FROM_PRIM: [&str; 5] = ["--no-tools", "--provider", "prim", "--model", "m"];

/// `n` jobs `doc-0…` with unique prompts `Summarise document i.`.
pub fn jobs(n: usize) -> String {
    (0..n).map(job).collect()
}

pub fn job(i: usize) -> String {
    format!("{{\"id\":\"doc-{i}\",\"prompt\":\"Summarise document {i}.\"}}\n")
}

/// The job id a request was for (from its unique prompt), if any.
pub fn job_of(r: &Request) -> Option<String> {
    // The prompt ends the user message (attachments come before it).
    let text = r.last_user_text()?;
    let (_, tail) = text.rsplit_once("Summarise document ")?;
    let n = tail.strip_suffix('.')?;
    n.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| format!("doc-{n}"))
}

/// Writes `text` to `name` in the env's temp dir; returns the path as a string.
pub fn write_file(env: &TestEnv, name: &str, text: &str) -> String {
    let path = env.dir.path().join(name);
    std::fs::write(&path, text).expect("write file");
    path.to_str().expect("utf-8 path").to_string()
}

/// Every line of a results file, parsed (panics naming a line that is not JSON). A final line
/// without its newline is a torn line and fails too.
pub fn read_results(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} ends without a newline: {:?}",
        path.display(),
        &text[text.len().saturating_sub(200)..]
    );
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("{} line {}: not JSON ({e}): {l}", path.display(), i + 1)
            })
        })
        .collect()
}

/// Ids with a success line, with how many success lines each has.
pub fn successes(results: &[Value]) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for r in results.iter().filter(|r| r["ok"] == true) {
        let id = match &r["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        *out.entry(id).or_insert(0) += 1;
    }
    out
}

/// A directory holding `pi-ccswitch-run` (a symlink to the binary under test), `pi` and `node`,
/// as an installer would put them in `/usr/local/bin`.
pub fn bin_dir(env: &TestEnv) -> PathBuf {
    let dir = env.dir.path().join("bin");
    std::fs::create_dir_all(&dir).expect("bin dir");
    for (name, target) in [
        ("pi-ccswitch-run", PathBuf::from(BIN)),
        ("pi", env.pi.pi_bin.clone()),
        ("node", env.pi.node_bin_dir.join("node")),
    ] {
        let link = dir.join(name);
        // Jobs of one matrix run this at once: another may make the link between the check
        // and ours.
        if !link.exists() {
            match std::os::unix::fs::symlink(&target, &link) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                made => made.expect("symlink"),
            }
        }
    }
    dir
}

/// README's "Set up providers" on the fake server: `zhipu` (route `z`: `glm-4.6`,
/// `glm-4.5-air`), `dashscope` (`q`: `qwen3-max`) and `deepseek-cn` (`d`: `deepseek-chat`), their
/// keys in `$ZHIPU_API_KEY`, `$DASHSCOPE_API_KEY` and `$DEEPSEEK_API_KEY`.
pub fn readme_providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new(
            "zhipu",
            "z",
            vec![ModelSpec::text("glm-4.6"), ModelSpec::text("glm-4.5-air")],
        )
        .api_key_env("ZHIPU_API_KEY"),
        ProviderSpec::new("dashscope", "q", vec![ModelSpec::text("qwen3-max")])
            .api_key_env("DASHSCOPE_API_KEY"),
        ProviderSpec::new("deepseek-cn", "d", vec![ModelSpec::text("deepseek-chat")])
            .api_key_env("DEEPSEEK_API_KEY"),
    ]
}

/// The keys of [`readme_providers`], as an env file or an environment would give them.
pub const README_KEYS: [(&str, &str); 3] = [
    ("ZHIPU_API_KEY", "zhipu-test-key"),
    ("DASHSCOPE_API_KEY", "dashscope-test-key"),
    ("DEEPSEEK_API_KEY", "deepseek-test-key"),
];

/// Writes `agent_dir/models.json` for [`readme_providers`], with Pi's own `deepseek` provider
/// routed to the fake server's route `builtin`: `DEEPSEEK_API_KEY` brings Pi's built-in
/// `deepseek/*` models in, and nothing may ever leave loopback.
pub fn write_readme_models_json(agent_dir: &Path, llm: &FakeLlm) {
    let mut doc = models_json(llm, &readme_providers());
    doc["providers"]["deepseek"] = serde_json::json!({"baseUrl": llm.base_url("builtin")});
    std::fs::create_dir_all(agent_dir).expect("agent dir");
    std::fs::write(
        agent_dir.join("models.json"),
        serde_json::to_string_pretty(&doc).expect("json"),
    )
    .expect("write models.json");
}
