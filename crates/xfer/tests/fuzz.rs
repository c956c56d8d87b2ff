//! Protocol fuzzer for `xfer serve`: random bytes before the handshake,
//! forged authentication, and after a valid handshake random and mutated
//! control messages, data connections to real and made-up sessions, and
//! random, truncated, oversized and out-of-order frames, pulls with random
//! pacing. After the cases, the server must still be running, must not have
//! panicked in any thread, must have stayed under a memory bound (VmHWM), and
//! must still carry a legitimate transfer bit for bit.
//!
//! Deterministic: case `i` is generated from a seeded generator (SplitMix64)
//! with seed `XFER_FUZZ_SEED` (default below) mixed with `i`, so a failing
//! case can be replayed with `XFER_FUZZ_FROM=i XFER_FUZZ_CASES=1`. The short
//! run (300 cases) is part of `cargo test`; the long run (10 000 cases) is
//! `cargo test --release -p xfer --test fuzz -- --ignored`, or any count
//! with `XFER_FUZZ_CASES=N`.

mod common;

use common::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

const DEFAULT_SEED: u64 = 0x00C0_FFEE_5EED_0010;
/// Peak resident memory the server may reach during a run.
const MAX_PEAK_KIB: u64 = 256 << 10;

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): tiny, fast and good enough to pick cases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize].clone()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A number from the edges a parser is likely to get wrong.
    fn edgy(&mut self, typical: u64) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => u32::MAX as u64,
            4 => 1 << self.below(64),
            5 => typical,
            6 => typical + 1,
            _ => self.below(typical.saturating_mul(4).max(2)),
        }
    }
}

/// Sends and reads never wait long: the server answers at once or not at all.
fn connect(addr: &str) -> Option<TcpStream> {
    let s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(1500))).ok()?;
    s.set_write_timeout(Some(Duration::from_millis(1500)))
        .ok()?;
    let _ = s.set_nodelay(true);
    Some(s)
}

fn authed(addr: &str) -> Option<TcpStream> {
    let mut s = connect(addr)?;
    raw_handshake(&mut s, KEY).ok()?;
    Some(s)
}

fn session_id(rng: &mut Rng) -> String {
    match rng.below(6) {
        0 => String::new(),
        1 => "€".repeat(11),
        2 => "zz".repeat(16),
        _ => (0..32)
            .map(|_| b"0123456789abcdef"[rng.below(16) as usize] as char)
            .collect(),
    }
}

fn random_sink(rng: &mut Rng) -> Value {
    let long = "n".repeat(300);
    let paths = [
        "f.bin",
        "d/e/f.bin",
        "../escape.bin",
        "/abs.bin",
        "a\u{0}b",
        "",
        ".",
        "d/",
        long.as_str(),
        "pull.bin",
    ];
    match rng.below(5) {
        0 => json!("discard"),
        1 => json!({"cmd": "true"}),
        2 => json!({"nosuch": 1}),
        _ => json!({ "path": rng.pick(&paths) }),
    }
}

/// A control request with every field drawn at random, mostly plausible.
fn random_request(rng: &mut Rng, session: &str) -> Value {
    let chunk = *[4096u64, 65536, 1 << 20, 16 << 20]
        .get(rng.below(5) as usize)
        .unwrap_or(&rng.edgy(1 << 20));
    let mut r = json!({
        "session": session,
        "streams": if rng.chance(70) { 1 + rng.below(8) } else { rng.edgy(128) },
        "mode": rng.pick(&["stripe", "stream", "mirror"]),
        "chunk": chunk,
        "size": if rng.chance(20) { Value::Null } else { json!(match rng.below(3) {
            0 => rng.below(1 << 20),
            1 => rng.below(1 << 26),
            _ => rng.edgy(1 << 40),
        }) },
        "sink": random_sink(rng),
        "src_id": rng.pick(&["test", "", "file:x:1:2"]),
        "hash": rng.chance(60),
        "resume": rng.chance(50),
        "interval_ms": if rng.chance(80) { 10 + rng.below(1000) } else { rng.edgy(500) },
        "pull": rng.chance(25),
    });
    if rng.chance(10) {
        r["fault_reset_after"] = json!(rng.edgy(1 << 20));
    }
    if rng.chance(10) {
        r["fault_stall_after"] = json!(rng.edgy(1 << 20));
    }
    if rng.chance(10) {
        r["parent_must_exist"] = json!(true);
    }
    if rng.chance(10) {
        // Drop or mistype a field.
        let keys = ["session", "streams", "chunk", "size", "sink", "mode"];
        let k = rng.pick(&keys);
        if rng.chance(50) {
            r.as_object_mut().unwrap().remove(k);
        } else {
            r[k] = json!("x");
        }
    }
    json!({ "Control": r })
}

