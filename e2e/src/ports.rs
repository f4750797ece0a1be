//! Free loopback ports for testbed components.
//!
//! The kernel chooses a port when a socket binds `127.0.0.1:0`; the socket is closed again
//! and the port handed to the component. Ports handed out once are remembered so that two
//! components of one process never get the same port.

use std::collections::HashSet;
use std::io;
use std::net::TcpListener;
use std::sync::{LazyLock, Mutex};

static HANDED_OUT: LazyLock<Mutex<HashSet<u16>>> = LazyLock::new(|| Mutex::new(HashSet::new()));

/// Attempts before giving up when the kernel keeps returning ports handed out before.
const ATTEMPTS: usize = 64;

/// Returns a loopback TCP port that was free a moment ago and was not handed out before
/// by this process.
pub fn free_port() -> io::Result<u16> {
    for _ in 0..ATTEMPTS {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let port = listener.local_addr()?.port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port)
        {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no fresh loopback port found",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_never_handed_out_twice() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
    }
}
