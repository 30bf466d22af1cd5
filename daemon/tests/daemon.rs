//! `cupreemptd` as a process: its socket, bad input, programs that misbehave, and SIGTERM.
//! No GPU: the test plays the programs' side of the protocol.
use cupreempt_daemon::protocol::{read_frame, write_msg, ClientMsg, ServerMsg};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

struct Daemon {
    child: Child,
    socket: PathBuf,
    dir: PathBuf,
}

impl Daemon {
    fn start(name: &str, args: &[&str]) -> Daemon {
        let dir = std::env::temp_dir().join(format!("cupreemptd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("sock");
        let child = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .spawn()
            .unwrap();
        let t = Instant::now();
        while UnixStream::connect(&socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Daemon { child, socket, dir }
    }

    fn client(&self) -> Client {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client(s)
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: sends a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "SIGTERM did not stop the daemon"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Client(UnixStream);

impl Client {
    fn send(&mut self, m: &ClientMsg) {
        write_msg(&mut self.0, m).unwrap();
    }
    fn recv(&mut self) -> ServerMsg {
        let body = read_frame(&mut self.0).unwrap_or_else(|e| panic!("no reply: {e:?}"));
        serde_json::from_slice(&body).unwrap()
    }
    /// Nothing arrives within `ms`.
    fn quiet(&mut self, ms: u64) -> bool {
        self.0
            .set_read_timeout(Some(Duration::from_millis(ms)))
            .unwrap();
        let r = read_frame(&mut self.0);
        self.0
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        r.is_err()
    }
    /// Returns once the daemon has handled everything sent before on this connection
    /// (connections race each other into the scheduler).
    fn sync(&mut self) {
        self.send(&ClientMsg::Finished { id: u64::MAX });
        assert!(error(self.recv()).contains("no kernel"));
    }
    fn launch(&mut self, id: u64, priority: u8) {
        self.launch_on(id, priority, None)
    }
    fn launch_on(&mut self, id: u64, priority: u8, gpu: Option<u32>) {
        self.launch_with(id, priority, gpu, None)
    }
    /// A launch of 1,000 tasks on GPU `gpu`, saying whether the GPU is shared through MPS.
    fn launch_with(&mut self, id: u64, priority: u8, gpu: Option<u32>, mps: Option<bool>) {
        self.send(&ClientMsg::Launch {
            id,
            kernel: format!("k{id}"),
            tasks: 1000,
            priority,
            weight: 1.0,
            estimate_us: Some(1e6),
            features: None,
            kept_off: Vec::new(),
            gpu,
            mps,
        });
    }
    /// Asks for a GPU as `cupreemptd run` does; the GPU placed on.
    fn place(&mut self, priority: u8) -> u32 {
        self.send(&ClientMsg::Place { priority });
        match self.recv() {
            ServerMsg::Placed { gpu, gpus } => {
                assert!(gpu < gpus);
                gpu
            }
            other => panic!("expected a placement, got {other:?}"),
        }
    }
}

fn error(m: ServerMsg) -> String {
    match m {
        ServerMsg::Error { message } => message,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn the_socket_is_the_owners_only() {
    let d = Daemon::start("mode", &[]);
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
}

#[test]
fn a_second_daemon_on_the_same_socket_is_refused() {
    let d = Daemon::start("twice", &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
        .arg("--socket")
        .arg(&d.socket)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already listens"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The first one still serves.
    let mut c = d.client();
    c.send(&ClientMsg::Finished { id: 1 });
    assert!(error(c.recv()).contains("no kernel 1"));
}

#[test]
fn bad_arguments_are_explained() {
    for (args, want) in [
        (vec![], "--socket is required"),
        (
            vec!["--socket", "/tmp/x", "--policy", "elastic"],
            "not one the daemon runs",
        ),
        (vec!["--socket", "/no/such/dir/s"], "no such folder"),
        (vec!["--socket", "/tmp/x", "--gpus", "-1"], "1 to 64"),
        (vec!["--socket", "/tmp/x", "--gpus", "0"], "1 to 64"),
        (vec!["--frobnicate"], "unknown argument"),
        (
            vec!["--socket", "/tmp/x", "--contexts", "maybe"],
            "`steer` or `leave`",
        ),
        (vec!["run", "--socket", "/tmp/x"], "no command to run"),
        (vec!["run", "true"], "--socket is required"),
        (
            vec!["run", "--socket", "/tmp/x", "--priority", "256", "true"],
            "0 to 255",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn malformed_messages_get_an_error_and_the_connection_goes_on() {
    let d = Daemon::start("malformed", &[]);
    let mut c = d.client();
    for body in [
        &b"not json"[..],
        b"{\"kill\":{\"id\":1}}",
        b"{\"launch\":{\"id\":1}}",
        b"\xff\xfe",
    ] {
        let mut frame = (body.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(body);
        c.0.write_all(&frame).unwrap();
        assert!(error(c.recv()).contains("not a message"));
    }
    c.launch(1, 0);
    c.send(&ClientMsg::Finished { id: 1 });
    c.sync();
    c.send(&ClientMsg::Finished { id: 1 });
    assert!(
        error(c.recv()).contains("no kernel 1"),
        "the launch was taken and finished"
    );
}

#[test]
fn an_oversized_frame_closes_that_connection_only() {
    let d = Daemon::start("oversized", &[]);
    let mut bad = d.client();
    bad.0.write_all(&(1u32 << 30).to_le_bytes()).unwrap();
    assert!(error(bad.recv()).contains("closing"));
    assert!(read_frame(&mut bad.0).is_err(), "the connection is closed");
    let mut good = d.client();
    good.send(&ClientMsg::Yielded { id: 3 });
    assert!(error(good.recv()).contains("no kernel 3"));
}

#[test]
fn a_program_can_steer_only_its_own_kernels() {
    let d = Daemon::start("own", &[]);
    let mut a = d.client();
    let mut b = d.client();
    a.launch(1, 0);
    a.sync();
    for m in [
        ClientMsg::Finished { id: 1 },
        ClientMsg::Yielded { id: 1 },
        ClientMsg::Progress { id: 1, done: 999 },
    ] {
        b.send(&m);
        assert!(error(b.recv()).contains("no kernel 1"));
    }
    // A's kernel still holds the GPU: B's launch must wait (preempted at once).
    b.launch(2, 0);
    assert_eq!(b.recv(), ServerMsg::Preempt { id: 2, sms: None });
}

#[test]
fn priorities_preempt_and_resume_across_programs() {
    let d = Daemon::start("hpf", &["--policy", "hpf"]);
    let mut batch = d.client();
    let mut urgent = d.client();
    batch.launch(1, 0);
    batch.sync();
    urgent.launch(1, 9);
    assert_eq!(batch.recv(), ServerMsg::Preempt { id: 1, sms: None });
    batch.send(&ClientMsg::Yielded { id: 1 });
    // GPU stamps are logged, never answered, and change nothing.
    batch.send(&ClientMsg::GpuTimes {
        id: 1,
        yielded_ns: Some(5_000),
        entered_ns: None,
    });
    batch.sync();
    assert!(urgent.quiet(100), "the urgent kernel keeps running");
    urgent.send(&ClientMsg::Finished { id: 1 });
    assert_eq!(batch.recv(), ServerMsg::Resume { id: 1, sms: None });
}

/// `--gpus 2`: programs are placed (urgent ones where no other urgent one is, batch ones
/// spread), each GPU's policy schedules the kernels on that GPU only, and a placement ends with
/// its connection.
#[test]
fn each_gpu_schedules_its_own_programs_and_placements_end_with_their_programs() {
    let d = Daemon::start("gpus", &["--policy", "hpf", "--gpus", "2"]);
    let (mut p1, mut p2, mut p3) = (d.client(), d.client(), d.client());
    assert_eq!(p1.place(0), 0);
    assert_eq!(p2.place(0), 1);
    assert_eq!(
        p3.place(9),
        0,
        "an urgent program goes to a GPU without urgent work"
    );
    assert!(error({
        p3.send(&ClientMsg::Place { priority: 9 });
        p3.recv()
    })
    .contains("placed its program already"));
    // GPU 0 holds two programs, GPU 1 one: a batch program goes to GPU 1.
    let mut p4 = d.client();
    assert_eq!(p4.place(0), 1);
    // A placement ends when the daemon hears its connection close, which races with other
    // connections' messages: the next program is placed as wanted once it has.
    let placed_eventually = |priority: u8, want: u32| {
        let t = Instant::now();
        loop {
            let mut c = d.client();
            if c.place(priority) == want {
                return c;
            }
            drop(c);
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "never placed on GPU {want}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    drop(p4);
    // Its program has ended: the GPUs hold two and one again.
    let _p5 = placed_eventually(0, 1);
    drop(p1);

    // The runtimes of programs on the two GPUs.
    let (mut batch0, mut batch1, mut urgent0) = (d.client(), d.client(), d.client());
    batch0.launch_on(1, 0, Some(0));
    batch1.launch_on(1, 0, Some(1));
    batch0.sync();
    batch1.sync();
    urgent0.launch_on(1, 9, Some(0));
    assert_eq!(batch0.recv(), ServerMsg::Preempt { id: 1, sms: None });
    assert!(batch1.quiet(150), "GPU 1's kernel is not GPU 0's business");
    batch0.send(&ClientMsg::Yielded { id: 1 });
    urgent0.send(&ClientMsg::Finished { id: 1 });
    assert_eq!(batch0.recv(), ServerMsg::Resume { id: 1, sms: None });
    // A connection's launches stay on one GPU, and the GPU must be one the daemon has.
    batch1.launch_on(2, 0, Some(0));
    assert!(error(batch1.recv()).contains("are on GPU 1"));
    let mut other = d.client();
    other.launch_on(1, 0, Some(2));
    assert!(error(other.recv()).contains("schedules 2 GPU(s)"));
    // Without a GPU named, a launch is on GPU 0: it waits behind the resumed batch kernel of
    // the same priority there, which runs on.
    other.launch_on(2, 0, None);
    assert_eq!(other.recv(), ServerMsg::Preempt { id: 2, sms: None });
    assert!(batch0.quiet(100));
}

/// Programs without MPS (their launches say `mps: false`): said once per GPU; with
/// `--contexts leave` left alone (told `lean`, never preempted, their reports answered by
/// nothing), with the default steered like any other.
#[test]
fn programs_in_contexts_of_their_own_are_left_alone_when_asked() {
    let launch = |c: &mut Client, id: u64, priority: u8, mps: Option<bool>| {
        c.launch_with(id, priority, None, mps)
    };
    for (mode, steered) in [("leave", false), ("steer", true)] {
        let d = Daemon::start(
            &format!("contexts-{mode}"),
            &["--policy", "hpf", "--contexts", mode],
        );
        let (mut batch, mut urgent) = (d.client(), d.client());
        launch(&mut batch, 1, 0, Some(false));
        if steered {
            batch.sync();
        } else {
            assert_eq!(batch.recv(), ServerMsg::Lean { on: true });
        }
        launch(&mut urgent, 1, 9, Some(false));
        if steered {
            assert_eq!(batch.recv(), ServerMsg::Preempt { id: 1, sms: None });
        } else {
            assert_eq!(urgent.recv(), ServerMsg::Lean { on: true });
            assert!(batch.quiet(150), "a program left alone was steered");
            // Its reports are taken without an answer, a second launch too.
            batch.send(&ClientMsg::Progress { id: 1, done: 10 });
            batch.send(&ClientMsg::Finished { id: 1 });
            launch(&mut batch, 2, 0, Some(false));
            assert!(batch.quiet(150));
            // A program with MPS beside them is scheduled as before.
            let (mut a, mut b) = (d.client(), d.client());
            launch(&mut a, 1, 0, Some(true));
            a.sync();
            launch(&mut b, 1, 9, None);
            assert_eq!(a.recv(), ServerMsg::Preempt { id: 1, sms: None });
        }
    }
}

/// `cupreemptd run` as a process: the program runs on the GPU placed (CUDA_VISIBLE_DEVICES,
/// CUPREEMPT_GPU, CUPREEMPT_SCHEDULER, CUPREEMPT_PRIORITY), holds the placement while it runs,
/// and runs unplaced where no daemon answers.
#[test]
fn run_places_the_program_and_holds_the_gpu_while_it_runs() {
    let d = Daemon::start("run", &["--policy", "hpf", "--gpus", "2"]);
    let run = |visible: Option<&str>, script: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_cupreemptd"));
        c.args(["run", "--socket"]).arg(&d.socket).args([
            "--priority",
            "9",
            "--",
            "sh",
            "-c",
            script,
        ]);
        match visible {
            Some(v) => c.env("CUDA_VISIBLE_DEVICES", v),
            None => c.env_remove("CUDA_VISIBLE_DEVICES"),
        };
        c.env_remove("CUPREEMPT_GPU").output().unwrap()
    };
    let env_line =
        "echo \"$CUDA_VISIBLE_DEVICES $CUPREEMPT_GPU $CUPREEMPT_PRIORITY $CUPREEMPT_SCHEDULER\"";
    let out = run(None, env_line);
    assert!(out.status.success(), "{out:?}");
    let sock = d.socket.display().to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("0 0 9 {sock}")
    );
    // A program that runs holds its GPU. On a daemon of its own it is the first placed: GPU 0.
    // Each probe's own placement ends only when the daemon has heard its connection close, so
    // a probe may meet an earlier one's still counted (then both GPUs hold an urgent program
    // and it ties to GPU 0): most, not all, probes show the holder's placement.
    let d2 = Daemon::start("run-hold", &["--policy", "hpf", "--gpus", "2"]);
    let sock2 = d2.socket.display().to_string();
    let probe = |want: &str| {
        let mut hits = 0;
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(100));
            let out = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
                .args(["run", "--socket"])
                .arg(&d2.socket)
                .args(["--priority", "9", "--", "sh", "-c", env_line])
                .env("CUDA_VISIBLE_DEVICES", "4,6")
                .env_remove("CUPREEMPT_GPU")
                .output()
                .unwrap();
            hits +=
                (String::from_utf8_lossy(&out.stdout).trim() == format!("{want} 9 {sock2}")) as u32;
        }
        hits
    };
    let mut holder = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
        .args(["run", "--socket"])
        .arg(&d2.socket)
        .args(["--priority", "9", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    // Placed and kept after the exec (the connection lives on in the program): the probes go
    // to GPU 1, the other entry of CUDA_VISIBLE_DEVICES.
    let held = probe("6 1");
    assert!(
        held >= 7,
        "the running program's placement was not held ({held} of 10)"
    );
    let _ = holder.kill();
    let _ = holder.wait();
    // Its end frees GPU 0.
    let freed = probe("4 0");
    assert!(freed >= 7, "GPU 0 was not freed ({freed} of 10)");
    // No daemon: unplaced, said once, and the program's own exit status comes back.
    let out = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
        .args([
            "run",
            "--socket",
            "/tmp/no-such-cupreemptd-socket",
            "sh",
            "-c",
        ])
        .arg("echo \"[$CUPREEMPT_GPU]\"; exit 3")
        .env_remove("CUPREEMPT_GPU")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    assert!(String::from_utf8_lossy(&out.stderr).contains("running the program unplaced"));
    // A command that does not exist: 127, as a shell says.
    let out = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
        .args(["run", "--socket"])
        .arg(&d.socket)
        .arg("/no/such/program")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
}

/// `--policy spatial` as a process: a launch of 40 tasks may use 40 SMs, so it is told to
/// leave the others; a second one gets SMs the first does not hold.
#[test]
fn spatial_shares_reach_programs_as_sm_sets() {
    let d = Daemon::start("spatial", &["--policy", "spatial", "--sms", "132"]);
    let sms_of = |m: ServerMsg| match m {
        ServerMsg::Preempt {
            id: 1,
            sms: Some(s),
        } => s,
        other => panic!("expected a preemption of some SMs, got {other:?}"),
    };
    let mut a = d.client();
    let launch = |c: &mut Client, tasks: u64| {
        c.send(&ClientMsg::Launch {
            id: 1,
            kernel: "share".into(),
            tasks,
            priority: 0,
            weight: 1.0,
            estimate_us: Some(1e6),
            features: None,
            kept_off: Vec::new(),
            gpu: None,
            mps: None,
        })
    };
    launch(&mut a, 40);
    let left_a = sms_of(a.recv());
    assert_eq!(left_a.len(), 132 - 40, "{left_a:?}");
    a.send(&ClientMsg::Yielded { id: 1 });
    let mut b = d.client();
    launch(&mut b, 40);
    let left_b = sms_of(b.recv());
    assert_eq!(left_b.len(), 132 - 40, "{left_b:?}");
    // Each runs on the SMs it was not told to leave: those of a and b are disjoint.
    let runs = |left: &[u32]| {
        (0..132u32)
            .filter(|s| !left.contains(s))
            .collect::<Vec<_>>()
    };
    let (ra, rb) = (runs(&left_a), runs(&left_b));
    assert!(
        ra.iter().all(|s| !rb.contains(s)),
        "{ra:?} and {rb:?} overlap"
    );
}

/// `reserve` over the socket: the program no other outranks is told it is left alone (`lean`);
/// when one of higher priority comes, the first is told otherwise, ordered off the reserve
/// (`keep_off`) and its running kernel sent off it; when that one leaves, all of it is undone.
#[test]
fn reserve_orders_reach_programs_over_the_socket() {
    let d = Daemon::start(
        "reserve",
        &["--policy", "reserve", "--reserve-sms", "4", "--sms", "132"],
    );
    let reserve = vec![128, 129, 130, 131];
    let mut batch = d.client();
    batch.launch(1, 0);
    assert_eq!(batch.recv(), ServerMsg::Lean { on: true });
    {
        let mut urgent = d.client();
        urgent.launch(1, 9);
        assert_eq!(urgent.recv(), ServerMsg::Lean { on: true });
        assert_eq!(batch.recv(), ServerMsg::Lean { on: false });
        assert_eq!(
            batch.recv(),
            ServerMsg::KeepOff {
                sms: reserve.clone()
            }
        );
        assert_eq!(
            batch.recv(),
            ServerMsg::Preempt {
                id: 1,
                sms: Some(reserve.clone())
            }
        );
        batch.send(&ClientMsg::Yielded { id: 1 });
        batch.sync();
    }
    assert_eq!(batch.recv(), ServerMsg::Lean { on: true });
    assert_eq!(batch.recv(), ServerMsg::KeepOff { sms: vec![] });
    assert_eq!(
        batch.recv(),
        ServerMsg::Resume {
            id: 1,
            sms: Some(reserve)
        }
    );
}

#[test]
fn a_program_that_dies_mid_kernel_or_mid_frame_releases_the_gpu() {
    let d = Daemon::start("dies", &["--policy", "fifo"]);
    let mut waiting = d.client();
    {
        let mut dying = d.client();
        dying.launch(1, 0);
        dying.sync();
        waiting.launch(1, 0);
        assert_eq!(waiting.recv(), ServerMsg::Preempt { id: 1, sms: None });
        waiting.send(&ClientMsg::Yielded { id: 1 });
        // Half a frame, then the program is gone.
        dying.0.write_all(&[40, 0, 0, 0, b'{']).unwrap();
    }
    assert_eq!(waiting.recv(), ServerMsg::Resume { id: 1, sms: None });
}

#[test]
fn a_stalled_program_does_not_hold_up_the_others() {
    let d = Daemon::start("stall", &[]);
    let mut stalled = d.client();
    stalled.0.write_all(&[100, 0, 0, 0, b'{', b'"']).unwrap();
    let mut other = d.client();
    other.send(&ClientMsg::Finished { id: 5 });
    assert!(error(other.recv()).contains("no kernel 5"));
}

#[test]
fn sigterm_removes_the_socket() {
    let mut d = Daemon::start("sigterm", &[]);
    // A program connected and heard (its connection accepted, a reader waiting on it): the
    // daemon still ends.
    let mut c = d.client();
    c.sync();
    let status = d.terminate();
    assert!(status.success(), "{status:?}");
    assert!(!Path::new(&d.socket).exists(), "the socket is still there");
}

#[test]
fn a_stale_socket_from_a_crash_is_replaced() {
    let dir = std::env::temp_dir().join(format!("cupreemptd-stale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap()); // left behind, nobody listens
    assert!(sock.exists());
    let mut child = Command::new(env!("CARGO_BIN_EXE_cupreemptd"))
        .arg("--socket")
        .arg(&sock)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while UnixStream::connect(&sock).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn many_programs_coming_and_going_leave_nothing_behind() {
    let d = Daemon::start("churn", &["--policy", "fifo"]);
    let mut keeper = d.client();
    keeper.launch(1, 0);
    keeper.sync();
    let mut threads = Vec::new();
    for t in 0..16 {
        let socket = d.socket.clone();
        threads.push(std::thread::spawn(move || {
            for i in 0..20u64 {
                let s = UnixStream::connect(&socket).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut c = Client(s);
                c.launch(i, (t % 3) as u8);
                // Waits behind the keeper's kernel (FIFO): told to yield; some say so, some die.
                assert_eq!(c.recv(), ServerMsg::Preempt { id: i, sms: None });
                if i % 2 == 0 {
                    c.send(&ClientMsg::Yielded { id: i });
                }
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    // Every one of them is gone (the daemon hears of each a little later): once the keeper's
    // kernel has finished, a new program's kernel soon runs at once (it is told nothing).
    keeper.send(&ClientMsg::Finished { id: 1 });
    keeper.sync();
    let t = Instant::now();
    for id in 1.. {
        let mut late = d.client();
        late.launch(id, 0);
        late.send(&ClientMsg::Finished { id: u64::MAX });
        match late.recv() {
            ServerMsg::Error { .. } => return, // ran at once: nothing of the dead remained
            ServerMsg::Preempt { .. } => {
                assert!(
                    t.elapsed() < Duration::from_secs(5),
                    "the dead programs' kernels stayed"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
