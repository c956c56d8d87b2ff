use xferlab_sim::config::SimConfig;
use xferlab_sim::Simulation;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pairs: u32 = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(1);
    let streams: u32 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(1);
    let buf: u32 = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(100);
    let rate: f64 = args.get(4).map(|s| s.parse().unwrap()).unwrap_or(1e9);
    let secs: u64 = args.get(5).map(|s| s.parse().unwrap()).unwrap_or(20);
    let mut flows = vec![];
    for p in 0..pairs {
        for s in 0..streams {
            flows.push(format!(
                r#"{{"pair":{p},"stream":{s},"start_ns":{},"duration_ns":{}}}"#,
                (p * streams + s) as u64 * 100_000,
                secs * 1_000_000_000
            ));
        }
    }
    let pairs_j: Vec<String> = (0..pairs)
        .map(|_| r#"{"access_rate_bps":1e9,"rtt_ns":20000000}"#.to_string())
        .collect();
    let j = format!(
        r#"{{"bottleneck":{{"rate_bps":{rate},"buffer_pkts":{buf}}},"pairs":[{}],"flows":[{}]}}"#,
        pairs_j.join(","),
        flows.join(",")
    );
    let t = Simulation::new(SimConfig::from_json(&j).unwrap())
        .unwrap()
        .run();
    let r: u64 = t.flows.retransmissions.iter().sum();
    let to: u64 = t.flows.timeouts.iter().sum();
    let fr: u64 = t.flows.fast_recoveries.iter().sum();
    println!(
        "drops {} retrans {} timeouts {} fast_recoveries {} events {}",
        t.stats.bottleneck_drops, r, to, fr, t.stats.events
    );
}
