"""CrowS-Pairs tasks: sentence log-likelihood preference and a free-form forced choice."""
