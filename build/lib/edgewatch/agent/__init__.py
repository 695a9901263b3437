"""The edge agent (``edgewatch agent``): runs on every edge node; peer checks, signed votes,
majority verdicts, publishing them, and carrying cut-off peers' heartbeats to the cloud."""
