//! Helpers shared by the end-to-end tests and the protocol fuzzer: temp
//! folders, a running `xfer serve`, `xfer send` runs, and a raw protocol
//! client (handshake and messages written by hand, to send what the real
//! client never would).
#![allow(dead_code)]

pub mod delay;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_xfer");
pub static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct TempDir(pub PathBuf);
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("xfert-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("root")).unwrap();
        // Keys are private, or xfer refuses them.
        for (name, key) in [("key", "test-key"), ("badkey", "wrong-key")] {
            let f = p.join(name);
            std::fs::write(&f, format!("{key}-0123456789abcdef\n")).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        TempDir(p)
    }
    pub fn root(&self) -> PathBuf {
        self.0.join("root")
    }
    pub fn key(&self) -> String {
        self.0.join("key").display().to_string()
    }
    pub fn p(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic pseudo-random data (xorshift), so corruption is visible.
pub fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A running `xfer serve`; killed (by its own PID) and reaped on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub log: PathBuf,
}

impl Server {
    pub fn start(td: &TempDir, extra: &[&str]) -> Server {
        Self::start_with(td, &[], "127.0.0.1:0", extra)
    }

    pub fn start_with(td: &TempDir, prefix: &[&str], listen: &str, extra: &[&str]) -> Server {
        let log_path = td.p(&format!(
            "server-{}.log",
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let log = std::fs::File::create(&log_path).unwrap();
        let (prog, pre_args) = match prefix.split_first() {
            Some((p, rest)) => (
                p.to_string(),
                rest.iter()
                    .map(|s| s.to_string())
                    .chain([BIN.to_string()])
                    .collect(),
            ),
            None => (BIN.to_string(), Vec::new()),
        };
        let root = td.root().display().to_string();
        let key = td.key();
        let mut args: Vec<&str> = vec![
            "serve",
            "--listen",
            listen,
            "--root",
            &root,
            "--key-file",
            &key,
        ];
        args.extend_from_slice(extra);
        let mut child = Command::new(prog)
            .args(&pre_args)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("spawn server");
        // Readiness signal: the server prints its bound address on stdout.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("xfer: listening on ")
            .unwrap_or_else(|| panic!("unexpected server output {line:?}"))
            .to_string();
        Server {
            child,
            addr,
            log: log_path,
        }
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn dest(&self, path: &str) -> String {
        format!("{}:{path}", self.addr)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub fn xfer(td: &TempDir, args: &[&str]) -> Output {
    xfer_in(&[], td, args, None)
}

pub fn xfer_in(prefix: &[&str], td: &TempDir, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let key = td.key();
    let (prog, mut all): (String, Vec<String>) = match prefix.split_first() {
        Some((p, rest)) => (
            p.to_string(),
            rest.iter()
                .map(|s| s.to_string())
                .chain([BIN.to_string()])
                .collect(),
        ),
        None => (BIN.to_string(), Vec::new()),
    };
    all.push("send".into());
    if !args.contains(&"--key-file") {
        all.extend(["--key-file".to_string(), key]);
    }
    all.extend(args.iter().map(|s| s.to_string()));
    let mut c = Command::new(prog)
        .args(&all)
        .current_dir(&td.0)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(d) = stdin {
        let mut si = c.stdin.take().unwrap();
        let d = d.to_vec();
        std::thread::spawn(move || {
            let _ = si.write_all(&d);
        });
    }
    c.wait_with_output().unwrap()
}

pub fn ok(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "xfer failed: {e}");
    e
}

pub fn failed(o: &Output) -> String {
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "xfer unexpectedly succeeded: {e}");
    assert!(!e.contains("panicked"), "panic instead of an error: {e}");
    e
}

pub fn json(p: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

pub fn same(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert!(
        x == y,
        "{} and {} differ ({} vs {} bytes)",
        a.display(),
        b.display(),
        x.len(),
        y.len()
    );
}

pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Number of records in a receiver journal (0 if absent).
pub fn journal_records(p: &Path) -> u64 {
    let Ok(b) = std::fs::read(p) else { return 0 };
    if b.len() < 11 {
        return 0;
    }
    let hl = u32::from_le_bytes(b[7..11].try_into().unwrap()) as usize;
    (b.len().saturating_sub(11 + hl) / 16) as u64
}

/// The directory holds exactly these names (no part files, no journals).
pub fn only_files(dir: &Path, names: &[&str]) {
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(left, want, "files in {}", dir.display());
}

extern "C" {
    #[link_name = "geteuid"]
    pub fn libc_geteuid() -> u32;
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

/// A field of /proc/PID/status in KiB (VmRSS, VmHWM).
pub fn vm_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

// ---- a raw protocol client ------------------------------------------------

/// The key `TempDir` writes, as both ends read it (whitespace trimmed).
pub const KEY: &[u8] = b"test-key-0123456789abcdef";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Connects with short timeouts, so a test never waits long on a server
/// that has nothing to say.
pub fn raw_connect(addr: &str) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(addr).expect("connect to server");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// The client side of the handshake (docs/xfer.md, Security), written from
/// the description rather than shared with the binary, asking for a
/// plaintext connection (which a server on loopback accepts by default).
/// Err if the server refused or did not prove the key.
pub fn raw_handshake(s: &mut std::net::TcpStream, key: &[u8]) -> std::io::Result<()> {
    use hmac::Mac;
    use std::io::Read;
    let mut hello = [0u8; 39];
    s.read_exact(&mut hello)?;
    assert_eq!(&hello[..6], b"XFER3\n", "server hello");
    let nonce_c = data(32, COUNTER.fetch_add(1, Ordering::SeqCst) as u64 + 77);
    let mut m = HmacSha256::new_from_slice(key).unwrap();
    m.update(b"xfer-v3 client");
    m.update(&hello[7..39]);
    m.update(&nonce_c);
    m.update(&[0]);
    let mut out = nonce_c.clone();
    out.push(0);
    out.extend_from_slice(&m.finalize().into_bytes());
    s.write_all(&out)?;
    let mut resp = [0u8; 33];
    s.read_exact(&mut resp)?;
    if resp[0] != 1 {
        return Err(std::io::Error::other("authentication refused"));
    }
    Ok(())
}

/// A length-prefixed JSON control message.
pub fn send_json(s: &mut std::net::TcpStream, v: &serde_json::Value) -> std::io::Result<()> {
    let body = serde_json::to_vec(v).unwrap();
    let mut m = (body.len() as u32).to_be_bytes().to_vec();
    m.extend_from_slice(&body);
    s.write_all(&m)
}

/// Reads one control message (at most 16 MiB), or None.
pub fn recv_json(s: &mut std::net::TcpStream) -> Option<serde_json::Value> {
    use std::io::Read;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let len = u32::from_be_bytes(len) as usize;
    if len > 16 << 20 {
        return None;
    }
    let mut b = vec![0u8; len];
    s.read_exact(&mut b).ok()?;
    serde_json::from_slice(&b).ok()
}

/// A control request as the real client builds it; tests change fields.
pub fn request(session: &str, sink: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"Control": {
        "session": session, "streams": 1, "mode": "stripe", "chunk": 1048576,
        "size": 1048576, "sink": sink, "src_id": "test", "hash": true,
        "resume": false, "interval_ms": 500
    }})
}

/// The end-to-end digest as docs/xfer.md defines it: the sum mod 2^128 of
/// XXH3-128(index ‖ chunk hash), both little-endian u64.
pub fn e2e_of(chunks: &[(u64, u64)]) -> String {
    let mut sum = 0u128;
    for (i, h) in chunks {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&i.to_le_bytes());
        b[8..].copy_from_slice(&h.to_le_bytes());
        sum = sum.wrapping_add(xxhash_rust::xxh3::xxh3_128(&b));
    }
    format!("{sum:032x}")
}

/// A data frame: the 32-byte header (docs/xfer.md, Frames) and the payload.
pub fn frame(kind: u8, index: u64, payload: &[u8], hash: u64) -> Vec<u8> {
    let mut f = vec![0u8; 32];
    f[0..4].copy_from_slice(&0x5846_5231u32.to_be_bytes());
    f[4] = kind;
    f[8..16].copy_from_slice(&index.to_le_bytes());
    f[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    f[24..32].copy_from_slice(&hash.to_le_bytes());
    f.extend_from_slice(payload);
    f
}
