//! Looking at processes through `/proc`: is the daemon alive, which processes does its
//! session still hold.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// The hidden subcommand the daemon runs as; `down` checks a pid's command line for it
/// before signalling, so a reused pid is never killed.
pub const DAEMON_SUBCOMMAND: &str = "__daemon";

/// State letter, process group and session of a process, from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(char, u32, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces or parentheses.
    let rest = text.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    Some((state, pgrp, session))
}

/// Whether `pid` is a live process (not a zombie).
pub fn alive(pid: u32) -> bool {
    matches!(stat(pid), Some((state, _, _)) if state != 'Z' && state != 'X')
}

/// Whether `pid` is a live sandbox daemon (its command line names the daemon subcommand).
pub fn is_daemon(pid: u32) -> bool {
    if pid == 0 || !alive(pid) {
        return false;
    }
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
        cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == DAEMON_SUBCOMMAND.as_bytes())
    })
}

/// Live processes in session `sid`: the daemon (which leads its own session) and every
/// process it started, whichever process group they moved to.
pub fn session_members(sid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            matches!(stat(*pid), Some((state, _, session))
                if session == sid && state != 'Z' && state != 'X')
        })
        .collect();
    pids.sort_unstable();
    pids
}

fn nix_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .map(Pid::from_raw)
}

/// Sends `signal` to one process.
pub fn signal(pid: u32, signal: Signal) -> nix::Result<()> {
    match nix_pid(pid) {
        Some(p) => kill(p, signal),
        None => Err(nix::errno::Errno::ESRCH),
    }
}

/// SIGKILLs every process left in session `sid`, group by group.
pub fn kill_session(sid: u32) {
    for pid in session_members(sid) {
        if let Some((_, pgrp, _)) = stat(pid)
            && let Some(group) = nix_pid(pgrp)
        {
            let _ = killpg(group, Signal::SIGKILL);
        }
        if let Some(p) = nix_pid(pid) {
            let _ = kill(p, Signal::SIGKILL);
        }
    }
}

/// Waits until `done` holds or `timeout` passes, checking every 50 ms; returns whether it
/// held. For processes going away, which no notification announces to a non-parent.
pub fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_in_its_own_session() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(!is_daemon(me), "a test binary is no sandbox daemon");
        let (_, _, session) = stat(me).unwrap();
        assert!(session_members(session).contains(&me));
    }

    #[test]
    fn a_reaped_child_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
    }
}
