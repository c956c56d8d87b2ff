//! `xferlab._sim`: runs the simulator from Python. Thin on purpose: a JSON configuration
//! in (already resolved by the scenario model), Arrow record batches out (through the Arrow
//! C data interface, no copies on the Python side).

use arrow_array::ffi::{to_ffi, FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use xferlab_sim::config::SimConfig;
use xferlab_sim::Simulation;

mod heap;

#[global_allocator]
static ALLOCATOR: heap::CountingAllocator = heap::CountingAllocator;

/// Hands a record batch to pyarrow (`RecordBatch._import_from_c` moves the data out).
fn to_pyarrow<'py>(py: Python<'py>, batch: RecordBatch) -> PyResult<Bound<'py, PyAny>> {
    let data = StructArray::from(batch).into_data();
    let (array, schema) = to_ffi(&data).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let array = Box::new(array);
    let schema = Box::new(schema);
    let a = &*array as *const FFI_ArrowArray as usize;
    let s = &*schema as *const FFI_ArrowSchema as usize;
    let rb = py
        .import("pyarrow")?
        .getattr("RecordBatch")?
        .call_method1("_import_from_c", (a, s))?;
    // pyarrow has taken ownership (the release callbacks are now null): dropping the
    // boxes only frees the structs themselves.
    drop(array);
    drop(schema);
    Ok(rb)
}

/// Runs one simulation.
///
/// `progress(now_s, events)` is called every `chunk_s` simulated seconds (the GIL is
/// released in between, and Ctrl-C is honoured there). Returns
/// `{"tables": {name: pyarrow.RecordBatch}, "stats": {...}}`, and with `capture` the data
/// segments offered to the bottleneck under `"capture"` (lists `t_ns`, `flow`, `seq`,
/// `departs_ns`, the last -1 for a drop) and every ACK as its receiver sends it under
/// `"ack_capture"` (`t_ns`, `flow`, `cum`, `wnd`): a diagnostic beside the trace, not part
/// of it.
#[pyfunction]
#[pyo3(signature = (config_json, progress=None, chunk_s=1.0, capture=false))]
fn run<'py>(
    py: Python<'py>,
    config_json: &str,
    progress: Option<Bound<'py, PyAny>>,
    chunk_s: f64,
    capture: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg =
        SimConfig::from_json(config_json).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut sim = Simulation::new(cfg).map_err(|e| PyValueError::new_err(e.to_string()))?;
    if capture {
        sim.capture_bottleneck();
    }
    let chunk = (chunk_s.max(1e-3) * 1e9) as u64;
    let mut limit = chunk;
    loop {
        let done = py.detach(|| sim.run_until(limit));
        if let Some(cb) = &progress {
            cb.call1((sim.now() as f64 / 1e9, sim.events()))?;
        }
        py.check_signals()?;
        if done {
            break;
        }
        limit = limit.saturating_add(chunk);
    }
    let captured = sim.take_capture();
    let trace = py.detach(|| sim.finish());
    let tables = PyDict::new(py);
    for (name, batch) in trace
        .to_record_batches()
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?
    {
        tables.set_item(name, to_pyarrow(py, batch)?)?;
    }
    let s = &trace.stats;
    let stats = PyDict::new(py);
    stats.set_item("events", s.events)?;
    stats.set_item("packets", s.packets)?;
    stats.set_item("acks", s.acks)?;
    stats.set_item("end_s", s.end_s)?;
    stats.set_item("bottleneck_drops", s.bottleneck_drops)?;
    stats.set_item("bottleneck_losses", s.bottleneck_losses)?;
    stats.set_item("bottleneck_max_queue", s.bottleneck_max_queue)?;
    stats.set_item("background_packets", s.background_packets)?;
    stats.set_item("background_drops", s.background_drops)?;
    stats.set_item("loss_probes", s.loss_probes)?;
    stats.set_item("segments_lost", s.segments_lost)?;
    stats.set_item("duplicate_segments", s.duplicate_segments)?;
    stats.set_item("rx_batch_packet_mean", s.rx_batch_packet_mean)?;
    let out = PyDict::new(py);
    out.set_item("tables", tables)?;
    out.set_item("stats", stats)?;
    if let Some(c) = captured {
        let d = PyDict::new(py);
        d.set_item("t_ns", c.t_ns)?;
        d.set_item("flow", c.flow)?;
        d.set_item("seq", c.seq)?;
        let departs: Vec<i64> = c
            .departs_ns
            .iter()
            .map(|x| x.map_or(-1, |t| t as i64))
            .collect();
        d.set_item("departs_ns", departs)?;
        out.set_item("capture", d)?;
        let a = PyDict::new(py);
        a.set_item("t_ns", c.acks.t_ns)?;
        a.set_item("flow", c.acks.flow)?;
        a.set_item("cum", c.acks.cum)?;
        a.set_item("wnd", c.acks.wnd)?;
        out.set_item("ack_capture", a)?;
    }
    Ok(out)
}

/// Congestion controls the simulator implements, as Linux names them.
#[pyfunction]
fn variants() -> Vec<&'static str> {
    xferlab_sim::cc::NAMES.to_vec()
}

/// Heap allocations made by the extension's Rust code since it was loaded, as
/// `{"allocations": n, "reallocations": n}` (new blocks; blocks resized). Read it before and
/// after a run for the run's own (tests/test_sim_cost.py).
#[pyfunction]
fn allocations(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (allocations, reallocations) = heap::counts();
    let d = PyDict::new(py);
    d.set_item("allocations", allocations)?;
    d.set_item("reallocations", reallocations)?;
    Ok(d)
}

#[pymodule]
fn _sim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(variants, m)?)?;
    m.add_function(wrap_pyfunction!(allocations, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
