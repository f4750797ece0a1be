//! A TCP proxy on loopback that a test controls, for putting network faults between two
//! real components (agents and hub, hub and etcd).
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use accord_e2e::faultproxy::{FaultProxy, Mode};
//! use std::time::Duration;
//!
//! let proxy = FaultProxy::start("127.0.0.1:2379".parse()?).await?;
//! // Point a client at `proxy.addr()` instead of the target, then:
//! proxy.set_mode(Mode::Blackhole); // streams stay open, nothing gets through
//! proxy.set_mode(Mode::Delay(Duration::from_millis(200)));
//! proxy.set_mode(Mode::Reset); // every connection ends with RST, new ones too
//! proxy.set_mode(Mode::Pass);
//! # Ok(())
//! # }
//! ```
//!
//! A mode change applies at once to the connections already open, not only to new ones:
//! a partition that spared established streams would test nothing. In `Blackhole` the
//! proxy stops reading from both sides, so the peers' kernels keep the connections open
//! and their writes end up blocked behind full buffers, as on a silently broken path;
//! bytes already accepted flow on when the path heals, as TCP retransmission would
//! deliver them. The proxy may front several targets (like a Service in front of hub
//! replicas): each new connection goes to the first target that accepts it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long a connection attempt to one target may take before the next one is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes read from one side at a time.
const CHUNK: usize = 16 * 1024;

/// What the proxy does with traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything as it comes.
    Pass,
    /// Forward everything, each chunk the given time after it arrived.
    Delay(Duration),
    /// Accept connections, forward nothing either way, keep every socket open.
    Blackhole,
    /// Close every connection with a TCP RST, and new ones at once.
    Reset,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum FaultProxyError {
    /// The loopback listener could not be bound.
    #[error("binding the fault proxy's loopback listener")]
    Bind(#[source] std::io::Error),
    /// The proxy was given no target.
    #[error("a fault proxy needs at least one target")]
    NoTarget,
}

/// A running proxy; dropping it stops accepting and ends every connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct Shared {
    mode: watch::Sender<Mode>,
    targets: Mutex<Vec<SocketAddr>>,
    open: AtomicUsize,
    accepted: AtomicUsize,
}

impl FaultProxy {
    /// Starts a proxy to `target` on a free loopback port, in [`Mode::Pass`].
    pub async fn start(target: SocketAddr) -> Result<Self, FaultProxyError> {
        Self::start_to_any(vec![target]).await
    }

    /// Starts a proxy in [`Mode::Pass`] that sends each new connection to the first of
    /// `targets` that accepts it.
    pub async fn start_to_any(targets: Vec<SocketAddr>) -> Result<Self, FaultProxyError> {
        if targets.is_empty() {
            return Err(FaultProxyError::NoTarget);
        }
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(FaultProxyError::Bind)?;
        let addr = listener.local_addr().map_err(FaultProxyError::Bind)?;
        let (mode, _) = watch::channel(Mode::Pass);
        let shared = Arc::new(Shared {
            mode,
            targets: Mutex::new(targets),
            open: AtomicUsize::new(0),
            accepted: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Self {
            addr,
            shared,
            accept,
        })
    }

    /// The address clients connect to, `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The mode in force.
    pub fn mode(&self) -> Mode {
        *self.shared.mode.borrow()
    }

    /// Switches mode, for open connections and new ones alike.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.mode.send_replace(mode);
    }

    /// Replaces the targets new connections go to (open ones stay where they are).
    pub fn set_targets(&self, targets: Vec<SocketAddr>) {
        if !targets.is_empty() {
            *self.targets_guard() = targets;
        }
    }

    /// Connections currently relayed.
    pub fn open_connections(&self) -> usize {
        self.shared.open.load(Ordering::Acquire)
    }

    /// Connections accepted since the start (including those reset at once).
    pub fn accepted_connections(&self) -> usize {
        self.shared.accepted.load(Ordering::Acquire)
    }

