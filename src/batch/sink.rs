//! Where results go: stdout (in input order — the caller arranges it) or `--output FILE`
//! (appended as jobs finish, each line in one write and `fdatasync`ed before the job counts as
//! done). One writer thread does every write and sync, so neither a slow reader of stdout nor
//! a slow disk ever blocks the event loop that drives the Pi processes.
//!
//! Results that arrive together share one `fdatasync` (a group commit): each is acknowledged
//! only once that sync returned, so a job is never counted done before its line is durable.

use std::io::{self, Write as _};

use tokio::sync::{mpsc, oneshot};

use crate::lockfile::LockGuard;
use crate::output;

/// Results queued for the writer before senders wait.
const QUEUE: usize = 64;

/// Where the lines go.
pub enum SinkTarget {
    Stdout,
    /// The locked `--output FILE` (opened for appending).
    File(LockGuard),
}

/// Why a line was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The reader of stdout went away (`| head -1`): nobody wants more results.
    Closed,
    /// Writing or syncing failed; the batch cannot record results any more.
    Io(String),
}

struct Msg {
    line: String,
    ack: oneshot::Sender<Result<(), Failure>>,
}

/// A handle to the writer thread; clones share it. The thread ends when every handle is gone.
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::Sender<Msg>,
}

impl Sink {
    /// Starts the writer thread. The receiver fires once the thread has finished (every handle
    /// dropped and everything written).
    pub fn start(target: SinkTarget) -> io::Result<(Sink, oneshot::Receiver<()>)> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let (finished_tx, finished) = oneshot::channel();
        std::thread::Builder::new()
            .name("results".into())
            .spawn(move || {
                Writer {
                    target,
                    failed: None,
                }
                .serve(rx);
                let _ = finished_tx.send(());
            })?;
        Ok((Sink { tx }, finished))
    }

    /// Writes one result line (`line` ends with `\n`) and waits until it is written — and, for
    /// a file, synced to disk.
    pub async fn write(&self, line: String) -> Result<(), Failure> {
        let (ack, done) = oneshot::channel();
        if self.tx.send(Msg { line, ack }).await.is_err() {
            return Err(Failure::Io("the results writer stopped".to_string()));
        }
        done.await
            .unwrap_or_else(|_| Err(Failure::Io("the results writer stopped".to_string())))
    }
}

struct Writer {
    target: SinkTarget,
    /// After a failure nothing more is written; every later line gets the same answer.
    failed: Option<Failure>,
}

impl Writer {
    fn serve(&mut self, mut rx: mpsc::Receiver<Msg>) {
        while let Some(first) = rx.blocking_recv() {
            let mut group = vec![first];
            while group.len() < QUEUE {
                match rx.try_recv() {
                    Ok(m) => group.push(m),
                    Err(_) => break,
                }
            }
            let mut written = 0usize;
            for m in &group {
                if self.failed.is_none() {
                    match self.write(&m.line) {
                        Ok(()) => written += 1,
                        Err(f) => self.failed = Some(f),
                    }
                }
            }
            if written > 0
                && self.failed.is_none()
                && let SinkTarget::File(guard) = &self.target
                && let Err(e) = guard.file().sync_data()
            {
                self.failed = Some(Failure::Io(format!("cannot sync --output to disk: {e}")));
            }
            // Lines written before a failure in the same group are acknowledged as failed too:
            // nothing is done until it is durable.
            for m in group {
                let _ = m.ack.send(match &self.failed {
                    Some(f) => Err(f.clone()),
                    None => Ok(()),
                });
            }
        }
    }

    fn write(&mut self, line: &str) -> Result<(), Failure> {
        match &mut self.target {
            SinkTarget::Stdout => output::stdout_text_strict(line).map_err(|e| {
                if e.kind() == io::ErrorKind::BrokenPipe {
                    Failure::Closed
                } else {
                    Failure::Io(format!("cannot write results to stdout: {e}"))
                }
            }),
            // One write call per line: with O_APPEND the line lands whole at the end.
            SinkTarget::File(guard) => guard
                .file_mut()
                .write_all(line.as_bytes())
                .map_err(|e| Failure::Io(format!("cannot write to --output: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_the_file_whole_and_in_the_order_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let ledger = super::super::ledger::open(&path, false, &[]).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (sink, finished) = Sink::start(SinkTarget::File(ledger.guard)).unwrap();
            let local = tokio::task::LocalSet::new();
            local
                .run_until(async {
                    let handles: Vec<_> = (0..100)
                        .map(|i| {
                            let sink = sink.clone();
                            tokio::task::spawn_local(async move {
                                sink.write(format!("{{\"n\":{i}}}\n")).await
                            })
                        })
                        .collect();
                    for h in handles {
                        assert_eq!(h.await.unwrap(), Ok(()));
                    }
                })
                .await;
            drop(sink);
            finished.await.unwrap();
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let mut ns: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        ns.sort_unstable();
        assert_eq!(ns, (0..100).collect::<Vec<_>>());
    }
}
