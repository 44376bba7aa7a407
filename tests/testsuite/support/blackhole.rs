//! A TCP black hole for client-timeout tests: a `127.0.0.1` listener that accepts every
//! connection and then does nothing with it — never reads, never writes, never closes — until the
//! [`BlackHole`] is dropped. A client sees its connect succeed and then waits forever (its writes
//! fill the kernel buffers and then block), which is what a wedged gateway or a dead Redis behind
//! a live load balancer looks like. For "connection refused" use
//! [`crate::support::closed_port`] instead.
//!
//! Owns one acceptor thread and the accepted sockets; binds loopback only.

// Also compiled into the benches and the demo (by `#[path]`), which use only part of it.
#![allow(dead_code, clippy::disallowed_methods)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A listener that never answers. See the module docs.
pub struct BlackHole {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    held: Arc<(Mutex<Vec<TcpStream>>, Condvar)>,
    acceptor: Option<JoinHandle<()>>,
}

impl BlackHole {
    /// Listen on `127.0.0.1:<ephemeral port>`.
    pub fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").expect("blackhole: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("blackhole: local_addr");
        let stop = Arc::new(AtomicBool::new(false));
        let held: Arc<(Mutex<Vec<TcpStream>>, Condvar)> = Arc::default();
        let acceptor = {
            let (stop, held) = (stop.clone(), held.clone());
            std::thread::Builder::new()
                .name(format!("blackhole-{}", addr.port()))
                .spawn(move || {
                    for stream in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        // Holding the socket is the whole point: dropping it would send a FIN.
                        if let Ok(s) = stream {
                            let (list, cv) = &*held;
                            list.lock().unwrap_or_else(|e| e.into_inner()).push(s);
                            cv.notify_all();
                        }
                    }
                })
                .expect("blackhole: spawn acceptor")
        };
        BlackHole {
            addr,
            stop,
            held,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT/v1` — an OpenAI-style base URL for `models.json`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port())
    }

    /// `redis://:pw@127.0.0.1:PORT/0` — a Redis URL whose server never answers.
    pub fn redis_url(&self) -> String {
        format!("redis://:pw@127.0.0.1:{}/0", self.port())
    }

    /// Connections accepted (and still held) so far.
    pub fn accepted(&self) -> usize {
        self.held.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Wait until at least `n` connections were accepted or `timeout` passed; returns the count.
    pub fn wait_accepted(&self, n: usize, timeout: Duration) -> usize {
        let (list, cv) = &*self.held;
        let g = list.lock().unwrap_or_else(|e| e.into_inner());
        let (g, _) = cv
            .wait_timeout_while(g, timeout, |l| l.len() < n)
            .unwrap_or_else(|e| e.into_inner());
        g.len()
    }
}

impl Drop for BlackHole {
    /// Stops accepting and closes every held connection: clients see EOF, or a reset when they
    /// had sent bytes the hole never read.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept(); that connection is dropped unheld.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
        self.held
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}