/// A data frame: 32-byte header (docs/xfer.md, Frames) and a payload that
/// may be shorter than the header says.
fn random_frame(rng: &mut Rng, chunk: u64, next: &mut u64) -> Vec<u8> {
    let kind = match rng.below(10) {
        0 => 2,                    // END
        1 => rng.below(256) as u8, // unknown
        _ => 1,                    // DATA
    };
    let index = match rng.below(4) {
        0 => rng.edgy(1 << 20),
        _ => {
            *next += 1;
            *next - 1
        }
    };
    let len: u32 = match rng.below(6) {
        0 => 0,
        1 => u32::MAX,
        2 => (chunk as u32).wrapping_add(1),
        3 => chunk as u32,
        _ => (rng.below(chunk.clamp(1, 1 << 16)) + 1) as u32,
    };
    let payload_len = if rng.chance(70) {
        (len as usize).min(1 << 16)
    } else {
        rng.below(len as u64 % (1 << 16) + 1) as usize
    };
    let payload = rng.bytes(payload_len);
    let hash = if rng.chance(50) && payload_len == len as usize {
        xxh3_64_of(&payload)
    } else {
        rng.next()
    };
    let mut f = vec![0u8; 32];
    let magic: u32 = if rng.chance(95) {
        0x5846_5231
    } else {
        rng.next() as u32
    };
    f[0..4].copy_from_slice(&magic.to_be_bytes());
    f[4] = kind;
    f[8..16].copy_from_slice(&index.to_le_bytes());
    f[16..20].copy_from_slice(&len.to_le_bytes());
    f[24..32].copy_from_slice(&hash.to_le_bytes());
    if rng.chance(5) {
        f.truncate(rng.below(32) as usize);
        return f;
    }
    f.extend_from_slice(&payload);
    f
}

fn xxh3_64_of(payload: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(payload)
}

/// Opens up to `n` data connections to `session`, sends random frames on
/// them, and returns them (still open).
fn data_connections(
    rng: &mut Rng,
    addr: &str,
    session: &str,
    n: u64,
    chunk: u64,
    seen: &mut Reached,
) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for _ in 0..n.min(8) {
        let Some(mut d) = authed(addr) else { break };
        let stream = if rng.chance(85) {
            out.len() as u64
        } else {
            rng.edgy(8)
        };
        let _ = send_json(
            &mut d,
            &json!({"Data": {"session": session, "stream": stream}}),
        );
        if rng.chance(80) && recv_json(&mut d).is_some_and(|r| r == json!("Joined")) {
            seen.joined += 1;
        }
        out.push(d);
    }
    let mut next = 0;
    for _ in 0..rng.below(12) {
        if out.is_empty() {
            break;
        }
        let i = rng.below(out.len() as u64) as usize;
        let f = random_frame(rng, chunk.clamp(1, 16 << 20), &mut next);
        if out[i].write_all(&f).is_err() {
            break;
        }
    }
    out
}

/// What the cases reached, to show a run exercises more than the front door.
#[derive(Default, Debug)]
struct Reached {
    /// Requests the server accepted (sessions and pulls set up).
    accepted: u64,
    /// Requests refused with a reason.
    refused: u64,
    /// Data connections that joined a session.
    joined: u64,
    /// Verdicts received after data.
    verdicts: u64,
    /// Of them, successes (data committed or accepted).
    committed: u64,
}

