//! The first night in production (issue 15), single runs through real Pi 0.84.4 and 1.6.0: a
//! typo in the scope, the provider or the model fails loudly before anything is sent (these flags
//! are how users limit where their data goes), and Pi's own start-up warnings reach stderr.

use crate::support::*;

both_versions!(
    a_scope_that_matches_nothing_is_exit_2_and_nothing_is_sent,
    a_pattern_that_matches_nothing_is_named_and_the_rest_serves,
    an_unknown_provider_is_exit_2_with_the_known_ones_closest_first,
    a_known_provider_alone_starts_from_its_model,
    an_unknown_model_of_a_known_provider_is_exit_2_with_the_closest,
    an_unknown_model_pattern_is_exit_2_and_names_what_the_runner_offers,
    a_scope_without_a_model_starts_where_pi_would,
    a_backtracking_glob_in_the_scope_costs_nothing,
);

fn hosts() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec::new("glm-host", "g", vec![ModelSpec::text("glm-4.6")]),
        ProviderSpec::new("qwen-host", "q", vec![ModelSpec::text("qwen3-max")]),
        ProviderSpec::new("ds-host", "d", vec![ModelSpec::text("deepseek-chat")]),
    ]
}

fn run(env: &TestEnv, flags: &[&str]) -> Output {
    let mut args = vec!["--no-tools"];
    args.extend_from_slice(flags);
    args.push("Summarise the night.");
    env.run(args)
}

fn a_scope_that_matches_nothing_is_exit_2_and_nothing_is_sent(v: &str) {
    let env = TestEnv::new(v, &hosts());
    let out = run(&env, &["--models", "zhipu/*"]);
    out.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains("--models 'zhipu/*' selects none of Pi's available models")
        .assert_stderr_contains("glm-host/glm-4.6")
        .assert_stderr_contains("--status lists them all")
        .assert_no_panic();
    assert!(env.llm.requests().is_empty(), "nothing may be sent");
}

fn a_pattern_that_matches_nothing_is_named_and_the_rest_serves(v: &str) {
    let env = TestEnv::new(v, &hosts());
    let out = run(
        &env,
        &[
            "--provider",
            "glm-host",
            "--model",
            "glm-4.6",
            "--models",
            "glm-host/*,qwen/*",
        ],
    );
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_contains(
            "warning: --models pattern 'qwen/*' matches none of Pi's available models",
        )
        .assert_stderr_count("qwen/*", 1);
    let routes: Vec<String> = env.llm.requests().iter().map(|r| r.route.clone()).collect();
    assert_eq!(routes, ["g"]);
}

fn an_unknown_provider_is_exit_2_with_the_known_ones_closest_first(v: &str) {
    let env = TestEnv::new(v, &hosts());
    let out = run(&env, &["--provider", "glm-hots"]);
    out.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains(
            "unknown provider 'glm-hots': no available model has it; providers with available \
         models: glm-host, ",
        );
    assert!(env.llm.requests().is_empty());
}

fn a_known_provider_alone_starts_from_its_model(v: &str) {
    let env = TestEnv::new(v, &hosts());
    let out = run(&env, &["--provider", "ds-host"]);
    out.assert_success().assert_answer(DEFAULT_TEXT);
    let routes: Vec<String> = env.llm.requests().iter().map(|r| r.route.clone()).collect();
    assert_eq!(routes, ["d"], "{}", out.dump());
}

fn an_unknown_model_of_a_known_provider_is_exit_2_with_the_closest(v: &str) {
    let env = TestEnv::new(v, &hosts());
    let out = run(&env, &["--model", "glm-host/glm-9"]);
    out.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains("unknown model 'glm-host/glm-9'")
        .assert_stderr_contains("closest available: glm-host/glm-4.6")
        // Pi's own warning reaches stderr too.
        .assert_stderr_contains("Pi: Warning: Model \"glm-9\" not found");
    assert!(env.llm.requests().is_empty());
}

fn an_unknown_model_pattern_is_exit_2_and_names_what_the_runner_offers(v: &str) {
    let env = TestEnv::new(v, &hosts());
    // No provider prefix: Pi itself refuses to start ("Use --list-models …").
    let out = run(&env, &["--model", "qwen3-mx"]);
    out.assert_code(2)
        .assert_stdout_empty()
        .assert_stderr_contains("unknown model 'qwen3-mx'")
        .assert_stderr_contains("closest available: qwen-host/qwen3-max")
        .assert_stderr_contains("--status lists every model")
        .assert_no_panic();
    assert!(env.llm.requests().is_empty());
}

fn routes(env: &TestEnv) -> Vec<String> {
    env.llm.requests().iter().map(|r| r.route.clone()).collect()
}

/// Pi is not given `--models`; the runner starts where Pi would have: the first scoped model,
/// or Pi's saved default when that is in scope.
fn a_scope_without_a_model_starts_where_pi_would(v: &str) {
    let env = TestEnv::new(v, &hosts());
    let out = run(&env, &["--models", "ds-host/*,glm-host/*"]);
    out.assert_success().assert_answer(DEFAULT_TEXT);
    assert_eq!(routes(&env), ["d"], "{}", out.dump());
    let env = TestEnv::new(v, &hosts());
    env.write_settings(&serde_json::json!({
        "defaultProvider": "glm-host",
        "defaultModel": "glm-4.6",
    }));
    let out = run(&env, &["--models", "ds-host/*,glm-host/*"]);
    out.assert_success().assert_answer(DEFAULT_TEXT);
    assert_eq!(routes(&env), ["g"], "{}", out.dump());
    // A saved default outside the scope is not where the run starts.
    let out = run(&env, &["--models", "qwen-host/*,ds-host/*"]);
    out.assert_success();
    assert_eq!(routes(&env), ["g", "q"], "{}", out.dump());
}

/// A glob that backtracks in a naive matcher (Pi 0.84.4's took minutes on a long id) is
/// resolved by the runner alone, in linear time; the run is not held up.
fn a_backtracking_glob_in_the_scope_costs_nothing(v: &str) {
    let long_id = "a".repeat(80);
    let mut providers = hosts();
    providers.push(ProviderSpec::new(
        "long-host",
        "l",
        vec![ModelSpec::text(&long_id)],
    ));
    let env = TestEnv::new(v, &providers);
    let out = run(
        &env,
        &[
            "--timeout-ms",
            "60000",
            "--models",
            "ds-host/*,*a*a*a*a*a*a*a*a*a*a*a*a*b",
        ],
    );
    out.assert_success()
        .assert_answer(DEFAULT_TEXT)
        .assert_stderr_contains(
            "warning: --models pattern '*a*a*a*a*a*a*a*a*a*a*a*a*b' matches none",
        );
    assert_eq!(routes(&env), ["d"], "{}", out.dump());
}
