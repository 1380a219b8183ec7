"""Hand-written reference Triton kernels transcribed from the seed documents, used by parity tests."""