/// A session that mostly follows the protocol (small sizes, valid frames
/// and hashes, END frames, the right digest), with a fault now and then: a
/// corrupted, duplicated, skipped or reordered chunk, a wrong digest, a
/// connection closed early. Sessions on a few shared paths with resume on
/// exercise the journal and the re-verification of partial files.
fn plausible_session(rng: &mut Rng, addr: &str, seen: &mut Reached) {
    let sid: String = (0..32)
        .map(|_| b"0123456789abcdef"[rng.below(16) as usize] as char)
        .collect();
    let streams = 1 + rng.below(4);
    let chunk = rng.pick(&[4096u64, 65536]);
    let size = rng.below(300_000);
    let stripe = rng.chance(50);
    let sink = if rng.chance(30) {
        json!("discard")
    } else {
        json!({ "path": format!("s/{}.bin", rng.below(3)) })
    };
    let hash = rng.chance(80);
    let faulty = rng.chance(40);
    let req = json!({"Control": {
        "session": sid, "streams": streams, "mode": if stripe { "stripe" } else { "stream" },
        "chunk": chunk, "size": if stripe || rng.chance(30) { json!(size) } else { Value::Null },
        "sink": sink, "src_id": format!("fuzz:{}", rng.below(2)), "hash": hash,
        "resume": rng.chance(70), "interval_ms": 50,
    }});
    let Some(mut ctrl) = authed(addr) else { return };
    if send_json(&mut ctrl, &req).is_err() {
        return;
    }
    let Some(reply) = recv_json(&mut ctrl) else {
        return;
    };
    let Some(acc) = reply.get("Accept") else {
        seen.refused += 1;
        return;
    };
    seen.accepted += 1;
    let have: Vec<(u64, u64)> = serde_json::from_value(acc["have"].clone()).unwrap_or_default();
    let mut conns = data_connections_valid(addr, &sid, streams, seen);
    if conns.is_empty() {
        return;
    }
    // The content of chunk i is a function of i (and the src_id), so a
    // resumed partial file matches what is sent again.
    let content = |i: u64, len: usize| {
        data(
            len,
            i + 1 + req["Control"]["src_id"].as_str().unwrap().len() as u64,
        )
    };
    let n = size.div_ceil(chunk);
    let mut sent: Vec<(u64, u64)> = Vec::new();
    let is_had = |i: u64| have.iter().any(|&(a, b)| a <= i && i < b);
    for i in 0..n {
        let len = chunk.min(size - i * chunk) as usize;
        let payload = content(i, len);
        let h = if hash { xxh3_64_of(&payload) } else { 0 };
        sent.push((i, h));
        if is_had(i) {
            continue;
        }
        let mut f = frame(1, i, &payload, h);
        if faulty && rng.chance(10) {
            match rng.below(4) {
                0 => f[40] ^= 1,                       // corrupted payload
                1 => continue,                         // skipped chunk
                2 => f.truncate(32 + len / 2),         // cut short
                _ => f.extend_from_within(..32 + len), // duplicated
            }
        }
        let c = if stripe {
            (i * streams / n.max(1)) as usize % conns.len()
        } else {
            rng.below(conns.len() as u64) as usize
        };
        if conns[c].write_all(&f).is_err() {
            break;
        }
    }
    let total = if stripe { 0 } else { n };
    for c in conns.iter_mut() {
        let _ = c.write_all(&frame(2, total, &[], 0));
    }
    let e2e = if faulty && rng.chance(30) {
        json!("0".repeat(32))
    } else if hash {
        json!(e2e_of(&sent))
    } else {
        Value::Null
    };
    let _ = send_json(&mut ctrl, &json!({ "e2e": e2e }));
    if let Some(done) = recv_json(&mut ctrl) {
        seen.verdicts += 1;
        if done["error"].is_null() {
            seen.committed += 1;
        } else if !faulty {
            // Oracle: a session that followed the protocol must succeed.
            panic!("a correct session failed: {}\nrequest {req}", done["error"]);
        }
    }
}

/// `n` data connections that join `session` properly.
fn data_connections_valid(addr: &str, session: &str, n: u64, seen: &mut Reached) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for i in 0..n {
        let Some(mut d) = authed(addr) else { break };
        let _ = send_json(&mut d, &json!({"Data": {"session": session, "stream": i}}));
        if recv_json(&mut d).is_some_and(|r| r == json!("Joined")) {
            seen.joined += 1;
        }
        out.push(d);
    }
    out
}

