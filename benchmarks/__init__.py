"""The harness behind `zoo bench`: suites (YAML), a worker per entry, reports, baselines."""
