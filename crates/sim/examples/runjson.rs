//! Runs a simulator configuration (JSON, as the Python backend builds it) and prints the
//! per-flow totals: `cargo run --release --example runjson -- config.json`.
use xferlab_sim::config::SimConfig;
use xferlab_sim::Simulation;

fn main() {
    let path = std::env::args().nth(1).expect("usage: runjson CONFIG.json");
    let j = std::fs::read_to_string(path).expect("readable configuration");
    let t = Simulation::new(SimConfig::from_json(&j).unwrap())
        .unwrap()
        .run();
    println!(
        "drops {} events {} end {:.3} s",
        t.stats.bottleneck_drops, t.stats.events, t.stats.end_s
    );
    for i in 0..t.flows.retransmissions.len() {
        println!(
            "flow {i}: bytes {} retx {} timeouts {}",
            t.flows.bytes[i], t.flows.retransmissions[i], t.flows.timeouts[i]
        );
    }
}
