//! `cupreemptd run --socket PATH [--priority P] [--] COMMAND [ARGS...]`: asks the daemon which
//! of its GPUs the program should use, then becomes the program (`exec`, same pid) on that
//! GPU: `CUDA_VISIBLE_DEVICES` names it (the `gpu`-th of the devices already visible, where
//! that variable is set), `CUPREEMPT_GPU` tells the runtime which of the daemon's GPUs its
//! launches are on, `CUPREEMPT_SCHEDULER` points it at the daemon, and `--priority` becomes
//! `CUPREEMPT_PRIORITY`. The placing connection is left open across `exec`: the program
//! holds it, and it closes when the program (and any child that inherited it) has ended,
//! which is how the daemon learns the GPU is free of it. A daemon that cannot be reached
//! never stops the program: it runs unplaced, said once on stderr.

use cupreempt_daemon::protocol::{read_frame, write_msg, ClientMsg, ServerMsg};
use std::ffi::OsString;
use std::os::unix::io::{AsRawFd, IntoRawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

const USAGE: &str = "usage: cupreemptd run --socket PATH [--priority P] [--] COMMAND [ARGS...]";

#[derive(Debug)]
struct Args {
    socket: PathBuf,
    priority: Option<u8>,
    command: Vec<OsString>,
}

fn args(raw: &[String]) -> Result<Args, String> {
    let mut socket = None;
    let mut priority = None;
    let mut i = 0;
    while i < raw.len() {
        let a = raw[i].as_str();
        let value = || {
            raw.get(i + 1)
                .cloned()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a {
            "--socket" => socket = Some(PathBuf::from(value()?)),
            "--priority" => {
                let v = value()?;
                priority = Some(
                    v.parse::<u8>()
                        .map_err(|_| format!("--priority {v}: a number from 0 to 255"))?,
                );
            }
            "--" => {
                i += 1;
                break;
            }
            _ if a.starts_with("--") => return Err(format!("unknown argument `{a}`\n{USAGE}")),
            _ => break,
        }
        i += 2;
    }
    let command: Vec<OsString> = raw[i.min(raw.len())..].iter().map(OsString::from).collect();
    if command.is_empty() {
        return Err(format!("no command to run\n{USAGE}"));
    }
    let socket = socket.ok_or_else(|| format!("--socket is required\n{USAGE}"))?;
    let socket = std::path::absolute(&socket).unwrap_or(socket);
    Ok(Args {
        socket,
        priority,
        command,
    })
}

/// Asks the daemon on `socket` for a GPU; the connection and the answer (`gpu`, `gpus`).
fn place(socket: &Path, priority: u8) -> Result<(UnixStream, u32, u32), String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write_msg(&mut s, &ClientMsg::Place { priority }).map_err(|e| e.to_string())?;
    let body = read_frame(&mut s).map_err(|e| format!("no answer ({e:?})"))?;
    match serde_json::from_slice::<ServerMsg>(&body) {
        Ok(ServerMsg::Placed { gpu, gpus }) => Ok((s, gpu, gpus)),
        Ok(ServerMsg::Error { message }) => Err(message),
        Ok(other) => Err(format!("unexpected answer {other:?}")),
        Err(e) => Err(format!("not an answer: {e}")),
    }
}

/// The device to make visible for the daemon's GPU `gpu`: the `gpu`-th entry of
/// `CUDA_VISIBLE_DEVICES` where it is set (the daemon's GPUs are the devices this user sees),
/// else `gpu` itself.
pub fn visible_device(visible: Option<&str>, gpu: u32) -> Result<String, String> {
    match visible.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(gpu.to_string()),
        Some(list) => {
            let entries: Vec<&str> = list.split(',').map(str::trim).collect();
            entries
                .get(gpu as usize)
                .map(|e| e.to_string())
                .ok_or_else(|| {
                    format!(
                        "the daemon placed the program on its GPU {gpu}, but CUDA_VISIBLE_DEVICES \
                     `{list}` lists {} device(s)",
                        entries.len()
                    )
                })
        }
    }
}

