"""Generated stubs of the omnimesh.v1 gRPC contract (see the .proto files beside them)."""
