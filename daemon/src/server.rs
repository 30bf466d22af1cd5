//! The socket and the connections. One thread accepts, one reads and one writes per
//! connection, and one owns the scheduler: a program that sends half a frame and stalls, or
//! stops reading its commands, holds up only its own threads.

use crate::live::{Command, ConnId, LaunchInfo, Live};
use crate::place::Placement;
use crate::protocol::{read_frame, write_msg, ClientMsg, FrameError, ServerMsg};
use std::collections::HashMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub policy: String,
    /// Also let this group's members connect (mode 0660); otherwise only the owner (0600).
    pub group: Option<String>,
    pub gpus: usize,
    pub sms: u32,
    pub quantum_us: f64,
    pub default_estimate_us: f64,
    /// The preemption cost the policies assume until the daemon has measured one (µs).
    pub preempt_prior_us: f64,
    /// `--policy reserve`: how many SMs it holds back (none: `reserve::DEFAULT_RESERVE_SMS`).
    pub reserve_sms: Option<u32>,
    /// Says on stderr who connects and leaves.
    pub verbose: bool,
    /// What to do with programs whose GPU time-slices between processes' contexts (no MPS).
    pub contexts: Contexts,
}

/// Programs that run in CUDA contexts of their own (no MPS; their launches say `mps: false`).
/// The GPU time-slices between the contexts, so a kernel's latency is its context's turn
/// whatever the daemon does, and a kernel the daemon preempts keeps a parked block that still
/// takes its context's slices: on two H200s, `hpf` over two batch processes per GPU left the
/// urgent kernels as slow as no scheduler and cost the batch two thirds of its throughput
/// (docs/daemon.md, "Measured: several GPUs").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contexts {
    /// Schedule them like any other (said once per GPU on stderr).
    Steer,
    /// Leave them alone: their launches are not scheduled, and they are told `lean`.
    Leave,
}

/// Who is at the other end of a connection (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
}

fn peer(stream: &UnixStream) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
    })
}

fn group_id(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: getgrnam reads a NUL-terminated name; the result is read before any other call.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    if g.is_null() {
        return Err(io::Error::other(format!("no group named `{name}`")));
    }
    // SAFETY: not null, as checked.
    Ok(unsafe { (*g).gr_gid })
}

/// Binds the socket with its permissions set from the start (no moment where others could
/// connect). A socket file nobody listens on is left from a crash and is replaced; one that
/// answers belongs to a running daemon and is an error.
pub fn bind(cfg: &Config) -> io::Result<UnixListener> {
    if cfg.socket.exists() {
        if UnixStream::connect(&cfg.socket).is_ok() {
            return Err(io::Error::other(format!(
                "a daemon already listens on {}",
                cfg.socket.display()
            )));
        }
        std::fs::remove_file(&cfg.socket)?;
    }
    let gid = cfg.group.as_deref().map(group_id).transpose()?;
    // SAFETY: umask only changes this process's file-creation mask; restored below.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&cfg.socket);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound?;
    if let Some(gid) = gid {
        let path = std::ffi::CString::new(cfg.socket.as_os_str().as_encoded_bytes())
            .map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated path; uid -1 leaves the owner as it is.
        if unsafe { libc::chown(path.as_ptr(), u32::MAX, gid) } != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_file(&cfg.socket);
            return Err(e);
        }
        std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(0o660))?;
    }
    Ok(listener)
}

enum Input {
    Connected(ConnId, Peer, Sender<ServerMsg>),
    Msg(ConnId, ClientMsg),
    Gone(ConnId),
}

