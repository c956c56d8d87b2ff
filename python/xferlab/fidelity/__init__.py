"""The simulator beside real Linux TCP: the fidelity matrix, run on the simulator and on the
netns backend (this host's kernel), judged metric by metric. benches/fidelity.py is its
command line; docs/fidelity.md says how far to trust the simulator, VALIDATION.md §3 gives
the verdicts and links to the full tables (docs/validation/).

One idea a module, in the order a case goes through them:

* ``matrix``: the cases and the scenario each runs; ``settings``: where results are kept,
  and the choices of a run of the bench (``OPTIONS``);
* ``emulation``: the simulator configured as the emulation netns builds (hosts, shapers,
  the receivers' reads); ``simulator`` and ``kernel``: a case's side on each backend;
  ``figures``: what the judgement reads of a run;
* ``store``: results directories and archived kernel runs (benches/fidelity-runs/);
  ``runs``: both sides of a case, stored, made again when stale;
* ``judge``: tolerances, verdicts, medians, ranges, tallies; ``table``: the fidelity table,
  written and read back; ``against``: the simulator against several kernel runs (held out,
  seeds, controls); ``dispersion``: run-to-run spread of one case;
* ``validation_md``: VALIDATION.md's tables between their markers, in it or in their own
  files under docs/validation/.
"""
