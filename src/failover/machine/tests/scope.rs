//! Issue 15: the user's scope, provider and model are checked against Pi's registry.

use super::*;

#[test]
fn a_scope_that_selects_nothing_stops_before_sending_and_names_the_closest() {
    let c = cfg_with(|c| c.models_scope = Some("zhipu/*".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert!(sent.is_empty(), "nothing is sent: {sent:?}");
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(msg.starts_with("--models 'zhipu/*' selects none"), "{msg}");
    assert!(msg.contains("a/m1, a/m2, b/m1, c/vision"), "{msg}");
    assert_eq!(h.commands(), ["get_state", "get_available_models"]);
}

#[test]
fn an_empty_glob_scope_lists_the_closest_models_first() {
    let c = cfg_with(|c| c.models_scope = Some("c/**vison-x**".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m1", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(msg.contains("available: c/vision, a/m1"), "{msg}");
}

/// A run with `edit`ed config and `opts` whose Pi is on `a/<pi_on>`, up to its first prompt;
/// with the commands it sent after reading Pi's state and models.
fn first_dispatch(edit: impl FnOnce(&mut Config), opts: Options, pi_on: &str) -> (H, Vec<String>) {
    let mut h = H::build(cfg_with(edit), Health::default(), opts);
    let sent = h.start(model("a", pi_on, false, 128_000), pool());
    h.complete_redispatch(sent);
    let commands = h.commands()[2..].to_vec();
    (h, commands)
}

#[test]
fn without_a_model_a_scoped_run_starts_where_pi_would_have() {
    // Pi is not given `--models`: its current model is its own default (a/m1), outside the
    // scope's first place. The run starts from the first scoped model, as Pi would have.
    let scope = |c: &mut Config| c.models_scope = Some("b/*,a/*".into());
    let (h, commands) = first_dispatch(scope, Options::default(), "m1");
    assert_eq!(commands, ["set_model b/m1", "prompt"]);
    assert_eq!(h.m.start_model(), Some("b/m1"));
    // The saved default wins when it is in scope, and Pi is already on it.
    let saved = |c: &mut Config| {
        scope(c);
        c.saved_default = Some("a/m2".into());
    };
    let (_, commands) = first_dispatch(saved, Options::default(), "m2");
    assert_eq!(commands, ["prompt"]);
    // Out of scope, it does not.
    let out_of_scope = |c: &mut Config| {
        c.models_scope = Some("b/*".into());
        c.saved_default = Some("a/m2".into());
    };
    let (_, commands) = first_dispatch(out_of_scope, Options::default(), "m2");
    assert_eq!(commands, ["set_model b/m1", "prompt"]);
    // `--model` decides the start; the scope only limits the fallbacks.
    let model_given = |c: &mut Config| {
        scope(c);
        c.model = Some("m2".into());
    };
    let (_, commands) = first_dispatch(model_given, Options::default(), "m2");
    assert_eq!(commands, ["prompt"]);
}

#[test]
fn a_scoped_start_takes_the_thinking_level_its_pattern_named() {
    let levels = |h: &H| -> Vec<String> {
        h.log
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    command: Command::SetThinkingLevel { level },
                    ..
                } => Some(level.clone()),
                _ => None,
            })
            .collect()
    };
    let (h, commands) = first_dispatch(
        |c| c.models_scope = Some("b/*:high,a/*".into()),
        Options::default(),
        "m1",
    );
    assert_eq!(commands, ["set_model b/m1", "set_thinking_level", "prompt"]);
    assert_eq!(levels(&h), ["high"]);
    // An explicit level wins over the pattern's.
    let opts = Options {
        thinking: Some("low".into()),
        ..Options::default()
    };
    let (h, _) = first_dispatch(|c| c.models_scope = Some("b/*:high".into()), opts, "m1");
    assert_eq!(levels(&h), ["low"]);
}

#[test]
fn a_pattern_that_matches_nothing_is_warned_about_and_the_rest_is_used() {
    let c = cfg_with(|c| c.models_scope = Some("a/*,qwen/*".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    h.ok_prompt(&sent);
    assert_eq!(
        notes(&mut h, Note::Warning),
        ["warning: --models pattern 'qwen/*' matches none of Pi's available models"]
    );
    h.fail_settled(Q402);
    // Inside the scope only a's models remain, and a's provider breaker is open.
    assert!(matches!(h.outcome(), Outcome::Exhausted { .. }));
}

#[test]
fn an_unknown_provider_is_a_setup_error_listing_the_known_ones() {
    let c = cfg_with(|c| c.provider = Some("zhipu".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m1", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert_eq!(
        msg,
        "unknown provider 'zhipu': no available model has it; providers with available \
         models: a, b, c"
    );
}

#[test]
fn a_provider_alone_starts_from_its_first_model() {
    let c = cfg_with(|c| c.provider = Some("b".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    let sent = h.start(model("a", "m1", false, 128_000), pool());
    assert_eq!(
        sent[0].1,
        Command::SetModel {
            provider: "b".into(),
            model_id: "m1".into()
        }
    );
}

#[test]
fn an_unknown_start_model_is_a_setup_error_with_the_closest_models() {
    let c = cfg_with(|c| c.model = Some("a/m9".into()));
    let mut h = H::with(c, Health::default(), vec![]);
    h.start(model("a", "m9", false, 128_000), pool());
    let Outcome::Setup(problem) = h.outcome() else {
        panic!("{:?}", h.outcome())
    };
    let msg = problem.to_string();
    assert!(
        msg.starts_with("unknown model 'a/m9': Pi would send 'm9' to a as a custom model id"),
        "{msg}"
    );
    assert!(msg.contains("closest available: a/m1, a/m2"), "{msg}");
}

#[test]
fn no_usable_model_at_all_is_a_setup_error() {
    let mut h = H::new(Health::default(), vec![]);
    h.start(json!({"provider": "unknown", "id": "unknown"}), vec![]);
    assert!(matches!(
        h.outcome(),
        Outcome::Setup(SetupProblem::NoUsableModel)
    ));
}
