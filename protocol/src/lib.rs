//! The wire format between a program's runtime and `cupreemptd`: frames of a 4-byte
//! little-endian length and that many bytes of one JSON object. A frame longer than
//! `MAX_FRAME` or empty cannot be trusted to end where it says, so the daemon answers it with
//! an error and closes the connection; a frame that is not a message it knows gets an error and
//! the connection goes on.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// The largest frame either side sends or accepts.
pub const MAX_FRAME: usize = 64 * 1024;

/// What a program tells the daemon. `id` is the program's own number for a launch: ids are
/// per connection, so a program can name only its own kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMsg {
    /// A preemptible launch, already on the GPU when this arrives.
    Launch {
        id: u64,
        kernel: String,
        tasks: u64,
        #[serde(default)]
        priority: u8,
        #[serde(default = "one")]
        weight: f64,
        /// What the runtime expects the launch to take (µs); none: the daemon's duration
        /// model, else its default.
        #[serde(default)]
        estimate_us: Option<f64>,
        /// What the duration model predicts from: (blocks, threads per block, input bytes,
        /// dynamic shared memory bytes); unknown ones 0.
        #[serde(default)]
        features: Option<[f64; 4]>,
        /// The SMs it started preempted on: the `keep_off` order in force when it was made
        /// (none: it started on every SM).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        kept_off: Vec<u32>,
        /// The daemon's GPU the launch runs on (`CUPREEMPT_GPU`, set by `cupreemptd run`);
        /// none: GPU 0. Every launch of a connection is on one GPU.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu: Option<u32>,
        /// Whether the GPU's contexts are shared through MPS (the processes' kernels run side
        /// by side) or not (the GPU time-slices between the processes' contexts); none:
        /// unknown.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mps: Option<bool>,
    },
    /// Before a program starts (`cupreemptd run`): which of the daemon's GPUs it should use.
    /// The connection stands for the program from then on: the placement holds until it
    /// closes (the program, which inherits it, has ended).
    Place {
        #[serde(default)]
        priority: u8,
    },
    Progress {
        id: u64,
        done: u64,
    },
    /// The launch has yielded every SM after a `Preempt`.
    Yielded {
        id: u64,
    },
    /// GPU clock stamps (`%globaltimer`, ns; one clock for every process on the GPU) that
    /// changed since the last report: its latest yield's last block leaving, and a block's
    /// latest entry into the task loop (the launch starting, or a resume). The daemon logs
    /// them: the gap from one kernel's yield to the next one's entry is the switch.
    GpuTimes {
        id: u64,
        #[serde(default)]
        yielded_ns: Option<u64>,
        #[serde(default)]
        entered_ns: Option<u64>,
    },
    Finished {
        id: u64,
    },
}

fn one() -> f64 {
    1.0
}

/// What the daemon tells a program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ServerMsg {
    /// Leave the SMs `sms` (physical SM ids, `%smid`), or every SM when absent; `yielded`
    /// answers once no block of the launch works there.
    Preempt {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sms: Option<Vec<u32>>,
    },
    /// Run on the SMs `sms` again, or on every SM when absent.
    Resume {
        id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sms: Option<Vec<u32>>,
    },
    /// A standing order for the program's launches from now on: each starts preempted on the
    /// SMs `sms` (none when empty), as if a `preempt` on them had been answered, until a later
    /// `keep_off` changes it; the launch says so (`kept_off`), and a `resume` lets it there.
    /// Kernels already running are not touched. A new launch reaches the GPU before the daemon
    /// hears of it, so an order given per launch (`preempt`) comes only after it has started
    /// on those SMs.
    KeepOff {
        sms: Vec<u32>,
    },
    /// Whether the daemon leaves this program's launches alone from now on (`on`) or may
    /// steer them (off, as at the start). While on, a launch that the runtime would run as its
    /// original kernel unscheduled (short, or one wave) runs so and is not announced: making
    /// it preemptible would only slow it down. `reserve` says so to every program that no other
    /// outranks.
    Lean {
        on: bool,
    },
    /// The answer to `place`: the program runs on GPU `gpu` of the daemon's `gpus` (the
    /// `gpu`-th device the program may see).
    Placed {
        gpu: u32,
        gpus: u32,
    },
    Error {
        message: String,
    },
}

#[derive(Debug)]
pub enum FrameError {
    /// The connection ended, between frames (`clean`) or inside one.
    Closed {
        clean: bool,
    },
    /// A length of 0 or above `MAX_FRAME`.
    BadLength(usize),
    Io(io::Error),
}

