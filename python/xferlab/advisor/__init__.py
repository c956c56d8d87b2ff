"""The advisor (issue 50, DESIGN.md "The advisor"): for a path, a job and the competition
it expects, a bounded campaign on the simulator over candidate configurations (variant ×
parallel streams × pacing) answers which configuration to use, how long the job will take
(p50, p99) and the ``xfer`` command and host settings that apply it.

``question`` (what the user asks), ``candidates`` (what is tried, and how long each run
is), ``runs`` (the simulator runs within a budget), ``predict`` (a whole job's completion
time from a short run), ``recommend`` (the choice), ``present`` (tables, commands, JSON).
"""
