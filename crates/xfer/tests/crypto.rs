//! Encrypted connections (docs/xfer.md, Security): round trips with
//! `--encrypt`, the default by address, mode mismatches and wrong keys
//! refused, and a man in the middle (a proxy in this test) that flips,
//! drops, replays or cuts one encrypted message of a connection: the
//! transfer fails with an integrity error and nothing is committed.
//!
//! The proxy alters the k-th Noise message of one direction of one
//! connection, counted from the start, and the transfers are long enough
//! that message k always comes before their end: no fault races the end
//! of a transfer.

mod common;
use common::*;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// One bit of the ciphertext flipped.
    Flip,
    /// The message left out.
    Drop,
    /// The message sent twice.
    Replay,
    /// The connection cut in the middle of the message.
    CutMid,
    /// The connection cut right after the message (a clean end, early).
    CutAfter,
}

/// Bytes before the first length-prefixed message: the client's
/// authentication answer (nonce, mode, MAC); the server's hello and proof.
const TO_SERVER_PREFIX: usize = 65;
const TO_CLIENT_PREFIX: usize = 39 + 33;

struct Mitm {
    addr: String,
    /// Set once the fault was applied.
    hit: Arc<AtomicBool>,
}

impl Mitm {
    /// A proxy to `target` that applies `fault` to message `msg` (0 is the
    /// Noise handshake message) of connection `conn` (0: the first one
    /// accepted, the control connection), in the direction to the server
    /// or to the client. Every other byte passes unchanged.
    fn start(target: &str, conn: usize, to_server: bool, msg: usize, fault: Fault) -> Mitm {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let hit = Arc::new(AtomicBool::new(false));
        let (target, h) = (target.to_string(), hit.clone());
        std::thread::spawn(move || {
            for (i, c) in l.incoming().enumerate() {
                let Ok(down) = c else { return };
                let Ok(up) = TcpStream::connect(&target) else {
                    return;
                };
                let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                let faulty = (i == conn).then(|| (msg, fault, h.clone()));
                let (f_up, f_down) = match to_server {
                    true => (faulty, None),
                    false => (None, faulty),
                };
                std::thread::spawn(move || pump(down, up, TO_SERVER_PREFIX, f_up));
                std::thread::spawn(move || pump(u2, d2, TO_CLIENT_PREFIX, f_down));
            }
        });
        Mitm { addr, hit }
    }

    fn dest(&self, path: &str) -> String {
        format!("{}:{path}", self.addr)
    }
}

type Faulty = Option<(usize, Fault, Arc<AtomicBool>)>;

