"""The bounds of what xferlab accepts, each with the reason a user is told.

One place for every limit a scenario, a campaign or an import is checked against: the
scenario model (:mod:`xferlab.scenario`) and the campaign expansion read them from here,
so that what ``xferlab check`` accepts is what ``xferlab run`` can run — in bounded memory,
and in a time that is shown up front. A limit is a :class:`Limit`: its value and why.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    value: float
    reason: str

    def __float__(self) -> float:
        return float(self.value)


# ----------------------------------------------------------------- quantities of a scenario

RATE_MAX_BPS = Limit(10e12, "ten times the fastest Ethernet")
RATE_MIN_BPS = Limit(1e3, "below 1 kbit/s one packet takes seconds")
RTT_MAX_S = Limit(10.0, "beyond any real path (a geostationary satellite hop is about 0.6 s)")
#: Durations, start times, jitter, stagger, ON/OFF periods, metric windows.
TIME_MAX_S = Limit(1e6, "about 11.6 days of experiment time")
#: The whole run: start times, stagger × pairs, the duration or the volume at the ideal rate.
SPAN_MAX_S = Limit(2e6, "about 23 days of experiment time")
#: Durations that must be positive (a run's, an RTT, an ON/OFF period).
TIME_MIN_S = Limit(1e-6, "shorter than any event a packet network resolves")
RTO_MIN_MAX_S = Limit(120.0, "Linux's largest retransmission timeout (TCP_RTO_MAX)")
INTERVAL_MIN_S = Limit(1e-6, "finer than one packet's time on the fastest link")
VOLUME_MAX_BYTES = Limit(10**15, "1 PB per transfer")
#: A socket buffer (window cap) or a token bucket's depth.
SIZE_MAX_BYTES = Limit(10**12, "1 TB")
BUFFER_MAX_PACKETS = Limit(100_000_000, "150 GB of queue at a 1500-byte MTU, beyond any router")
PAIRS_MAX = Limit(100_000, "each pair is a sender and a receiver with their own state")
STREAMS_MAX = Limit(10_000, "parallel streams per transfer")
#: Flows of a run: pairs × streams plus reverse sources.
FLOWS_MAX = Limit(100_000, "each flow costs memory and a series in every table of the trace")
BACKGROUND_SOURCES_MAX = Limit(10_000, "each background source is an event stream of its own")
#: Competing flows an advice simulates beside the job (`xferlab advise --competing`).
ADVISE_COMPETING_MAX = Limit(1_000, "every run of the advice simulates each of them; more would leave no run in any budget")
#: Rows of a trace, for one table and its tables together (a flow's samples times the flows).
SAMPLES_MAX = Limit(20_000_000, "a trace must fit in memory (about 1 GB)")
#: Packets a run may carry through its bottleneck(s) (data moved, plus background and
#: reverse traffic): about 150 TB, some hours of simulation. Below this a long run is
#: estimated up front and shown in progress.
PACKETS_MAX = Limit(1e11, "about 150 TB through the bottleneck, hours of simulation")

# ----------------------------------------------------------------- run folders

#: A time in a trace (s; ms for srtt and rto): beyond SPAN_MAX_S and a volume run's give-up time.
TRACE_TIME_MAX = Limit(1e8, "about three years, beyond any run")
#: run.json or metrics.json of a run folder: their per-flow lists at FLOWS_MAX flows.
RUN_FILE_MAX_BYTES = Limit(2**28, "256 MiB of JSON, beyond what a run of the largest scenario writes")

# ----------------------------------------------------------------- imports

LOG_MAX_BYTES = Limit(2**30, "1 GiB of log; split longer captures")
#: An import's mean goodput over the ideal goodput r_TP of its --capacity, counted by the
#: receivers: a few percent is interval edges and clocks (a warning), this much says that
#: the capacity given is not the path's bottleneck.
GOODPUT_OVER_CAPACITY_MAX = Limit(1.5, "what arrives cannot exceed what the bottleneck carries")
#: A run's name (an import's --name): one folder name.
NAME_MAX_CHARS = Limit(100, "a name is a folder name and a report's title")
#: Trace rows (goodput and tcp) an import's metrics and report go through per wall second,
#: for the estimate shown before a long one (the slowest measured: 20 flows, 2·10⁷ rows
#: in 70 s on a loaded 2-core machine).
IMPORT_ROWS_PER_S = 2.5e5

# ----------------------------------------------------------------- campaigns

CAMPAIGN_RUNS_MAX = Limit(100_000, "a campaign's catalog and folders; split a larger study into campaigns")
REPETITIONS_MAX = Limit(10_000, "repetitions of one point")
WORKERS_MAX = Limit(1024, "worker processes on one machine")

# ----------------------------------------------------------------- flow scheduling (seed 001)

#: Transfer requests of one scenario: each is a pair of hosts, a row of the plan and a series
#: of the plan figure; ifs, vifi, edf and spaghetti plan them in O(n log n) (20 000 in a few
#: seconds, docs/scheduling.md "Scale").
REQUESTS_MAX = Limit(20_000, "each request is a pair of hosts and a row of the plan; split larger sets of requests")
#: multirate's linear program: one variable per request and interval of its window, solved by
#: HiGHS in bounded memory (docs/scheduling.md "Scale" gives its times).
MULTIRATE_VARIABLES_MAX = Limit(
    400_000, "HiGHS's time grows faster than the program: 366 000 variables took 3.5 min on a loaded 2-core machine"
)
#: Transfers `xferlab schedule run` starts at once, one `xfer send` each, with its session.
XFER_SESSIONS_MAX = Limit(1024, "the most sessions an `xfer serve` takes (--max-sessions), each a process here")
#: A start's clock error, and a signal's processing time.
TIME_CONTROL_MAX_S = Limit(10.0, "synchronised clocks (NTP) err by milliseconds; beyond seconds a start is not controlled")

# ----------------------------------------------------------------- the simulator's speed

#: Simulated packets per wall second on one core, for estimates shown to a user (the
#: slowest of BENCHMARKS.md's figures, rounded down: 1 000 flows, 251 ns per packet).
SIM_PACKETS_PER_S = 3.0e6
#: Wall seconds per trace row a run samples, computes metrics of and draws (a run of 4 M
#: rows at 12.5 µs intervals took 80 s on an AMD EPYC core, the simulator 15 % of it).
SECONDS_PER_TRACE_ROW = 2e-5
#: Runs estimated to take longer than this say so, with the estimate, before they start.
ANNOUNCE_AFTER_S = 30.0


def too_big(what: str, value: float, limit: Limit, unit: str = "") -> str:
    """The message for ``value`` over ``limit``: what, how much, the bound and why."""
    return f"{what} {_fmt(value)}{unit} is over the limit of {_fmt(limit.value)}{unit} ({limit.reason})"


def _fmt(x: float) -> str:
    if isinstance(x, int) or float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}".replace(",", " ")
    return f"{x:.3g}"
