"""A child for the supervisor's tests: serves grpc.health.v1 on a free loopback port (or the last `--port N`, as a
restarted stage is given), prints the ready line, reports SERVING, then after `argv[1]` seconds either reports
NOT_SERVING and lives on (as a stage whose engine died does), or, with `argv[2] == "exit"`, exits with code 3 (as a
crashed stage does)."""
from __future__ import annotations

import argparse
import sys
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from runtime.server import BoundPorts, announce_ready

if __name__ == "__main__":
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    parser = argparse.ArgumentParser()
    parser.add_argument("seconds", type=float)
    parser.add_argument("then", nargs="?", default="not-serving")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    server.start()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    announce_ready(BoundPorts(port, -1))
    time.sleep(args.seconds)
    if args.then == "exit":
        sys.exit(3)
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    time.sleep(60)
