//! The first night in production (issue 15), single runs through real Pi 0.84.4 and 1.6.0: a
//! typo in the scope, the provider or the model fails loudly before anything is sent (these flags
//! are how users limit where their data goes), and Pi's own start-up warnings reach stderr.
//!
//! The primary is the user's choice, visibly (issue 21): README's `models.json` with
//! `DEEPSEEK_API_KEY` exported brings Pi's built-in `deepseek/*` models into the pool, and
//! without `--model` a run starts on one of them; `--explain` and `--doctor` say so and name the
//! variable; `--model` and `--models` keep the run on the user's providers, in the patterns'
//! order; a key that refers to an unset variable is named. Pi's built-in `deepseek` provider is
//! routed to the fake server (a `baseUrl` override in `models.json`), so nothing leaves
//! loopback.

use crate::support::batch::{README_KEYS, readme_providers, write_readme_models_json};
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
    a_built_in_start_model_is_named_with_the_variable_that_brought_it_in,
    the_order_of_the_models_patterns_is_the_fallback_order,
    a_key_variable_that_is_not_set_is_named,
    a_run_served_by_a_built_in_model_nobody_chose_warns_and_lists_it,
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

/// README's setup ([`readme_providers`]), all three keys exported.
fn readme_env(v: &str) -> TestEnv {
    let mut env = TestEnv::new(v, &readme_providers());
    write_readme_models_json(&env.agent_dir, &env.llm);
    for (k, val) in README_KEYS {
        env.env(k, val);
    }
    // A built-in provider with a key makes Pi 1.6.0 fetch that provider's catalogue from
    // pi.dev at start-up; nothing may leave loopback.
    env.env("PI_OFFLINE", "1");
    env
}

const RECIPE_CHOICE: [&str; 4] = [
    "--model",
    "zhipu/glm-4.6",
    "--models",
    "zhipu/*,dashscope/*,deepseek-cn/*",
];

