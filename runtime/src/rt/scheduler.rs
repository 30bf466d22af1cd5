//! Scheduling by `cupreemptd` (docs/daemon.md): with `CUPREEMPT_SCHEDULER=PATH`, each
//! preemptible launch whose handle the program lets go of (the launch shim does at once) is
//! reported to the daemon listening on PATH, and the daemon's `preempt` and `resume` commands
//! are applied to it. A launch's priority is `CUPREEMPT_PRIORITY` (0-255) where it is set,
//! else its stream's rank above the lowest stream priority (0 for default streams); its weight
//! is `CUPREEMPT_WEIGHT` (default 1).
//!
//! The program never waits for the daemon: launches start before it hears of them, and when it
//! cannot be reached, or goes away, kernels run unscheduled (every preempted one is resumed at
//! once) and the connection is tried again at most once a second, at a later launch. A kernel
//! is never left preempted.

use super::capi::lock;
use super::command::Target;
use super::kernel::Kernel;
use crate::smset::SmSet;
use cupreempt_protocol::{read_frame, write_msg, ClientMsg, ServerMsg};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering as MemOrder};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often tracked kernels are looked at (completion, progress) while there are any: the
/// daemon hears of a kernel's end at most this late.
const POLL: Duration = Duration::from_micros(200);
/// Progress goes to the daemon at most this often per kernel.
const PROGRESS_EVERY: Duration = Duration::from_millis(5);
/// A daemon that could not be reached is tried again after this long.
const RETRY: Duration = Duration::from_secs(1);
/// At exit, how long the program waits for the client thread's last reports.
const EXIT_WAIT: Duration = Duration::from_millis(50);

/// What the scheduler client needs of a launch (a `Kernel`, or a stand-in in tests).
pub(crate) trait Steer: Send + 'static {
    /// Preempts on the SMs `sms` (every SM: `None`) and waits until it has yielded there.
    fn preempt(&mut self, sms: Option<&[u32]>) -> Result<(), String>;
    /// Lets it run on the SMs `sms` again (every SM: `None`).
    fn resume(&mut self, sms: Option<&[u32]>) -> Result<(), String>;
    /// (tasks done, tasks in all).
    fn progress(&self) -> Result<(u64, u64), String>;
    /// As `progress`, from host memory alone (no driver call).
    fn progress_in_host_memory(&self) -> (u64, u64);
    fn is_complete(&self) -> bool;
    /// Whether every task is done, from host memory alone (no driver call).
    fn tasks_done(&self) -> bool;
    /// Whether it is preempted on every SM (nothing of it runs until a resume).
    fn held_everywhere(&self) -> bool;
    /// A name for the daemon's duration model (the same for every launch of one kernel).
    fn name(&self) -> String;
    /// The priority of its stream, 0 for the lowest.
    fn stream_priority(&self) -> u8;
    /// (blocks, threads per block, input bytes, shared bytes) for the daemon's duration model.
    fn features(&self) -> [f64; 4];
    /// (latest yield, latest block entry), GPU clock ns; 0 where none yet.
    fn gpu_stamps(&self) -> (u64, u64);
    /// The SMs it is preempted on now (a launch made under a `keep_off` order starts so).
    fn off_sms(&self) -> Vec<u32>;
    /// Whether its GPU's contexts are shared through MPS (none: unknown).
    fn mps(&self) -> Option<bool>;
}

/// The runtime's target for a daemon's SM list (`None`: every SM).
fn target(sms: Option<&[u32]>) -> Result<Target, String> {
    match sms {
        None => Ok(Target::All),
        Some(ids) => crate::smset::SmSet::from_ids(ids.iter().copied())
            .map(Target::Sms)
            .map_err(|e| e.to_string()),
    }
}

impl Steer for Shared {
    fn preempt(&mut self, sms: Option<&[u32]>) -> Result<(), String> {
        let mut k = lock(self);
        k.preempt(target(sms)?).map_err(|e| e.to_string())?;
        k.wait_yielded().map_err(|e| e.to_string())
    }
    fn resume(&mut self, sms: Option<&[u32]>) -> Result<(), String> {
        lock(self).resume(target(sms)?).map_err(|e| e.to_string())
    }
    fn progress(&self) -> Result<(u64, u64), String> {
        let p = lock(self).progress().map_err(|e| e.to_string())?;
        Ok((p.done, p.total))
    }
    fn progress_in_host_memory(&self) -> (u64, u64) {
        let p = lock(self).progress_in_host_memory();
        (p.done, p.total)
    }
    fn is_complete(&self) -> bool {
        // An error (a context gone bad) counts as complete: nothing can be steered any more.
        !matches!(lock(self).is_complete(), Ok(false))
    }
    fn tasks_done(&self) -> bool {
        lock(self).done_in_host_memory()
    }
    fn held_everywhere(&self) -> bool {
        lock(self).held_everywhere()
    }
    fn name(&self) -> String {
        lock(self).function_name()
    }
    fn stream_priority(&self) -> u8 {
        lock(self)
            .stream_priority_rank()
            .map_or(0, |r| r.min(255) as u8)
    }
    fn features(&self) -> [f64; 4] {
        let k = lock(self);
        let cfg = k.launch_config();
        [
            k.total_tasks() as f64,
            cfg.threads_per_block() as f64,
            0.0, // the runtime does not know how much data a kernel reads
            cfg.shared_mem_bytes as f64,
        ]
    }
    fn gpu_stamps(&self) -> (u64, u64) {
        lock(self).gpu_stamps()
    }
    fn off_sms(&self) -> Vec<u32> {
        let k = lock(self);
        k.command().yielded_sms(k.sm_count()).iter().collect()
    }
    fn mps(&self) -> Option<bool> {
        lock(self).gpu_shared_through_mps()
    }
}