/// One fuzz case; every connection it opens is closed when it returns.
fn one_case(rng: &mut Rng, addr: &str, seen: &mut Reached) {
    match rng.below(11) {
        8..=10 => plausible_session(rng, addr, seen),
        // Garbage before (or instead of) the handshake.
        0 => {
            let Some(mut s) = connect(addr) else { return };
            if rng.chance(50) {
                let mut hello = [0u8; 39];
                let _ = s.read_exact(&mut hello);
            }
            let n = rng.below(4096) as usize;
            let _ = s.write_all(&rng.bytes(n));
        }
        // A forged authentication answer.
        1 => {
            let Some(mut s) = connect(addr) else { return };
            let mut hello = [0u8; 39];
            if s.read_exact(&mut hello).is_ok() {
                let _ = s.write_all(&rng.bytes(65));
                let _ = s.read(&mut [0u8; 33]);
            }
        }
        // Authenticated, then a random length prefix and body.
        2 => {
            let Some(mut s) = authed(addr) else { return };
            let len = rng.edgy(1 << 16) as u32;
            let _ = s.write_all(&len.to_be_bytes());
            let n = (len as usize).min(rng.below(70_000) as usize);
            let body = rng.bytes(n);
            let _ = s.write_all(&body);
            if body.len() == len as usize {
                let _ = recv_json(&mut s);
            }
        }
        // A data connection for a session that does not exist.
        3 => {
            let sid = session_id(rng);
            let n = 1 + rng.below(2);
            let _held = data_connections(rng, addr, &sid, n, 1 << 20, seen);
        }
        // A random request, and if accepted, data connections and frames.
        _ => {
            let sid = session_id(rng);
            let Some(mut ctrl) = authed(addr) else { return };
            let req = random_request(rng, &sid);
            if send_json(&mut ctrl, &req).is_err() {
                return;
            }
            let Some(reply) = recv_json(&mut ctrl) else {
                return;
            };
            if reply.get("Accept").is_none() {
                seen.refused += 1;
                return;
            }
            seen.accepted += 1;
            let streams = req["Control"]["streams"].as_u64().unwrap_or(1);
            let chunk = req["Control"]["chunk"].as_u64().unwrap_or(1 << 20);
            let mut held = data_connections(rng, addr, &sid, streams, chunk, seen);
            if req["Control"]["pull"] == json!(true) && rng.chance(70) {
                let pacing = if rng.chance(50) {
                    Value::Null
                } else {
                    json!(rng.edgy(1 << 20))
                };
                let _ = send_json(&mut ctrl, &json!({ "pacing": pacing }));
                // Read a little of what the server sends.
                for d in held.iter_mut().take(2) {
                    let _ = d.set_read_timeout(Some(Duration::from_millis(50)));
                    let _ = d.read(&mut [0u8; 4096]);
                }
            } else if rng.chance(30) {
                let e2e = if rng.chance(50) {
                    Value::Null
                } else {
                    json!("00".repeat(16))
                };
                let _ = send_json(&mut ctrl, &json!({ "e2e": e2e }));
            }
            for d in &held {
                let _ = d.shutdown(Shutdown::Write);
            }
            if rng.chance(30) {
                // Wait for the verdict: the server must answer or close.
                if recv_json(&mut ctrl).is_some() {
                    seen.verdicts += 1;
                }
            }
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn fuzz(default_cases: u64) {
    let cases = env_u64("XFER_FUZZ_CASES").unwrap_or(default_cases);
    let first = env_u64("XFER_FUZZ_FROM").unwrap_or(0);
    let seed = env_u64("XFER_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let td = TempDir::new("fuzz");
    let mut srv = Server::start(&td, &[]);
    let pid = srv.child.id();
    // A file for pulls to read.
    let pulled = data(3 << 20, 40);
    std::fs::write(td.root().join("pull.bin"), &pulled).unwrap();
    let t0 = Instant::now();
    let mut seen = Reached::default();
    for i in first..first + cases {
        let mut rng = Rng::new(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        one_case(&mut rng, &srv.addr, &mut seen);
        if i % 50 == 49 || i + 1 == first + cases {
            assert!(
                srv.child.try_wait().unwrap().is_none(),
                "server died at case {i} (seed {seed:#x}); log:\n{}",
                srv.log()
            );
            let log = srv.log();
            assert!(
                !log.contains("panicked"),
                "a server thread panicked by case {i} (seed {seed:#x}; replay from \
                 XFER_FUZZ_FROM={}):\n{log}",
                i.saturating_sub(49)
            );
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let rss = vm_kib(pid, "VmRSS");
    let hwm = vm_kib(pid, "VmHWM");
    // Sessions end asynchronously; a legitimate transfer may have to wait
    // for a slot or its destination for a moment.
    std::fs::write(td.p("legit.bin"), data(5 << 20, 41)).unwrap();
    wait_until("a legitimate transfer", Duration::from_secs(60), || {
        xfer(&td, &["-P", "4", "legit.bin", &srv.dest("/legit/out.bin")])
            .status
            .success()
    });
    same(&td.p("legit.bin"), &td.root().join("legit/out.bin"));
    ok(&xfer(
        &td,
        &["-P", "3", &srv.dest("/pull.bin"), "pulled.bin"],
    ));
    assert!(std::fs::read(td.p("pulled.bin")).unwrap() == pulled);
    assert!(srv.child.try_wait().unwrap().is_none(), "server died");
    assert!(!srv.log().contains("panicked"), "{}", srv.log());
    eprintln!(
        "fuzz: {cases} cases from {first} (seed {seed:#x}) in {elapsed:.1} s; server VmRSS \
         {rss} KiB, VmHWM {hwm} KiB; {seen:?}"
    );
    // A run that never gets past the handshake tests little.
    if cases >= 100 {
        assert!(seen.accepted > 0 && seen.joined > 0, "{seen:?}");
    }
    assert!(
        hwm < MAX_PEAK_KIB,
        "server peak RSS {hwm} KiB exceeds {MAX_PEAK_KIB} KiB"
    );
    srv.kill();
}

#[test]
fn fuzz_server_protocol() {
    fuzz(300);
}

#[test]
#[ignore = "long run (10 000 cases, a few minutes): cargo test --release -p xfer --test fuzz -- --ignored"]
fn fuzz_server_protocol_long() {
    fuzz(10_000);
}
