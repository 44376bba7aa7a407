//! Settings from the environment: `PI_BIN`, `PI_CODING_AGENT_DIR`, the health store, the failover
//! timers, and the values of secret-named variables (for masking). The only reader of
//! environment variables, and the one list of them ([`ENVIRONMENT`]: name, default, meaning),
//! from which `--help` and the man page describe them.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub const DEFAULT_ROUND_LIMIT_MS: u64 = 480_000;
pub const DEFAULT_FIRST_RESPONSE_MS: u64 = 90_000;
pub const DEFAULT_STALL_MS: u64 = 120_000;
/// Default key prefix in a Redis health store.
pub const DEFAULT_HEALTH_PREFIX: &str = "pi-ccswitch-run:";
pub const DEFAULT_COOLDOWN_SCALE: f64 = 1.0;

/// One environment variable the runner reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variable {
    pub name: &'static str,
    /// What it sets, for `--help` and the man page (the default is added by [`describe`]).
    ///
    /// [`describe`]: Variable::describe
    pub meaning: &'static str,
    /// What applies when it is unset or empty (`None`: nothing, e.g. no Redis store).
    pub default: Option<Fallback>,
}

/// The value a variable falls back to, as `--help` shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fallback {
    Text(&'static str),
    Number(u64),
    Factor(f64),
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::Text(t) => f.write_str(t),
            Fallback::Number(n) => write!(f, "{n}"),
            Fallback::Factor(x) => write!(f, "{x}"),
        }
    }
}

impl Variable {
    /// `meaning (default …)`: the variable's entry in `--help` and the man page.
    pub fn describe(&self) -> String {
        match self.default_phrase() {
            Some(d) => format!("{} {d}", self.meaning),
            None => self.meaning.to_string(),
        }
    }

    /// `(default …)`, kept on one line when `--help` wraps the description.
    pub fn default_phrase(&self) -> Option<String> {
        self.default.map(|d| format!("(default {d})"))
    }
}

/// Every variable [`from_lookup`] reads, with its default and meaning (a test holds the two
/// to each other).
pub const ENVIRONMENT: [Variable; 12] = [
    Variable {
        name: "PI_BIN",
        meaning: "the real `pi` executable",
        default: Some(Fallback::Text("`pi` on PATH")),
    },
    Variable {
        name: "PI_CODING_AGENT_DIR",
        meaning: "Pi's agent directory; health state and the run log live here",
        default: Some(Fallback::Text("~/.pi/agent")),
    },
    Variable {
        name: "CCSWITCH_HEALTH_URL",
        meaning: "share health through Redis: redis://[user:password@]host[:port][/db], \
                  rediss://… (TLS) or unix:///path/redis.sock (--health-url wins)",
        default: None,
    },
    Variable {
        name: "CCSWITCH_HEALTH_PREFIX",
        meaning: "key prefix in Redis",
        default: Some(Fallback::Text(DEFAULT_HEALTH_PREFIX)),
    },
    Variable {
        name: "CCSWITCH_ROUND_LIMIT_MS",
        meaning: "failover round window in ms",
        default: Some(Fallback::Number(DEFAULT_ROUND_LIMIT_MS)),
    },
    Variable {
        name: "CCSWITCH_FIRST_RESPONSE_MS",
        meaning: "watchdog: most ms without a first response from the model (the limit until \
                  its pace is known; a limit derived from its pace stays below it)",
        default: Some(Fallback::Number(DEFAULT_FIRST_RESPONSE_MS)),
    },
    Variable {
        name: "CCSWITCH_STALL_MS",
        meaning: "watchdog: most ms without stream progress (the limit until the model's pace \
                  is known; a derived limit stays below it)",
        default: Some(Fallback::Number(DEFAULT_STALL_MS)),
    },
    Variable {
        name: "CCSWITCH_WATCHDOG_FLOOR_MS",
        meaning: "the least a watchdog derived from a model's pace may be",
        default: Some(Fallback::Number(crate::pace::watchdog::DEFAULT_FLOOR_MS)),
    },
    Variable {
        name: "CCSWITCH_COOLDOWN_SCALE",
        meaning: "multiply every breaker cooldown by this factor, 0-1",
        default: Some(Fallback::Factor(DEFAULT_COOLDOWN_SCALE)),
    },
    Variable {
        name: "CCSWITCH_MAX_INFLIGHT",
        meaning: "most requests in flight per provider, PROVIDER=N[,PROVIDER=N…] \
                  (--max-inflight wins)",
        default: None,
    },
    Variable {
        name: "CCSWITCH_MAX_WAIT",
        meaning: "the most one run or job waits in all (breakers, stated resets, capacity \
                  slots, back-off), e.g. 30s, then it fails (--max-wait wins)",
        default: Some(Fallback::Text("up to the deadline")),
    },
    Variable {
        name: "CCSWITCH_PREFER_PRIMARY",
        meaning: "wait up to this long for the primary model's stated reset or capacity pause \
                  instead of going to the backups, e.g. 10m (--prefer-primary wins)",
        default: None,
    },
];

