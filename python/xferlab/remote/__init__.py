"""Real remote hosts over SSH: the ssh backend's host-side pieces (inventory, connections,
facts, changes and their journal, clocks, the processes a run starts)."""
