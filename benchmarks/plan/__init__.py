"""`zoo plan`: a slice planned before it is rented. The analytic plan (memory vs HBM, FLOPs),
the train step traced and compiled by the real TPU compiler (libtpu, compile-only) for the
slice, a step-time model over the compiler's numbers, and MaxText's own step compiled
beside it (`--compare maxtext`)."""
