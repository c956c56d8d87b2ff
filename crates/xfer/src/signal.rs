//! Direct signalling between transfers (seed 001 §2.2): the sender of a
//! transfer that has just committed tells the next one to start. The cost is
//! a TCP three-way handshake whose last segment carries the signal, 1.5 RTT,
//! plus the processing at both ends, so the signal is one line sent at
//! once, not a challenge–response (which would add a round trip):
//!
//! `XFERSIG1 <token> <sent> <nonce> <mac>\n`, where `sent` is the sender's
//! Unix time, `nonce` 16 random bytes in hex and `mac` the hex
//! HMAC-SHA256(key, "xfer-signal-v1 " ‖ the line up to the nonce), or `-`
//! without a key (loopback only). The listener answers `ok` or `refused: why`.
//! The token names the link of the chain: a fresh one per link (the scheduler
//! knows them) stops a signal recorded on another link from being replayed;
//! the listener takes one signal and closes.

use crate::proto::Auth;
use crate::util::{hex, random_bytes, unix_now, usage};
use anyhow::{anyhow, bail, Context, Result};
use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const MAGIC: &str = "XFERSIG1";
const LABEL: &[u8] = b"xfer-signal-v1 ";
/// Longest line a listener reads.
const MAX_LINE: u64 = 1024;
/// A peer must send its line this soon after connecting.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a sender keeps trying a listener that is not up yet.
const CONNECT_FOR: Duration = Duration::from_secs(30);

type HmacSha256 = Hmac<Sha256>;

/// The signal as the listener took it (`run.start.signal` in the trace).
#[derive(Serialize, Clone, Debug)]
pub struct Received {
    /// The address listened on.
    pub listen: String,
    /// Who sent it.
    pub peer: String,
    /// Unix time it was read and verified (this host's clock).
    pub received: f64,
    /// Unix time the peer says it sent it (the peer's clock).
    pub sent: f64,
}

/// What `--signal-done` did (`run.signal_done` in the trace); Unix times.
#[derive(Serialize, Clone, Debug)]
pub struct Sent {
    pub addr: String,
    /// The receiver's verdict (the commit) arrived.
    pub committed: f64,
    /// The connection to the listener was up.
    pub connected: Option<f64>,
    /// The line was written.
    pub sent: Option<f64>,
    /// The listener's `ok` arrived.
    pub acked: Option<f64>,
    pub error: Option<String>,
}

/// Checks a token given on the command line: 1 to 128 printable ASCII
/// characters, no spaces (it travels inside a space-separated line).
pub fn check_token(t: &str) -> Result<()> {
    if t.is_empty() || t.len() > 128 || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(usage(format!(
            "--signal-token {t:?} must be 1 to 128 printable characters without spaces"
        )));
    }
    Ok(())
}

fn mac(key: &[u8], body: &str) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("hmac accepts any key length");
    m.update(LABEL);
    m.update(body.as_bytes());
    m
}

/// The signal line for `token`, stamped `now` (Unix time).
fn signal_line(token: &str, auth: &Auth, now: f64) -> Result<String> {
    let body = format!("{MAGIC} {token} {now:.6} {}", hex(&random_bytes::<16>()?));
    let tag = match auth {
        Auth::Key(k) => hex(&mac(k, &body).finalize().into_bytes()),
        Auth::Insecure => "-".into(),
    };
    Ok(format!("{body} {tag}\n"))
}