#[derive(Debug, Clone)]
pub struct Settings {
    /// What to spawn as Pi.
    pub pi_command: OsString,
    /// A warning to print once (legacy `PI_BIN` value ignored).
    pub pi_warning: Option<String>,
    /// Pi's agent directory; `None` when neither `PI_CODING_AGENT_DIR` nor a home dir is known.
    pub agent_dir: Option<PathBuf>,
    pub round_limit: Duration,
    pub first_response: Duration,
    pub stall: Duration,
    /// `CCSWITCH_WATCHDOG_FLOOR_MS`: the least a pace-derived watchdog may be.
    pub watchdog_floor: Duration,
    /// `CCSWITCH_COOLDOWN_SCALE`: multiplies every breaker cooldown (0–1; for tests and drills).
    pub cooldown_scale: f64,
    /// `--health-url` or `CCSWITCH_HEALTH_URL`: a Redis store; `None` = the state file.
    pub health_url: Option<String>,
    /// `CCSWITCH_MAX_INFLIGHT`: provider → most requests in flight (`--max-inflight` wins).
    pub max_inflight: std::collections::BTreeMap<String, u32>,
    /// `CCSWITCH_HEALTH_PREFIX`: key prefix in Redis.
    pub health_prefix: String,
    /// `CCSWITCH_MAX_WAIT`: the most a run or job waits in all (`--max-wait` wins).
    pub max_wait: Option<Duration>,
    /// `CCSWITCH_PREFER_PRIMARY`: how far ahead a primary's stated reset may lie to be waited
    /// for (`--prefer-primary` wins).
    pub prefer_primary: Option<Duration>,
    /// Values of environment variables whose names say they hold secrets; Pi inherits them, so
    /// they are masked in everything printed or stored. Never written anywhere.
    pub secret_values: Vec<String>,
}

/// A configuration problem (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// Reads the process environment.
#[expect(
    clippy::disallowed_methods,
    reason = "settings.rs is the environment chokepoint"
)]
pub fn load(health_url_flag: Option<&str>) -> Result<Settings, ConfigError> {
    let home = directories::BaseDirs::new().map(|d| d.home_dir().to_path_buf());
    let mut settings = from_lookup(|name| std::env::var_os(name), home)?;
    if let Some(url) = health_url_flag {
        settings.health_url = Some(url.to_string());
    }
    // A test-only clock skew (not in ENVIRONMENT, not documented for users): the binary acts
    // as on a host whose clock is off by this many ms, as under `faketime`.
    if let Some(ms) = std::env::var("CCSWITCH_TEST_CLOCK_OFFSET_MS")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
    {
        crate::clock::shift_wall_clock(ms);
    }
    settings.secret_values = std::env::vars_os()
        .filter(|(k, _)| crate::redact::is_secret_env_name(&k.to_string_lossy()))
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .collect();
    Ok(settings)
}

