//! Contract A.11 scenarios for `ModelAdapter` (origins' `model_test.go` and accumulator tests).
