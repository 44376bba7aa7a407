//! Who holds a capacity slot. Pure.

use std::fmt;

/// A slot holder's id, unique among every process sharing the store: `host:pid` for the
/// process, then `:wN` for a batch worker, then `:N` for the job on its Pi (so a late answer
/// about one job's slot never touches the next one's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotId(String);

impl SlotId {
    /// This process on `host`.
    pub fn process(host: &str, pid: u32) -> SlotId {
        SlotId(format!("{host}:{pid}"))
    }

    /// Batch worker `n` of this holder.
    pub fn worker(&self, n: usize) -> SlotId {
        SlotId(format!("{}:w{n}", self.0))
    }

    /// Job `n` of this holder.
    pub fn job(&self, n: u32) -> SlotId {
        SlotId(format!("{}:{n}", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SlotId {
    /// An id as stored or given in a test.
    fn from(text: &str) -> SlotId {
        SlotId(text.to_string())
    }
}

impl fmt::Display for SlotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::SlotId;

    #[test]
    fn ids_name_the_process_the_worker_and_the_job() {
        let p = SlotId::process("host", 42);
        assert_eq!(p.worker(3).job(7).as_str(), "host:42:w3:7");
        assert_eq!(p.job(0).to_string(), "host:42:0");
    }
}