/// Pi's saved default model (`defaultProvider`/`defaultModel` in the agent dir's
/// `settings.json`) as `provider/id`. Under `--models` without `--model` Pi starts from it when
/// it is in scope; the runner does not forward `--models` and so makes that choice itself.
/// Missing, unreadable, oversized or malformed → `None` (Pi then starts from the first
/// scoped model too).
pub fn pi_saved_default(agent_dir: &std::path::Path) -> Option<String> {
    saved_default_in(&pi_config_text(agent_dir, "settings.json")?)
}

/// What `models.json` and `auth.json` in the agent dir say about where models and keys come
/// from (see `catalog::origin`); missing or unreadable files count as absent. Pair it with
/// [`var`] for the variables those files and Pi's built-in providers refer to.
pub fn pi_config(agent_dir: &std::path::Path) -> crate::catalog::origin::PiConfig {
    crate::catalog::origin::PiConfig::from_texts(
        pi_config_text(agent_dir, "models.json").as_deref(),
        pi_config_text(agent_dir, "auth.json").as_deref(),
    )
}

/// The text of one of Pi's config files in the agent dir (`models.json`, `auth.json`,
/// `settings.json`). Bounded: these files are small, and one over 4 MiB is not Pi's (`None`,
/// as for a missing or unreadable one).
pub fn pi_config_text(agent_dir: &std::path::Path, name: &str) -> Option<String> {
    use std::io::Read as _;
    const MAX: u64 = 4 * 1024 * 1024;
    let mut text = String::new();
    // Non-blocking and regular files only: a FIFO or `/dev/zero` planted here must not hang or
    // feed the runner before Pi even starts.
    crate::lockfile::open_regular(&agent_dir.join(name))
        .ok()?
        .take(MAX + 1)
        .read_to_string(&mut text)
        .ok()?;
    (text.len() as u64 <= MAX).then_some(text)
}

/// [`pi_saved_default`] of a `settings.json` text (Pi reads it with `JSON.parse` after
/// dropping a BOM).
pub fn saved_default_in(text: &str) -> Option<String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let provider = v.get("defaultProvider")?.as_str()?;
    let model = v.get("defaultModel")?.as_str()?;
    (!provider.is_empty() && !model.is_empty()).then(|| format!("{provider}/{model}"))
}