    fn targets_guard(&self) -> std::sync::MutexGuard<'_, Vec<SocketAddr>> {
        self.shared
            .targets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Every relay ends on Reset; none outlives the proxy.
        self.shared.mode.send_replace(Mode::Reset);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::AcqRel);
        if *shared.mode.borrow() == Mode::Reset {
            reset(&client);
            continue;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let targets = shared
                .targets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let Some(upstream) = connect_any(&targets).await else {
                // Nothing listens behind the proxy: the client sees what it would have
                // seen connecting directly, a refused (reset) connection.
                reset(&client);
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            shared.open.fetch_add(1, Ordering::AcqRel);
            relay(client, upstream, shared.mode.subscribe()).await;
            shared.open.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn connect_any(targets: &[SocketAddr]) -> Option<TcpStream> {
    for target in targets {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
        {
            return Some(stream);
        }
    }
    None
}

/// Makes the next close of `stream` send RST instead of FIN.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Relays between `client` and `upstream` in both directions until either side closes or
/// the mode becomes [`Mode::Reset`].
async fn relay(client: TcpStream, upstream: TcpStream, mode: watch::Receiver<Mode>) {
    let client = Arc::new(client);
    let upstream = Arc::new(upstream);
    let (done_tx, done) = watch::channel(false);
    let forward = pump(
        client.clone(),
        upstream.clone(),
        mode.clone(),
        done.clone(),
        done_tx.clone(),
    );
    let backward = pump(upstream.clone(), client.clone(), mode, done, done_tx);
    let _ = tokio::join!(forward, backward);
    // Both pumps have dropped their handles; these are the last, so the sockets close
    // here (with RST if a pump set zero linger).
}

/// One direction: reads from `from`, writes to `to`, as the mode says. Ends when a side
/// closes or fails (telling the other direction through `done`), or on `Reset`.
async fn pump(
    from: Arc<TcpStream>,
    to: Arc<TcpStream>,
    mut mode: watch::Receiver<Mode>,
    mut done: watch::Receiver<bool>,
    done_tx: watch::Sender<bool>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let current = *mode.borrow_and_update();
        match current {
            Mode::Reset => {
                reset(&from);
                reset(&to);
                break;
            }
            Mode::Blackhole => {
                tokio::select! {
                    changed = mode.changed() => if changed.is_err() { break },
                    _ = done.wait_for(|d| *d) => break,
                }
            }
            Mode::Pass | Mode::Delay(_) => {
                let n = tokio::select! {
                    read = read_some(&from, &mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    },
                    changed = mode.changed() => {
                        if changed.is_err() { break }
                        continue;
                    }
                    _ = done.wait_for(|d| *d) => break,
                };
                if !deliver(&to, &buf[..n], &mut mode, &mut done).await {
                    if *mode.borrow() == Mode::Reset {
                        reset(&from);
                        reset(&to);
                    }
                    break;
                }
            }
        }
    }
    done_tx.send_replace(true);
}

/// Writes `bytes` to `to` after the delay the mode asks for, holding them while the mode
/// is `Blackhole`. False when the connection is to end (reset, closed, failed).
async fn deliver(
    to: &TcpStream,
    bytes: &[u8],
    mode: &mut watch::Receiver<Mode>,
    done: &mut watch::Receiver<bool>,
) -> bool {
    let arrived = tokio::time::Instant::now();
    loop {
        let current = *mode.borrow_and_update();
        let due = match current {
            Mode::Reset => return false,
            Mode::Pass => arrived,
            Mode::Delay(d) => arrived + d,
            Mode::Blackhole => {
                tokio::select! {
                    changed = mode.changed() => if changed.is_err() { return false },
                    _ = done.wait_for(|d| *d) => return false,
                }
                continue;
            }
        };
        tokio::select! {
            () = tokio::time::sleep_until(due) => {}
            changed = mode.changed() => {
                if changed.is_err() { return false }
                continue;
            }
            _ = done.wait_for(|d| *d) => return false,
        }
        return tokio::select! {
            written = write_all(to, bytes) => written.is_ok(),
            changed = mode.changed() => {
                // A write blocked on a peer that does not read; Reset must still win.
                changed.is_ok() && *mode.borrow() != Mode::Reset && write_all(to, bytes).await.is_ok()
            }
        };
    }
}

async fn read_some(from: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        from.readable().await?;
        match from.try_read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

async fn write_all(to: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        to.writable().await?;
        match to.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An echo server on loopback; returns its address.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg).await?;
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await?;
        Ok(back)
    }

    /// Waits (bounded) for the proxy to count `n` relayed connections.
    async fn wait_open(proxy: &FaultProxy, n: usize) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while proxy.open_connections() != n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("connection count reached");
    }

    #[tokio::test]
    async fn pass_forwards_both_ways() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"hello").await.unwrap(), b"hello");
        let big = vec![7u8; 200_000];
        assert_eq!(roundtrip(&mut s, &big).await.unwrap(), big);
        assert_eq!(proxy.open_connections(), 1);
    }

    #[tokio::test]
    async fn delay_holds_each_chunk_back_on_an_open_connection() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"before").await.unwrap(), b"before");
        proxy.set_mode(Mode::Delay(Duration::from_millis(150)));
        let started = Instant::now();
        assert_eq!(roundtrip(&mut s, b"slow").await.unwrap(), b"slow");
        // Delayed on the way there and on the way back.
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
        proxy.set_mode(Mode::Pass);
        assert_eq!(roundtrip(&mut s, b"after").await.unwrap(), b"after");
    }

    #[tokio::test]
    async fn blackhole_keeps_streams_open_silently_and_heals_without_loss() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"one").await.unwrap(), b"one");
        proxy.set_mode(Mode::Blackhole);
        s.write_all(b"two").await.unwrap();
        let mut back = [0u8; 3];
        let silent =
            tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut back)).await;
        assert!(silent.is_err(), "nothing may come back through a blackhole");
        // New connections are accepted and stay silent too.
        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        fresh.write_all(b"new").await.unwrap();
        let silent =
            tokio::time::timeout(Duration::from_millis(200), fresh.read_exact(&mut back)).await;
        assert!(silent.is_err());
        wait_open(&proxy, 2).await;
        proxy.set_mode(Mode::Pass);
        // What was sent during the partition arrives once it heals.
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&back, b"two");
        tokio::time::timeout(Duration::from_secs(5), fresh.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&back, b"new");
    }

    #[tokio::test]
    async fn reset_ends_open_connections_with_rst_and_refuses_new_ones() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"one").await.unwrap(), b"one");
        // A connection idle in a blocking read is reset too.
        let mut buf = [0u8; 1];
        proxy.set_mode(Mode::Reset);
        let err = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the reset arrives at once")
            .expect_err("an RST, not a clean end");
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
        wait_open(&proxy, 0).await;

        let mut fresh = TcpStream::connect(proxy.addr()).await.unwrap();
        let refused = tokio::time::timeout(Duration::from_secs(5), roundtrip(&mut fresh, b"x"))
            .await
            .expect("the refusal arrives at once");
        assert!(refused.is_err(), "{refused:?}");

        proxy.set_mode(Mode::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut again, b"back").await.unwrap(), b"back");
    }

    #[tokio::test]
    async fn new_connections_go_to_the_first_target_that_accepts() {
        // A port nothing listens on, then a live echo server.
        let dead = {
            let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
            l.local_addr().unwrap()
        };
        let live = echo_server().await;
        let proxy = FaultProxy::start_to_any(vec![dead, live]).await.unwrap();
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut s, b"hi").await.unwrap(), b"hi");

        proxy.set_targets(vec![dead]);
        let mut nowhere = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(roundtrip(&mut nowhere, b"x").await.is_err());
        assert!(matches!(
            FaultProxy::start_to_any(Vec::new()).await,
            Err(FaultProxyError::NoTarget)
        ));
    }
}