/// Serves until `stop` is set, then removes the socket.
pub fn serve(cfg: &Config, stop: &AtomicBool) -> io::Result<()> {
    let make = {
        let cfg = cfg.clone();
        move || {
            // One engine per GPU: each GPU's policy sees the kernels of the programs on it.
            (0..cfg.gpus.max(1))
                .map(|_| {
                    let live = Live::new(
                        &cfg.policy,
                        1,
                        cfg.sms,
                        cfg.quantum_us,
                        cfg.default_estimate_us,
                    )?
                    .with_preempt_prior(cfg.preempt_prior_us)?;
                    match cfg.reserve_sms {
                        Some(n) => live.with_reserve(n),
                        None => Ok(live),
                    }
                })
                .collect::<Result<Vec<Live>, String>>()
        }
    };
    // Policies are not `Send`: checked here, made again on the scheduler's thread.
    make().map_err(io::Error::other)?;
    let listener = bind(cfg)?;
    listener.set_nonblocking(true)?;
    let (tx, rx) = channel::<Input>();
    let scheduler = std::thread::Builder::new()
        .name("cupreemptd-scheduler".into())
        .spawn({
            let verbose = cfg.verbose;
            let contexts = cfg.contexts;
            move || {
                if let Ok(gpus) = make() {
                    schedule(gpus, rx, verbose, contexts)
                }
            }
        })?;
    let mut next: ConnId = 1;
    // The open connections, to close at the end: each one's reader holds a sender to the
    // scheduler, which ends only once every sender is gone.
    let open: Open = Default::default();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(());
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = connect(stream, next, &tx, &open) {
                    eprintln!("cupreemptd: connection {next} refused: {e}");
                }
                next += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Until a program connects (then at once), or 50 ms pass (a look at `stop`).
                let mut fd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; the listener outlives the call.
                unsafe { libc::poll(&mut fd, 1, 50) };
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    let _ = std::fs::remove_file(&cfg.socket);
    drop(tx);
    // Programs still connected see the daemon go away (and run unscheduled, docs/daemon.md).
    if let Ok(open) = open.lock() {
        for stream in open.values() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }
    let _ = scheduler.join();
    result
}

/// The open connections, by id (each one's reader removes its own when it ends).
type Open = std::sync::Arc<std::sync::Mutex<HashMap<ConnId, UnixStream>>>;

fn connect(stream: UnixStream, conn: ConnId, tx: &Sender<Input>, open: &Open) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let who = peer(&stream)?;
    if let Ok(mut o) = open.lock() {
        o.insert(conn, stream.try_clone()?);
    }
    let open = open.clone();
    let (out_tx, out_rx) = channel::<ServerMsg>();
    tx.send(Input::Connected(conn, who, out_tx.clone()))
        .map_err(|_| io::Error::other("the scheduler has stopped"))?;
    let mut writer = stream.try_clone()?;
    std::thread::Builder::new()
        .name(format!("cupreemptd-out-{conn}"))
        .spawn(move || {
            for msg in out_rx {
                if write_msg(&mut writer, &msg).is_err() {
                    break;
                }
            }
        })?;
    let tx = tx.clone();
    let mut reader = stream;
    std::thread::Builder::new()
        .name(format!("cupreemptd-in-{conn}"))
        .spawn(move || {
            loop {
                match read_frame(&mut reader) {
                    Ok(body) => match serde_json::from_slice::<ClientMsg>(&body) {
                        Ok(m) => {
                            if tx.send(Input::Msg(conn, m)).is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            let _ = out_tx.send(ServerMsg::Error {
                                message: format!("not a message: {e}"),
                            });
                        }
                    },
                    Err(FrameError::BadLength(n)) => {
                        let _ = out_tx.send(ServerMsg::Error {
                            message: format!(
                                "a frame of {n} bytes (1 to {} allowed); closing",
                                crate::protocol::MAX_FRAME
                            ),
                        });
                        // Let the writer send it, then end the connection.
                        std::thread::sleep(Duration::from_millis(50));
                        let _ = reader.shutdown(std::net::Shutdown::Both);
                        break;
                    }
                    Err(FrameError::Closed { .. }) | Err(FrameError::Io(_)) => break,
                }
            }
            if let Ok(mut o) = open.lock() {
                o.remove(&conn);
            }
            let _ = tx.send(Input::Gone(conn));
        })?;
    Ok(())
}