fn a_built_in_start_model_is_named_with_the_variable_that_brought_it_in(v: &str) {
    let env = readme_env(v);
    // --explain, as README says to check the pool: the warnings come first.
    let out = run(&env, &["--explain"]);
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    out.check(
        lines[0].starts_with("warning: the start model deepseek/")
            && lines[0].contains(
                "is from Pi's built-in catalogue, not from your models.json (provider deepseek \
                 was brought in by DEEPSEEK_API_KEY)",
            ),
        "first line: the built-in start model and its variable",
    );
    out.check(
        lines[1].starts_with("warning: ")
            && lines[1].contains("candidates are from Pi's built-in catalogue")
            && lines[1].contains("keep them out with --models '")
            // The user's providers, in Pi's order (the test's models.json is sorted by name).
            && lines[1].contains("'dashscope/*,deepseek-cn/*,zhipu/*'"),
        "second line: the built-in candidates",
    );
    out.check(
        lines[2].starts_with("warning: no --model and no saved default chose the start model")
            && lines[2].ends_with("(e.g. --model dashscope/qwen3-max)"),
        "third line: nothing the user chose picked the primary",
    );
    out.check(
        lines[3].is_empty() && lines[4].starts_with("start model: deepseek/"),
        "then the explanation",
    );
    let j = env
        .run(["--no-tools", "--explain", "--json", "hello"])
        .json();
    let codes: Vec<&str> = j["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap())
        .collect();
    assert_eq!(
        codes,
        ["built_in_start", "built_in_candidates", "no_primary"],
        "{j}"
    );
    // The recipes' flags: no warning, and the user's primary.
    let mut flags = vec!["--explain"];
    flags.extend(RECIPE_CHOICE);
    let out = run(&env, &flags);
    out.assert_success().assert_stdout_lacks("warning:").check(
        out.stdout.starts_with("start model: zhipu/glm-4.6\n"),
        "starts on the user's primary",
    );
    let mut args = vec!["--no-tools", "--explain", "--json"];
    args.extend(RECIPE_CHOICE);
    args.push("hello");
    assert_eq!(env.run(args).json()["warnings"], serde_json::json!([]));
    // --doctor says the same, as warnings (exit 0).
    let out = env.run(["--doctor"]);
    out.assert_success()
        .assert_stdout_contains(
            "warn primary: no --model and no saved default chose the start model: deepseek/",
        )
        .assert_stdout_contains("warn model origin: the start model deepseek/")
        .assert_stdout_contains("(provider deepseek was brought in by DEEPSEEK_API_KEY)")
        .assert_stdout_contains("ok   keys: all 3 variables models.json refers to are set")
        .assert_stdout_lacks("deepseek-test-key");
    let mut args = vec!["--doctor"];
    args.extend(RECIPE_CHOICE);
    let out = env.run(args);
    out.assert_success()
        .assert_stdout_contains("ok   primary: zhipu/glm-4.6 (--model)\n")
        .assert_stdout_contains(
            "ok   model origin: all 4 candidates, the start model included, are from models.json",
        )
        .assert_stdout_lacks("warn ");
    assert!(
        env.llm.requests().is_empty(),
        "explain and doctor send nothing"
    );
    // What the warnings are about: without --model the answer comes from Pi's own deepseek
    // (here the fake server's route `builtin`), with the recipe's flags from zhipu.
    run(&env, &[]).assert_success().assert_answer(DEFAULT_TEXT);
    assert_eq!(routes(&env), ["builtin"]);
    let mut flags = RECIPE_CHOICE.to_vec();
    flags.push("--no-wait");
    run(&env, &flags)
        .assert_success()
        .assert_answer(DEFAULT_TEXT);
    assert_eq!(routes(&env), ["builtin", "z"]);
    assert_eq!(
        env.llm.requests()[1].bearer(),
        Some("zhipu-test-key"),
        "the key came from $ZHIPU_API_KEY"
    );
}

/// README: after the start model, failover goes to another provider before a sibling on the
/// same one, and among models alike the `--models` patterns' order decides.
fn the_order_of_the_models_patterns_is_the_fallback_order(v: &str) {
    for (scope, first_backup) in [
        ("zhipu/*,dashscope/*,deepseek-cn/*", "q"),
        ("zhipu/*,deepseek-cn/*,dashscope/*", "d"),
    ] {
        let env = readme_env(v);
        env.llm.script("z", "*", vec![Behaviour::Status402]);
        let out = run(&env, &["--model", "zhipu/glm-4.6", "--models", scope]);
        out.assert_success().assert_answer(DEFAULT_TEXT);
        assert_eq!(routes(&env), ["z", first_backup], "{scope}\n{}", out.dump());
        // --explain lists the same order.
        let j = env
            .run([
                "--no-tools",
                "--explain",
                "--json",
                "--model",
                "zhipu/glm-4.6",
                "--models",
                scope,
                "hello",
            ])
            .json();
        let order: Vec<&str> = j["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["model"].as_str().unwrap())
            .collect();
        let expected = if first_backup == "q" {
            ["dashscope/qwen3-max", "deepseek-cn/deepseek-chat"]
        } else {
            ["deepseek-cn/deepseek-chat", "dashscope/qwen3-max"]
        };
        // zhipu's breaker is open now: its models are excluded, the rest keep the order.
        assert_eq!(order, expected, "{j}");
    }
}

fn a_key_variable_that_is_not_set_is_named(v: &str) {
    let mut env = readme_env(v);
    // As under cron: the variables models.json refers to are not there (one is empty).
    env.extra_env
        .retain(|(k, _)| k != "ZHIPU_API_KEY" && k != "DEEPSEEK_API_KEY");
    env.env("DEEPSEEK_API_KEY", "");
    let out = env.run(["--doctor"]);
    out.assert_code(2)
        .assert_stdout_contains(
            "FAIL key: provider zhipu: apiKey refers to $ZHIPU_API_KEY, which is not set here \
             (cron starts with an almost empty environment: source an env file)\n",
        )
        .assert_stdout_contains(
            "FAIL key: provider deepseek-cn: apiKey refers to $DEEPSEEK_API_KEY, which is empty \
             here",
        )
        .assert_stdout_lacks("provider dashscope: apiKey")
        .assert_stdout_lacks("dashscope-test-key");
    let j = env.run(["--doctor", "--json"]).json();
    let key = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "key")
        .cloned()
        .unwrap();
    assert_eq!(key["level"], "fail", "{j}");
    assert_eq!(key["ok"], false, "{j}");
    // A run says it too, on stderr, before what Pi makes of it.
    let out = run(&env, &RECIPE_CHOICE);
    out.assert_code(2)
        .assert_stderr_contains(
            "warning: models.json: provider zhipu: apiKey refers to $ZHIPU_API_KEY, which is not \
             set here",
        )
        .assert_no_panic();
    assert!(env.llm.requests().is_empty());
}

/// `catalog::origin::BUILT_IN_KEY_VARS` is Pi's own table (pi-ai's `getApiKeyEnvVars` in
/// `env-api-keys.js`) for its providers: every variable either supported Pi tries for a listed
/// provider is listed, in Pi's order, and every listed one is tried by at least one of them.
#[test]
fn the_key_variable_table_is_pis_own() {
    use pi_ccswitch_run::catalog::origin::BUILT_IN_KEY_VARS;
    let sources: Vec<(String, String)> = [PI_MIN, PI_NEWEST]
        .iter()
        .map(|v| {
            let prefix = pi(v)
                .pi_bin
                .parent()
                .and_then(|p| p.parent())
                .expect("<prefix>/node_modules/.bin/pi")
                .to_path_buf();
            let path = prefix.join("@earendil-works/pi-ai/dist/env-api-keys.js");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (v.to_string(), text)
        })
        .collect();
    let quoted = |text: &str| -> Vec<String> {
        text.split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    // The variables one Pi tries for `provider`: a special case before the map, or its entry.
    let vars_in = |js: &str, provider: &str| -> Option<Vec<String>> {
        let special = format!("if (provider === \"{provider}\") {{");
        // Only the special cases of `getApiKeyEnvVars` (`getEnvApiKey` has others).
        let head = js
            .split_once("function getApiKeyEnvVars(provider) {")?
            .1
            .split_once("const envMap = {")?
            .0;
        if let Some(at) = head.find(&special) {
            let body = &head[at + special.len()..];
            let ret = body.split_once("return")?.1.split_once(';')?.0;
            let names: Vec<String> = if ret.contains("_ENV") {
                // `[ANTHROPIC_AUTH_TOKEN_ENV, …]`: constants declared at the top.
                ret.trim()
                    .trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .filter_map(|c| {
                        let decl = format!("const {} = ", c.trim());
                        let at = js.find(&decl)?;
                        quoted(&js[at..js[at..].find(';')? + at]).into_iter().next()
                    })
                    .collect()
            } else {
                quoted(ret)
            };
            return Some(names);
        }
        let map = js.split_once("const envMap = {")?.1.split_once("};")?.0;
        map.lines().find_map(|line| {
            let line = line.trim();
            let (key, value) = line.split_once(": ")?;
            (key.trim_matches('"') == provider).then(|| quoted(value))
        })
    };
    let mut problems = Vec::new();
    for (provider, ours) in BUILT_IN_KEY_VARS {
        let mut union: Vec<String> = Vec::new();
        for (version, js) in &sources {
            let Some(theirs) = vars_in(js, provider) else {
                continue;
            };
            assert!(!theirs.is_empty(), "{version} {provider}: nothing parsed");
            // Pi's order is kept: its variables appear in ours in the same order.
            let positions: Vec<Option<usize>> = theirs
                .iter()
                .map(|t| ours.iter().position(|o| o == t))
                .collect();
            if positions.iter().any(Option::is_none) || !positions.is_sorted() {
                problems.push(format!(
                    "{version} {provider}: Pi tries {theirs:?}, we list {ours:?}"
                ));
            }
            union.extend(theirs);
        }
        if union.is_empty() {
            problems.push(format!("{provider}: neither Pi has it"));
        }
        for o in *ours {
            if !union.iter().any(|u| u == o) {
                problems.push(format!("{provider}: neither Pi tries {o}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// README's old CI example (no --model, no --models, DEEPSEEK_API_KEY exported) starts on Pi's
/// own deepseek model: the run says so on stderr and in `--json` `warnings`; so does a
/// failover to a built-in model outside any --models scope, and each batch result (stderr once
/// per model for the whole batch). With the recipes' flags nothing is said.
fn a_run_served_by_a_built_in_model_nobody_chose_warns_and_lists_it(v: &str) {
    let env = readme_env(v);
    let out = run(&env, &["--json"]);
    out.assert_success();
    let j = out.json();
    let warnings = j["warnings"].as_array().expect("warnings");
    assert_eq!(warnings.len(), 1, "{j}");
    assert_eq!(warnings[0]["code"], "built_in_start");
    let model = warnings[0]["model"]
        .as_str()
        .expect("the model")
        .to_string();
    assert!(model.starts_with("deepseek/"), "{model}");
    assert_eq!(j["model"]["provider"], "deepseek");
    let message = warnings[0]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "the run started on {model}, a model from Pi's built-in"
        )) && message.contains("(provider deepseek was brought in by DEEPSEEK_API_KEY)"),
        "{message}"
    );
    out.assert_stderr_contains(&format!("warning: {message}"));
    assert_eq!(routes(&env), ["builtin"]);

    // The user's primary, but no --models: every provider of models.json is out of quota, and
    // the failover that answers goes to a built-in model.
    for route in ["z", "q", "d"] {
        env.llm.script(route, "*", vec![Behaviour::Status402]);
    }
    let out = run(&env, &["--json", "--model", "zhipu/glm-4.6"]);
    out.assert_success();
    let j = out.json();
    assert_eq!(j["model"]["provider"], "deepseek", "{j}");
    let codes: Vec<&str> = j["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["built_in_failover"], "{j}");
    out.assert_stderr_contains("warning: the run failed over to deepseek/")
        .assert_stderr_contains("keep failover among your models with --models");

    // A batch: each result lists it; stderr names it once for the whole batch.
    let env = readme_env(v);
    let out = env.run_stdin(
        ["--batch", "-", "--jobs", "1", "--no-tools"],
        b"{\"id\":\"a\",\"prompt\":\"one\"}\n{\"id\":\"b\",\"prompt\":\"two\"}\n",
    );
    out.assert_success()
        .assert_stderr_count("warning: job a: the run started on deepseek/", 1)
        .assert_stderr_lacks("job b: the run started");
    for line in out.json_lines() {
        assert_eq!(line["warnings"][0]["code"], "built_in_start", "{line}");
    }

    // The recipes' flags: nothing to say.
    let mut flags = vec!["--json"];
    flags.extend(RECIPE_CHOICE);
    let out = run(&env, &flags);
    out.assert_success().assert_stderr_lacks("warning:");
    assert_eq!(out.json()["warnings"], serde_json::json!([]));
}
