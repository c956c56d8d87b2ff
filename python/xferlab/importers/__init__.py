"""Importers: logs from anywhere (a real testbed, the netns backend) turned into a Trace.

* :mod:`.iperf3` — iperf3 JSON (``iperf3 -J``, ``--logfile``, ``--get-server-output``);
* :mod:`.ss` — repeated ``ss -tin`` snapshots;
* :mod:`.xfer` — xfer's ``--json`` trace (the netns and ssh backends' volume-bound runs);
* :mod:`.common` — what they share: reading and checking logs, the bounds checked before
  any table is made, re-binning onto the run's grid, the checks of the finished Trace and
  the synthetic "resolved" scenario of an imported run.
"""

from .common import ImportLogError

__all__ = ["ImportLogError"]
