"""STAND-IN package: only the two MPI launcher modules of TensorRT-LLM's llmapi (see there)."""