/// The daemon's standing orders, for the launch path.
#[derive(Default)]
pub(crate) struct Orders {
    /// `keep_off`: the SMs that this process's launches start off.
    keep_off: Mutex<Option<SmSet>>,
    /// `lean`: launches the plan would run as the original kernel run so, unannounced.
    lean: AtomicBool,
}

static ORDERS: Orders = Orders {
    keep_off: Mutex::new(None),
    lean: AtomicBool::new(false),
};

/// The SMs a launch made now starts preempted on (the daemon's `keep_off`), if any.
pub(crate) fn kept_off() -> Option<SmSet> {
    socket()?;
    *lock(&ORDERS.keep_off)
}

/// Whether the daemon leaves this process's launches alone (its `lean`): then a launch that
/// would run as its original kernel unscheduled runs so.
pub(crate) fn lean() -> bool {
    socket().is_some() && ORDERS.lean.load(MemOrder::Relaxed)
}

/// The daemon's socket (`CUPREEMPT_SCHEDULER`), read once.
pub fn socket() -> Option<&'static Path> {
    static S: OnceLock<Option<PathBuf>> = OnceLock::new();
    S.get_or_init(|| std::env::var_os("CUPREEMPT_SCHEDULER").map(PathBuf::from))
        .as_deref()
}

/// Priority (where set) and weight of this process's launches (`CUPREEMPT_PRIORITY`,
/// `CUPREEMPT_WEIGHT`); a bad value is said on stderr and not used.
fn priority_and_weight() -> (Option<u8>, f64) {
    static P: OnceLock<(Option<u8>, f64)> = OnceLock::new();
    *P.get_or_init(|| {
        let priority = match std::env::var("CUPREEMPT_PRIORITY") {
            Err(_) => None,
            Ok(v) => match v.trim().parse::<u8>() {
                Ok(p) => Some(p),
                Err(_) => {
                    eprintln!(
                        "cupreempt: CUPREEMPT_PRIORITY `{v}` is not 0 to 255; using the streams' priorities"
                    );
                    None
                }
            },
        };
        let weight = positive_env("CUPREEMPT_WEIGHT", "using 1").unwrap_or(1.0);
        (priority, weight)
    })
}

/// How long this process's launches run alone, in microseconds (`CUPREEMPT_ESTIMATE_US`): a
/// batch job's length, which the daemon's shortest-first policies order by (without it, the
/// daemon estimates from kernels it has seen, and one kernel that runs longer with other
/// arguments looks the same to it). A bad value is said on stderr and not used.
fn estimate_us() -> Option<f64> {
    static E: OnceLock<Option<f64>> = OnceLock::new();
    *E.get_or_init(|| positive_env("CUPREEMPT_ESTIMATE_US", "not sent"))
}

/// The daemon's GPU this process was placed on (`CUPREEMPT_GPU`, set by `cupreemptd run`
/// together with `CUDA_VISIBLE_DEVICES`): its launches are scheduled with that GPU's. A bad
/// value is said on stderr and not sent (the daemon then takes GPU 0).
fn placed_gpu() -> Option<u32> {
    static G: OnceLock<Option<u32>> = OnceLock::new();
    *G.get_or_init(|| {
        let v = std::env::var("CUPREEMPT_GPU").ok()?;
        v.trim()
            .parse::<u32>()
            .map_err(|_| eprintln!("cupreempt: CUPREEMPT_GPU `{v}` is not a GPU number; not sent"))
            .ok()
    })
}

/// The positive number in environment variable `name`; none where it is unset, or not such a
/// number (then said on stderr, with what happens `instead`).
fn positive_env(name: &str, instead: &str) -> Option<f64> {
    let v = std::env::var(name).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Some(x),
        _ => {
            eprintln!("cupreempt: {name} `{v}` is not a positive number; {instead}");
            None
        }
    }
}

/// A launch the program let go of.
type Shared = Arc<Mutex<Kernel>>;

/// What the program asks of the scheduler client.
pub(crate) enum Request<S> {
    /// A launch whose handle the program let go of.
    Launch(S),
    /// The process is exiting: report the kernels that ended, let go of every other one and
    /// close the connection, then answer.
    Exit(Sender<()>),
}

/// The scheduler client's thread, once the first launch made it (none: no thread to be had).
static WORKER: OnceLock<Option<Mutex<Sender<Request<Shared>>>>> = OnceLock::new();

/// Whether `adopt` takes launches (a daemon is configured), so that a released launch needs a
/// shared handle (`capi::detach_unregistered`).
pub(crate) fn adopts() -> bool {
    socket().is_some()
}

/// Hands a launch whose handle the program let go of to the scheduler client; gives it back
/// when there is no daemon configured or no thread to be had (then it runs to its end).
pub(crate) fn adopt(kernel: Shared) -> Result<(), Shared> {
    // `adopts()`'s condition.
    let Some(path) = socket() else {
        return Err(kernel);
    };
    let worker = WORKER.get_or_init(|| {
        let (tx, rx) = channel();
        let (priority, weight) = priority_and_weight();
        let client = Client::new(path.to_path_buf(), priority, weight).estimate(estimate_us());
        let worker = std::thread::Builder::new()
            .name("cupreempt-scheduler".into())
            .spawn(move || client.run(rx))
            .ok()
            .map(|_| Mutex::new(tx));
        if worker.is_some() {
            register_exit_reports();
        }
        worker
    });
    let Some(tx) = worker else {
        return Err(kernel);
    };
    lock(tx)
        .send(Request::Launch(kernel))
        .map_err(|e| match e.0 {
            Request::Launch(k) => k,
            Request::Exit(_) => unreachable!("only a launch was sent"),
        })
}

