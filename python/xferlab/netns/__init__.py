"""Real Linux TCP in network namespaces: the emulation backend's host-side pieces."""
