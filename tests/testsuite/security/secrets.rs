//! Keys of every shape stay out of every output (issue 9, defect 1), through real Pi: providers
//! whose keys have no vendor prefix answer 401 with a body that echoes the key, and the key must
//! appear nowhere — stdout, stderr at every verbosity, `--json`, batch results (even when the job
//! then succeeds on the fallback), the state file, the log, `--status [--json]`, `--doctor`.

use crate::support::*;

/// Key shapes real providers use that a prefix rule cannot know.
const KEYS: [(&str, &str); 6] = [
    ("zhipu", "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d.AbCdEfGhIjKlMnOp"),
    ("uuid", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"),
    ("hex", "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
    (
        "baidu",
        "bce-v3/ALTAK-AbCdEfGh1234567890/0123456789abcdef0123456789abcdef01234567",
    ),
    ("upper", "SK-ABCDEF1234567890ABCDEF12"),
    ("human", "hunter22horse"),
];

/// Passed through the environment (`"apiKey": "$LEAKY_TOKEN"`), never in models.json.
const ENV_KEY: &str = "Xq7Wv2Lp9Rz4Kt8Nb3Mf6Hd1Jc5";

fn providers() -> Vec<ProviderSpec> {
    // The same model id everywhere: ties keep the registry's order, so every leaky provider is
    // tried before the healthy one at the end.
    let mut v: Vec<ProviderSpec> = KEYS
        .iter()
        .map(|(name, key)| {
            ProviderSpec::new(&format!("leak-{name}"), name, vec![ModelSpec::text("m")])
                .api_key(key)
        })
        .collect();
    v.push(
        ProviderSpec::new("leak-env", "env", vec![ModelSpec::text("m")]).api_key_env("LEAKY_TOKEN"),
    );
    v.push(ProviderSpec::new(
        "safe",
        "safe",
        vec![ModelSpec::text("m")],
    ));
    v
}

fn all_keys() -> Vec<&'static str> {
    KEYS.iter().map(|(_, k)| *k).chain([ENV_KEY]).collect()
}

#[track_caller]
fn no_key_in(what: &str, text: &str) {
    for key in all_keys() {
        assert!(!text.contains(key), "{what} leaks {key}:\n{text}");
        // Nor a long piece of it.
        if key.len() >= 24 {
            let piece = &key[4..20];
            assert!(!text.contains(piece), "{what} leaks part of {key}:\n{text}");
        }
    }
}

fn keys_never_leak(v: &str) {
    let mut env = TestEnv::new(v, &providers());
    env.env("LEAKY_TOKEN", ENV_KEY);
    for (i, (name, _)) in KEYS.iter().enumerate() {
        let b = if i % 2 == 0 {
            Behaviour::EchoKey401
        } else {
            Behaviour::EchoKey401Chinese
        };
        env.llm.script(name, "*", vec![b]);
    }
    env.llm.script("env", "*", vec![Behaviour::EchoKey401]);
    let run = ["--no-tools", "--provider", "leak-zhipu", "--model", "m"];

    // A batch first (fresh breakers): the job fails over through every leaky provider and
    // succeeds on the fallback; its result line lists every failed attempt.
    let job = br#"{"id":"doc","prompt":"Summarise."}"#;
    let mut args = vec!["--batch", "-", "-v"];
    args.extend(&run);
    let out = env.run_stdin(args, job);
    out.assert_success();
    assert_eq!(
        env.llm.requests().len(),
        8,
        "every provider was tried: {}",
        out.dump()
    );
    assert!(out.stdout.contains(r#""class":"auth""#), "{}", out.dump());
    no_key_in("batch stdout", &out.stdout);
    no_key_in("batch stderr", &out.stderr);

    // Single runs at every verbosity, plain and --json.
    for extra in [&[][..], &["-v"], &["-vv"], &["--json", "-vv"]] {
        env.run(["--reset", "all"]).assert_success();
        let mut args: Vec<&str> = run.to_vec();
        args.extend(extra);
        args.push("Summarise.");
        let out = env.run(args);
        out.assert_success().assert_stdout_contains(DEFAULT_TEXT);
        no_key_in(&format!("stdout {extra:?}"), &out.stdout);
        no_key_in(&format!("stderr {extra:?}"), &out.stderr);
    }
    // What stays behind.
    let state =
        std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run-state.json")).expect("state");
    assert!(
        state.contains("auth"),
        "the failures were recorded: {state}"
    );
    no_key_in("the state file", &state);
    let log = std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run.log")).expect("log");
    no_key_in("the log", &log);
    for args in [&["--status"][..], &["--status", "--json"], &["--doctor"]] {
        let out = env.run(args);
        no_key_in(&format!("{args:?} stdout"), &out.stdout);
        no_key_in(&format!("{args:?} stderr"), &out.stderr);
    }
}

both_versions!(
    keys_never_leak,
    keys_from_commands_and_real_wordings_never_leak
);

/// The control: the bodies really do carry the keys (so the test above can fail), and the
/// masks stand where they were.
#[test]
fn the_provider_bodies_really_echo_the_keys() {
    let mut env = TestEnv::new(PI_MIN, &providers());
    env.env("LEAKY_TOKEN", ENV_KEY);
    for (name, _) in KEYS {
        env.llm.script(name, "*", vec![Behaviour::EchoKey401]);
    }
    env.llm.script("env", "*", vec![Behaviour::EchoKey401]);
    let out = env.run([
        "--json",
        "--no-tools",
        "--provider",
        "leak-zhipu",
        "--model",
        "m",
        "hi",
    ]);
    out.assert_success();
    let carried: Vec<String> = env
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.bearer().map(str::to_string))
        .collect();
    for key in all_keys() {
        assert!(
            carried.iter().any(|c| c == key),
            "{key} was not sent: {carried:?}"
        );
    }
    assert_eq!(
        out.stdout
            .matches("Incorrect API key provided: [redacted]")
            .count(),
        7,
        "{}",
        out.stdout
    );
}

/// The key a `!command` in models.json produces (Pi runs it; so does the runner, to mask it).
const COMMAND_KEY: &str = "correcthorsebatterystaplezebra";

/// Issue 20: keys the masking missed. Each provider echoes its key in a wording or a
/// transformation real providers use; one takes its key from a `!command`. The keys have no
/// vendor shape. `known: false` keys come from a command that prints something else the first
/// time it runs (the runner's run, before Pi starts: a token minted per call), so the runner
/// cannot know them and only the wording rules can catch them.
fn echoed_keys() -> Vec<(&'static str, &'static str, Behaviour, bool)> {
    vec![
        (
            "unauth",
            "quietmeadowlanternpebble",
            Behaviour::echo_key_unauthorized(),
            false,
        ),
        (
            "authfail",
            "silverharbormosaicthimble",
            Behaviour::echo_key_auth_failed(),
            false,
        ),
        (
            "revoked",
            "amberfalconquiltorchard",
            Behaviour::echo_key_revoked(),
            false,
        ),
        (
            "expired",
            "velvetcompassrainbarrel",
            Behaviour::echo_key_expired(),
            false,
        ),
        (
            "query",
            "horse/battery+staple=07",
            Behaviour::echo_key_in_query(),
            true,
        ),
        (
            "split",
            "copperwillowmarblesunset",
            Behaviour::echo_key_split(),
            true,
        ),
        (
            "prefix",
            "granitetulipmeteorcanvasdawn",
            Behaviour::echo_key_prefix12(),
            true,
        ),
    ]
}

fn keys_from_commands_and_real_wordings_never_leak(v: &str) {
    let cases = echoed_keys();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut providers: Vec<ProviderSpec> = cases
        .iter()
        .map(|(name, key, _, known)| {
            let p = ProviderSpec::new(&format!("echo-{name}"), name, vec![ModelSpec::text("m")]);
            if *known {
                return p.api_key(key);
            }
            let seen = dir.path().join(format!("{name}.seen"));
            p.api_key_command(&format!(
                "if [ -e '{s}' ]; then echo {key}; else touch '{s}'; echo first-call-token; fi",
                s = seen.display()
            ))
        })
        .collect();
    let key_file = dir.path().join("key.txt");
    std::fs::write(&key_file, format!("{COMMAND_KEY}\n")).expect("key file");
    providers.insert(
        0,
        ProviderSpec::new("echo-cmd", "cmd", vec![ModelSpec::text("m")])
            .api_key_command(&format!("cat '{}'", key_file.display())),
    );
    providers.push(ProviderSpec::new(
        "safe",
        "safe",
        vec![ModelSpec::text("m")],
    ));
    let env = TestEnv::new(v, &providers);
    // No phrase announces it: only learning the command's key masks it.
    env.llm.script(
        "cmd",
        "*",
        vec![Behaviour::echo_key("request rejected for {key} today")],
    );
    for (name, _, behaviour, _) in &cases {
        env.llm.script(name, "*", vec![behaviour.clone()]);
    }
    let keys: Vec<&str> = cases
        .iter()
        .map(|(_, k, _, _)| *k)
        .chain([COMMAND_KEY])
        .collect();
    let check = |what: &str, text: &str| {
        for key in &keys {
            assert!(!text.contains(key), "{what} leaks {key}:\n{text}");
            assert!(
                !text.contains(&key[..12]),
                "{what} leaks the head of {key}:\n{text}"
            );
        }
        assert!(
            !text.contains("battery%2B"),
            "{what} leaks the encoded key:\n{text}"
        );
    };
    let out = env.run([
        "--json",
        "-vv",
        "--no-tools",
        "--provider",
        "echo-cmd",
        "--model",
        "m",
        "hi",
    ]);
    out.assert_success();
    // The bodies did carry the keys: Pi sent each, and the command's key came from the file.
    let sent: Vec<String> = env
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.bearer().map(str::to_string))
        .collect();
    for key in &keys {
        assert!(
            sent.iter().any(|s| s == key),
            "{key} was not sent: {sent:?}"
        );
    }
    check("--json stdout", &out.stdout);
    check("stderr", &out.stderr);
    let state =
        std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run-state.json")).expect("state");
    check("the state file", &state);
    check(
        "the log",
        &std::fs::read_to_string(env.agent_dir.join("pi-ccswitch-run.log")).expect("log"),
    );
    for args in [&["--status"][..], &["--status", "--json"]] {
        let out = env.run(args);
        check(&format!("{args:?}"), &out.stdout);
    }
    // --output of a batch, too.
    let results = env.dir.path().join("results.jsonl");
    env.run(["--reset", "all"]).assert_success();
    let out = env.run_stdin(
        [
            "--batch",
            "-",
            "--no-tools",
            "--provider",
            "echo-cmd",
            "--model",
            "m",
            "--output",
            results.to_str().expect("path"),
        ],
        br#"{"id":"d","prompt":"hi"}"#,
    );
    out.assert_success();
    check(
        "--output",
        &std::fs::read_to_string(&results).expect("results"),
    );
}
