"""Which thinker replicas exist: an address list as given, and a dns:/// name (a headless Service) as the set of
addresses it resolves to now, resolved again every interval as pods come and go."""
from __future__ import annotations

import asyncio
import logging
import socket
from typing import NamedTuple

log = logging.getLogger(__name__)

DNS_SCHEME = "dns:///"


class Endpoint(NamedTuple):
    target: str  # what the channel dials: an IP and port for a resolved DNS name
    authority: str  # the name TLS certificates are checked against ("" for a target dialled as given)


def split_dns(target: str) -> tuple[str, int] | None:
    """(host, port) of a dns:///host:port target; None for any other target (dialled as given)."""
    if not target.startswith(DNS_SCHEME):
        return None
    host, sep, port = target[len(DNS_SCHEME):].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"thinker target {target!r}: a DNS target needs a port, e.g. dns:///thinker-headless:50051")
    return host.strip("[]"), int(port)


def endpoint(ip: str, port: int, host: str) -> Endpoint:
    return Endpoint(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}", host)


async def resolve(targets: tuple[str, ...]) -> list[Endpoint]:
    """Every endpoint of `targets` now; a DNS name that does not resolve contributes nothing (logged)."""
    found: list[Endpoint] = []
    loop = asyncio.get_running_loop()
    for target in targets:
        dns = split_dns(target)
        if dns is None:
            found.append(Endpoint(target, ""))
            continue
        host, port = dns
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as err:
            log.warning("thinker target %s does not resolve now (%s)", target, err)
            continue
        found.extend(sorted({endpoint(info[4][0], port, host) for info in infos}))
    return found


def needs_resolving(targets: tuple[str, ...]) -> bool:
    return any(split_dns(t) is not None for t in targets)
