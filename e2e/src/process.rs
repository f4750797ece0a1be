//! Supervision of the testbed's processes.
//!
//! Each component runs in its own process group with stdout and stderr in a log file. The
//! [`Supervisor`] stops every group when asked or dropped (SIGTERM, then SIGKILL after a
//! grace period) and reaps the processes, so nothing is left behind. A watchdog shell
//! process learns each process group as it starts; if the supervising process dies
//! without dropping the supervisor (killed, or a testbed kept in a `static`), the
//! watchdog sees its input close and stops the groups itself.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

/// How long processes get to exit after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A process group stopped with SIGSTOP, continued with SIGCONT when dropped, so a failing
/// test never leaves a component frozen (the supervisor starts each process as its own
/// group, so the group is the component).
pub struct Frozen(Pid);

impl Frozen {
    /// Stops the process group led by `pid`.
    pub fn freeze(pid: u32) -> Result<Self> {
        let pid = Pid::from_raw(i32::try_from(pid)?);
        killpg(pid, Signal::SIGSTOP).context("SIGSTOP")?;
        Ok(Self(pid))
    }

    /// Continues the group now (what dropping it does).
    pub fn thaw(self) {}
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = killpg(self.0, Signal::SIGCONT);
    }
}

/// Lines of a log printed when a component fails or a test panics.
pub const DEFAULT_TAIL_LINES: usize = 40;

/// The watchdog: reads `pgid N` (a group started) and `reaped N` (its leader was reaped, so
/// the id may be reused) lines until `disarm` (normal stop) or end of input (the supervising
/// process is gone), then stops every group still listed and removes the directory given
/// as `$1`, if any.
const WATCHDOG_SCRIPT: &str = r#"
trap '' INT HUP TERM
groups=
while read -r command argument; do
  case "$command" in
    pgid) groups="$groups $argument" ;;
    reaped)
      kept=
      for g in $groups; do [ "$g" = "$argument" ] || kept="$kept $g"; done
      groups=$kept
      ;;
    disarm) exit 0 ;;
  esac
done
for g in $groups; do kill -s TERM -- "-$g" 2>/dev/null; done
i=0
while [ "$i" -lt 30 ]; do
  alive=
  for g in $groups; do kill -s 0 -- "-$g" 2>/dev/null && alive=1; done
  [ -z "$alive" ] && break
  sleep 0.1
  i=$((i + 1))
done
for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
[ -n "$1" ] && rm -rf -- "$1"
exit 0
"#;

/// A handle to one supervised process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessId(usize);

/// What the supervisor knows about one process.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// Component name, e.g. `member-1/kube-apiserver`.
    pub name: String,
    /// Process id, which is also its process group id.
    pub pid: u32,
    /// File holding the process's stdout and stderr.
    pub log: PathBuf,
}

struct Supervised {
    info: ProcessInfo,
    child: Child,
    exit: Option<ExitStatus>,
}

struct Watchdog {
    child: Child,
    input: Option<ChildStdin>,
}

/// Starts processes in their own process groups and stops them all on drop.
pub struct Supervisor {
    log_dir: PathBuf,
    processes: Mutex<Vec<Supervised>>,
    watchdog: Mutex<Option<Watchdog>>,
}

