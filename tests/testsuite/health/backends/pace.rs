//! The pace part of the behaviour suite (issue 31): each model's clean answers, stored next to
//! the breakers, held to the same assertions on the in-memory store, the state file and a real
//! Redis. What only a shared store can meet (records written by others, corrupt or foreign;
//! `--reset all`) runs on the file store and Redis.

use std::time::Duration;

use super::capacity::stores::Memory;
use super::{Backend, File, PREFIX, Redis, T0, load, quota, together};
use crate::support::RedisConn;
use crate::support::redis::{Resp, redis_cmd};
use pi_ccswitch_run::health::Delta;
use pi_ccswitch_run::health::store::STATE_FILE;
use pi_ccswitch_run::pace::watchdog::{Bounds, Watchdogs};
use pi_ccswitch_run::pace::{MAX_AGE_MS, MAX_RECORDS, MAX_SAMPLES, Sample};

/// `every` behaviours run on every store, `shared` ones on the stores processes share.
macro_rules! pace_behaviours {
    (every: [$($every:ident),* $(,)?], shared: [$($shared:ident),* $(,)?] $(,)?) => {
        mod memory { $( #[test] fn $every() { super::$every(&super::Memory::new()) } )* }
        mod file {
            $( #[test] fn $every() { super::$every(&super::File::new()) } )*
            $( #[test] fn $shared() { super::$shared(&super::File::new()) } )*
        }
        mod redis {
            $( #[test] fn $every() { super::$every(&super::Redis::new()) } )*
            $( #[test] fn $shared() { super::$shared(&super::Redis::new()) } )*
        }
    };
}

pace_behaviours!(
    every: [
        answers_of_every_process_add_up_to_one_pace,
        a_model_keeps_its_newest_answers_and_the_store_its_freshest_models,
        answers_from_the_future_or_long_ago_are_not_read,
    ],
    shared: [
        a_corrupt_or_foreign_pace_reads_as_defaults_and_breakers_survive_it,
        reset_all_forgets_the_pace,
    ],
);

fn answer(key: &str, at_ms: u64, first_ms: u64, gap_ms: u64) -> Delta {
    Delta::Pace {
        key: key.to_string(),
        sample: Sample {
            at_ms,
            first_ms,
            gap_ms,
            prompt_chars: 120,
        },
    }
}

fn bounds() -> Bounds {
    Bounds {
        first_ceiling: Duration::from_secs(90),
        stall_ceiling: Duration::from_secs(120),
        floor: Duration::from_secs(3),
    }
}

/// Four processes each record five answers of `glm/m` at once: all twenty are there, and the
/// watchdogs every process derives from them are the same.
fn answers_of_every_process_add_up_to_one_pace(b: &dyn Backend) {
    together(b, 4, 1.0, |i, store| {
        for j in 0..5u64 {
            let n = i as u64 * 5 + j + 1;
            store
                .commit(&[answer("glm/m", T0, n * 100, n * 10)], T0 + n)
                .expect("commit");
        }
    });
    let h = load(b, T0 + 100);
    let r = &h.pace["glm/m"];
    assert_eq!(r.samples().len(), 20, "{r:?}");
    let sum = h.pace_of("glm/m", T0 + 100, 120).expect("pace");
    assert_eq!(
        (sum.answers, sum.first_p95_ms, sum.gap_p95_ms),
        (20, 1900, 190)
    );
    let w = Watchdogs::derive(Some(&sum), bounds());
    assert_eq!(w.first_response.ms, 3 * 1900 + 1000);
    assert_eq!(w.stall.ms, 3000, "the floor");
    assert_eq!(
        sum.describe(),
        "first response p95 1.9 s, longest gap p95 190 ms over 20 answers"
    );
}

/// 60 answers of one model: the newest 40 stay. Past `MAX_RECORDS` models the longest idle go.
fn a_model_keeps_its_newest_answers_and_the_store_its_freshest_models(b: &dyn Backend) {
    let mut store = b.store(1.0);
    let deltas: Vec<Delta> = (0..60u64)
        .map(|n| answer("a/m", T0 + n, 100 + n, 0))
        .collect();
    store.commit(&deltas, T0 + 60).expect("commit");
    let h = load(b, T0 + 61);
    let firsts: Vec<u64> = h.pace["a/m"].samples().iter().map(|s| s.first_ms).collect();
    assert_eq!(firsts, (120..160).collect::<Vec<_>>());
    assert_eq!(firsts.len(), MAX_SAMPLES);
    let many: Vec<Delta> = (0..MAX_RECORDS as u64 + 5)
        .map(|n| answer(&format!("p/m{n:04}"), T0 + 1000 + n, 100, 0))
        .collect();
    store.commit(&many, T0 + 2000).expect("commit");
    let h = load(b, T0 + 2001);
    assert_eq!(h.pace.len(), MAX_RECORDS, "bounded");
    assert!(!h.pace.contains_key("a/m"), "the longest idle went first");
    assert!(!h.pace.contains_key("p/m0004"));
    assert!(h.pace.contains_key("p/m0005"));
    // And a second read agrees (Redis deleted the lists it dropped).
    assert_eq!(load(b, T0 + 2002).pace.len(), MAX_RECORDS);
}

/// A clock far ahead, or a forged year 9999, never outweighs real answers; a week-old answer
/// counts for nothing.
fn answers_from_the_future_or_long_ago_are_not_read(b: &dyn Backend) {
    let mut store = b.store(1.0);
    store
        .commit(
            &[
                answer("a/m", u64::MAX / 2, 50, 0),
                answer("a/m", T0 + 3_600_000, 60, 0),
                answer("a/m", T0 - MAX_AGE_MS - 1, 70, 0),
                answer("a/m", T0 - 5, 1234, 0),
            ],
            T0,
        )
        .expect("commit");
    let h = load(b, T0);
    let firsts: Vec<u64> = h.pace["a/m"].samples().iter().map(|s| s.first_ms).collect();
    assert_eq!(firsts, [1234]);
}

/// A pace written by something else — not a list, entries that are not samples, times and
/// sizes out of range — reads as the valid samples it holds (at worst none: the ceilings), the
/// breakers beside it are read as ever, and the next answer is recorded on top.
fn a_corrupt_or_foreign_pace_reads_as_defaults_and_breakers_survive_it<B: Backend + CorruptPace>(
    b: &B,
) {
    let mut store = b.store(1.0);
    store
        .commit(&[quota(T0, "p"), answer("good/m", T0, 500, 0)], T0)
        .expect("commit");
    let junk = [
        b"not json".to_vec(),
        b"[1,2,3]".to_vec(),
        format!("[{T0},0,1,1]").into_bytes(),
        format!("[{T0},-5,1,1]").into_bytes(),
        format!("[{T0},5000000,1,1]").into_bytes(),
        format!("[{T0},700,20,10]").into_bytes(),
        vec![b'['; 5000],
    ];
    b.corrupt_pace(&junk);
    let h = load(b, T0 + 1);
    assert_eq!(h.providers["p"].consecutive_failures, 1, "breakers intact");
    assert_eq!(h.pace["good/m"].samples().len(), 1);
    let firsts: Vec<u64> = h.pace["mixed/m"]
        .samples()
        .iter()
        .map(|s| s.first_ms)
        .collect();
    assert_eq!(firsts, [700], "only the valid sample");
    assert!(!h.pace.contains_key("junk/m"));
    let w = Watchdogs::derive(h.pace_of("junk/m", T0 + 1, 10).as_ref(), bounds());
    assert_eq!(w.first_response.ms, 90_000, "no history: the ceiling");
    store
        .commit(&[answer("junk/m", T0 + 2, 900, 0)], T0 + 2)
        .expect("commit on top of junk");
    let h = load(b, T0 + 3);
    assert_eq!(h.pace["junk/m"].samples()[0].first_ms, 900);
}

/// `--reset all` forgets every pace.
fn reset_all_forgets_the_pace(b: &dyn Backend) {
    let mut store = b.store(1.0);
    store
        .commit(&[answer("a/m", T0, 500, 0)], T0)
        .expect("commit");
    store.reset_all(T0 + 1).expect("reset");
    assert!(load(b, T0 + 2).pace.is_empty());
    assert_eq!(b.items(), 0);
}

/// Writes foreign pace records as another writer could: `mixed/m` holds `junk` (some of it
/// valid), `junk/m` is not a list of samples at all, and (Redis) the index names a model with
/// nothing behind it.
pub(super) trait CorruptPace {
    fn corrupt_pace(&self, junk: &[Vec<u8>]);
}

impl CorruptPace for File {
    fn corrupt_pace(&self, junk: &[Vec<u8>]) {
        let path = self.dir.path().join(STATE_FILE);
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("state")).expect("json");
        let mixed: Vec<serde_json::Value> = junk
            .iter()
            .map(|j| {
                serde_json::from_slice(j)
                    .unwrap_or_else(|_| serde_json::Value::from(String::from_utf8_lossy(j)))
            })
            .collect();
        v["pace"]["mixed/m"] = serde_json::Value::from(mixed);
        v["pace"]["junk/m"] = serde_json::json!({"samples": "many"});
        v["pace"][""] = serde_json::json!([[T0, 1, 1, 1]]);
        std::fs::write(&path, serde_json::to_vec(&v).expect("encode")).expect("write");
    }
}

impl CorruptPace for Redis {
    fn corrupt_pace(&self, junk: &[Vec<u8>]) {
        let mut con = RedisConn::tcp(self.server.addr(), Duration::from_secs(5)).expect("connect");
        con.auth(self.server.password()).expect("auth");
        let ns = format!("{PREFIX}v1:");
        for j in junk {
            con.cmd_bytes(&[b"RPUSH", format!("{ns}pace:mixed/m").as_bytes(), j])
                .expect("RPUSH");
        }
        // A key of the wrong type, and an index entry with nothing behind it.
        assert_eq!(
            redis_cmd(&self.server, &["SET", &format!("{ns}pace:junk/m"), "many"]),
            Resp::ok()
        );
        for m in ["mixed/m", "junk/m", "gone/m"] {
            redis_cmd(&self.server, &["SADD", &format!("{ns}idx:pace"), m]);
        }
    }
}
