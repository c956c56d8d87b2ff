"""Campaigns: sweeps and repetitions of a scenario, a kill-safe DuckDB catalog, reports,
and the seeds' user-oriented benchmark (HSTTS). See docs/campaigns.md."""

from .spec import Campaign, CampaignError, RunSpec, derive_seed, from_dict, load

__all__ = ["Campaign", "CampaignError", "RunSpec", "derive_seed", "from_dict", "load"]
