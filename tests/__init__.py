"""The zoo test suite: unit/, multidevice/ and e2e/ tests, and their helpers in support/."""
