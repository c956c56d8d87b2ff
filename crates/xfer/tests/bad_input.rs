//! What a user (or an attacker) can get wrong on xfer's command line: every
//! number out of its bounds, key and plan files that are FIFOs, devices,
//! folders or open to others, results aimed at devices or symlinks, a
//! start time in the past, a consumer the server will not run or that
//! fails. Each is one `xfer: error:` line naming the option and the problem,
//! exit status 2 for the user's input, given before anything is sent, and
//! never a hang (every run here is bounded).

mod common;
use common::*;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs xfer with `args`, killing it if it has not ended within 20 s (a
/// hang is a failure, not a stuck test suite).
fn bounded(td: &TempDir, args: &[&str]) -> Output {
    let mut c = Command::new(BIN)
        .args(args)
        .current_dir(&td.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            panic!("xfer {args:?} hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// One refusal: status 2, one line, starting `xfer: error: ` and saying `want`.
fn refused(o: &Output, want: &str, what: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{what}: {e}");
    assert!(
        e.starts_with("xfer: error: ") && e.contains(want),
        "{what}: wanted {want:?} in {e}"
    );
    assert_eq!(e.trim_end().lines().count(), 1, "{what}: not one line: {e}");
}

/// `xfer send` with the test key, to a port nothing listens on: a refusal
/// must come before any connection is tried.
fn send_refused(td: &TempDir, args: &[&str], want: &str) {
    let key = td.key();
    let mut all = vec!["send", "--key-file", &key, "--no-progress"];
    all.extend_from_slice(args);
    refused(&bounded(td, &all), want, &format!("{args:?}"));
}

#[test]
fn every_number_out_of_its_bounds_is_refused_with_status_2() {
    let td = TempDir::new("bounds");
    let to = ["mem:1M", "127.0.0.1:1", "--discard"];
    let cases: &[(&[&str], &str)] = &[
        (&["-P", "0"], "-P 0 is out of range: at least 1"),
        (&["-P", "129"], "-P 129 is out of range: at most 128"),
        (
            &["--chunk", "1K"],
            "--chunk 1K is out of range: at least 4.00 KiB",
        ),
        (
            &["--chunk", "1G"],
            "--chunk 1G is out of range: at most 16.00 MiB",
        ),
        (
            &["--sndbuf", "1T"],
            "--sndbuf 1T is out of range: at most 1.00 GiB",
        ),
        (
            &["--rcvbuf", "100"],
            "--rcvbuf 100 is out of range: at least 4.00 KiB",
        ),
        (
            &["--rate", "500"],
            "--rate 500 is out of range: at least 1 kbit/s",
        ),
        (
            &["--rate", "99T"],
            "--rate 99T is out of range: at most 10 Tbit/s",
        ),
        (
            &["--deadline", "1000h"],
            "--deadline 1000h is out of range: at most 2000000 s",
        ),
        (
            &["--retries", "4000000000"],
            "--retries 4000000000 is out of range: at most 100",
        ),
        (
            &["--interval", "1ms"],
            "--interval 1ms is out of range: at least 0.01 s",
        ),
        (
            &["--interval", "2h"],
            "--interval 2h is out of range: at most 3600 s",
        ),
        (
            &["--size", "2P"],
            "--size 2P is out of range: at most 1.00 PiB",
        ),
        (
            &["--expect-size", "9999999999999T"],
            "--expect-size 9999999999999T is out of range",
        ),
        (
            &["--rate-profile", "0s:1M,1s:50T"],
            "rate 50T is out of range: at most 10 Tbit/s",
        ),
        (
            &["--rate-profile", "0s:1M,3000000s:0"],
            "out of range (at most 2000000 s",
        ),
        (
            &["-P", "128", "--chunk", "16M"],
            "-P 128 with --chunk 16.00 MiB is 2.00 GiB",
        ),
        (
            &["--start-at", "2100-01-01T00:00:00Z"],
            "ahead, more than 11 days 13 h",
        ),
        (
            &[
                "--start-at",
                &format!("{:.0}", unix_now() + 10.0),
                "--connect-ahead",
                "2h",
            ],
            "--connect-ahead 2h is out of range: at most 3600 s",
        ),
    ];
    for (args, want) in cases {
        let mut all = args.to_vec();
        all.extend(to);
        send_refused(&td, &all, want);
    }
    send_refused(
        &td,
        &["mem:2P", "127.0.0.1:1", "--discard"],
        "mem: 2P is out of range",
    );
    send_refused(
        &td,
        &["mem:1M", "127.0.0.1:0", "--discard"],
        "a port from 1 to 65535",
    );
    // A rate that would take longer than the limit, said with its time.
    send_refused(
        &td,
        &["--rate", "1k", "mem:1G", "127.0.0.1:1", "--discard"],
        "--rate 1 kbit/s: 1.00 GiB would take 99 days 10 h at that rate",
    );
}

#[test]
fn serve_options_out_of_bounds_are_refused_with_status_2() {
    let td = TempDir::new("servebounds");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--max-sessions", "0"],
            "--max-sessions 0 is out of range: at least 1",
        ),
        (
            &["--max-sessions", "99999"],
            "--max-sessions 99999 is out of range: at most 1024",
        ),
        (
            &["--rcvbuf", "1T"],
            "--rcvbuf 1T is out of range: at most 1.00 GiB",
        ),
        (
            &["--max-conns", "1"],
            "--max-conns 1 is out of range: at least 2",
        ),
        (
            &["--max-conns", "9999999"],
            "--max-conns 9999999 is out of range: at most 65536",
        ),
        (
            &["--max-chunk", "1G"],
            "--max-chunk 1G is out of range: at most 16.00 MiB",
        ),
        (
            &["--listen", "example"],
            "--listen \"example\" is not IP:PORT",
        ),
        (
            &["--root", "/nonexistent/x"],
            "--root /nonexistent/x: No such file",
        ),
        (
            &["--root", "/dev/null"],
            "--root /dev/null is a character device, not a directory",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["serve", "--insecure"];
        if !args.contains(&"--listen") {
            all.extend(["--listen", "127.0.0.1:0"]);
        }
        all.extend_from_slice(args);
        refused(&bounded(&td, &all), want, &format!("{args:?}"));
    }
}

#[test]
fn onoff_numbers_that_would_hang_it_are_refused() {
    let td = TempDir::new("onoff");
    // (rate, mean ON, duration): each would spin for ever or overflow a clock.
    let cases = [
        ("1e300", "1", "1", "--rate 1e300 is out of range"),
        (
            "1000000",
            "1e-300",
            "1",
            "--mean-on 1e-300 is out of range: at least",
        ),
        (
            "1000000",
            "1",
            "1e300",
            "--duration 1e300 is out of range: at most 1000000 s",
        ),
    ];
    for (rate, on, duration, want) in cases {
        let args = [
            "onoff",
            "--dst",
            "127.0.0.1:9",
            "--rate",
            rate,
            "--mean-on",
            on,
            "--duration",
            duration,
        ];
        refused(&bounded(&td, &args), want, want);
    }
    let sink = ["onoff", "--sink", "127.0.0.1:0", "--duration", "inf"];
    refused(
        &bounded(&td, &sink),
        "--duration inf is not a number of seconds",
        "sink",
    );
}

/// A FIFO nobody writes to, at `p`.
fn mkfifo(p: &std::path::Path) {
    let ok = Command::new("mkfifo").arg(p).status().unwrap().success();
    assert!(ok, "mkfifo {}", p.display());
}

#[test]
fn key_and_plan_files_must_be_private_regular_files() {
    let td = TempDir::new("keyfiles");
    mkfifo(&td.p("fifo"));
    std::fs::create_dir(td.p("dir")).unwrap();
    let open = td.p("open.key");
    std::fs::write(&open, "0123456789abcdef0123").unwrap();
    std::fs::write(td.p("short.key"), "short").unwrap();
    let short = td.p("short.key");
    std::process::Command::new("chmod")
        .args(["644", &open.display().to_string()])
        .status()
        .unwrap();
    std::process::Command::new("chmod")
        .args(["600", &short.display().to_string()])
        .status()
        .unwrap();
    let cases = [
        (
            "fifo",
            "--key-file fifo is a FIFO (named pipe), not a regular file",
        ),
        (
            "/dev/zero",
            "--key-file /dev/zero is a character device, not a regular file",
        ),
        ("dir", "--key-file dir is a directory, not a regular file"),
        (
            "open.key",
            "is open to group or others (mode 644): the key must be private",
        ),
        ("short.key", "the key is too short"),
        ("missing.key", "--key-file missing.key: cannot read it"),
    ];
    for (key, want) in cases {
        let send = [
            "send",
            "--key-file",
            key,
            "mem:1M",
            "127.0.0.1:1",
            "--discard",
        ];
        refused(&bounded(&td, &send), want, key);
        let serve = ["serve", "--key-file", key, "--listen", "127.0.0.1:0"];
        refused(&bounded(&td, &serve), want, key);
    }
    for (plan, want) in [
        (
            "@fifo",
            "the plan fifo is a FIFO (named pipe), not a regular file",
        ),
        ("@/dev/zero", "the plan /dev/zero is a character device"),
        ("@dir", "the plan dir is a directory"),
    ] {
        send_refused(
            &td,
            &["--rate-profile", plan, "mem:1M", "127.0.0.1:1", "--discard"],
            want,
        );
    }
}

#[test]
fn results_never_replace_a_device_or_a_symlink() {
    let td = TempDir::new("results");
    let srv = Server::start(&td, &[]);
    std::fs::write(td.root().join("r.bin"), data(1 << 20, 3)).unwrap();
    std::fs::write(td.p("mine"), b"precious").unwrap();
    std::os::unix::fs::symlink(td.p("mine"), td.p("link")).unwrap();
    let dest = srv.dest("/r.bin");
    let to = ["mem:1M", srv.addr.as_str(), "--discard"];
    send_refused(
        &td,
        &[&["--json", "/dev/null"][..], &to[..]].concat(),
        "--json /dev/null is a character device",
    );
    send_refused(
        &td,
        &[&["--json", "link"][..], &to[..]].concat(),
        "--json link is a symlink",
    );
    send_refused(
        &td,
        &[dest.as_str(), "/dev/null"],
        "DEST /dev/null is a character device",
    );
    send_refused(&td, &[dest.as_str(), "link"], "DEST link is a symlink");
    // A symlink planted where a pull keeps its partial data is never
    // followed: the file it names is left as it was.
    std::os::unix::fs::symlink(td.p("mine"), td.p(".out.bin.xfer-part")).unwrap();
    let key = td.key();
    let o = bounded(&td, &["send", "--key-file", &key, &dest, "out.bin"]);
    let e = failed(&o);
    assert!(e.contains(".out.bin.xfer-part"), "{e}");
    assert_eq!(std::fs::read(td.p("mine")).unwrap(), b"precious");
    assert!(!td.p("out.bin").exists());
    ok(&xfer(&td, &[&dest, "fine.bin"]));
    same(&td.root().join("r.bin"), &td.p("fine.bin"));
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn a_start_time_long_past_is_refused_saying_how_long_ago() {
    let td = TempDir::new("startpast");
    for t in ["2020-01-01T00:00:00Z", "0", "1969-07-20T20:17:40Z"] {
        let to = ["--start-at", t, "mem:1M", "127.0.0.1:1", "--discard"];
        send_refused(&td, &to, &format!("--start-at {t} is in the past: "));
        let key = td.key();
        let run = [&["send", "--key-file", &key][..], &to[..]].concat();
        let e = String::from_utf8_lossy(&bounded(&td, &run).stderr).to_string();
        assert!(
            e.contains(" days ") && e.contains(" ago (the clock reads "),
            "{e}"
        );
    }
}

#[test]
fn a_consumer_command_error_names_its_real_cause() {
    let td = TempDir::new("tocmd");
    std::fs::write(td.p("src.bin"), data(3 << 20, 9)).unwrap();
    // A server without --allow-cmd says so, for a file too (a file used to
    // be refused first for its stripe mode).
    let plain = Server::start(&td, &[]);
    let e = failed(&xfer(&td, &["src.bin", &plain.addr, "--to-cmd", "cat"]));
    assert!(e.contains("start it with --allow-cmd"), "{e}");
    let o = xfer(
        &td,
        &[
            "--mode",
            "stripe",
            "src.bin",
            &plain.addr,
            "--to-cmd",
            "cat",
        ],
    );
    refused(&o, "--to-cmd feeds a command its input in order", "stripe");
    // A consumer that fails is named with its exit status.
    let srv = Server::start(&td, &["--allow-cmd"]);
    for cmd in ["exit 3", "cat >/dev/null; exit 3"] {
        let o = xfer(&td, &["src.bin", &srv.addr, "--to-cmd", cmd]);
        let e = failed(&o);
        let want = format!("the consumer command {cmd:?} failed");
        assert!(e.contains(&want) && e.contains("exit status: 3"), "{e}");
    }
    // And a file goes to a consumer, whole, in stream mode.
    ok(&xfer(
        &td,
        &["src.bin", &srv.addr, "--to-cmd", "cat > got.bin"],
    ));
    same(&td.p("src.bin"), &td.root().join("got.bin"));
}

#[test]
fn a_slow_rate_says_how_long_the_transfer_takes() {
    let td = TempDir::new("slowrate");
    let key = td.key();
    // 1 MiB at 10 kbit/s: the estimate comes before the connection fails.
    let o = bounded(
        &td,
        &[
            "send",
            "--key-file",
            &key,
            "--rate",
            "10k",
            "mem:1M",
            "127.0.0.1:1",
            "--discard",
        ],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("xfer: 1.00 MiB at 10 kbit/s takes about 13 min 59 s; progress moves by whole 1.00 MiB chunks"),
        "{e}"
    );
    // -q says nothing.
    let o = bounded(
        &td,
        &[
            "send",
            "--key-file",
            &key,
            "-q",
            "--rate",
            "10k",
            "mem:1M",
            "127.0.0.1:1",
            "--discard",
        ],
    );
    assert!(!String::from_utf8_lossy(&o.stderr).contains("takes about"));
}

#[test]
fn a_source_that_is_not_a_file_is_named() {
    let td = TempDir::new("srckinds");
    let srv = Server::start(&td, &[]);
    std::fs::create_dir(td.p("dir")).unwrap();
    send_refused(&td, &["dir", &srv.dest("/d")], "SRC dir is a directory");
    send_refused(
        &td,
        &["nothing", &srv.dest("/d")],
        "SRC nothing: no such file",
    );
    // A FIFO is a pipe: what its writer writes is sent, and the user is told.
    mkfifo(&td.p("fifo"));
    let writer = {
        let p = td.p("fifo");
        std::thread::spawn(move || std::fs::write(p, data(2 << 20, 5)).unwrap())
    };
    let e = ok(&xfer(&td, &["fifo", &srv.dest("/f.bin")]));
    writer.join().unwrap();
    assert!(
        e.contains("SRC fifo is a FIFO (named pipe): sending what it gives until its end"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(td.root().join("f.bin")).unwrap(),
        data(2 << 20, 5)
    );
}