/// Checks a received line; returns the sender's stamp and its nonce.
fn check_line(line: &str, token: &str, auth: &Auth) -> std::result::Result<(f64, String), String> {
    let parts: Vec<&str> = line.trim_end().split(' ').collect();
    let [magic, tok, sent, nonce, tag] = parts[..] else {
        return Err("not an xfer start signal".into());
    };
    if magic != MAGIC {
        return Err("not an xfer start signal".into());
    }
    let body = format!("{magic} {tok} {sent} {nonce}");
    match auth {
        Auth::Key(k) => {
            let tag = unhex(tag).ok_or("bad authentication tag")?;
            mac(k, &body)
                .verify_slice(&tag)
                .map_err(|_| "wrong key (authentication failed)")?;
        }
        Auth::Insecure if tag != "-" => {
            return Err("signed with a key, but this side has none (--insecure)".into())
        }
        Auth::Insecure => {}
    }
    if tok != token {
        return Err(format!("token {tok:?} is not the one awaited"));
    }
    let sent: f64 = sent.parse().map_err(|_| "bad time stamp")?;
    Ok((sent, nonce.to_string()))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `--start-after-signal ADDR`: bound when the command starts, so a signal
/// sent while this side is still connecting waits in the accept queue.
pub struct SignalListener {
    listener: TcpListener,
    addr: SocketAddr,
    token: String,
    auth: Auth,
}

impl SignalListener {
    pub fn bind(addr: &str, token: &str, auth: &Auth) -> Result<SignalListener> {
        let a: SocketAddr = addr.parse().map_err(|_| {
            usage(format!(
                "--start-after-signal {addr:?} is not IP:PORT (example: 127.0.0.1:7600)"
            ))
        })?;
        if matches!(auth, Auth::Insecure) && !a.ip().is_loopback() {
            return Err(usage(format!(
                "no key: --start-after-signal listens on a loopback address only ({a}); pass --key-file"
            )));
        }
        let listener = TcpListener::bind(a).with_context(|| format!("listening on {a}"))?;
        let addr = listener.local_addr()?;
        Ok(SignalListener {
            listener,
            addr,
            token: token.to_string(),
            auth: auth.clone(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until a peer sends a valid signal; refuses (and logs) the
    /// others and keeps waiting.
    pub fn wait(&self) -> Result<Received> {
        let mut seen = std::collections::HashSet::new();
        loop {
            let (conn, peer) = self
                .listener
                .accept()
                .context("waiting for a start signal")?;
            match self.take(conn, &mut seen) {
                Ok((sent, received)) => {
                    return Ok(Received {
                        listen: self.addr.to_string(),
                        peer: peer.to_string(),
                        received,
                        sent,
                    })
                }
                Err(e) => eprintln!("xfer: refused a start signal from {peer}: {e}"),
            }
        }
    }

    /// Reads and checks one peer's line, and answers it.
    fn take(
        &self,
        conn: TcpStream,
        seen: &mut std::collections::HashSet<String>,
    ) -> std::result::Result<(f64, f64), String> {
        let _ = conn.set_nodelay(true);
        let _ = conn.set_read_timeout(Some(PEER_TIMEOUT));
        let mut line = String::new();
        let read = BufReader::new((&conn).take(MAX_LINE)).read_line(&mut line);
        let received = unix_now();
        let verdict = match read {
            Ok(_) if line.ends_with('\n') => check_line(&line, &self.token, &self.auth),
            Ok(_) => Err("no complete line".into()),
            Err(e) => Err(format!("reading: {e}")),
        }
        .and_then(|(sent, nonce)| {
            seen.insert(nonce)
                .then_some((sent, received))
                .ok_or_else(|| "a replayed signal".to_string())
        });
        let reply = match &verdict {
            Ok(_) => "ok\n".to_string(),
            Err(e) => format!("refused: {e}\n"),
        };
        let _ = (&conn).write_all(reply.as_bytes());
        verdict
    }
}

/// Resolves `--signal-done ADDR` (HOST:PORT) and refuses a non-loopback
/// peer without a key.
pub fn resolve(addr: &str, auth: &Auth) -> Result<SocketAddr> {
    let a = addr
        .to_socket_addrs()
        .map_err(|_| usage(format!("--signal-done {addr:?} is not HOST:PORT")))?
        .next()
        .ok_or_else(|| usage(format!("--signal-done {addr:?}: no address")))?;
    if matches!(auth, Auth::Insecure) && !a.ip().is_loopback() {
        return Err(usage(format!(
            "no key: --signal-done goes to a loopback address only ({a}); pass --key-file"
        )));
    }
    Ok(a)
}

/// `--signal-done`: tells the listener at `addr` to start, right after the
/// commit. Keeps trying a listener that is not up yet for `CONNECT_FOR`.
pub fn send_signal(addr: SocketAddr, token: &str, auth: &Auth, committed: f64) -> Sent {
    let mut out = Sent {
        addr: addr.to_string(),
        committed,
        connected: None,
        sent: None,
        acked: None,
        error: None,
    };
    if let Err(e) = signal_once(addr, token, auth, &mut out) {
        out.error = Some(format!("{e:#}"));
    }
    out
}

fn signal_once(addr: SocketAddr, token: &str, auth: &Auth, out: &mut Sent) -> Result<()> {
    let give_up = Instant::now() + CONNECT_FOR;
    let mut conn = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(c) => break c,
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < give_up =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(anyhow!(e).context(format!("connecting to {addr}"))),
        }
    };
    out.connected = Some(unix_now());
    conn.set_nodelay(true)?;
    // Stamped just before it goes: the listener may read it before write()
    // returns here.
    let now = unix_now();
    let line = signal_line(token, auth, now)?;
    out.sent = Some(now);
    conn.write_all(line.as_bytes())
        .context("sending the signal")?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reply = String::new();
    BufReader::new((&conn).take(MAX_LINE))
        .read_line(&mut reply)
        .context("reading the listener's answer")?;
    match reply.trim_end() {
        "ok" => {
            out.acked = Some(unix_now());
            Ok(())
        }
        "" => bail!("the listener at {addr} closed without an answer"),
        r => bail!("the listener at {addr} {r}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Auth {
        Auth::Key(k.as_bytes().to_vec())
    }

    #[test]
    fn lines_check_key_token_and_form() {
        let k = key("0123456789abcdef");
        let line = signal_line("link-7", &k, unix_now()).unwrap();
        assert!(line.starts_with("XFERSIG1 link-7 ") && line.ends_with('\n'));
        let (sent, nonce) = check_line(&line, "link-7", &k).unwrap();
        assert!((sent - unix_now()).abs() < 5.0 && nonce.len() == 32);
        assert!(check_line(&line, "link-8", &k)
            .unwrap_err()
            .contains("token"));
        let e = check_line(&line, "link-7", &key("fedcba9876543210")).unwrap_err();
        assert!(e.contains("wrong key"), "{e}");
        assert!(check_line(&line, "link-7", &Auth::Insecure).is_err());
        // A changed token or stamp breaks the tag.
        let forged = line.replacen("link-7", "link-8", 1);
        assert!(check_line(&forged, "link-8", &k)
            .unwrap_err()
            .contains("wrong key"));
        let plain = signal_line("t", &Auth::Insecure, unix_now()).unwrap();
        assert!(check_line(&plain, "t", &Auth::Insecure).is_ok());
        assert!(check_line(&plain, "t", &k).is_err());
        assert!(check_line("hello\n", "t", &k).is_err());
        assert!(check_token("a b").is_err() && check_token("").is_err());
        check_token("req-3/run-0x7f").unwrap();
    }

    #[test]
    fn a_signal_over_loopback_and_a_refused_one() {
        let k = key("0123456789abcdef");
        let l = SignalListener::bind("127.0.0.1:0", "go", &k).unwrap();
        let addr = l.local_addr();
        let t = std::thread::spawn(move || l.wait().unwrap());
        // A wrong key is refused with the reason, and the listener waits on.
        let bad = send_signal(addr, "go", &key("fedcba9876543210"), unix_now());
        assert!(
            bad.error.as_deref().unwrap().contains("wrong key"),
            "{bad:?}"
        );
        let s = send_signal(addr, "go", &k, unix_now());
        assert!(s.error.is_none(), "{s:?}");
        let r = t.join().unwrap();
        assert!(r.received >= r.sent - 1e-3);
        assert!(s.acked.unwrap() >= s.sent.unwrap());
        assert!(SignalListener::bind("10.0.0.1:0", "go", &Auth::Insecure).is_err());
    }
}
