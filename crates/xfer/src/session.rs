//! The session both directions share: the options of `xfer send`, the
//! authenticated connection to the server (handshake), and what an attempt
//! comes to (its outcome, or an error that may be retried).

use crate::autotune::AutoOpts;
use crate::conn::Conn;
use crate::crypt::Crypto;
use crate::limiter::{Limiter, RateChange, RatePlan};
use crate::monitor::TcpRow;
use crate::profile::Profile;
use crate::proto::*;
use crate::sock;
use anyhow::{Context, Result};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct SendOpts {
    pub src: SrcSpec,
    pub host: String,
    pub port: u16,
    pub sink: Sink,
    /// Data connections; with `--streams auto`, the most the search may
    /// open (announced to the receiver).
    pub streams: u32,
    /// `--streams auto`: the search's start and ceiling.
    pub auto: Option<AutoOpts>,
    pub mode: Option<Mode>,
    pub chunk: u32,
    pub rate_bps: Option<u64>,
    pub deadline: Option<Duration>,
    pub size: Option<u64>,
    pub cc: Option<String>,
    pub sndbuf: Option<usize>,
    pub rcvbuf: Option<usize>,
    pub hash: bool,
    pub resume: Option<bool>,
    pub retries: u32,
    pub auth: Auth,
    /// `--encrypt`, `--plaintext` or the default.
    pub crypto: Crypto,
    pub json: Option<std::path::PathBuf>,
    pub interval: Duration,
    pub progress: bool,
    pub quiet: bool,
    /// The source must be exactly this many bytes, or nothing is committed.
    pub expect_size: Option<u64>,
    /// DEST ended in '/': the directory must exist on the server.
    pub parent_must_exist: bool,
    /// Test hook: the receiver fails the first attempt once it has written
    /// this many bytes (see `Session::wrote` in server.rs).
    pub fault_reset_after: Option<u64>,
    /// Test hook: the senders (the server's, for a pull) stop once this many
    /// bytes went out, and wait for their connections to close.
    pub fault_stall_after: Option<u64>,
    /// Test hook: a command run (sh -c) before each retry.
    pub fault_before_retry: Option<String>,
    /// Test hook: each data socket paced to this many bit/s, so that more
    /// streams carry more even on loopback (`--streams auto` tests).
    pub test_stream_rate: Option<u64>,
    pub args: Vec<String>,
    /// `--rate-profile` (else `--rate`/`--deadline` make a one-step plan).
    pub profile: Option<Profile>,
    pub limiter: Limiter,
    pub timer_hz: u32,
    /// When the data starts: `--start-at`, `--start-after-signal`.
    pub start_at: Option<f64>,
    pub connect_ahead: Duration,
    pub start_after_signal: Option<String>,
    /// `--signal-done`: tell this listener once the transfer is committed.
    pub signal_done: Option<SocketAddr>,
    pub signal_token: String,
}

pub enum SrcSpec {
    Path(std::path::PathBuf),
    Stdin,
    Mem(u64),
    Cmd(String),
    /// Pull the file named by `sink` from the server (see pull.rs).
    Pull(PullDest),
}

pub enum PullDest {
    File(std::path::PathBuf),
    Stdout,
}

pub(crate) struct Outcome {
    pub done: Done,
    pub resumed: u64,
    pub elapsed: f64,
    pub rate_bps: Option<u64>,
    pub mode: Mode,
    pub tcp: Vec<TcpRow>,
    pub e2e: Option<String>,
    /// The rate plan followed (None: unlimited), and its steps as applied.
    pub plan: Option<RatePlan>,
    pub changes: Vec<RateChange>,
    /// Unix time the receiver's verdict arrived.
    pub end_unix: f64,
    /// Every connection of the attempt was encrypted.
    pub encrypted: bool,
    /// `--streams auto`: the search's measured ticks (empty otherwise).
    pub auto_steps: Vec<crate::autotune::AutoStep>,
    /// The data connections opened.
    pub streams: u32,
}

#[derive(Debug)]
pub(crate) struct AttemptError {
    pub err: anyhow::Error,
    /// True once data moved: a retry can then resume from the journal.
    pub retriable: bool,
}

impl<E: Into<anyhow::Error>> From<E> for AttemptError {
    fn from(e: E) -> Self {
        AttemptError {
            err: e.into(),
            retriable: false,
        }
    }
}

/// The error of an attempt that may be retried (resumed) if `retriable`.
pub(crate) fn failing(retriable: bool) -> impl Fn(anyhow::Error) -> AttemptError + Copy {
    move |err| AttemptError { err, retriable }
}

/// What opening a connection takes, apart from the options (a data
/// connection opened by the `--streams auto` driver, on its own thread).
#[derive(Clone)]
pub(crate) struct Dial {
    sndbuf: Option<usize>,
    rcvbuf: Option<usize>,
    cc: Option<String>,
    auth: Auth,
    crypto: Crypto,
    test_stream_rate: Option<u64>,
}

impl SendOpts {
    pub(crate) fn dial(&self) -> Dial {
        Dial {
            sndbuf: self.sndbuf,
            rcvbuf: self.rcvbuf,
            cc: self.cc.clone(),
            auth: self.auth.clone(),
            crypto: self.crypto,
            test_stream_rate: self.test_stream_rate,
        }
    }
}

pub(crate) fn connect(o: &SendOpts, addr: SocketAddr, data: bool) -> Result<Conn> {
    dial(&o.dial(), addr, data)
}

fn dial(o: &Dial, addr: SocketAddr, data: bool) -> Result<Conn> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )?;
    if data {
        // Buffers must be set before connect to take part in window scaling.
        if let Some(b) = o.sndbuf {
            sock::set_buffer(&s, sock::Buffer::Send, "--sndbuf", b)?;
        }
        if let Some(b) = o.rcvbuf {
            sock::set_buffer(&s, sock::Buffer::Receive, "--rcvbuf", b)?;
        }
        if let Some(cc) = &o.cc {
            sock::set_cc(&s, cc)?;
        }
    }
    s.connect_timeout(&addr.into(), Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(30))
            .with_interval(Duration::from_secs(10))
            .with_retries(6),
    )?;
    let t: TcpStream = s.into();
    t.set_read_timeout(Some(Duration::from_secs(30)))?;
    let c = Conn::client(t, &o.auth, o.crypto)?;
    c.set_read_timeout(None)?;
    if let (true, Some(bps)) = (data, o.test_stream_rate) {
        sock::set_pacing(&c, (bps / 8).max(1))?;
    }
    Ok(c)
}

/// Opens data connection `stream` and joins it to `session`.
pub(crate) fn join_data(o: &Dial, addr: SocketAddr, session: &str, stream: u32) -> Result<Conn> {
    let mut c = dial(o, addr, true)?;
    let join = Open::Data {
        session: session.to_string(),
        stream,
    };
    send_msg(&mut c, &join)?;
    match recv_msg::<_, Reply>(&mut c)? {
        Reply::Joined => Ok(c),
        Reply::Reject(m) => anyhow::bail!("server refused data stream: {m}"),
        _ => anyhow::bail!("protocol error"),
    }
}
