//! The fake LLM's quota windows at the HTTP level: a route answers its window's requests, then
//! refuses with a body stating the reset (a whole second, `reset_after` ahead), then answers
//! again after it; requests refused for capacity use none of the window.

use std::time::{SystemTime, UNIX_EPOCH};

use super::fake_llm_capacity::{chat_post, message_of};
use super::*;

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

#[test]
fn a_quota_window_answers_its_requests_refuses_until_its_stated_reset_then_answers_again() {
    let llm = FakeLlm::start();
    llm.set_quota_window(
        "a",
        Some(QuotaWindow::glm_1308(2, Duration::from_millis(1500))),
    );
    // The concurrency cap comes first: a request over it uses no answer of the window.
    llm.set_concurrency_cap("a", Some(0));
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 429);
    llm.set_concurrency_cap("a", None);
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 200);
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 200);
    assert_eq!(llm.quota_refusals("a"), 0);
    let before = unix_ms();
    let (status, _, body) = chat_post(llm.port(), "a", "m", None);
    assert_eq!(status, 429, "{body}");
    let reset = llm.quota_reset_at("a").expect("used up");
    assert_eq!(reset % 1000, 0, "a whole second");
    assert!(
        reset >= before + 1500 && reset <= unix_ms() + 2500,
        "{reset}"
    );
    assert_eq!(message_of(&body), message_of(&bodies::glm_1308(reset)));
    // Refused with the same statement until then.
    let (status, _, again) = chat_post(llm.port(), "a", "m", None);
    assert_eq!((status, again), (429, body));
    assert_eq!(llm.quota_refusals("a"), 2);
    std::thread::sleep(Duration::from_millis(reset.saturating_sub(unix_ms()) + 20));
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 200);
    assert_eq!(llm.quota_reset_at("a"), None, "a new window");
    // A window after a reset may be of another size.
    llm.set_quota_window(
        "a",
        Some(QuotaWindow::glm_1308(1, Duration::from_millis(1000)).then_answers(3)),
    );
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 200);
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 429);
    let reset = llm.quota_reset_at("a").expect("used up");
    std::thread::sleep(Duration::from_millis(reset.saturating_sub(unix_ms()) + 20));
    for _ in 0..3 {
        assert_eq!(chat_post(llm.port(), "a", "m", None).0, 200);
    }
    assert_eq!(chat_post(llm.port(), "a", "m", None).0, 429);
    // Other routes are not counted.
    for _ in 0..3 {
        assert_eq!(chat_post(llm.port(), "b", "m", None).0, 200);
    }
    llm.set_quota_window("a", None);
    for _ in 0..3 {
        assert_eq!(chat_post(llm.port(), "a", "m", None).0, 200);
    }
}