/// One variable's value, for reading a config file's `$VAR` references the way Pi would.
#[expect(
    clippy::disallowed_methods,
    reason = "settings.rs is the environment chokepoint"
)]
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Builds settings from any variable lookup (tests pass a map).
pub fn from_lookup(
    var: impl Fn(&str) -> Option<OsString>,
    home: Option<PathBuf>,
) -> Result<Settings, ConfigError> {
    let (pi_command, pi_warning) = resolve_pi_bin(var("PI_BIN"))?;
    let agent_dir = match var("PI_CODING_AGENT_DIR") {
        Some(v) if !v.is_empty() => expand_like_pi(&v, home.as_deref()),
        _ => home.map(|h| h.join(".pi").join("agent")),
    };
    let ms = |name: &str, default: u64| -> Result<Duration, ConfigError> {
        // An empty value is unset (CI files often write `VAR=`).
        match var(name).filter(|v| !v.is_empty()) {
            None => Ok(Duration::from_millis(default)),
            Some(v) => match parse_decimal(&v.to_string_lossy()) {
                Some(n) if n > 0 => Ok(Duration::from_millis(n)),
                _ => Err(ConfigError(format!(
                    "{name} must be a positive integer of milliseconds (got '{}')",
                    v.to_string_lossy()
                ))),
            },
        }
    };
    let cooldown_scale = match var("CCSWITCH_COOLDOWN_SCALE").filter(|v| !v.is_empty()) {
        None => DEFAULT_COOLDOWN_SCALE,
        Some(v) => match v.to_string_lossy().trim().parse::<f64>() {
            Ok(f) if (0.0..=1.0).contains(&f) => f,
            _ => {
                return Err(ConfigError(format!(
                    "CCSWITCH_COOLDOWN_SCALE must be a number from 0 to 1 (got '{}')",
                    v.to_string_lossy()
                )));
            }
        },
    };
    let health_url = var("CCSWITCH_HEALTH_URL")
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string_lossy().into_owned());
    if let Some(url) = &health_url
        && !["redis://", "rediss://", "unix://"]
            .iter()
            .any(|s| url.starts_with(s))
    {
        return Err(ConfigError(
            "CCSWITCH_HEALTH_URL expects redis://…, rediss://… or unix:///path".to_string(),
        ));
    }
    let max_inflight = match var("CCSWITCH_MAX_INFLIGHT").filter(|v| !v.is_empty()) {
        None => std::collections::BTreeMap::new(),
        Some(v) => crate::capacity::caps::parse_caps(&v.to_string_lossy())
            .map_err(|e| ConfigError(format!("CCSWITCH_MAX_INFLIGHT: {e}")))?,
    };
    let duration = |name: &str| -> Result<Option<Duration>, ConfigError> {
        match var(name).filter(|v| !v.is_empty()) {
            None => Ok(None),
            Some(v) => parse_duration(&v.to_string_lossy())
                .map(Some)
                .map_err(|e| ConfigError(format!("{name} {e}"))),
        }
    };
    let max_wait = duration("CCSWITCH_MAX_WAIT")?;
    let prefer_primary = duration("CCSWITCH_PREFER_PRIMARY")?;
    let health_prefix = var("CCSWITCH_HEALTH_PREFIX")
        .filter(|v| !v.is_empty())
        .map_or_else(
            || DEFAULT_HEALTH_PREFIX.to_string(),
            |v| v.to_string_lossy().into_owned(),
        );
    Ok(Settings {
        health_url,
        max_inflight,
        max_wait,
        prefer_primary,
        health_prefix,
        secret_values: Vec::new(),
        pi_command,
        pi_warning,
        agent_dir,
        round_limit: ms("CCSWITCH_ROUND_LIMIT_MS", DEFAULT_ROUND_LIMIT_MS)?,
        first_response: ms("CCSWITCH_FIRST_RESPONSE_MS", DEFAULT_FIRST_RESPONSE_MS)?,
        stall: ms("CCSWITCH_STALL_MS", DEFAULT_STALL_MS)?,
        watchdog_floor: ms(
            "CCSWITCH_WATCHDOG_FLOOR_MS",
            crate::pace::watchdog::DEFAULT_FLOOR_MS,
        )?,
        cooldown_scale,
    })
}

/// The longest duration `--max-wait` and `--prefer-primary` (and their variables) take: a
/// week, a weekly quota window; a job's deadline bounds every wait anyway.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// A duration as people write one: whole numbers with units, largest first, no blanks —
/// `30s`, `10m`, `1h30m`, `1500ms`, `2d`; `0` alone needs no unit. Bounded by
/// [`MAX_DURATION`]. The error says what is wrong, for a flag's or a variable's message.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    const UNITS: [(&str, u64); 5] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ];
    let shape = || {
        format!(
            "expects a duration such as 30s, 10m or 1h30m (units d, h, m, s, ms; got '{}')",
            crate::redact::printable(text)
        )
    };
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total: u64 = 0;
    // Each unit at most once, larger before smaller: `1m1h` and `5s5s` are typos.
    let mut last_unit: Option<usize> = None;
    if rest.is_empty() {
        return Err(shape());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let (number, unit) = (&rest[..digits], &rest[digits..digits + letters]);
        let n = parse_decimal(number).ok_or_else(shape)?;
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(shape());
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(shape());
        }
        last_unit = Some(index);
        total = n
            .checked_mul(UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(too_long)?;
        rest = &rest[digits + letters..];
    }
    let d = Duration::from_millis(total);
    if d > MAX_DURATION {
        return Err(too_long());
    }
    Ok(d)
}

