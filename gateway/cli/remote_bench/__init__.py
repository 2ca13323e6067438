"""`omnimesh bench --addr`: the workloads of docs/benchmarks.md in a closed loop against a running deployment, over the
gRPC API (omnimesh.AsyncClient) or any OpenAI-compatible HTTP server (the openai package), with the same metrics."""
