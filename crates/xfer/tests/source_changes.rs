//! A source file that changes while it is sent (truncated, grown, rewritten)
//! fails the transfer with a message that says so, and nothing is committed:
//! within an attempt, and across a resumed attempt. The change is made at a
//! point the test controls (while the senders are stalled by a test hook, or
//! by a hook run before the retry), never raced against the end of the
//! transfer.

mod common;
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `xfer send` of src.bin (8 MiB) whose first attempt the receiver resets
/// after 1 MiB; `hook` changes the source before the retry.
fn send_with_retry_hook(td: &TempDir, srv: &Server, hook: &str, extra: &[&str]) -> String {
    std::fs::write(td.p("src.bin"), data(8 << 20, 41)).unwrap();
    let dest = srv.dest("/t.bin");
    let mut args = vec![
        "-P",
        "2",
        "--retries",
        "3",
        "--fault-reset-after",
        "1M",
        "--fault-before-retry",
        hook,
    ];
    args.extend_from_slice(extra);
    args.extend(["src.bin", dest.as_str()]);
    let o = xfer(td, &args);
    let e = failed(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("attempt 1 failed"),
        "the first attempt failed: {e}"
    );
    assert!(
        !e.contains("attempt 2 failed"),
        "a change is never retried: {e}"
    );
    assert!(
        !td.root().join("t.bin").exists(),
        "nothing under the final name"
    );
    e
}

#[test]
fn a_file_truncated_before_a_resumed_attempt_fails_and_commits_nothing() {
    let td = TempDir::new("truncretry");
    let srv = Server::start(&td, &[]);
    for extra in [&[][..], &["--mode", "stream"][..]] {
        let e = send_with_retry_hook(&td, &srv, "truncate -s 3M src.bin", extra);
        assert!(
            e.contains(
                "xfer: error: the source src.bin changed during the transfer: it was 8.00 MiB \
                 (8388608 bytes) when the transfer started and is 3.00 MiB (3145728 bytes) now; \
                 nothing was committed"
            ),
            "{extra:?}: {e}"
        );
    }
    // Rewritten in place (same size, new modification time), or replaced.
    let e = send_with_retry_hook(&td, &srv, "touch -d '1 hour ago' src.bin", &[]);
    assert!(e.contains("it was written to"), "{e}");
    let e = send_with_retry_hook(&td, &srv, "cp src.bin x && mv x src.bin", &[]);
    assert!(e.contains("it was replaced by another file"), "{e}");
    // Unchanged, the same retry resumes and commits the file.
    std::fs::write(td.p("src.bin"), data(8 << 20, 41)).unwrap();
    ok(&xfer(
        &td,
        &[
            "-P",
            "2",
            "--fault-reset-after",
            "1M",
            "--fault-before-retry",
            "true",
            "src.bin",
            &srv.dest("/t.bin"),
        ],
    ));
    same(&td.p("src.bin"), &td.root().join("t.bin"));
}

/// Starts a send of src.bin whose senders stall after 2 MiB, and waits
/// until the receiver holds verified chunks.
fn stalled_send(td: &TempDir, srv: &Server, mode: &str) -> std::process::Child {
    let c = Command::new(BIN)
        .args(["send", "--key-file", &td.key(), "--no-progress"])
        .args(["-P", "2", "--retries", "3", "--mode", mode])
        .args(["--fault-stall-after", "2M", "src.bin", &srv.dest("/g.bin")])
        .current_dir(&td.0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let journal = td.root().join(".g.bin.xfer-journal");
    wait_until("verified chunks", Duration::from_secs(30), || {
        journal_records(&journal) >= 1
    });
    c
}

#[test]
fn a_file_that_grows_or_shrinks_while_sent_fails_at_once() {
    for (mode, change) in [
        ("stripe", 9u64 << 20),
        ("stream", 9 << 20),
        ("stripe", 1 << 20),
    ] {
        let td = TempDir::new("growing");
        let mut srv = Server::start(&td, &[]);
        std::fs::write(td.p("src.bin"), data(8 << 20, 42)).unwrap();
        let c = stalled_send(&td, &srv, mode);
        // While the senders are stalled: the file grows (a log being
        // written) or is cut; then the receiver goes away.
        std::fs::File::options()
            .write(true)
            .open(td.p("src.bin"))
            .unwrap()
            .set_len(change)
            .unwrap();
        srv.kill();
        let o = c.wait_with_output().unwrap();
        let e = failed(&o);
        let now = format!("is {}.00 MiB ({change} bytes) now", change >> 20);
        assert!(
            e.contains("changed during the transfer: it was 8.00 MiB (8388608 bytes)")
                && e.contains(&now),
            "{mode}: {e}"
        );
        assert!(!e.contains("retrying"), "{mode}: a change is final: {e}");
        assert!(!td.root().join("g.bin").exists());
    }
}
