//! End-to-end check on real Linux forwarding (needs root, `ip`, `iptables`, `ping`;
//! skipped otherwise): host A — router R — host B in three network namespaces, NFQUEUE
//! rules in R, the daemon running in R with 10 ms per direction. Ping must see 20 ms, a
//! second daemon must be refused the same queue, and once the daemon is gone the rule must
//! drop (no bypass).
//!
//! Namespaces are named `xl-…` and exist only while `/run/xferlab/netns.lock` is held, as
//! everything of the netns emulation (python/xferlab/netns/host.py).

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_xferlab-delay");

fn tool_missing(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
}

fn skip_reason() -> Option<String> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for (tool, arg) in [("ip", "-V"), ("iptables", "--version"), ("ping", "-V")] {
        if tool_missing(tool, arg) {
            return Some(format!("{tool} not found"));
        }
    }
    None
}

/// `flock` on the host lock; waits up to 2 minutes for another emulation to finish.
fn host_lock() -> Option<std::fs::File> {
    let dir = std::env::var("XFERLAB_STATE_DIR").unwrap_or_else(|_| "/run/xferlab".into());
    std::fs::create_dir_all(&dir).ok()?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(format!("{dir}/netns.lock"))
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        // SAFETY: valid fd.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Some(f);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "`{}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn in_ns(ns: &str, args: &[&str]) -> String {
    let mut all = vec!["ip", "netns", "exec", ns];
    all.extend_from_slice(args);
    sh(&all)
}

/// Everything the test created; torn down on drop, also when an assertion fails.
struct Topology {
    names: Vec<String>,
    daemons: Vec<Child>,
}

impl Drop for Topology {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill(); // by PID
            let _ = d.wait();
        }
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn build(tag: &str) -> Topology {
    let names: Vec<String> = ["a", "r", "b"]
        .iter()
        .map(|s| format!("xl-dlt{tag}-{s}"))
        .collect();
    let (a, r, b) = (&names[0], &names[1], &names[2]);
    for n in &names {
        // a leftover of a crashed run of this test (we hold the lock, so it is not live)
        let _ = Command::new("ip")
            .args(["netns", "del", n])
            .stderr(Stdio::null())
            .status();
    }
    let topo = Topology {
        names: names.clone(),
        daemons: vec![],
    };
    for n in &names {
        sh(&["ip", "netns", "add", n]);
        in_ns(n, &["ip", "link", "set", "lo", "up"]);
    }
    sh(&[
        "ip", "link", "add", "va", "netns", a, "type", "veth", "peer", "name", "ra", "netns", r,
    ]);
    sh(&[
        "ip", "link", "add", "vb", "netns", b, "type", "veth", "peer", "name", "rb", "netns", r,
    ]);
    for (ns, dev, addr) in [
        (a, "va", "10.93.1.2/24"),
        (r, "ra", "10.93.1.1/24"),
        (r, "rb", "10.93.2.1/24"),
        (b, "vb", "10.93.2.2/24"),
    ] {
        in_ns(ns, &["ip", "addr", "add", addr, "dev", dev]);
        in_ns(ns, &["ip", "link", "set", dev, "up"]);
    }
    in_ns(a, &["ip", "route", "add", "default", "via", "10.93.1.1"]);
    in_ns(b, &["ip", "route", "add", "default", "via", "10.93.2.1"]);
    in_ns(r, &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    in_ns(
        r,
        &[
            "iptables",
            "-A",
            "FORWARD",
            "-i",
            "ra",
            "-j",
            "NFQUEUE",
            "--queue-num",
            "0",
        ],
    );
    in_ns(
        r,
        &[
            "iptables",
            "-A",
            "FORWARD",
            "-i",
            "rb",
            "-j",
            "NFQUEUE",
            "--queue-num",
            "1",
        ],
    );
    topo
}

/// Starts the daemon in `ns` and waits for its `ready` line.
fn start_daemon(ns: &str, args: &[&str]) -> Child {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, BIN])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn xferlab-delay");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap_or_default());
        }
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(line) if line == "ready" => child,
        other => {
            let _ = child.kill();
            panic!("daemon did not print `ready`: {other:?}");
        }
    }
}

/// Round-trip times (ms) of `count` pings from `ns` to `dst`.
fn ping(ns: &str, dst: &str, count: u32) -> Vec<f64> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "ping",
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.05",
            "-W",
            "1",
            dst,
        ])
        .output()
        .expect("ping");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn delays_ping_by_the_configured_rtt_and_drops_when_gone() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(_lock) = host_lock() else {
        eprintln!("skipped: /run/xferlab/netns.lock held by another emulation for 2 minutes");
        return;
    };
    let mut topo = build(&std::process::id().to_string()[..]);
    let (a, r) = (topo.names[0].clone(), topo.names[1].clone());
    let stats = std::env::temp_dir().join(format!("xl-delay-it-{}.json", std::process::id()));
    let stats_s = stats.to_str().unwrap().to_string();

    let daemon = start_daemon(
        &r,
        &[
            "--queue",
            "0:10ms",
            "--queue",
            "1:10ms",
            "--stats",
            &stats_s,
            "--rt-priority",
            "50",
        ],
    );
    let pid = daemon.id();
    topo.daemons.push(daemon);

    // A second daemon is refused the queues, with a clear message.
    let second = Command::new("ip")
        .args(["netns", "exec", &r, BIN, "--queue", "0:1ms"])
        .output()
        .unwrap();
    assert!(!second.status.success());
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("already bound"), "{err}");

    let mut rtts = ping(&a, "10.93.2.2", 40);
    assert_eq!(rtts.len(), 40, "every ping answered through the delay line");
    rtts.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let median = rtts[rtts.len() / 2];
    assert!(
        rtts[0] >= 20.0,
        "never earlier than the delay: min {} ms",
        rtts[0]
    );
    assert!(
        median <= 21.5,
        "median RTT {median} ms for 2 × 10 ms ({rtts:?})"
    );

    let read_stats = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&stats).expect("stats file"))
            .expect("stats JSON")
    };
    // SIGUSR1: the first window's stats are written, a new window starts.
    // SAFETY: signals to the PID of the child we started.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stats.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = read_stats();
    assert_eq!(v["window"], 0);
    for q in ["0", "1"] {
        let s = &v["queues"][q];
        assert_eq!(s["packets"], 40, "{s}");
        assert_eq!(
            s["bytes"],
            40 * 84,
            "ICMP echo of 84 bytes (IP length, from NFQA_CAP_LEN)"
        );
        assert_eq!(s["queue_dropped"], 0);
        // a sanity bound only: punctuality is measured by benches/delayline.py
        assert!(s["late_max_ms"].as_f64().unwrap() < 50.0, "{s}");
    }
    assert_eq!(ping(&a, "10.93.2.2", 5).len(), 5);

    // SIGTERM: clean exit with the final stats (second window: the last 5 pings only).
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = topo.daemons[0].wait().unwrap();
    assert!(status.success(), "daemon exit on SIGTERM: {status:?}");
    let v = read_stats();
    let _ = std::fs::remove_file(&stats);
    assert_eq!(v["window"], 1);
    assert_eq!(v["queues"]["0"]["packets"], 5);
    assert_eq!(v["queues"]["1"]["packets"], 5);

    // No daemon: the rule drops (no fail-open, no bypass).
    assert!(
        ping(&a, "10.93.2.2", 5).is_empty(),
        "traffic passed without the delay line"
    );
}
