//! Request id allocation and response correlation, by id and never by order (Pi answers
//! `abort` after the run it aborted has settled). Pure.

use std::collections::BTreeMap;

use super::Response;

/// Tracks commands awaiting their response.
#[derive(Debug, Default)]
pub struct Pending<T> {
    prefix: String,
    next: u64,
    waiting: BTreeMap<String, T>,
}

impl<T> Pending<T> {
    pub fn new() -> Pending<T> {
        Pending::with_prefix("")
    }

    /// Ids start with `prefix`, so a late answer meant for an earlier run on the same Pi (an
    /// `abort` answered after its run settled) can never match a command of this one.
    pub fn with_prefix(prefix: &str) -> Pending<T> {
        Pending {
            prefix: prefix.to_string(),
            next: 1,
            waiting: BTreeMap::new(),
        }
    }

    /// Allocates an id for a command and remembers `tag` until its response arrives.
    pub fn register(&mut self, tag: T) -> String {
        let id = format!("{}{}", self.prefix, self.next);
        self.next += 1;
        self.waiting.insert(id.clone(), tag);
        id
    }

    /// The tag of the command this response answers; `None` for responses we did not ask for.
    pub fn resolve(&mut self, response: &Response) -> Option<T> {
        response.id.as_ref().and_then(|id| self.waiting.remove(id))
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(id: Option<&str>) -> Response {
        Response {
            id: id.map(str::to_string),
            command: String::new(),
            success: true,
            data: None,
            error: None,
        }
    }

    #[test]
    fn prefixed_ids_never_collide_across_runs() {
        let mut first: Pending<&str> = Pending::with_prefix("j1-");
        let mut second: Pending<&str> = Pending::with_prefix("j2-");
        let late = first.register("abort");
        second.register("get_state");
        assert_eq!(second.resolve(&resp(Some(&late))), None);
        assert_eq!(late, "j1-1");
    }

    #[test]
    fn correlates_by_id_in_any_order() {
        let mut p = Pending::new();
        let a = p.register("abort");
        let b = p.register("get_state");
        assert_eq!(p.resolve(&resp(Some(&b))), Some("get_state"));
        assert_eq!(p.resolve(&resp(Some(&b))), None, "answered once");
        assert_eq!(p.resolve(&resp(None)), None);
        assert_eq!(p.resolve(&resp(Some("999"))), None);
        assert_eq!(p.resolve(&resp(Some(&a))), Some("abort"));
        assert!(p.is_empty());
    }
}