/// At exit, the client's last reports before the process goes. A program that waits for its
/// kernel and exits at once would otherwise end before the client's next look (every `POLL`),
/// and the daemon would hear of the kernel's end only when the connection closes, after the
/// CUDA runtime's teardown: milliseconds later under MPS (17 ms seen, docs/daemon.md), while
/// the policy keeps other processes' kernels waiting for this one. Registered at the first
/// launch, after the CUDA runtime's own exit handler, so that this one runs first and the
/// driver still answers the client's looks.
fn register_exit_reports() {
    extern "C" fn at_exit() {
        let Some(Some(tx)) = WORKER.get() else {
            return;
        };
        let (ack, answered) = channel();
        if lock(tx).send(Request::Exit(ack)).is_ok() {
            // Bounded: the client may be waiting for a kernel to yield.
            let _ = answered.recv_timeout(EXIT_WAIT);
        }
    }
    super::at_exit(at_exit);
}

struct Tracked<S> {
    kernel: S,
    preempted: bool,
    reported_done: u64,
    reported_at: Instant,
    /// The GPU stamps last sent (`Steer::gpu_stamps`).
    reported_stamps: (u64, u64),
}

/// What the client thread hears of. Messages of a connection carry its number, so that a
/// late report of an old connection cannot touch a newer one.
enum Input<S> {
    Launch(S),
    /// The process is exiting (`Request::Exit`).
    Exit(Sender<()>),
    Server(u64, ServerMsg),
    /// The daemon closed the connection (or it broke).
    Lost(u64),
}

pub(crate) struct Client<S> {
    path: PathBuf,
    /// Every launch's priority; none: its stream's.
    priority: Option<u8>,
    weight: f64,
    /// Every launch's run time alone, where the program says it (`CUPREEMPT_ESTIMATE_US`).
    estimate_us: Option<f64>,
    kernels: HashMap<u64, Tracked<S>>,
    /// Launches not yet announced: they came while a kernel was held everywhere (see
    /// `holding`), and announcing one asks the driver about it.
    unannounced: Vec<u64>,
    next_id: u64,
    /// The connection's writing end; its reader thread feeds `Input::Server`.
    conn: Option<UnixStream>,
    /// The number of the newest connection.
    generation: u64,
    next_try: Instant,
    said_unreachable: bool,
    /// Where the daemon's standing orders go for the launch path to read (`ORDERS`).
    orders: &'static Orders,
}

impl<S: Steer> Client<S> {
    pub(crate) fn new(path: PathBuf, priority: Option<u8>, weight: f64) -> Client<S> {
        Client {
            path,
            priority,
            weight,
            estimate_us: None,
            kernels: HashMap::new(),
            unannounced: Vec::new(),
            next_id: 1,
            conn: None,
            generation: 0,
            next_try: Instant::now(),
            said_unreachable: false,
            orders: &ORDERS,
        }
    }

    /// Sends `estimate_us` with every launch.
    pub(crate) fn estimate(mut self, estimate_us: Option<f64>) -> Client<S> {
        self.estimate_us = estimate_us;
        self
    }

    /// Keeps the daemon's standing orders in `orders` instead of the process's `ORDERS`.
    #[cfg(test)]
    fn orders(mut self, orders: &'static Orders) -> Client<S> {
        self.orders = orders;
        self
    }

    /// Serves until `requests` is closed and every tracked kernel is done, or until the
    /// process exits.
    pub(crate) fn run(mut self, requests: Receiver<Request<S>>) {
        let (tx, rx) = channel::<Input<S>>();
        {
            let tx = tx.clone();
            std::thread::Builder::new()
                .name("cupreempt-scheduler-in".into())
                .spawn(move || {
                    for r in requests {
                        let input = match r {
                            Request::Launch(k) => Input::Launch(k),
                            Request::Exit(ack) => Input::Exit(ack),
                        };
                        if tx.send(input).is_err() {
                            return;
                        }
                    }
                })
                .ok();
        }
        loop {
            let input = if self.kernels.is_empty() {
                match rx.recv() {
                    Ok(i) => Some(i),
                    Err(_) => return,
                }
            } else {
                match rx.recv_timeout(POLL) {
                    Ok(i) => Some(i),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => None,
                }
            };
            match input {
                Some(Input::Launch(k)) => {
                    // Kernels that ended before this launch say so first: a program that waits
                    // for each kernel before the next would otherwise seem to the daemon to
                    // run two at once (the looks come every POLL), and the policy would
                    // preempt the newer launch of the same program only to resume it.
                    self.look_at_kernels();
                    self.launch(k, &tx)
                }
                Some(Input::Exit(ack)) => {
                    self.look_at_kernels();
                    self.leave();
                    let _ = ack.send(());
                    return;
                }
                Some(Input::Server(g, m)) if g == self.generation => self.command(m),
                Some(Input::Lost(g)) if g == self.generation => self.lost(),
                Some(Input::Server(..)) | Some(Input::Lost(_)) => {} // an older connection's
                None => {}
            }
            self.look_at_kernels();
            self.announce_deferred();
        }
    }

    /// Whether a tracked kernel is preempted on every SM. Until it is resumed the client
    /// thread makes no driver call that could wait (docs/runtime.md, "No wait inside the
    /// driver while preempted"): a thread of the program may be waiting inside the driver
    /// for that kernel (`cudaFree`, a synchronous copy) and hold the context's lock, and a
    /// query behind it would keep this thread from the resume the daemon sends. So
    /// completion and progress come from host memory, and new launches are announced later.
    fn holding(&self) -> bool {
        self.kernels
            .values()
            .any(|t| t.preempted && t.kernel.held_everywhere())
    }

    /// Announces the launches deferred while a kernel was held, once none is.
    fn announce_deferred(&mut self) {
        if self.unannounced.is_empty() || self.conn.is_none() || self.holding() {
            return;
        }
        for id in std::mem::take(&mut self.unannounced) {
            self.announce(id);
        }
    }