impl Supervisor {
    /// Creates a supervisor writing logs to `log_dir`. When the supervising process dies
    /// without stopping the supervisor, the watchdog stops every process and removes
    /// `remove_on_abandon` if given.
    pub fn new(log_dir: &Path, remove_on_abandon: Option<&Path>) -> Result<Self> {
        fs::create_dir_all(log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("accord-testbed-watchdog")
            .arg(remove_on_abandon.map(Path::as_os_str).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so a terminal's Ctrl-C reaches the test process only and the
            // watchdog lives on to clean up after it.
            .process_group(0);
        let mut child = command
            .spawn()
            .context("starting the testbed watchdog (sh)")?;
        let input = child.stdin.take();
        Ok(Self {
            log_dir: log_dir.to_path_buf(),
            processes: Mutex::new(Vec::new()),
            watchdog: Mutex::new(Some(Watchdog { child, input })),
        })
    }

    /// Directory holding the component logs.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Starts `command` as component `name` in a new process group, with stdin closed and
    /// stdout and stderr appended to `<log_dir>/<name>.log` (slashes become dashes).
    pub fn spawn(&self, name: &str, mut command: Command) -> Result<ProcessId> {
        let log = self.log_dir.join(format!("{}.log", name.replace('/', "-")));
        let file = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0);
        let program = command.get_program().to_string_lossy().into_owned();
        let child = command
            .spawn()
            .with_context(|| format!("starting {name} ({program})"))?;
        let pid = child.id();
        self.tell_watchdog(&format!("pgid {pid}\n"));
        tracing::debug!(component = name, pid, "started");
        let mut processes = self.lock();
        processes.push(Supervised {
            info: ProcessInfo {
                name: name.to_string(),
                pid,
                log,
            },
            child,
            exit: None,
        });
        Ok(ProcessId(processes.len() - 1))
    }

    /// Returns an error carrying the log tail if the process has exited.
    pub fn ensure_running(&self, id: ProcessId) -> Result<()> {
        let mut processes = self.lock();
        let process = &mut processes[id.0];
        match self.poll_exit(process)? {
            None => Ok(()),
            Some(status) => bail!(
                "{} exited ({status}); last lines of {}:\n{}",
                process.info.name,
                process.info.log.display(),
                tail(&process.info.log, DEFAULT_TAIL_LINES)
            ),
        }
    }

    /// The exit status of a process, if it has exited.
    pub fn exit_status(&self, id: ProcessId) -> Result<Option<ExitStatus>> {
        let mut processes = self.lock();
        Ok(self.poll_exit(&mut processes[id.0])?)
    }

    /// Runs `command` as component `name` to completion, failing with its log tail if it
    /// exits unsuccessfully or outlives `timeout`.
    pub async fn run_to_completion(
        &self,
        name: &str,
        command: Command,
        timeout: Duration,
    ) -> Result<()> {
        let id = self.spawn(name, command)?;
        let status = crate::wait::until(&format!("{name} to finish"), timeout, || async {
            Ok(match self.exit_status(id)? {
                Some(status) => crate::wait::Check::Ready(status),
                None => crate::wait::Check::NotYet("still running".into()),
            })
        })
        .await?;
        if !status.success() {
            let info = self.info(id);
            bail!(
                "{name} failed ({status}); last lines of {}:\n{}",
                info.log.display(),
                tail(&info.log, DEFAULT_TAIL_LINES)
            );
        }
        Ok(())
    }

    /// What is known about one process.
    pub fn info(&self, id: ProcessId) -> ProcessInfo {
        self.lock()[id.0].info.clone()
    }

    /// Every process started so far that is still running, in start order.
    pub fn running(&self) -> Vec<ProcessInfo> {
        let mut processes = self.lock();
        processes
            .iter_mut()
            .filter_map(|p| {
                let exited = self.poll_exit(p).map_or(true, |status| status.is_some());
                (!exited).then(|| p.info.clone())
            })
            .collect()
    }

    /// Process ids of everything started, including the watchdog and exited processes.
    pub fn all_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.lock().iter().map(|p| p.info.pid).collect();
        if let Some(watchdog) = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            pids.push(watchdog.child.id());
        }
        pids
    }

    /// Renders the last `lines` lines of every component's log.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for process in self.lock().iter() {
            let _ = writeln!(
                out,
                "----- {} (pid {}, {}) -----\n{}",
                process.info.name,
                process.info.pid,
                process.info.log.display(),
                tail(&process.info.log, lines)
            );
        }
        out
    }

    /// Stops every process: SIGTERM to each process group, SIGKILL to groups whose leader
    /// has not exited after the grace period, then SIGKILL to each group once more to catch
    /// children left behind, and reaps everything. Idempotent.
    pub fn stop_all(&self) {
        self.stop_processes(&mut self.lock());
        self.disarm_watchdog();
    }

    /// Stops one process the way [`Supervisor::stop_all`] stops all; e.g. to simulate a
    /// component failing.
    pub fn stop(&self, id: ProcessId) {
        self.stop_processes(std::slice::from_mut(&mut self.lock()[id.0]));
    }

    /// The process started as component `name`, the latest one if several were.
    pub fn find(&self, name: &str) -> Option<ProcessId> {
        self.lock()
            .iter()
            .rposition(|p| p.info.name == name)
            .map(ProcessId)
    }

    /// SIGTERM to each group, SIGKILL to groups whose leader has not exited after the
    /// grace period, then SIGKILL to each group once more to catch children left behind,
    /// and reap.
    fn stop_processes(&self, processes: &mut [Supervised]) {
        for process in processes.iter_mut().rev() {
            if process.exit.is_none() {
                let _ = killpg(pgid(process), Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        for process in processes.iter_mut().rev() {
            if process.exit.is_some() {
                continue;
            }
            // Peek without reaping: while the exited leader is a zombie, its group id
            // cannot be reused, so the final SIGKILL reaches only its own stragglers.
            while !leader_exited(process) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = killpg(pgid(process), Signal::SIGKILL);
            match process.child.wait() {
                Ok(status) => self.reaped(process, status),
                Err(e) => tracing::warn!(component = %process.info.name, "reaping failed: {e}"),
            }
        }
    }

    /// Records a process's exit if it has exited (reaping it).
    fn poll_exit(&self, process: &mut Supervised) -> std::io::Result<Option<ExitStatus>> {
        if process.exit.is_none()
            && let Some(status) = process.child.try_wait()?
        {
            self.reaped(process, status);
        }
        Ok(process.exit)
    }

    /// Records an exit. Once reaped, the process's group id may be reused by an unrelated
    /// process, so the watchdog must forget it.
    fn reaped(&self, process: &mut Supervised, status: ExitStatus) {
        process.exit = Some(status);
        self.tell_watchdog(&format!("reaped {}\n", process.info.pid));
    }

    fn disarm_watchdog(&self) {
        let watchdog = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut watchdog) = watchdog {
            if let Some(mut input) = watchdog.input.take() {
                let _ = input.write_all(b"disarm\n");
            }
            let _ = watchdog.child.wait();
        }
    }

    fn tell_watchdog(&self, line: &str) {
        if let Some(watchdog) = self
            .watchdog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            && let Some(input) = watchdog.input.as_mut()
        {
            let _ = input.write_all(line.as_bytes());
            let _ = input.flush();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Supervised>> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop_all();
    }
}

fn pgid(process: &Supervised) -> Pid {
    Pid::from_raw(i32::try_from(process.info.pid).expect("pids fit in i32"))
}

fn leader_exited(process: &Supervised) -> bool {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pgid(process)), flags) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) => true,
        // Already reaped or not our child: nothing left to wait for.
        Err(_) => true,
    }
}

