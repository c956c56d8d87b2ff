//! `--streams auto` (issue 50, item 3): the search grows the stream count
//! during a real transfer, and the receiver takes late data connections up
//! to the count the request announced, never beyond it, never into another
//! session.

mod common;

use common::*;
use serde_json::json;
use std::io::Write;

#[test]
fn auto_grows_from_one_stream_and_moves_a_file_bit_exact() {
    let td = TempDir::new("auto");
    let srv = Server::start(&td, &[]);
    let size = 64 << 20;
    std::fs::write(td.p("src.bin"), data(size + 4321, 50)).unwrap();
    let js = td.p("trace.json");
    let js_s = js.display().to_string();
    // Each socket paced to 50 Mbit/s (test hook), so that on loopback two
    // streams really carry twice what one does. Pacing bounds what one
    // stream sends before the first decision (about 0.6 s, 4 MB) far below
    // the 64 MiB, so the search decides before the data runs out however
    // slow the machine.
    let o = xfer(
        &td,
        &[
            "--streams",
            "auto",
            "--start-streams",
            "1",
            "--max-streams",
            "4",
            "--chunk",
            "256K",
            "--test-stream-rate",
            "50M",
            "--json",
            &js_s,
            "src.bin",
            &srv.dest("/out/auto.bin"),
        ],
    );
    let err = ok(&o);
    same(&td.p("src.bin"), &td.root().join("out/auto.bin"));
    assert!(err.contains("(auto)"), "{err}");
    let t = json(&js);
    let steps = t["streams_auto"]
        .as_array()
        .expect("streams_auto in the trace");
    assert!(!steps.is_empty(), "{t}");
    assert_eq!(steps[0]["n"], 1, "{steps:?}");
    assert!(
        steps
            .iter()
            .any(|s| s["next"].as_u64() > s["n"].as_u64() && s["n"].as_u64() >= Some(1)),
        "the count never grew: {steps:?}"
    );
    for s in steps {
        for k in ["t", "goodput_bps", "loss", "utility"] {
            assert!(s[k].is_number(), "{k} in {s}");
        }
        assert!(s["next"].as_u64().unwrap() <= 4);
    }
    let streams = t["run"]["streams"].as_u64().unwrap();
    assert!((2..=4).contains(&streams), "{streams}");
    let flows = t["flows"].as_array().unwrap();
    assert_eq!(flows.len() as u64, streams);
    let bytes: u64 = flows.iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
    assert_eq!(bytes, size as u64 + 4321);
}

#[test]
fn auto_refuses_what_it_does_not_do() {
    let td = TempDir::new("auto-refuse");
    let srv = Server::start(&td, &[]);
    let dest = srv.dest("/x.bin");
    for (args, why) in [
        (
            vec!["--streams", "auto", "--rate", "100M", "mem:1M", &dest],
            "--rate",
        ),
        (
            vec!["-P", "auto", "--to-cmd", "cat", "mem:1M", &srv.addr],
            "stripe mode",
        ),
        (vec!["-P", "auto", &dest, "local.bin"], "pull"),
        (
            vec!["-P", "auto", "--max-streams", "200", "mem:1M", &dest],
            "--max-streams",
        ),
        (
            vec!["-P", "2", "--max-streams", "4", "mem:1M", &dest],
            "--streams auto",
        ),
    ] {
        let o = xfer(&td, &args);
        let e = failed(&o);
        assert!(e.contains(why), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: one line: {e}");
    }
}

/// A data connection joining `session` as `stream`: the server's reply.
fn join(srv: &Server, session: &str, stream: u64) -> (std::net::TcpStream, serde_json::Value) {
    let mut d = raw_connect(&srv.addr);
    raw_handshake(&mut d, KEY).unwrap();
    send_json(
        &mut d,
        &json!({"Data": {"session": session, "stream": stream}}),
    )
    .unwrap();
    let r = recv_json(&mut d).unwrap_or_else(|| panic!("no reply; log:\n{}", srv.log()));
    (d, r)
}

#[test]
fn late_joins_up_to_the_announced_count_only() {
    const S: &str = "a0112233445566778899aabbccddeeff";
    let td = TempDir::new("late-join");
    let srv = Server::start(&td, &[]);
    // A session announcing 3 streams, of which the client opens 2.
    let chunk = 64 << 10;
    let mut req = request(S, json!({"path": "late.bin"}));
    req["Control"]["streams"] = 3.into();
    req["Control"]["chunk"] = chunk.into();
    req["Control"]["size"] = (2 * chunk).into();
    let mut ctrl = raw_connect(&srv.addr);
    raw_handshake(&mut ctrl, KEY).unwrap();
    send_json(&mut ctrl, &req).unwrap();
    let acc = recv_json(&mut ctrl).unwrap();
    let features = acc["Accept"]["features"].as_array().unwrap();
    assert!(features.contains(&json!("late_join")), "{acc}");
    let payload: Vec<Vec<u8>> = (0..2).map(|i| data(chunk, 60 + i as u64)).collect();
    let hash = |p: &[u8]| xxhash_rust::xxh3::xxh3_64(p);
    let (mut d0, r) = join(&srv, S, 0);
    assert_eq!(r, json!("Joined"));
    d0.write_all(&frame(1, 0, &payload[0], hash(&payload[0])))
        .unwrap();
    // Stream 1 joins after data moved on stream 0: a late join is valid.
    let (mut d1, r) = join(&srv, S, 1);
    assert_eq!(r, json!("Joined"));
    // Beyond the announced count, a duplicate, another session: refused.
    for (session, stream) in [(S, 3), (S, 1), ("b0112233445566778899aabbccddeeff", 0)] {
        let (_d, r) = join(&srv, session, stream);
        assert!(r["Reject"].is_string(), "{session} {stream}: {r}");
    }
    d1.write_all(&frame(1, 1, &payload[1], hash(&payload[1])))
        .unwrap();
    for d in [&mut d0, &mut d1] {
        d.write_all(&frame(2, 0, &[], 0)).unwrap();
    }
    // Two streams used of three announced: the verdict comes without the third.
    let e2e = e2e_of(&[(0, hash(&payload[0])), (1, hash(&payload[1]))]);
    send_json(&mut ctrl, &json!({"e2e": e2e, "streams_used": 2})).unwrap();
    let done = recv_json(&mut ctrl).unwrap_or_else(|| panic!("no verdict:\n{}", srv.log()));
    assert!(done["error"].is_null(), "{done}");
    assert_eq!(
        std::fs::read(td.root().join("late.bin")).unwrap(),
        payload.concat()
    );
}