    fn connect(&mut self, tx: &Sender<Input<S>>) {
        if self.conn.is_some() || Instant::now() < self.next_try {
            return;
        }
        self.next_try = Instant::now() + RETRY;
        let stream = match UnixStream::connect(&self.path) {
            Ok(s) => s,
            Err(e) => {
                if !self.said_unreachable {
                    eprintln!(
                        "cupreempt: scheduler {}: {e}; kernels run unscheduled until it answers",
                        self.path.display()
                    );
                    self.said_unreachable = true;
                }
                return;
            }
        };
        let Ok(mut reader) = stream.try_clone() else {
            return;
        };
        let tx = tx.clone();
        let generation = self.generation + 1;
        let spawned = std::thread::Builder::new()
            .name("cupreempt-scheduler-rx".into())
            .spawn(move || {
                while let Ok(body) = read_frame(&mut reader) {
                    match serde_json::from_slice::<ServerMsg>(&body) {
                        Ok(m) => {
                            if tx.send(Input::Server(generation, m)).is_err() {
                                return;
                            }
                        }
                        Err(e) => eprintln!("cupreempt: scheduler sent no message: {e}"),
                    }
                }
                let _ = tx.send(Input::Lost(generation));
            });
        if spawned.is_err() {
            return;
        }
        self.conn = Some(stream);
        self.generation = generation;
        self.said_unreachable = false;
        // The kernels that ran while there was no daemon are its kernels now (nothing is
        // held without a daemon: each is announced now).
        self.unannounced.clear();
        let ids: Vec<u64> = self.kernels.keys().copied().collect();
        for id in ids {
            self.announce(id);
        }
    }

    fn send(&mut self, m: &ClientMsg) {
        if let Some(c) = self.conn.as_mut() {
            if write_msg(c, m).is_err() {
                self.lost();
            }
        }
    }

    fn announce(&mut self, id: u64) {
        let Some(t) = self.kernels.get(&id) else {
            return;
        };
        let (_, tasks) = t.kernel.progress().unwrap_or((0, 1));
        let m = ClientMsg::Launch {
            id,
            kernel: t.kernel.name(),
            tasks,
            priority: self.priority.unwrap_or_else(|| t.kernel.stream_priority()),
            weight: self.weight,
            estimate_us: self.estimate_us,
            features: Some(t.kernel.features()),
            kept_off: t.kernel.off_sms(),
            gpu: placed_gpu(),
            mps: t.kernel.mps(),
        };
        self.send(&m);
    }

    fn launch(&mut self, kernel: S, tx: &Sender<Input<S>>) {
        let id = self.next_id;
        self.next_id += 1;
        let preempted = !kernel.off_sms().is_empty(); // made under a `keep_off` order
        self.kernels.insert(
            id,
            Tracked {
                kernel,
                preempted,
                reported_done: 0,
                reported_at: Instant::now(),
                reported_stamps: (0, 0),
            },
        );
        if self.conn.is_some() {
            if self.holding() {
                self.unannounced.push(id);
            } else {
                self.announce(id);
            }
        } else {
            self.connect(tx); // announces every tracked kernel, this one included
        }
    }

    fn command(&mut self, m: ServerMsg) {
        match m {
            ServerMsg::Preempt { id, sms } => {
                let holding = self.holding();
                let Some(t) = self.kernels.get_mut(&id) else {
                    return; // ended meanwhile: its `finished` is on its way
                };
                if ended(&t.kernel, holding) {
                    return;
                }
                match t.kernel.preempt(sms.as_deref()) {
                    Ok(()) => {
                        t.preempted = true;
                        self.send(&ClientMsg::Yielded { id });
                    }
                    // Completed between the look and the command: `finished` follows.
                    Err(_) if ended(&t.kernel, holding) => {}
                    // The daemon counts one `yielded` per `preempt` (SMs that had yielded
                    // already are an error here, and yielded all the same).
                    Err(e) => {
                        eprintln!("cupreempt: scheduler's preemption failed: {e}");
                        t.preempted = true;
                        self.send(&ClientMsg::Yielded { id });
                    }
                }
            }
            ServerMsg::Resume { id, sms } => {
                if let Some(t) = self.kernels.get_mut(&id) {
                    if t.preempted {
                        match t.kernel.resume(sms.as_deref()) {
                            // After a resume of some SMs, others may still be preempted.
                            Ok(()) => t.preempted = sms.is_some(),
                            Err(e) => eprintln!("cupreempt: scheduler's resume failed: {e}"),
                        }
                    }
                }
            }
            ServerMsg::KeepOff { sms } => match SmSet::from_ids(sms.iter().copied()) {
                Ok(set) => self.set_keep_off(set),
                Err(e) => eprintln!("cupreempt: scheduler's keep_off: {e}"),
            },
            ServerMsg::Lean { on } => self.orders.lean.store(on, MemOrder::Relaxed),
            ServerMsg::Error { message } => eprintln!("cupreempt: scheduler: {message}"),
            // The answer to a placement, which a program's runtime never asks for.
            ServerMsg::Placed { .. } => {
                eprintln!("cupreempt: scheduler: a placement nobody asked for; ignored")
            }
        }
    }

