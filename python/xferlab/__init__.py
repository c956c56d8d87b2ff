"""xferlab: a laboratory for bulk data transfers over high bandwidth-delay-product networks."""

__version__ = "0.1.0"
