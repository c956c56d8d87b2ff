"""Importers: logs from anywhere (a real testbed, the netns backend) turned into a Trace.

* :mod:`.iperf3` — iperf3 JSON (``iperf3 -J``, ``--logfile``, ``--get-server-output``);
* :mod:`.ss` — repeated ``ss -tin`` snapshots;
* :mod:`.common` — the Trace schemas, re-binning onto the run's grid, the synthetic
  "resolved" scenario of an imported run and the run folder writer.
"""

from .common import ImportLogError

__all__ = ["ImportLogError"]