    /// The daemon is gone: nothing stays preempted; kernels run unscheduled.
    fn lost(&mut self) {
        if let Some(c) = self.conn.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
            eprintln!(
                "cupreempt: scheduler {} went away; kernels run unscheduled",
                self.path.display()
            );
        }
        self.resume_all();
        self.next_try = Instant::now() + RETRY;
    }

    /// The process is exiting: nothing stays preempted, and the daemon hears the connection
    /// close now rather than when the process is gone.
    fn leave(&mut self) {
        self.resume_all();
        if let Some(c) = self.conn.take() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Also ends the standing orders: launches start on every SM again, and each is announced.
    fn resume_all(&mut self) {
        self.set_keep_off(SmSet::empty());
        self.orders.lean.store(false, MemOrder::Relaxed);
        for t in self.kernels.values_mut() {
            if t.preempted && t.kernel.resume(None).is_ok() {
                t.preempted = false;
            }
        }
        // Without a daemon there is nobody to announce them to; a new connection announces
        // every tracked kernel.
        self.unannounced.clear();
    }

    fn set_keep_off(&self, sms: SmSet) {
        *lock(&self.orders.keep_off) = (!sms.is_empty()).then_some(sms);
    }

    fn look_at_kernels(&mut self) {
        let now = Instant::now();
        let mut out = Vec::new();
        let holding = self.holding();
        let unannounced = &mut self.unannounced;
        self.kernels.retain(|&id, t| {
            // A kernel preempted on every SM cannot complete; one preempted on some can.
            if ended(&t.kernel, holding) {
                // One the daemon never heard of ends unannounced.
                match unannounced.iter().position(|&u| u == id) {
                    Some(i) => {
                        unannounced.remove(i);
                    }
                    None => out.push(ClientMsg::Finished { id }),
                }
                return false;
            }
            if unannounced.contains(&id) {
                return true;
            }
            let stamps = t.kernel.gpu_stamps();
            if stamps != t.reported_stamps {
                let changed = |new: u64, old: u64| (new != old && new != 0).then_some(new);
                out.push(ClientMsg::GpuTimes {
                    id,
                    yielded_ns: changed(stamps.0, t.reported_stamps.0),
                    entered_ns: changed(stamps.1, t.reported_stamps.1),
                });
                t.reported_stamps = stamps;
            }
            if now.duration_since(t.reported_at) >= PROGRESS_EVERY {
                let progress = if holding {
                    Ok(t.kernel.progress_in_host_memory())
                } else {
                    t.kernel.progress()
                };
                if let Ok((done, _)) = progress {
                    if done != t.reported_done {
                        t.reported_done = done;
                        out.push(ClientMsg::Progress { id, done });
                    }
                }
                t.reported_at = now;
            }
            true
        });
        for m in out {
            self.send(&m);
        }
    }
}