fn too_long() -> String {
    "is longer than a week (7d), the longest wait taken".to_string()
}

/// Decimal digits only: no sign, no exponent, no hex, no surrounding whitespace (for numbers in
/// the environment and on the command line alike).
pub fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Resolves `PI_CODING_AGENT_DIR` exactly as Pi does, so health lives beside Pi's own files:
/// `~` and `~/…` are the home directory, a `file://` prefix is dropped, nothing is trimmed.
fn expand_like_pi(value: &std::ffi::OsStr, home: Option<&std::path::Path>) -> Option<PathBuf> {
    let text = value.to_string_lossy();
    if text == "~" {
        return home.map(std::path::Path::to_path_buf);
    }
    if let Some(rest) = text.strip_prefix("~/") {
        return home.map(|h| h.join(rest));
    }
    if let Some(rest) = text.strip_prefix("file://") {
        return Some(PathBuf::from(rest));
    }
    Some(PathBuf::from(value))
}

/// `PI_BIN` must name the real `pi` (stem `pi`); the old runner's self references fall back
/// to `pi` on PATH with a warning; anything else is refused.
fn resolve_pi_bin(value: Option<OsString>) -> Result<(OsString, Option<String>), ConfigError> {
    let Some(raw) = value else {
        return Ok((OsString::from("pi"), None));
    };
    let text = raw.to_string_lossy();
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok((OsString::from("pi"), None));
    }
    let last = trimmed
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(trimmed)
        .to_lowercase();
    let stem = [".cmd", ".exe", ".bat"]
        .iter()
        .find_map(|ext| last.strip_suffix(ext))
        .unwrap_or(&last);
    match stem {
        "pi" => Ok((OsString::from(trimmed), None)),
        "pi-ccswitch-run" | "ccswitch-run" => Ok((
            OsString::from("pi"),
            Some(
                "warning: PI_BIN points to a legacy runner wrapper; ignoring it and falling back \
                 to 'pi' on PATH"
                    .to_string(),
            ),
        )),
        _ => Err(ConfigError(format!(
            "PI_BIN must name the real pi executable, not an arbitrary command (got '{trimmed}')"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn load_with(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), OsString::from(v)))
            .collect();
        from_lookup(|k| map.get(k).cloned(), Some(PathBuf::from("/home/u")))
    }

    #[test]
    fn pi_bin_rules() {
        assert_eq!(load_with(&[]).unwrap().pi_command, "pi");
        assert_eq!(load_with(&[("PI_BIN", "  ")]).unwrap().pi_command, "pi");
        assert_eq!(
            load_with(&[("PI_BIN", " /opt/pi/bin/pi ")])
                .unwrap()
                .pi_command,
            "/opt/pi/bin/pi"
        );
        assert_eq!(
            load_with(&[("PI_BIN", "C:\\npm\\PI.CMD")])
                .unwrap()
                .pi_command,
            "C:\\npm\\PI.CMD"
        );
        for legacy in [
            "pi-ccswitch-run",
            "/usr/bin/ccswitch-run",
            "PI-CCSWITCH-RUN.exe",
        ] {
            let s = load_with(&[("PI_BIN", legacy)]).unwrap();
            assert_eq!(s.pi_command, "pi", "{legacy}");
            assert!(s.pi_warning.unwrap().contains("legacy runner"));
        }
        for bad in ["bash", "/bin/sh", "pi2", "python pi", "node"] {
            let err = load_with(&[("PI_BIN", bad)]).unwrap_err();
            assert!(
                err.0.contains("PI_BIN must name the real pi"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn agent_dir_defaults_to_home() {
        assert_eq!(
            load_with(&[]).unwrap().agent_dir,
            Some(PathBuf::from("/home/u/.pi/agent"))
        );
        // As Pi resolves it: not trimmed, `~` expanded, `file://` dropped.
        let dir = |v: &str| load_with(&[("PI_CODING_AGENT_DIR", v)]).unwrap().agent_dir;
        assert_eq!(dir("/tmp/a b/代理 "), Some(PathBuf::from("/tmp/a b/代理 ")));
        assert_eq!(dir("~/ag"), Some(PathBuf::from("/home/u/ag")));
        assert_eq!(dir("~"), Some(PathBuf::from("/home/u")));
        assert_eq!(dir("file:///srv/pi"), Some(PathBuf::from("/srv/pi")));
        assert_eq!(
            dir(""),
            Some(PathBuf::from("/home/u/.pi/agent")),
            "empty = unset"
        );
    }

    #[test]
    fn timers_are_positive_integers() {
        let s = load_with(&[("CCSWITCH_STALL_MS", "1500")]).unwrap();
        assert_eq!(s.stall, Duration::from_millis(1500));
        assert_eq!(s.round_limit, Duration::from_millis(DEFAULT_ROUND_LIMIT_MS));
        assert_eq!(
            s.first_response,
            Duration::from_millis(DEFAULT_FIRST_RESPONSE_MS)
        );
        for bad in ["0", "-1", "abc", "1.5"] {
            let err = load_with(&[("CCSWITCH_ROUND_LIMIT_MS", bad)]).unwrap_err();
            assert!(err.0.starts_with("CCSWITCH_ROUND_LIMIT_MS"), "{bad}");
        }
        assert!(load_with(&[("CCSWITCH_COOLDOWN_SCALE", "2")]).is_err());
        let empty =
            load_with(&[("CCSWITCH_STALL_MS", ""), ("CCSWITCH_COOLDOWN_SCALE", "")]).unwrap();
        assert_eq!(
            empty.stall,
            Duration::from_millis(DEFAULT_STALL_MS),
            "empty = unset"
        );
        assert_eq!(empty.cooldown_scale, 1.0);
        assert_eq!(
            load_with(&[("CCSWITCH_COOLDOWN_SCALE", "0.01")])
                .unwrap()
                .cooldown_scale,
            0.01
        );
    }

    /// The table is the list of what `from_lookup` reads, no more, no less, and its defaults
    /// are the ones applied.
    #[test]
    fn the_table_lists_exactly_the_variables_read_with_their_defaults() {
        let asked = std::cell::RefCell::new(Vec::new());
        let s = from_lookup(
            |name| {
                asked.borrow_mut().push(name.to_string());
                None
            },
            Some(PathBuf::from("/home/u")),
        )
        .unwrap();
        let mut asked = asked.into_inner();
        asked.sort();
        asked.dedup();
        let mut listed: Vec<String> = ENVIRONMENT.iter().map(|v| v.name.to_string()).collect();
        listed.sort();
        assert_eq!(asked, listed);
        let default = |name: &str| {
            ENVIRONMENT
                .iter()
                .find(|v| v.name == name)
                .and_then(|v| v.default)
                .map(|d| d.to_string())
        };
        let ms = |d: Duration| Some(d.as_millis().to_string());
        assert_eq!(default("CCSWITCH_ROUND_LIMIT_MS"), ms(s.round_limit));
        assert_eq!(default("CCSWITCH_FIRST_RESPONSE_MS"), ms(s.first_response));
        assert_eq!(default("CCSWITCH_STALL_MS"), ms(s.stall));
        assert_eq!(default("CCSWITCH_WATCHDOG_FLOOR_MS"), ms(s.watchdog_floor));
        assert_eq!(
            default("CCSWITCH_COOLDOWN_SCALE"),
            Some(s.cooldown_scale.to_string())
        );
        assert_eq!(default("CCSWITCH_HEALTH_PREFIX"), Some(s.health_prefix));
        assert_eq!(default("CCSWITCH_HEALTH_URL"), None);
        assert_eq!(s.health_url, None);
        assert_eq!(s.pi_command, "pi");
        assert_eq!(s.agent_dir, Some(PathBuf::from("/home/u/.pi/agent")));
        assert_eq!(
            ENVIRONMENT[4].describe(),
            "failover round window in ms (default 480000)"
        );
    }

    #[test]
    fn durations_are_numbers_with_units() {
        let ok = |t: &str| parse_duration(t).unwrap();
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("30s"), Duration::from_secs(30));
        assert_eq!(ok("10m"), Duration::from_secs(600));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("1m500ms"), Duration::from_millis(60_500));
        assert_eq!(ok("1500ms"), Duration::from_millis(1500));
        assert_eq!(ok("7d"), MAX_DURATION);
        for bad in [
            "",
            "30",
            "-5s",
            "+5s",
            "5 s",
            " 5s",
            "5s ",
            "5sec",
            "1.5m",
            "5S",
            "m",
            "1m1h",
            "5s5s",
            "1h1d",
            "5sx",
            "١s",
            "99999999999999999999s",
        ] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.starts_with("expects a duration"), "{bad:?}: {err}");
        }
        for long in ["8d", "7d1ms", "169h", "18446744073709551615d"] {
            let err = parse_duration(long).unwrap_err();
            assert!(err.contains("longer than a week"), "{long}: {err}");
        }
        // Control characters are shown escaped: the error stays one line.
        assert!(!parse_duration("1\n2s").unwrap_err().contains('\n'));
    }

    #[test]
    fn wait_bounds_come_from_the_environment() {
        let s = load_with(&[
            ("CCSWITCH_MAX_WAIT", "30s"),
            ("CCSWITCH_PREFER_PRIMARY", "10m"),
        ])
        .unwrap();
        assert_eq!(s.max_wait, Some(Duration::from_secs(30)));
        assert_eq!(s.prefer_primary, Some(Duration::from_secs(600)));
        let unset = load_with(&[("CCSWITCH_MAX_WAIT", "")]).unwrap();
        assert_eq!((unset.max_wait, unset.prefer_primary), (None, None));
        let err = load_with(&[("CCSWITCH_PREFER_PRIMARY", "10")]).unwrap_err();
        assert_eq!(
            err.0,
            "CCSWITCH_PREFER_PRIMARY expects a duration such as 30s, 10m or 1h30m (units d, h, \
             m, s, ms; got '10')"
        );
        let err = load_with(&[("CCSWITCH_MAX_WAIT", "9d")]).unwrap_err();
        assert_eq!(
            err.0,
            "CCSWITCH_MAX_WAIT is longer than a week (7d), the longest wait taken"
        );
    }

    #[test]
    fn decimals_are_digits_only() {
        assert_eq!(parse_decimal("007"), Some(7));
        for bad in ["", " 7", "+7", "-1", "1e3", "0x10", "99999999999999999999"] {
            assert_eq!(parse_decimal(bad), None, "{bad}");
        }
    }

    #[test]
    fn pis_saved_default_is_read_as_pi_reads_it() {
        use super::saved_default_in as d;
        assert_eq!(
            d("\u{feff}{\"defaultProvider\":\"p\",\"defaultModel\":\"m\"}").as_deref(),
            Some("p/m")
        );
        assert_eq!(d("{\"defaultModel\":\"m\"}"), None);
        assert_eq!(d("{\"defaultProvider\":\"p\",\"defaultModel\":7}"), None);
        assert_eq!(d("{\"defaultProvider\":\"\",\"defaultModel\":\"m\"}"), None);
        assert_eq!(d("not json"), None);
        assert_eq!(d("[]"), None);
    }
}