pub fn main(raw: &[String]) -> ExitCode {
    let a = match args(raw) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cupreemptd run: {e}");
            return ExitCode::from(2);
        }
    };
    let priority = a.priority.unwrap_or_else(|| {
        std::env::var("CUPREEMPT_PRIORITY")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    });
    let mut cmd = Command::new(&a.command[0]);
    cmd.args(&a.command[1..]);
    cmd.env("CUPREEMPT_SCHEDULER", &a.socket);
    if let Some(p) = a.priority {
        cmd.env("CUPREEMPT_PRIORITY", p.to_string());
    }
    let placed = place(&a.socket, priority).and_then(|(s, gpu, gpus)| {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let device = visible_device(visible.as_deref(), gpu)?;
        // Kept open in the program: its end tells the daemon the GPU is free of it.
        // SAFETY: fcntl on a descriptor this process owns.
        let flags = unsafe { libc::fcntl(s.as_raw_fd(), libc::F_GETFD) };
        // SAFETY: as above; clears only FD_CLOEXEC.
        if flags < 0
            || unsafe { libc::fcntl(s.as_raw_fd(), libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0
        {
            return Err(format!(
                "could not keep the connection open: {}",
                std::io::Error::last_os_error()
            ));
        }
        let _ = s.into_raw_fd();
        Ok((gpu, gpus, device))
    });
    match placed {
        Ok((gpu, gpus, device)) => {
            cmd.env("CUDA_VISIBLE_DEVICES", &device);
            cmd.env("CUPREEMPT_GPU", gpu.to_string());
            if std::env::var_os("CUPREEMPT_VERBOSE").is_some() {
                eprintln!(
                    "cupreemptd run: placed on GPU {gpu} of {gpus} (CUDA_VISIBLE_DEVICES={device})"
                );
            }
        }
        Err(e) => eprintln!(
            "cupreemptd run: {}: {e}; running the program unplaced",
            a.socket.display()
        ),
    }
    let e = cmd.exec();
    eprintln!(
        "cupreemptd run: {}: {e}",
        Path::new(&a.command[0]).display()
    );
    ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placed_gpu_is_named_among_the_visible_devices() {
        assert_eq!(visible_device(None, 1).unwrap(), "1");
        assert_eq!(visible_device(Some(""), 0).unwrap(), "0");
        assert_eq!(visible_device(Some("3,5"), 1).unwrap(), "5");
        assert_eq!(visible_device(Some("GPU-aa, GPU-bb"), 0).unwrap(), "GPU-aa");
        assert!(visible_device(Some("3"), 1).is_err());
    }

    #[test]
    fn arguments_and_their_errors() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let a = args(&s(&[
            "--socket",
            "/tmp/x",
            "--priority",
            "9",
            "--",
            "prog",
            "--flag",
        ]))
        .unwrap();
        assert_eq!(a.priority, Some(9));
        assert_eq!(
            a.command,
            vec![OsString::from("prog"), OsString::from("--flag")]
        );
        let b = args(&s(&["--socket", "/tmp/x", "prog", "--priority", "3"])).unwrap();
        assert_eq!(
            b.priority, None,
            "options after the command are the command's"
        );
        assert_eq!(b.command.len(), 3);
        assert!(args(&s(&["--socket", "/tmp/x"]))
            .unwrap_err()
            .contains("no command"));
        assert!(args(&s(&["prog"])).unwrap_err().contains("--socket"));
        assert!(args(&s(&["--socket", "/tmp/x", "--priority", "300", "p"]))
            .unwrap_err()
            .contains("0 to 255"));
        assert!(args(&s(&["--socket", "/tmp/x", "--bogus", "p"]))
            .unwrap_err()
            .contains("unknown"));
    }
}
