//! Following a schedule (issue 13, seed 001): starts at a time or on a
//! signal, rate profiles under each limiter, and refused plans. Real `xfer`
//! processes over loopback (and, for the window clamp, over a delayed path
//! between two namespaces the test creates). Times are compared as
//! orderings and with tolerances a loaded 2-core machine keeps; rates over
//! segments of at least 2 s.

mod common;

use common::delay::{DelayedPath, ADDR_B};
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The tests that time transfers run one at a time: cargo runs a file's tests in parallel,
/// and two transfers on a 2-core machine slow each other (a window clamp fell 25 % short).
static TIMED: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    TIMED.lock().unwrap_or_else(|e| e.into_inner())
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `xfer send ARGS --json FILE`; asserts success, returns the trace.
fn traced(td: &TempDir, name: &str, args: &[&str]) -> Value {
    traced_in(&[], td, name, args)
}

fn traced_in(prefix: &[&str], td: &TempDir, name: &str, args: &[&str]) -> Value {
    let js = td.p(name).display().to_string();
    let mut all = vec!["--json", js.as_str()];
    all.extend_from_slice(args);
    ok(&xfer_in(prefix, td, &all, None));
    json(&td.p(name))
}

#[test]
fn start_at_waits_for_its_time_or_says_how_late() {
    let _one = one_at_a_time();
    let td = TempDir::new("startat");
    let srv = Server::start(&td, &[]);
    // Unscheduled: the start is "now" and nothing is planned.
    let j = traced(&td, "now.json", &["mem:1M", &srv.addr, "--discard"]);
    assert_eq!(j["run"]["start"]["mode"], "now");
    assert!(j["run"]["limiter"].is_null() && j["run"]["profile"].is_null());
    assert_eq!(j["segments"], serde_json::json!([]));
    assert_eq!(j["rate_changes"], serde_json::json!([]));

    // In the future: the session is set up first, and the data waits for T.
    let t = unix_now() + 1.5;
    let at = format!("{t:.3}");
    let j = traced(
        &td,
        "at.json",
        &["--start-at", &at, "mem:1M", &srv.addr, "--discard"],
    );
    let st = &j["run"]["start"];
    let planned = num(&st["planned"]);
    assert_eq!(st["mode"], "at");
    assert!((planned - t).abs() < 1e-3);
    assert!(
        num(&st["connected"]) < planned,
        "not set up beforehand: {st}"
    );
    assert!(num(&st["actual"]) >= planned, "started early: {st}");
    let late = num(&st["late"]);
    assert!((0.0..1.0).contains(&late), "late {late}");
    assert!(num(&j["run"]["end_time"]) > num(&st["actual"]));

    // RFC 3339, and --connect-ahead: the session is set up no earlier than
    // that before T.
    let t = unix_now() + 2.0;
    let rfc = Command::new("date")
        .args(["-u", "-d", &format!("@{t:.3}"), "+%Y-%m-%dT%H:%M:%S.%3NZ"])
        .output()
        .unwrap();
    let rfc = String::from_utf8(rfc.stdout).unwrap();
    let j = traced(
        &td,
        "rfc.json",
        &[
            "--start-at",
            rfc.trim(),
            "--connect-ahead",
            "1s",
            "mem:1M",
            &srv.addr,
            "--discard",
        ],
    );
    let st = &j["run"]["start"];
    let planned = num(&st["planned"]);
    assert!(
        (planned - t).abs() < 2e-3,
        "{rfc} read as {planned}, not {t}"
    );
    assert!(
        num(&st["connected"]) >= planned - 1.0,
        "connected too early: {st}"
    );
    assert!(num(&st["actual"]) >= planned, "started early: {st}");

    // In the past: at once, saying how late, in the log and the trace.
    let t = unix_now() - 3.0;
    let js = td.p("past.json").display().to_string();
    let at = format!("{t:.3}");
    let e = ok(&xfer(
        &td,
        &[
            "--start-at",
            &at,
            "--json",
            &js,
            "mem:1M",
            &srv.addr,
            "--discard",
        ],
    ));
    assert!(
        e.contains("s ago when the session was ready: started at once"),
        "{e}"
    );
    let st = &json(&td.p("past.json"))["run"]["start"];
    assert!(num(&st["late"]) >= 3.0 && num(&st["late"]) < 60.0, "{st}");
}