/// Reads one frame's bytes.
pub fn read_frame(r: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) => return Err(FrameError::Closed { clean: got == 0 }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(FrameError::BadLength(n));
    }
    let mut buf = vec![0u8; n];
    r.read_exact(&mut buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => FrameError::Closed { clean: false },
        _ => FrameError::Io(e),
    })?;
    Ok(buf)
}

/// Writes one message as a frame.
pub fn write_msg<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::other("message longer than a frame may be"));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_lengths_are_refused() {
        let mut buf = Vec::new();
        let m = ClientMsg::Finished { id: 7 };
        write_msg(&mut buf, &m).unwrap();
        let body = read_frame(&mut buf.as_slice()).unwrap();
        assert_eq!(serde_json::from_slice::<ClientMsg>(&body).unwrap(), m);
        let stamps = ClientMsg::GpuTimes {
            id: 7,
            yielded_ns: None,
            entered_ns: Some(123),
        };
        let text = serde_json::to_string(&stamps).unwrap();
        assert_eq!(serde_json::from_str::<ClientMsg>(&text).unwrap(), stamps);
        let short: ClientMsg = serde_json::from_str(r#"{"gpu_times":{"id":7}}"#).unwrap();
        assert_eq!(
            short,
            ClientMsg::GpuTimes {
                id: 7,
                yielded_ns: None,
                entered_ns: None
            }
        );
        let huge = ((MAX_FRAME + 1) as u32).to_le_bytes();
        assert!(matches!(
            read_frame(&mut huge.as_slice()),
            Err(FrameError::BadLength(_))
        ));
        assert!(matches!(
            read_frame(&mut [0u8, 0, 0, 0].as_slice()),
            Err(FrameError::BadLength(0))
        ));
        let cut = [5u8, 0, 0, 0, b'{'];
        assert!(matches!(
            read_frame(&mut cut.as_slice()),
            Err(FrameError::Closed { clean: false })
        ));
        assert!(matches!(
            read_frame(&mut [].as_slice()),
            Err(FrameError::Closed { clean: true })
        ));
    }

    #[test]
    fn commands_name_sms_or_every_sm() {
        let all = ServerMsg::Preempt { id: 3, sms: None };
        assert_eq!(
            serde_json::to_string(&all).unwrap(),
            r#"{"preempt":{"id":3}}"#
        );
        let some: ServerMsg = serde_json::from_str(r#"{"resume":{"id":3,"sms":[0,2]}}"#).unwrap();
        assert_eq!(
            some,
            ServerMsg::Resume {
                id: 3,
                sms: Some(vec![0, 2])
            }
        );
    }

    #[test]
    fn lean_is_an_object_with_its_switch() {
        let on = ServerMsg::Lean { on: true };
        assert_eq!(
            serde_json::to_string(&on).unwrap(),
            r#"{"lean":{"on":true}}"#
        );
        assert!(serde_json::from_str::<ServerMsg>(r#"{"lean":{}}"#).is_err());
    }

    #[test]
    fn unknown_fields_and_messages_are_errors() {
        assert!(serde_json::from_str::<ClientMsg>(r#"{"finished":{"id":1,"x":2}}"#).is_err());
        assert!(serde_json::from_str::<ClientMsg>(r#"{"kill":{"id":1}}"#).is_err());
        let l: ClientMsg =
            serde_json::from_str(r#"{"launch":{"id":1,"kernel":"k","tasks":10}}"#).unwrap();
        assert!(
            matches!(l, ClientMsg::Launch { priority: 0, weight, gpu: None, .. } if weight == 1.0)
        );
    }

    #[test]
    fn placement_messages_and_a_launch_on_a_gpu() {
        let place: ClientMsg = serde_json::from_str(r#"{"place":{"priority":9}}"#).unwrap();
        assert_eq!(place, ClientMsg::Place { priority: 9 });
        let placed = ServerMsg::Placed { gpu: 1, gpus: 2 };
        assert_eq!(
            serde_json::to_string(&placed).unwrap(),
            r#"{"placed":{"gpu":1,"gpus":2}}"#
        );
        let l: ClientMsg =
            serde_json::from_str(r#"{"launch":{"id":1,"kernel":"k","tasks":10,"gpu":1}}"#).unwrap();
        assert!(matches!(
            l,
            ClientMsg::Launch {
                gpu: Some(1),
                mps: None,
                ..
            }
        ));
        let l: ClientMsg =
            serde_json::from_str(r#"{"launch":{"id":1,"kernel":"k","tasks":10,"mps":false}}"#)
                .unwrap();
        assert!(matches!(
            l,
            ClientMsg::Launch {
                mps: Some(false),
                ..
            }
        ));
    }
}