/// Copies `from` to `to`, applying the fault if any, then closes `to`'s
/// writing side (after a cut: `to` closed, `from` drained).
fn pump(mut from: TcpStream, mut to: TcpStream, prefix: usize, faulty: Faulty) {
    if let Some((msg, fault, hit)) = faulty {
        let _ = tamper(&mut from, &mut to, prefix, msg, fault, &hit);
        if matches!(fault, Fault::CutMid | Fault::CutAfter) {
            // The receiving end sees the cut; the sending end is drained
            // (so it learns of the failure from the receiver, not from us).
            let _ = to.shutdown(Shutdown::Both);
            let _ = std::io::copy(&mut from, &mut std::io::sink());
            return;
        }
    }
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Forwards the prefix and messages up to `msg`, then applies the fault
/// to it (setting `hit`). None if the stream ended first.
fn tamper(
    from: &mut TcpStream,
    to: &mut TcpStream,
    prefix: usize,
    msg: usize,
    fault: Fault,
    hit: &AtomicBool,
) -> Option<()> {
    // The prefix passes as it comes (the server's proof waits for the
    // client's answer to its hello).
    let mut left = prefix;
    let mut buf = [0u8; 128];
    while left > 0 {
        let n = from.read(&mut buf[..left.min(128)]).ok()?;
        if n == 0 {
            return None;
        }
        to.write_all(&buf[..n]).ok()?;
        left -= n;
    }
    for i in 0.. {
        let mut len = [0u8; 2];
        from.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
        from.read_exact(&mut body).ok()?;
        let mut m = len.to_vec();
        m.extend_from_slice(&body);
        if i < msg {
            to.write_all(&m).ok()?;
            continue;
        }
        // Said before the fault takes effect: the test may look right after.
        hit.store(true, Ordering::SeqCst);
        match fault {
            Fault::Flip => {
                let k = m.len() / 2;
                m[k] ^= 0x10;
                to.write_all(&m).ok()?;
            }
            Fault::Drop => {}
            Fault::Replay => {
                to.write_all(&m).ok()?;
                to.write_all(&m).ok()?;
            }
            Fault::CutMid => to.write_all(&m[..m.len() / 2]).ok()?,
            Fault::CutAfter => to.write_all(&m).ok()?,
        }
        return Some(());
    }
    None
}

fn run_encrypted(j: &serde_json::Value) -> bool {
    j["run"]["encrypted"].as_bool().expect("run.encrypted")
}

#[test]
fn encrypted_push_and_pull_round_trip_bit_exact() {
    let td = TempDir::new("enc");
    // The server on loopback takes either; the client asks for encryption.
    let srv = Server::start(&td, &["--allow-cmd"]);
    let d = data((9 << 20) + 4321, 5);
    std::fs::write(td.p("src.bin"), &d).unwrap();
    for p in ["1", "4"] {
        let json = td.p(&format!("t{p}.json")).display().to_string();
        let dest = format!("/f{p}.bin");
        let e = ok(&xfer(
            &td,
            &[
                "--encrypt",
                "-P",
                p,
                "--json",
                &json,
                "src.bin",
                &srv.dest(&dest),
            ],
        ));
        assert!(e.contains("verified"), "{e}");
        same(&td.p("src.bin"), &td.root().join(&dest[1..]));
        assert!(run_encrypted(&json_file(&json)));
        // A pipe (stream mode), from stdin.
        let o = xfer_in(
            &[],
            &td,
            &[
                "--encrypt",
                "-P",
                p,
                "-",
                &srv.dest(&format!("/pipe{p}.bin")),
            ],
            Some(&d),
        );
        ok(&o);
        same(&td.p("src.bin"), &td.root().join(format!("pipe{p}.bin")));
        // Pulls, into a file and to stdout.
        let name = format!("pulled{p}.bin");
        ok(&xfer(
            &td,
            &["--encrypt", "-P", p, &srv.dest("/f1.bin"), &name],
        ));
        same(&td.p("src.bin"), &td.p(&name));
        let o = xfer(&td, &["--encrypt", "-P", p, &srv.dest("/f1.bin"), "-"]);
        ok(&o);
        assert!(o.stdout == d, "stdout differs");
    }
    // A producer into a consumer.
    let o = xfer(
        &td,
        &[
            "--encrypt",
            "-P",
            "4",
            "--from-cmd",
            "cat src.bin",
            &srv.addr,
            "--to-cmd",
            "cat > piped.bin",
        ],
    );
    ok(&o);
    same(&td.p("src.bin"), &td.root().join("piped.bin"));
    let log = srv.log();
    assert_eq!(log.matches("encrypted)").count(), 9, "{log}");
    assert!(!log.contains("plaintext"), "{log}");
}

fn json_file(p: &str) -> serde_json::Value {
    json(std::path::Path::new(p))
}

#[test]
fn server_encrypt_flag_applies_on_loopback_and_default_is_plaintext() {
    let td = TempDir::new("encdef");
    std::fs::write(td.p("src.bin"), data(3 << 20, 6)).unwrap();
    let plain = Server::start(&td, &[]);
    let j = td.p("plain.json").display().to_string();
    ok(&xfer(
        &td,
        &["--json", &j, "src.bin", &plain.dest("/a.bin")],
    ));
    assert!(
        !run_encrypted(&json_file(&j)),
        "loopback is plaintext by default"
    );
    assert!(plain.log().contains("stripe, plaintext)"));
    // A server with --encrypt: a default client follows it.
    let enc = Server::start(&td, &["--encrypt"]);
    let j = td.p("enc.json").display().to_string();
    ok(&xfer(&td, &["--json", &j, "src.bin", &enc.dest("/b.bin")]));
    assert!(run_encrypted(&json_file(&j)));
    same(&td.p("src.bin"), &td.root().join("b.bin"));
}

#[test]
fn mode_mismatch_and_wrong_key_are_refused() {
    let td = TempDir::new("encmis");
    std::fs::write(td.p("src.bin"), data(1 << 20, 7)).unwrap();
    let enc = Server::start(&td, &["--encrypt"]);
    let plain = Server::start(&td, &["--plaintext"]);
    for (srv, flag, want) in [
        (&enc, "--plaintext", "drop --plaintext"),
        (&plain, "--encrypt", "refusing to send in the clear"),
    ] {
        for args in [
            vec![flag, "src.bin", &srv.dest("/m.bin")],
            vec![flag, &srv.dest("/x.bin"), "pulled.bin"],
        ] {
            let o = xfer(&td, &args);
            let e = failed(&o);
            assert_eq!(o.status.code(), Some(1), "{e}");
            assert!(
                e.contains("encryption mode mismatch") && e.contains(want),
                "{e}"
            );
            assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
        }
    }
    // A wrong key, encrypted or not.
    let bad = td.p("badkey").display().to_string();
    for srv in [&enc, &plain] {
        let e = failed(&xfer(
            &td,
            &["--key-file", &bad, "src.bin", &srv.dest("/k.bin")],
        ));
        assert!(e.contains("rejected authentication"), "{e}");
    }
    // --encrypt needs a key; both flags at once make no sense.
    let o = xfer(
        &td,
        &["--encrypt", "--insecure", "src.bin", &enc.dest("/i.bin")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", failed(&o));
    let o = xfer(
        &td,
        &["--encrypt", "--plaintext", "src.bin", &enc.dest("/i.bin")],
    );
    assert_eq!(o.status.code(), Some(2), "{}", failed(&o));
    assert!(std::fs::read_dir(td.root()).unwrap().next().is_none());
}

/// A push through the proxy that alters message `msg` of the first data
/// connection; it must fail, with nothing under the destination's name.
fn tampered_push(fault: Fault, msg: usize) {
    let td = TempDir::new("mitm");
    let srv = Server::start(&td, &[]);
    std::fs::write(td.p("src.bin"), data(16 << 20, 8)).unwrap();
    let mitm = Mitm::start(&srv.addr, 1, true, msg, fault);
    let o = xfer(
        &td,
        &[
            "--encrypt",
            "-P",
            "1",
            "--retries",
            "0",
            "src.bin",
            &mitm.dest("/t.bin"),
        ],
    );
    let e = failed(&o);
    assert!(mitm.hit.load(Ordering::SeqCst), "{fault:?} not applied");
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!td.root().join("t.bin").exists(), "{fault:?}: committed");
    let want = match fault {
        Fault::CutMid => "in the middle of an encrypted message",
        Fault::CutAfter => "connection lost",
        _ => "integrity check failed",
    };
    let t = std::time::Instant::now();
    while !srv.log().contains(want) {
        let log = srv.log();
        assert!(
            t.elapsed().as_secs() < 10,
            "{fault:?}: {want:?} not in {log}; client: {e}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The server still serves, encrypted, bit for bit.
    ok(&xfer(&td, &["--encrypt", "src.bin", &srv.dest("/ok.bin")]));
    same(&td.p("src.bin"), &td.root().join("ok.bin"));
}

#[test]
fn tampered_push_fails_with_an_integrity_error() {
    for f in [
        Fault::Flip,
        Fault::Drop,
        Fault::Replay,
        Fault::CutMid,
        Fault::CutAfter,
    ] {
        // Message 100: about 6 MiB into a 16 MiB stream.
        tampered_push(f, 100);
    }
}

#[test]
fn tampered_control_and_pull_fail_cleanly() {
    let td = TempDir::new("mitmpull");
    let srv = Server::start(&td, &[]);
    std::fs::write(td.root().join("src.bin"), data(16 << 20, 9)).unwrap();
    std::fs::write(td.p("src.bin"), data(1 << 20, 9)).unwrap();
    for f in [Fault::Flip, Fault::Drop, Fault::CutMid] {
        // Message 100 from the server on the first data connection.
        let mitm = Mitm::start(&srv.addr, 1, false, 100, f);
        let o = xfer(
            &td,
            &["--encrypt", "-P", "1", &mitm.dest("/src.bin"), "got.bin"],
        );
        let e = failed(&o);
        assert!(mitm.hit.load(Ordering::SeqCst), "{f:?} not applied: {e}");
        if f != Fault::CutMid {
            assert!(e.contains("integrity check failed"), "{f:?}: {e}");
        }
        assert!(!td.p("got.bin").exists() && !td.p(".got.bin.xfer-part").exists());
    }
    // The request on the control connection (message 1) altered: refused.
    let mitm = Mitm::start(&srv.addr, 0, true, 1, Fault::Flip);
    let e = failed(&xfer(&td, &["--encrypt", "src.bin", &mitm.dest("/c.bin")]));
    assert!(mitm.hit.load(Ordering::SeqCst), "{e}");
    assert!(!td.root().join("c.bin").exists(), "{e}");
    wait_until(
        "the server's log",
        std::time::Duration::from_secs(10),
        || srv.log().contains("integrity check failed"),
    );
}

#[test]
fn tampering_then_retry_resumes_bit_exact() {
    let td = TempDir::new("mitmretry");
    let srv = Server::start(&td, &[]);
    std::fs::write(td.p("src.bin"), data(16 << 20, 10)).unwrap();
    // Only the first attempt's data connection is altered.
    let mitm = Mitm::start(&srv.addr, 1, true, 100, Fault::Flip);
    let e = ok(&xfer(
        &td,
        &[
            "--encrypt",
            "-P",
            "1",
            "--retries",
            "1",
            "src.bin",
            &mitm.dest("/r.bin"),
        ],
    ));
    assert!(e.contains("retrying"), "{e}");
    same(&td.p("src.bin"), &td.root().join("r.bin"));
}

/// A local address that is not loopback (the first of the host's), if any.
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let u = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    u.connect("192.0.2.1:9").ok()?;
    let ip = u.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn default_is_encrypted_off_loopback() {
    let Some(ip) = non_loopback_ip() else {
        eprintln!("skipped: this host has no non-loopback address");
        return;
    };
    let td = TempDir::new("encnet");
    std::fs::write(td.p("src.bin"), data(2 << 20, 11)).unwrap();
    let srv = Server::start_with(&td, &[], &format!("{ip}:0"), &[]);
    let j = td.p("t.json").display().to_string();
    ok(&xfer(&td, &["--json", &j, "src.bin", &srv.dest("/a.bin")]));
    assert!(
        run_encrypted(&json_file(&j)),
        "encrypted by default off loopback"
    );
    same(&td.p("src.bin"), &td.root().join("a.bin"));
    // --plaintext on one end only is refused; on both, plaintext.
    let e = failed(&xfer(&td, &["--plaintext", "src.bin", &srv.dest("/b.bin")]));
    assert!(e.contains("encryption mode mismatch"), "{e}");
    let plain = Server::start_with(&td, &[], &format!("{ip}:0"), &["--plaintext"]);
    let e = failed(&xfer(&td, &["src.bin", &plain.dest("/b.bin")]));
    assert!(e.contains("pass --plaintext"), "{e}");
    ok(&xfer(
        &td,
        &[
            "--plaintext",
            "--json",
            &j,
            "src.bin",
            &plain.dest("/b.bin"),
        ],
    ));
    assert!(!run_encrypted(&json_file(&j)));
}