/// Starts `xfer send --start-after-signal 127.0.0.1:0 ARGS`; returns the
/// process and the address it listens on (its readiness line).
fn waiting_sender(td: &TempDir, args: &[&str]) -> (std::process::Child, String) {
    let mut c = Command::new(BIN)
        .arg("send")
        .args([
            "--key-file",
            &td.key(),
            "--start-after-signal",
            "127.0.0.1:0",
        ])
        .args(args)
        .current_dir(&td.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("xfer: waiting for a start signal on ")
        .unwrap_or_else(|| panic!("unexpected output {line:?}"))
        .to_string();
    (c, addr)
}

#[test]
fn a_signal_starts_the_next_transfer_only_after_the_first_commits() {
    let _one = one_at_a_time();
    let td = TempDir::new("signal");
    let srv = Server::start(&td, &[]);
    let bjs = td.p("b.json").display().to_string();
    let (b, addr) = waiting_sender(
        &td,
        &[
            "--signal-token",
            "link-1",
            "--json",
            &bjs,
            "mem:4M",
            &srv.dest("/b.bin"),
        ],
    );
    // A signal for another link is refused with the reason; B waits on.
    let e = failed(&xfer(
        &td,
        &[
            "--signal-done",
            &addr,
            "--signal-token",
            "link-0",
            "mem:1M",
            &srv.addr,
            "--discard",
        ],
    ));
    assert!(
        e.contains("committed, but the start signal") && e.contains("token"),
        "{e}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let mut b = b;
    assert!(
        b.try_wait().unwrap().is_none(),
        "B started on a wrong signal"
    );
    // A: paced, so it is still sending well after B is set up; B must not
    // start before A's receiver has committed.
    let adest = srv.dest("/a.bin");
    let a = traced(
        &td,
        "a.json",
        &[
            "--rate",
            "40M",
            "--signal-done",
            &addr,
            "--signal-token",
            "link-1",
            "mem:4M",
            &adest,
        ],
    );
    let out = b.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b = json(&td.p("b.json"));
    let sent = &a["run"]["signal_done"];
    let got = &b["run"]["start"];
    assert!(sent["error"].is_null(), "{sent}");
    assert_eq!(got["mode"], "signal");
    // Causality on one clock: commit, signal out, signal in, data.
    let committed = num(&sent["committed"]);
    assert_eq!(committed, num(&a["run"]["end_time"]));
    assert!(committed >= num(&a["run"]["start"]["actual"]));
    assert!(num(&sent["sent"]) >= committed);
    assert!(num(&got["signal"]["received"]) >= num(&sent["sent"]));
    assert!(num(&got["actual"]) >= num(&got["signal"]["received"]));
    assert!(
        num(&got["connected"]) < committed,
        "B was not set up beforehand"
    );
    assert!(num(&sent["acked"]) >= num(&sent["sent"]));
    let cost = num(&got["actual"]) - committed;
    eprintln!("signal: commit to next data start {:.3} ms", cost * 1e3);
    assert!(cost < 5.0, "{cost}");
    assert_eq!(
        std::fs::read(td.root().join("b.bin")).unwrap().len(),
        4 << 20
    );
}

/// The plan of the profile tests: 2 s at 40 Mbit/s, then 120 Mbit/s for
/// what is left of 40 MiB (2.1 s).
const PLAN: &str = "0s:40M,2s:120M";

/// Runs PLAN with `limiter` and checks the trace: the steps applied at
/// their times, and each segment's goodput at most 15 % above the plan and
/// at most 35 % below it. The limiters only hold a transfer back, so going
/// over the plan is their fault; falling short is also what a loaded 2-core
/// machine does to any sender (CI saw the window clamp's first segment at
/// −16 % with a busy loop on each core), so the floor is looser.
fn follows_the_plan(prefix: &[&str], td: &TempDir, addr: &str, limiter: &str) -> Value {
    let name = format!("{limiter}.json");
    let j = traced_in(
        prefix,
        td,
        &name,
        &[
            "-P",
            "2",
            "--interval",
            "50ms",
            "--limiter",
            limiter,
            "--rate-profile",
            PLAN,
            "mem:40M",
            addr,
            "--discard",
        ],
    );
    let r = &j["run"];
    assert_eq!(r["limiter"], limiter);
    assert_eq!(
        r["profile"],
        serde_json::json!([{"t": 0.0, "rate_bps": 40_000_000}, {"t": 2.0, "rate_bps": 120_000_000}])
    );
    let ch = j["rate_changes"].as_array().unwrap();
    assert_eq!(ch.len(), 2, "{ch:?}");
    for (k, c) in ch.iter().enumerate() {
        assert_eq!(c["step"], k);
        let (t, planned) = (num(&c["t"]), num(&c["t_planned"]));
        assert!(t >= planned && t - planned < 0.5, "step {k} applied at {t}");
        assert_eq!(c["per_stream"].as_array().unwrap().len(), 2);
    }
    let seg = j["segments"].as_array().unwrap();
    assert_eq!(seg.len(), 2);
    let mut bytes = 0;
    for s in seg {
        let err = num(&s["error"]);
        assert!(
            (-0.35..0.15).contains(&err),
            "{limiter}: segment {s} off the plan by {err:.3}"
        );
        bytes += s["bytes"].as_u64().unwrap();
    }
    assert!(bytes.abs_diff(40 << 20) <= 2, "segments hold {bytes} bytes");
    assert_eq!(num(&seg[0]["actual_end"]), 2.0);
    // Pacing cannot make it faster than the plan (bar the first window).
    assert!(num(&r["completion_time"]) > 3.6, "{r}");
    j
}

#[test]
fn a_profile_is_followed_with_pacing() {
    let _one = one_at_a_time();
    let td = TempDir::new("prof-pacing");
    let srv = Server::start(&td, &[]);
    let j = follows_the_plan(&[], &td, &srv.addr, "pacing");
    // SO_MAX_PACING_RATE per stream: half the goodput, plus frame headers.
    let per = j["rate_changes"][1]["per_stream"][0].as_u64().unwrap();
    assert_eq!(
        per,
        (120e6 / 8.0 / 2.0 * (1048576.0 + 32.0) / 1048576.0_f64).ceil() as u64
    );
}

#[test]
fn a_profile_is_followed_with_the_sleep_timer() {
    let _one = one_at_a_time();
    let td = TempDir::new("prof-sleep");
    let srv = Server::start(&td, &[]);
    let j = follows_the_plan(&[], &td, &srv.addr, "sleep");
    assert_eq!(j["run"]["timer_hz"], 250);
}

#[test]
fn a_profile_is_followed_with_the_window_clamp() {
    let _one = one_at_a_time();
    // A window is rate × RTT: loopback's RTT (microseconds) cannot carry
    // one, so this runs over a 40 ms round trip between two namespaces.
    let Some(path) = DelayedPath::create(Duration::from_millis(20)) else {
        return;
    };
    let td = TempDir::new("prof-cwnd");
    let srv = Server::start_with(
        &td,
        &["ip", "netns", "exec", &path.b],
        &format!("{ADDR_B}:0"),
        &[],
    );
    let inns = ["ip", "netns", "exec", path.a.as_str()];
    let j = follows_the_plan(&inns, &td, &srv.addr, "cwnd");
    for c in j["rate_changes"].as_array().unwrap() {
        for rtt in c["min_rtt_ms"].as_array().unwrap() {
            assert!((35.0..100.0).contains(&num(rtt)), "min RTT {rtt}");
        }
        // window = wire rate per stream × min RTT
        let w = num(&c["per_stream"][0]);
        let want = num(&c["rate_bps"]) / 8.0 / 2.0 * num(&c["min_rtt_ms"][0]) / 1e3;
        assert!((w / want - 1.0).abs() < 0.01, "window {w} vs {want}");
    }
    // On loopback the window would be below a segment: said, not hidden.
    let srv = Server::start(&td, &[]);
    let js = td.p("lo.json").display().to_string();
    let e = ok(&xfer(
        &td,
        &[
            "--limiter",
            "cwnd",
            "--rate",
            "40M",
            "--json",
            &js,
            "mem:1M",
            &srv.addr,
            "--discard",
        ],
    ));
    assert!(e.contains("too short for a window clamp"), "{e}");
    let j = json(&td.p("lo.json"));
    assert!(j["rate_changes"][0]["note"]
        .as_str()
        .unwrap()
        .contains("too short"));
}

#[test]
fn a_pause_stops_the_data_until_the_plan_resumes() {
    let _one = one_at_a_time();
    let td = TempDir::new("pause");
    let srv = Server::start(&td, &[]);
    let j = traced(
        &td,
        "pause.json",
        &[
            "-P",
            "2",
            "--interval",
            "50ms",
            "--rate-profile",
            "0s:80M,2s:0,3s:80M",
            "mem:24M",
            &srv.addr,
            "--discard",
        ],
    );
    let seg = j["segments"].as_array().unwrap();
    assert_eq!(seg.len(), 3);
    // 2 s at 80 Mbit/s is 20 MB, and a second of it unpaused 10 MB. What leaks
    // into the pause is what was queued in the sockets (TCP_NOTSENT_LOWAT, 100 kB
    // per stream at this rate) and in flight, plus what the 50 ms intervals
    // straddling the step carry at the old rate (500 kB each; two when the
    // interval report comes late on a loaded machine: 1 048 749 bytes once in a
    // CI pass). 1.5 MB is 15 % of an unpaused second.
    let paused = seg[1]["bytes"].as_u64().unwrap();
    assert!(paused < 1_500_000, "{paused} bytes sent during the pause");
    assert!(seg[1]["error"].is_null() && seg[1]["rate_bps"] == 0);
    assert!(num(&seg[0]["error"]).abs() < 0.15, "{}", seg[0]);
    assert!(num(&j["run"]["completion_time"]) > 3.0);
    assert_eq!(j["rate_changes"][1]["rate_bps"], 0);
}

#[test]
fn bad_plans_are_refused_with_status_2_before_connecting() {
    let td = TempDir::new("badplan");
    // Nothing listens on port 1: a refusal must come before any connection.
    let cases: &[(&[&str], &str)] = &[
        (
            &["--rate-profile", "0s:40M,2s:120M,1s:10M"],
            "times must increase",
        ),
        (
            &["--rate-profile", "0s:40M,2s:120M,2s:10M"],
            "times must increase",
        ),
        (&["--rate-profile", "0s:40M,-1s:10M"], "negative"),
        (&["--rate-profile", "0s:40Q"], "invalid rate"),
        (&["--rate-profile", "0s:40M,3x:1M"], "unknown time unit"),
        (&["--rate-profile", ""], "empty"),
        (&["--rate-profile", "1s:40M"], "first step must be at 0s"),
        (&["--rate-profile", "0s:0"], "every rate is 0"),
        (&["--rate-profile", "@missing.json"], "cannot read"),
        (&["--start-at", "tomorrow"], "--start-at"),
        (
            &["--rate", "1M", "--timer-hz", "100"],
            "--timer-hz applies to --limiter sleep",
        ),
        (&["--limiter", "sleep"], "--limiter needs --rate"),
        (&["--rate", "1M", "--signal-token", "a b"], "--signal-token"),
    ];
    for (args, want) in cases {
        let mut all = args.to_vec();
        all.extend(["mem:1M", "127.0.0.1:1", "--discard"]);
        let o = xfer(&td, &all);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.starts_with("xfer: error: ") && e.contains(want),
            "{args:?}: {e}"
        );
        assert_eq!(
            e.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {e}"
        );
    }
    // Profiles and rates are one thing: not both.
    let o = xfer(
        &td,
        &[
            "--rate",
            "1M",
            "--rate-profile",
            "0s:1M",
            "mem:1M",
            "127.0.0.1:1",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
}
