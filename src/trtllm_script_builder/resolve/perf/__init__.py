"""Perf-sanity (Category 4) building blocks: test ids, config sizing and
the one call out to the repo's ``jenkins/scripts/perf/local/submit.py``."""

# The submodules are imported where used: a pytest build only needs `testid`.