/// Whether `k` has ended: while the client holds a kernel (`Client::holding`), from host
/// memory alone (every task done), else as the driver says (the stream has passed it).
fn ended<S: Steer>(k: &S, holding: bool) -> bool {
    if holding {
        k.tasks_done()
    } else {
        k.is_complete()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A stand-in launch: its state is shared with the test.
    #[derive(Clone, Default)]
    struct Fake(Arc<FakeState>);
    #[derive(Default)]
    struct FakeState {
        preempted: AtomicU32,
        resumed: AtomicU32,
        complete: AtomicU32,
        parked: AtomicU32,
        /// The SMs of the last command (`None`: every SM).
        last_sms: Mutex<Option<Vec<u32>>>,
        /// What `gpu_stamps` answers.
        stamps: Mutex<(u64, u64)>,
        /// What `off_sms` answers (the SMs it was launched off).
        off: Mutex<Vec<u32>>,
        /// Calls that ask the driver in a `Kernel` (progress, completion, name, priority).
        driver_calls: AtomicU32,
    }
    impl Steer for Fake {
        fn preempt(&mut self, sms: Option<&[u32]>) -> Result<(), String> {
            self.0.preempted.fetch_add(1, Ordering::SeqCst);
            self.0.parked.store(1, Ordering::SeqCst);
            *self.0.last_sms.lock().unwrap() = sms.map(<[u32]>::to_vec);
            Ok(())
        }
        fn resume(&mut self, sms: Option<&[u32]>) -> Result<(), String> {
            self.0.resumed.fetch_add(1, Ordering::SeqCst);
            if sms.is_none() {
                self.0.parked.store(0, Ordering::SeqCst);
            }
            *self.0.last_sms.lock().unwrap() = sms.map(<[u32]>::to_vec);
            Ok(())
        }
        fn progress(&self) -> Result<(u64, u64), String> {
            self.0.driver_calls.fetch_add(1, Ordering::SeqCst);
            Ok((0, 4096))
        }
        fn progress_in_host_memory(&self) -> (u64, u64) {
            (0, 4096)
        }
        fn is_complete(&self) -> bool {
            self.0.driver_calls.fetch_add(1, Ordering::SeqCst);
            self.tasks_done()
        }
        fn tasks_done(&self) -> bool {
            self.0.complete.load(Ordering::SeqCst) != 0
        }
        fn held_everywhere(&self) -> bool {
            self.0.parked.load(Ordering::SeqCst) != 0 && self.0.last_sms.lock().unwrap().is_none()
        }
        fn name(&self) -> String {
            self.0.driver_calls.fetch_add(1, Ordering::SeqCst);
            "fake".into()
        }
        fn stream_priority(&self) -> u8 {
            self.0.driver_calls.fetch_add(1, Ordering::SeqCst);
            3
        }
        fn features(&self) -> [f64; 4] {
            [4096.0, 256.0, 0.0, 0.0]
        }
        fn gpu_stamps(&self) -> (u64, u64) {
            *self.0.stamps.lock().unwrap()
        }
        fn off_sms(&self) -> Vec<u32> {
            self.0.off.lock().unwrap().clone()
        }
        fn mps(&self) -> Option<bool> {
            Some(false)
        }
    }

    fn recv(s: &mut UnixStream) -> ClientMsg {
        let body = read_frame(s).unwrap_or_else(|e| panic!("nothing from the client: {e:?}"));
        serde_json::from_slice(&body).unwrap()
    }

    fn until(what: &str, f: impl Fn() -> bool) {
        let t = Instant::now();
        while !f() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A socket that plays the daemon, in a fresh folder for the test named `tag`.
    fn daemon_socket(tag: &str) -> (PathBuf, PathBuf, UnixListener) {
        let dir =
            std::env::temp_dir().join(format!("cupreempt-sched-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        let listener = UnixListener::bind(&path).unwrap();
        (dir, path, listener)
    }

    /// The client's next connection, with a read timeout.
    fn accept(listener: &UnixListener) -> UnixStream {
        let (daemon, _) = listener.accept().unwrap();
        daemon
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        daemon
    }

    fn start(path: &Path, priority: Option<u8>) -> Launches {
        start_with(path, priority, None)
    }

    fn start_with(path: &Path, priority: Option<u8>, estimate_us: Option<f64>) -> Launches {
        start_ordered(path, priority, estimate_us, Box::leak(Box::default()))
    }

    /// A client that keeps the daemon's standing order in `orders`.
    fn start_ordered(
        path: &Path,
        priority: Option<u8>,
        estimate_us: Option<f64>,
        orders: &'static Orders,
    ) -> Launches {
        let (tx, rx) = channel::<Request<Fake>>();
        let client = Client::<Fake>::new(path.to_path_buf(), priority, 2.0)
            .estimate(estimate_us)
            .orders(orders);
        std::thread::spawn(move || client.run(rx));
        Launches(tx)
    }

    /// The program's side of a client under test.
    struct Launches(Sender<Request<Fake>>);
    impl Launches {
        fn send(&self, k: Fake) -> Result<(), ()> {
            self.0.send(Request::Launch(k)).map_err(|_| ())
        }
        /// What the exit handler does: asks for the last reports and waits for them.
        fn exit(&self) -> bool {
            let (ack, answered) = channel();
            self.0.send(Request::Exit(ack)).is_ok()
                && answered.recv_timeout(Duration::from_secs(5)).is_ok()
        }
    }

    /// At exit, a kernel that ended since the client's last look is reported before the
    /// connection closes, a preempted one is resumed, and the daemon sees the connection
    /// close at once (not when the process is gone).
    #[test]
    fn at_exit_ended_kernels_are_reported_and_the_connection_closes() {
        let (dir, launches, mut daemon, [ended, parked]) = two_launches_one_preempted("exit", 2);
        // The program's kernel ends and the program exits straight away.
        ended.0.complete.store(1, Ordering::SeqCst);
        assert!(launches.exit(), "the client did not answer the exit");
        assert_eq!(parked.0.parked.load(Ordering::SeqCst), 0, "left preempted");
        let mut finished = false;
        loop {
            match read_frame(&mut daemon) {
                Ok(body) => match serde_json::from_slice::<ClientMsg>(&body).unwrap() {
                    ClientMsg::Finished { id: 1 } => finished = true,
                    ClientMsg::Progress { .. } | ClientMsg::GpuTimes { .. } => {}
                    other => panic!("unexpected at exit: {other:?}"),
                },
                // A read timeout (an I/O error) is a connection left open.
                Err(e) => {
                    assert!(
                        matches!(e, cupreempt_protocol::FrameError::Closed { clean: true }),
                        "the connection did not close after the exit: {e:?}"
                    );
                    break;
                }
            }
        }
        assert!(
            finished,
            "the ended kernel was not reported before the close"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A connected client that has reported two launches (ids 1 and 2, in `kernels`' order),
    /// the one numbered `preempted` preempted on every SM and yielded: its folder, launches, the
    /// daemon's end and the two kernels.
    fn two_launches_one_preempted(
        tag: &str,
        preempted: u64,
    ) -> (PathBuf, Launches, UnixStream, [Fake; 2]) {
        let (dir, path, listener) = daemon_socket(tag);
        let launches = start(&path, None);
        let kernels = [Fake::default(), Fake::default()];
        launches.send(kernels[0].clone()).unwrap();
        let mut daemon = accept(&listener);
        launches.send(kernels[1].clone()).unwrap();
        for id in 1..=2 {
            assert!(matches!(recv(&mut daemon), ClientMsg::Launch { id: i, .. } if i == id));
        }
        let preempt = ServerMsg::Preempt {
            id: preempted,
            sms: None,
        };
        write_msg(&mut daemon, &preempt).unwrap();
        assert_eq!(recv(&mut daemon), ClientMsg::Yielded { id: preempted });
        (dir, launches, daemon, kernels)
    }

    /// A client keeping the daemon's standing orders in its own `Orders`, which has made one
    /// launch and is connected: its folder, orders, launches and the daemon's end.
    fn ordered_client_with_a_launch(tag: &str) -> (PathBuf, &'static Orders, Launches, UnixStream) {
        let (dir, path, listener) = daemon_socket(tag);
        let orders: &'static Orders = Box::leak(Box::default());
        let launches = start_ordered(&path, None, None, orders);
        launches.send(Fake::default()).unwrap();
        let daemon = accept(&listener);
        (dir, orders, launches, daemon)
    }

    /// The daemon's `lean` reaches the launch path (`lean()`: launches the plan would run as
    /// their original kernels run so), is withdrawn by `lean` off, and ends with the daemon.
    #[test]
    fn lean_reaches_the_launch_path_and_ends_with_the_daemon() {
        let (dir, orders, _launches, mut daemon) = ordered_client_with_a_launch("lean");
        let lean = || orders.lean.load(MemOrder::Relaxed);
        assert!(matches!(recv(&mut daemon), ClientMsg::Launch { id: 1, .. }));
        assert!(!lean(), "lean before the daemon said so");
        write_msg(&mut daemon, &ServerMsg::Lean { on: true }).unwrap();
        until("lean", lean);
        write_msg(&mut daemon, &ServerMsg::Lean { on: false }).unwrap();
        until("lean withdrawn", || !lean());
        write_msg(&mut daemon, &ServerMsg::Lean { on: true }).unwrap();
        until("lean again", lean);
        drop(daemon);
        until("lean's end with the daemon", || !lean());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The daemon's standing order (`keep_off`) reaches the launch path; a launch made under
    /// it is announced with the SMs it started off and counts as preempted there, so that the
    /// daemon's `resume` reaches it; an empty order, or the daemon going away, ends it.
    #[test]
    fn a_standing_order_reaches_launches_and_ends_with_the_daemon() {
        let (dir, orders, launches, mut daemon) = ordered_client_with_a_launch("keep-off");
        let order = || *orders.keep_off.lock().unwrap();
        assert!(
            matches!(recv(&mut daemon), ClientMsg::Launch { id: 1, kept_off, .. } if kept_off.is_empty())
        );
        let reserve = vec![128, 129, 130];
        write_msg(
            &mut daemon,
            &ServerMsg::KeepOff {
                sms: reserve.clone(),
            },
        )
        .unwrap();
        let wanted = SmSet::from_ids(reserve.iter().copied()).unwrap();
        until("the standing order", || order() == Some(wanted));
        // The launch path starts the next launch off those SMs (Runtime::launch_kept_off).
        let kept = Fake::default();
        *kept.0.off.lock().unwrap() = reserve.clone();
        launches.send(kept.clone()).unwrap();
        let next = |daemon: &mut UnixStream| loop {
            match recv(daemon) {
                ClientMsg::Progress { .. } | ClientMsg::GpuTimes { .. } => {}
                other => return other,
            }
        };
        match next(&mut daemon) {
            ClientMsg::Launch {
                id: 2, kept_off, ..
            } => assert_eq!(kept_off, reserve),
            other => panic!("expected launch 2, got {other:?}"),
        }
        // Preempted there from its start: the daemon's resume of those SMs reaches it.
        let sms = Some(reserve.clone());
        write_msg(
            &mut daemon,
            &ServerMsg::Resume {
                id: 2,
                sms: sms.clone(),
            },
        )
        .unwrap();
        until("the resume", || kept.0.resumed.load(Ordering::SeqCst) == 1);
        assert_eq!(*kept.0.last_sms.lock().unwrap(), sms);
        // An order naming an SM no GPU has is refused (said on stderr); the one in force stays.
        // (The preempt after it is answered only once the client has read both.)
        write_msg(&mut daemon, &ServerMsg::KeepOff { sms: vec![4096] }).unwrap();
        write_msg(&mut daemon, &ServerMsg::Preempt { id: 2, sms: None }).unwrap();
        assert_eq!(next(&mut daemon), ClientMsg::Yielded { id: 2 });
        assert_eq!(order(), Some(wanted));
        // An empty order ends it.
        write_msg(&mut daemon, &ServerMsg::KeepOff { sms: vec![] }).unwrap();
        until("the order's end", || order().is_none());
        // Given again, it ends when the daemon goes away.
        write_msg(&mut daemon, &ServerMsg::KeepOff { sms: reserve }).unwrap();
        until("the second order", || order().is_some());
        drop(daemon);
        until("the order's end with the daemon", || order().is_none());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// While one of its kernels is preempted on every SM, the client asks the driver nothing:
    /// a thread of the program may be waiting inside the driver for that kernel and hold the
    /// context's lock. Completion and progress come from host memory; a launch made meanwhile
    /// is announced after the resume.
    #[test]
    fn while_a_kernel_is_held_nothing_is_asked_of_the_driver() {
        let (dir, launches, mut daemon, [held, other]) = two_launches_one_preempted("held", 1);
        let late = Fake::default();
        let asked = || {
            [&held, &other, &late]
                .iter()
                .map(|k| k.0.driver_calls.load(Ordering::SeqCst))
                .sum::<u32>()
        };
        let before = asked();
        launches.send(late.clone()).unwrap();
        // Many looks, and progress reports due.
        std::thread::sleep(PROGRESS_EVERY * 4);
        other.0.complete.store(1, Ordering::SeqCst);
        assert_eq!(recv(&mut daemon), ClientMsg::Finished { id: 2 });
        assert_eq!(
            asked(),
            before,
            "the driver was asked while a kernel was held"
        );
        write_msg(&mut daemon, &ServerMsg::Resume { id: 1, sms: None }).unwrap();
        assert!(matches!(recv(&mut daemon), ClientMsg::Launch { id: 3, .. }));
        assert!(
            asked() > before,
            "after the resume the client looks as before"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The GPU's stamps go to the daemon as they change, each only when it changed.
    #[test]
    fn gpu_stamps_are_reported_when_they_change() {
        let (dir, path, listener) = daemon_socket("stamps");
        let launches = start(&path, None);
        let k = Fake::default();
        *k.0.stamps.lock().unwrap() = (0, 1_000);
        launches.send(k.clone()).unwrap();
        let mut daemon = accept(&listener);
        assert!(matches!(recv(&mut daemon), ClientMsg::Launch { id: 1, .. }));
        let next_stamps = |daemon: &mut UnixStream| loop {
            match recv(daemon) {
                ClientMsg::Progress { .. } => {}
                other => return other,
            }
        };
        let started = ClientMsg::GpuTimes {
            id: 1,
            yielded_ns: None,
            entered_ns: Some(1_000),
        };
        assert_eq!(next_stamps(&mut daemon), started);
        *k.0.stamps.lock().unwrap() = (5_000, 1_000);
        let yielded = ClientMsg::GpuTimes {
            id: 1,
            yielded_ns: Some(5_000),
            entered_ns: None,
        };
        assert_eq!(next_stamps(&mut daemon), yielded);
        *k.0.stamps.lock().unwrap() = (5_000, 9_000);
        let resumed = ClientMsg::GpuTimes {
            id: 1,
            yielded_ns: None,
            entered_ns: Some(9_000),
        };
        assert_eq!(next_stamps(&mut daemon), resumed);
        k.0.complete.store(1, Ordering::SeqCst);
        assert_eq!(next_stamps(&mut daemon), ClientMsg::Finished { id: 1 });
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A process's estimate goes with each of its launches; none is sent without one.
    #[test]
    fn launches_carry_the_process_estimate() {
        for (tag, estimate) in [("estimate", Some(2500.0)), ("no-estimate", None)] {
            let (dir, path, listener) = daemon_socket(tag);
            let launches = start_with(&path, None, estimate);
            launches.send(Fake::default()).unwrap();
            let mut daemon = accept(&listener);
            match recv(&mut daemon) {
                ClientMsg::Launch { estimate_us, .. } => assert_eq!(estimate_us, estimate),
                other => panic!("expected the launch, got {other:?}"),
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    #[test]
    fn launches_are_reported_and_commands_applied() {
        let (dir, path, listener) = daemon_socket("client");
        let launches = start(&path, Some(7));
        let k = Fake::default();
        launches.send(k.clone()).unwrap();
        let mut daemon = accept(&listener);
        match recv(&mut daemon) {
            ClientMsg::Launch {
                id,
                tasks,
                priority,
                weight,
                ..
            } => assert_eq!((id, tasks, priority, weight), (1, 4096, 7, 2.0)),
            other => panic!("expected the launch, got {other:?}"),
        }
        write_msg(&mut daemon, &ServerMsg::Preempt { id: 1, sms: None }).unwrap();
        assert_eq!(recv(&mut daemon), ClientMsg::Yielded { id: 1 });
        assert_eq!(k.0.preempted.load(Ordering::SeqCst), 1);
        write_msg(&mut daemon, &ServerMsg::Resume { id: 1, sms: None }).unwrap();
        until("the resume", || k.0.resumed.load(Ordering::SeqCst) == 1);
        k.0.complete.store(1, Ordering::SeqCst);
        assert_eq!(recv(&mut daemon), ClientMsg::Finished { id: 1 });

        // The daemon goes away while a kernel is preempted: it is resumed at once.
        let k2 = Fake::default();
        launches.send(k2.clone()).unwrap();
        assert!(matches!(recv(&mut daemon), ClientMsg::Launch { id: 2, .. }));
        write_msg(&mut daemon, &ServerMsg::Preempt { id: 2, sms: None }).unwrap();
        assert_eq!(recv(&mut daemon), ClientMsg::Yielded { id: 2 });
        drop(daemon);
        until("the resume after the daemon left", || {
            k2.0.parked.load(Ordering::SeqCst) == 0
        });

        // A later launch finds the daemon back (after the retry delay) and announces both.
        std::thread::sleep(RETRY);
        let k3 = Fake::default();
        launches.send(k3.clone()).unwrap();
        let mut daemon = accept(&listener);
        let mut ids = vec![];
        for _ in 0..2 {
            match recv(&mut daemon) {
                ClientMsg::Launch { id, .. } => ids.push(id),
                other => panic!("expected launches, got {other:?}"),
            }
        }
        ids.sort_unstable();
        assert_eq!(ids, [2, 3]);
        k2.0.complete.store(1, Ordering::SeqCst);
        k3.0.complete.store(1, Ordering::SeqCst);
        let mut done = vec![];
        while done.len() < 2 {
            match recv(&mut daemon) {
                ClientMsg::Finished { id } => done.push(id),
                ClientMsg::Progress { .. } => {}
                other => panic!("expected finished, got {other:?}"),
            }
        }
        done.sort_unstable();
        assert_eq!(done, [2, 3]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_kernel_that_ended_is_reported_before_the_next_launch() {
        let (dir, path, listener) = daemon_socket("order");
        let launches = start(&path, None);
        let mut daemon = None;
        for round in 1..=20u64 {
            let k = Fake::default();
            launches.send(k.clone()).unwrap();
            let d = daemon.get_or_insert_with(|| accept(&listener));
            if round > 1 {
                assert_eq!(recv(d), ClientMsg::Finished { id: round - 1 });
            }
            assert!(matches!(recv(d), ClientMsg::Launch { id, .. } if id == round));
            // The program waits for the kernel, then launches the next one at once.
            k.0.complete.store(1, Ordering::SeqCst);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Spatial commands: the SMs named reach the kernel, `yielded` answers, and a kernel still
    /// running on other SMs reports its end.
    #[test]
    fn commands_for_some_sms_reach_the_kernel() {
        let (dir, path, listener) = daemon_socket("spatial");
        let launches = start(&path, None);
        let k = Fake::default();
        launches.send(k.clone()).unwrap();
        let mut daemon = accept(&listener);
        assert!(matches!(recv(&mut daemon), ClientMsg::Launch { id: 1, .. }));
        let preempt = ServerMsg::Preempt {
            id: 1,
            sms: Some(vec![0, 2, 131]),
        };
        write_msg(&mut daemon, &preempt).unwrap();
        assert_eq!(recv(&mut daemon), ClientMsg::Yielded { id: 1 });
        assert_eq!(*k.0.last_sms.lock().unwrap(), Some(vec![0, 2, 131]));
        let resume = ServerMsg::Resume {
            id: 1,
            sms: Some(vec![2]),
        };
        write_msg(&mut daemon, &resume).unwrap();
        until("the resume of SM 2", || {
            k.0.resumed.load(Ordering::SeqCst) == 1
        });
        assert_eq!(*k.0.last_sms.lock().unwrap(), Some(vec![2]));
        // Still preempted on SMs 0 and 131, it runs on the others and ends.
        k.0.complete.store(1, Ordering::SeqCst);
        loop {
            match recv(&mut daemon) {
                ClientMsg::Finished { id } => {
                    assert_eq!(id, 1);
                    break;
                }
                ClientMsg::Progress { .. } => {}
                other => panic!("expected finished, got {other:?}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_a_process_priority_the_streams_priority_goes() {
        let (dir, path, listener) = daemon_socket("prio");
        let launches = start(&path, None);
        let k = Fake::default();
        launches.send(k.clone()).unwrap();
        let mut daemon = accept(&listener);
        assert!(matches!(
            recv(&mut daemon),
            ClientMsg::Launch {
                priority: 3,
                mps: Some(false),
                ..
            }
        ));
        k.0.complete.store(1, Ordering::SeqCst);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn without_a_daemon_kernels_run_unscheduled() {
        let path = std::env::temp_dir().join(format!("cupreempt-no-daemon-{}", std::process::id()));
        let launches = start(&path, None);
        let k = Fake::default();
        launches.send(k.clone()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(k.0.preempted.load(Ordering::SeqCst), 0);
        k.0.complete.store(1, Ordering::SeqCst);
    }
}