/// The scheduler's thread: every program's messages in the order they came, each GPU's policy
/// (`gpus`, one `Live` each) on the kernels of the programs on that GPU, and the placements.
fn schedule(gpus: Vec<Live>, rx: Receiver<Input>, verbose: bool, contexts: Contexts) {
    let start = Instant::now();
    let now = || start.elapsed().as_secs_f64() * 1e6;
    let mut s = Scheduler::new(gpus, verbose, contexts);
    loop {
        let deadline = s
            .gpus
            .iter()
            .filter_map(Live::next_deadline)
            .reduce(f64::min);
        let input = match deadline {
            Some(at) => {
                let wait = Duration::from_secs_f64(((at - now()) / 1e6).max(0.0));
                match rx.recv_timeout(wait) {
                    Ok(i) => Some(i),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            None => match rx.recv() {
                Ok(i) => Some(i),
                Err(_) => return,
            },
        };
        let t = now();
        let cmds = match input {
            None => s.gpus.iter_mut().flat_map(|g| g.expire(t)).collect(),
            Some(Input::Connected(conn, who, out)) => {
                if verbose {
                    eprintln!(
                        "cupreemptd: connection {conn}: pid {}, uid {}",
                        who.pid, who.uid
                    );
                }
                s.conns.insert(conn, (who, out));
                Vec::new()
            }
            Some(Input::Gone(conn)) => s.gone(t, conn),
            Some(Input::Msg(conn, msg)) => {
                if verbose && !matches!(msg, ClientMsg::Progress { .. }) {
                    eprintln!("cupreemptd: {t:.0} us: connection {conn}: {msg:?}");
                }
                s.handle(t, conn, msg)
            }
        };
        if verbose {
            for c in &cmds {
                eprintln!(
                    "cupreemptd: {t:.0} us: to connection {}: {:?}",
                    c.conn, c.msg
                );
            }
        }
        for c in cmds {
            if let Some((_, out)) = s.conns.get(&c.conn) {
                let _ = out.send(c.msg);
            }
        }
    }
}

/// What the scheduler's thread keeps between inputs.
struct Scheduler {
    gpus: Vec<Live>,
    conns: HashMap<ConnId, (Peer, Sender<ServerMsg>)>,
    /// The GPU each connection's launches are on (from its first launch).
    on_gpu: HashMap<ConnId, usize>,
    placement: Placement,
    /// `Contexts::Leave`: connections left alone (their kernels are nobody's business here).
    unsteered: std::collections::HashSet<ConnId>,
    /// GPUs on which a program without MPS has been said.
    told_contexts: std::collections::HashSet<usize>,
    verbose: bool,
    contexts: Contexts,
}

impl Scheduler {
    fn new(gpus: Vec<Live>, verbose: bool, contexts: Contexts) -> Scheduler {
        Scheduler {
            placement: Placement::new(gpus.len()),
            gpus,
            conns: HashMap::new(),
            on_gpu: HashMap::new(),
            unsteered: Default::default(),
            told_contexts: Default::default(),
            verbose,
            contexts,
        }
    }

    /// A program's message at `t`: the commands it gives (an error message to the program
    /// where it is wrong).
    fn handle(&mut self, t: f64, conn: ConnId, msg: ClientMsg) -> Vec<Command> {
        let lean_now = self.note_contexts(conn, &msg);
        let demand = match &msg {
            ClientMsg::Launch { id, .. } => Some((true, *id)),
            ClientMsg::Finished { id } => Some((false, *id)),
            _ => None,
        };
        let answer = self.message(t, conn, msg, lean_now);
        if let (Ok(_), Some((launched, id))) = (&answer, demand) {
            self.note_demand(t, conn, id, launched);
        }
        answer.unwrap_or_else(|message| {
            vec![Command {
                conn,
                msg: ServerMsg::Error { message },
            }]
        })
    }

    /// The pid of a connection's process (0 where unknown).
    fn pid(&self, conn: ConnId) -> i32 {
        self.conns.get(&conn).map_or(0, |(who, _)| who.pid)
    }

    /// A kernel launched or finished, for the placement's demands (place.rs).
    fn note_demand(&mut self, t: f64, conn: ConnId, id: u64, launched: bool) {
        let pid = self.pid(conn);
        if launched {
            self.placement.launched(pid, conn, id, t);
        } else {
            self.placement.finished(pid, conn, id, t);
        }
    }

    /// A connection closed: its placement ends, and its kernels are done for its GPU's policy.
    fn gone(&mut self, t: f64, conn: ConnId) -> Vec<Command> {
        self.unsteered.remove(&conn);
        let pid = self.pid(conn);
        if let Some((who, _)) = self.conns.remove(&conn) {
            if self.verbose {
                eprintln!("cupreemptd: connection {conn} (pid {}) closed", who.pid);
            }
        }
        if let Some(p) = self.placement.gone(conn, pid, t) {
            if self.verbose {
                eprintln!(
                    "cupreemptd: {t:.0} us: the program placed by connection {conn} \
                     has ended; GPU {} (programs per GPU now {:?})",
                    p.gpu,
                    self.placement.counts()
                );
            }
        }
        match self.on_gpu.remove(&conn) {
            Some(g) => self.gpus[g].gone(t, conn),
            None => Vec::new(),
        }
    }

    /// A launch of a program without MPS: said once per GPU; under `Contexts::Leave` its
    /// connection is left alone from then on, and told `lean` (returned).
    fn note_contexts(&mut self, conn: ConnId, msg: &ClientMsg) -> Vec<Command> {
        let ClientMsg::Launch {
            mps: Some(false),
            gpu,
            ..
        } = msg
        else {
            return Vec::new();
        };
        let g = gpu.unwrap_or(0) as usize;
        if self.told_contexts.insert(g) {
            let pid = self.conns.get(&conn).map_or(0, |(who, _)| who.pid);
            eprintln!(
                "cupreemptd: GPU {g}: a program (pid {pid}) runs in a CUDA context of its own \
                 (no MPS): the GPU time-slices between contexts; its launches come with gated \
                 links, so that a kernel preempted here leaves no block to take its context's \
                 slices, up to one preemption per link (docs/daemon.md, \"Programs without \
                 MPS\"); {}",
                match self.contexts {
                    Contexts::Steer => {
                        "scheduling such programs all the same (--contexts leave leaves them alone)"
                    }
                    Contexts::Leave => "leaving such programs alone",
                }
            );
        }
        if self.contexts == Contexts::Leave && self.unsteered.insert(conn) {
            return vec![Command {
                conn,
                msg: ServerMsg::Lean { on: true },
            }];
        }
        Vec::new()
    }

    /// A program's message: to its GPU's policy, or the placement. `lean_now`: what
    /// `note_contexts` said to a program it now leaves alone.
    fn message(
        &mut self,
        t: f64,
        conn: ConnId,
        msg: ClientMsg,
        lean_now: Vec<Command>,
    ) -> Result<Vec<Command>, String> {
        let n = self.gpus.len();
        // The GPU of a connection's kernels: a message about a kernel of a connection that has
        // launched none is answered as the policy answers an unknown id.
        let of = |on_gpu: &HashMap<ConnId, usize>, id: u64| {
            on_gpu
                .get(&conn)
                .copied()
                .ok_or_else(|| format!("no kernel {id} of this connection is running"))
        };
        match msg {
            // Messages about kernels of a program left alone change nothing.
            ClientMsg::Launch { .. }
            | ClientMsg::Progress { .. }
            | ClientMsg::Yielded { .. }
            | ClientMsg::Finished { .. }
                if self.unsteered.contains(&conn) =>
            {
                Ok(lean_now)
            }
            ClientMsg::Launch {
                id,
                kernel,
                tasks,
                priority,
                weight,
                estimate_us,
                features,
                kept_off,
                gpu,
                mps: _,
            } => {
                let g = gpu.unwrap_or(0) as usize;
                match self.on_gpu.get(&conn) {
                    _ if g >= n => Err(format!(
                        "GPU {g}: the daemon schedules {n} GPU(s), 0 to {}",
                        n - 1
                    )),
                    Some(&other) if other != g => Err(format!(
                        "GPU {g}: this connection's launches are on GPU {other}"
                    )),
                    _ => {
                        self.on_gpu.insert(conn, g);
                        let info = LaunchInfo {
                            kernel: &kernel,
                            tasks,
                            priority,
                            weight,
                            estimate_us,
                            features,
                            kept_off: &kept_off,
                        };
                        self.gpus[g].launch(t, conn, id, &info)
                    }
                }
            }
            ClientMsg::Place { priority } => {
                // Only for the log: `place` weighs the demands itself.
                let demands = if self.verbose {
                    self.placement.demands(t)
                } else {
                    Vec::new()
                };
                let g = self.placement.place(conn, priority, self.pid(conn), t)?;
                if self.verbose {
                    eprintln!(
                        "cupreemptd: {t:.0} us: connection {conn} placed on GPU {g} (priority \
                         {priority}; demand per GPU before it {demands:.2?}; programs per GPU \
                         now {:?})",
                        self.placement.counts()
                    );
                }
                Ok(vec![Command {
                    conn,
                    msg: ServerMsg::Placed {
                        gpu: g as u32,
                        gpus: n as u32,
                    },
                }])
            }
            ClientMsg::Progress { id, done } => of(&self.on_gpu, id)
                .and_then(|g| self.gpus[g].progress(conn, id, done))
                .map(|()| Vec::new()),
            ClientMsg::Yielded { id } => {
                of(&self.on_gpu, id).and_then(|g| self.gpus[g].yielded(t, conn, id))
            }
            // Measurements for the log (switch gaps), nothing to decide.
            ClientMsg::GpuTimes { .. } => Ok(Vec::new()),
            ClientMsg::Finished { id } => {
                of(&self.on_gpu, id).and_then(|g| self.gpus[g].finished(t, conn, id))
            }
        }
    }
}

/// The socket path's folder must exist; a clear error otherwise.
pub fn check_socket_path(p: &Path) -> Result<(), String> {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.is_dir() => {
            Err(format!("{}: no such folder", d.display()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed_on(cmds: &[Command]) -> u32 {
        match cmds {
            [Command {
                msg: ServerMsg::Placed { gpu, .. },
                ..
            }] => *gpu,
            other => panic!("expected a placement, got {other:?}"),
        }
    }

    /// Two programs, each placed on one connection and launching on another from the same
    /// process (as `cupreemptd run` and the program's runtime do): the one whose kernel stays
    /// outstanding makes its GPU the busier, and the next batch program goes to the other GPU,
    /// which the count alone would not choose.
    #[test]
    fn launches_count_toward_their_process_placement() {
        let gpus = (0..2)
            .map(|_| Live::new("hpf", 1, 132, 2000.0, 1000.0).unwrap())
            .collect();
        let mut s = Scheduler::new(gpus, false, Contexts::Steer);
        let mut keep = Vec::new();
        for (conn, pid) in [(1, 101), (11, 101), (2, 102), (12, 102), (3, 103)] {
            let (tx, rx) = channel();
            keep.push(rx);
            s.conns.insert(conn, (Peer { pid, uid: 0 }, tx));
        }
        let launch = |id: u64, gpu: u32| ClientMsg::Launch {
            id,
            kernel: "k".into(),
            tasks: 1000,
            priority: 0,
            weight: 1.0,
            estimate_us: None,
            features: None,
            kept_off: Vec::new(),
            gpu: Some(gpu),
            mps: Some(true),
        };
        assert_eq!(
            placed_on(&s.handle(0.0, 1, ClientMsg::Place { priority: 0 })),
            0
        );
        assert_eq!(
            placed_on(&s.handle(0.0, 2, ClientMsg::Place { priority: 0 })),
            1
        );
        // Program 101's kernel on GPU 0 is outstanding from 0 on; 102's on GPU 1 runs 0.1 s.
        s.handle(0.0, 11, launch(1, 0));
        s.handle(100_000.0, 12, launch(1, 1));
        s.handle(200_000.0, 12, ClientMsg::Finished { id: 1 });
        let d = s.placement.demands(1_000_000.0);
        assert!(d[0] > 0.9 && d[1] < 0.2, "{d:?}");
        assert_eq!(
            placed_on(&s.handle(1_000_000.0, 3, ClientMsg::Place { priority: 0 })),
            1
        );
    }
}