/// The last `lines` lines of a file, or a note saying why there are none.
pub fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pid` is a live process, waiting briefly for one just killed to go: a
    /// killed grandchild is reaped by init, not by us, a moment later.
    fn alive(pid: u32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let state = fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit(')')
                        .next()
                        .and_then(|rest| rest.split_whitespace().next())
                        .map(str::to_owned)
                });
            let running = matches!(state.as_deref(), Some(s) if s != "Z" && s != "X");
            if !running || Instant::now() >= deadline {
                return running;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn stopping_kills_process_groups_including_their_children() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor::new(dir.path(), None).unwrap();
        let mut command = Command::new("sh");
        // The background child ignores SIGTERM and outlives its group leader.
        command.args(["-c", "(trap '' TERM; exec sleep 300) & echo child $!; wait"]);
        let id = supervisor.spawn("test/sleeper", command).unwrap();
        let log = supervisor.info(id).log;
        let child_pid = loop {
            if let Some(pid) = fs::read_to_string(&log).unwrap().lines().find_map(|l| {
                l.strip_prefix("child ")
                    .map(|p| p.trim().parse::<u32>().unwrap())
            }) {
                break pid;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let pids = supervisor.all_pids();
        supervisor.stop_all();
        assert!(!alive(child_pid), "background child survived");
        for pid in pids {
            assert!(!alive(pid), "pid {pid} survived");
        }
    }

    #[test]
    fn watchdog_stops_processes_when_the_supervisor_is_abandoned() {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor::new(dir.path(), None).unwrap();
        let mut command = Command::new("sleep");
        command.arg("300");
        let id = supervisor.spawn("test/sleep", command).unwrap();
        let pid = supervisor.info(id).pid;
        // Closing the watchdog's input without disarming is what process exit does.
        let mut watchdog = supervisor.watchdog.lock().unwrap().take().unwrap();
        drop(watchdog.input.take());
        watchdog.child.wait().unwrap();
        // The watchdog killed the group; reap the leader so it is gone, not a zombie.
        let deadline = Instant::now() + Duration::from_secs(5);
        while supervisor.exit_status(id).unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            supervisor.exit_status(id).unwrap().is_some(),
            "sleep survived the watchdog"
        );
        assert!(!alive(pid));
    }
}
