//! xferlab's packet-level simulator of bulk TCP transfers on a dumbbell.
//!
//! Sans-IO and deterministic: time is an explicit integer (ns), every random draw comes
//! from one seeded generator, and the same configuration gives the same trace bit for bit.
//!
//! ```
//! use xferlab_sim::{config::SimConfig, Simulation};
//! let cfg = SimConfig::from_json(r#"{
//!   "bottleneck": {"rate_bps": 1e9, "buffer_pkts": 100},
//!   "pairs": [{"access_rate_bps": 1e9, "rtt_ns": 10000000}],
//!   "flows": [{"pair": 0, "duration_ns": 1000000000}]
//! }"#).unwrap();
//! let trace = Simulation::new(cfg).unwrap().run();
//! assert!(trace.flows.bytes[0] > 50_000_000);
//! ```

pub mod cc;
pub mod config;
pub mod gate;
pub mod host;
pub mod link;
pub mod pipe;
pub mod sim;
pub mod tcp;
pub mod time;
pub mod trace;

pub use sim::Simulation;
pub use trace::Trace;
